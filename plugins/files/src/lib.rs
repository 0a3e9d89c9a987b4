//! The `files` tool adapter: `read_lines` (with a line range), `write_file`, `list_dir`,
//! `find_files` (by name pattern) and `grep` (by regular expression) on the run's sandbox.
//! `find_files` and `grep` run the image's `find` and `grep` without a shell (no quoting traps),
//! and cap their answers at 200 lines.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "tool-adapter" });

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::sandbox::{self, Command, EntryKind, ExecRequest};
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::Value;

struct Files;

const MAX_LINES: usize = 200;

fn out(text: String, is_error: bool) -> Result<ToolOutput, Error> {
    Ok(ToolOutput { content: vec![ContentPart::Text(text)], is_error })
}

fn spec(name: &str, description: &str, parameters: &str) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.into() }
}

/// Runs an argv; keeps at most MAX_LINES lines of stdout.
fn run_capped(argv: Vec<String>) -> Result<(String, usize, i32), Error> {
    let r = sandbox::exec(&ExecRequest {
        command: Command::Argv(argv),
        cwd: None,
        env: vec![],
        timeout_ms: Some(60_000),
        stdin: None,
    })?;
    let lines: Vec<&str> = r.stdout.lines().collect();
    let total = lines.len();
    Ok((lines.into_iter().take(MAX_LINES).collect::<Vec<_>>().join("\n"), total, r.exit_code))
}

impl Guest for Files {
    fn list() -> Vec<ToolSpec> {
        vec![
            spec(
                "read_lines",
                "Read a text file, or lines start_line..end_line of it (1-based, inclusive).",
                r#"{"type":"object","properties":{"path":{"type":"string"},"start_line":{"type":"integer"},"end_line":{"type":"integer"}},"required":["path"]}"#,
            ),
            spec(
                "write_file",
                "Write a whole text file (parent directories are created).",
                r#"{"type":"object","properties":{"path":{"type":"string"},"content":{"type":"string"}},"required":["path","content"]}"#,
            ),
            spec(
                "list_dir",
                "List a directory: names, kinds and sizes.",
                r#"{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}"#,
            ),
            spec(
                "find_files",
                "Find files under a directory whose name matches a shell pattern (e.g. *.py).",
                r#"{"type":"object","properties":{"path":{"type":"string"},"name":{"type":"string"}},"required":["path","name"]}"#,
            ),
            spec(
                "grep",
                "Search files under a path for a regular expression; answers file:line:text.",
                r#"{"type":"object","properties":{"pattern":{"type":"string"},"path":{"type":"string"},"include":{"type":"string","description":"Only files matching this shell pattern."}},"required":["pattern","path"]}"#,
            ),
        ]
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let args: Value = serde_json::from_str(&call.arguments)
            .map_err(|e| Error::InvalidInput(format!("{}: arguments are not JSON: {e}", call.name)))?;
        let text = |k: &str| -> Result<String, Error> {
            args.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| Error::InvalidInput(format!("{}: missing string argument `{k}`", call.name)))
        };
        match call.name.as_str() {
            "read_lines" => {
                let path = text("path")?;
                let content = match sandbox::read_file(&path) {
                    Ok(b) => String::from_utf8_lossy(&b).into_owned(),
                    Err(Error::NotFound(m)) | Err(Error::Denied(m)) | Err(Error::InvalidInput(m)) => {
                        return out(m, true);
                    }
                    Err(e) => return Err(e),
                };
                let lines: Vec<&str> = content.lines().collect();
                let n = lines.len();
                let start = args.get("start_line").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
                let end = args.get("end_line").and_then(Value::as_u64).map(|e| e as usize).unwrap_or(n).min(n);
                if start > n.max(1) || end < start {
                    return out(format!("{path} has {n} lines: lines {start}-{end} do not exist"), true);
                }
                let body = lines[start - 1..end].join("\n");
                out(format!("[{path}: lines {start}-{end} of {n}]\n{body}"), false)
            }
            "write_file" => {
                let (path, content) = (text("path")?, text("content")?);
                match sandbox::write_file(&path, content.as_bytes()) {
                    Ok(()) => out(format!("wrote {} bytes to {path}", content.len()), false),
                    Err(Error::Denied(m)) | Err(Error::InvalidInput(m)) => out(m, true),
                    Err(e) => Err(e),
                }
            }
            "list_dir" => {
                let path = text("path")?;
                match sandbox::list_dir(&path) {
                    Ok(entries) => {
                        let lines: Vec<String> = entries
                            .iter()
                            .map(|e| match e.kind {
                                EntryKind::Directory => format!("{}/", e.name),
                                EntryKind::Symlink => format!("{}@", e.name),
                                _ => format!("{}  ({} bytes)", e.name, e.size),
                            })
                            .collect();
                        out(if lines.is_empty() { format!("{path} is empty") } else { lines.join("\n") }, false)
                    }
                    Err(Error::NotFound(m)) | Err(Error::Denied(m)) | Err(Error::InvalidInput(m)) => out(m, true),
                    Err(e) => Err(e),
                }
            }
            "find_files" => {
                let argv = vec![
                    "find".into(),
                    text("path")?,
                    "-name".into(),
                    text("name")?,
                    "-not".into(),
                    "-path".into(),
                    "*/.*".into(),
                ];
                let (found, total, code) = run_capped(argv)?;
                let more =
                    if total > MAX_LINES { format!("\n[{} more not shown]", total - MAX_LINES) } else { String::new() };
                out(
                    if found.is_empty() { "no files found".into() } else { format!("{found}{more}") },
                    code != 0 && found.is_empty(),
                )
            }
            "grep" => {
                let mut argv: Vec<String> = vec!["grep".into(), "-rnIE".into()];
                if let Some(include) = args.get("include").and_then(Value::as_str) {
                    argv.push(format!("--include={include}"));
                }
                argv.extend(["-e".into(), text("pattern")?, "--".into(), text("path")?]);
                let (found, total, code) = run_capped(argv)?;
                let more = if total > MAX_LINES {
                    format!("\n[{} more matches not shown]", total - MAX_LINES)
                } else {
                    String::new()
                };
                // grep exits 1 for "no match": an answer, not a failure.
                match code {
                    0 => out(format!("{found}{more}"), false),
                    1 => out("no matches".into(), false),
                    _ => out(format!("grep failed (exit {code})"), true),
                }
            }
            other => Err(Error::NotFound(format!(
                "no tool named {other:?} (read_lines, write_file, list_dir, find_files, grep)"
            ))),
        }
    }
}

export!(Files);
