//! The `shell` tool adapter: `bash`, `read_file` and `write_file` on the run's sandbox.

wit_bindgen::generate!({ path: "../../wit/0.1.0", world: "tool-adapter" });

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::sandbox::{self, Command, ExecRequest};
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::Value;

struct Shell;

/// Commands without a timeout of their own stop after this long.
const DEFAULT_TIMEOUT_S: f64 = 600.0;

impl Guest for Shell {
    fn list() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "bash".into(),
                description: "Run a bash command in the sandbox and get its exit code, stdout and stderr. \
                              Each call starts a fresh shell: cd and exported variables do not carry over."
                    .into(),
                parameters: r#"{"type":"object","properties":{"command":{"type":"string","description":"The command or script to run."},"timeout":{"type":"number","description":"Seconds before the command is killed (default 600)."},"cwd":{"type":"string","description":"Working directory."}},"required":["command"]}"#.into(),
            },
            ToolSpec {
                name: "read_file".into(),
                description: "Read a text file from the sandbox.".into(),
                parameters: r#"{"type":"object","properties":{"path":{"type":"string","description":"Absolute path."}},"required":["path"]}"#.into(),
            },
            ToolSpec {
                name: "write_file".into(),
                description: "Write a text file in the sandbox (parent directories are created).".into(),
                parameters: r#"{"type":"object","properties":{"path":{"type":"string","description":"Absolute path."},"content":{"type":"string"}},"required":["path","content"]}"#.into(),
            },
        ]
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let args: Value = serde_json::from_str(&call.arguments)
            .map_err(|e| Error::InvalidInput(format!("{}: arguments are not JSON: {e}", call.name)))?;
        let text = |key: &str| -> Result<String, Error> {
            args.get(key)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| Error::InvalidInput(format!("{}: missing string argument `{key}`", call.name)))
        };
        match call.name.as_str() {
            "bash" => {
                let timeout = args.get("timeout").and_then(Value::as_f64).unwrap_or(DEFAULT_TIMEOUT_S);
                let request = ExecRequest {
                    command: Command::Shell(text("command")?),
                    cwd: args.get("cwd").and_then(Value::as_str).map(str::to_string),
                    env: vec![],
                    timeout_ms: Some((timeout.max(0.001) * 1000.0) as u64),
                    stdin: None,
                };
                let r = sandbox::exec(&request)?;
                let mut out = String::new();
                if r.timed_out {
                    out += &format!("[command timed out after {timeout} s]\n");
                }
                out += &format!("exit code: {}\n", r.exit_code);
                if !r.stdout.is_empty() {
                    out += &format!("stdout:\n{}", r.stdout);
                    if !r.stdout.ends_with('\n') {
                        out.push('\n');
                    }
                }
                if !r.stderr.is_empty() {
                    out += &format!("stderr:\n{}", r.stderr);
                }
                Ok(ToolOutput { content: vec![ContentPart::Text(out)], is_error: r.exit_code != 0 })
            }
            "read_file" => match sandbox::read_file(&text("path")?) {
                Ok(bytes) => Ok(ToolOutput {
                    content: vec![ContentPart::Text(String::from_utf8_lossy(&bytes).into_owned())],
                    is_error: false,
                }),
                Err(Error::NotFound(m)) | Err(Error::Denied(m)) | Err(Error::InvalidInput(m)) => {
                    Ok(ToolOutput { content: vec![ContentPart::Text(m)], is_error: true })
                }
                Err(e) => Err(e),
            },
            "write_file" => {
                let (path, content) = (text("path")?, text("content")?);
                match sandbox::write_file(&path, content.as_bytes()) {
                    Ok(()) => Ok(ToolOutput {
                        content: vec![ContentPart::Text(format!("wrote {} bytes to {path}", content.len()))],
                        is_error: false,
                    }),
                    Err(Error::Denied(m)) | Err(Error::InvalidInput(m)) | Err(Error::NotFound(m)) => {
                        Ok(ToolOutput { content: vec![ContentPart::Text(m)], is_error: true })
                    }
                    Err(e) => Err(e),
                }
            }
            other => {
                Err(Error::NotFound(format!("no tool named {other:?} (this adapter has bash, read_file, write_file)")))
            }
        }
    }
}

export!(Shell);
