//! The `shell` tool adapter, on the run's sandbox:
//!
//! - `bash`: a command in a fresh process (nothing carries over; mini-swe-agent's semantics);
//! - `bash_session`: a command in a persistent bash (cwd, variables, functions and virtualenvs
//!   carry over; a timeout interrupts the command, not the session). With `idle_timeout` the
//!   answer comes when the command goes quiet, leaving it running to be waited on, typed into or
//!   interrupted with `is_input` (OpenHands' soft timeout);
//! - `background_start`, `background_log`, `background_signal`: long-running processes;
//! - `read_file`, `write_file`.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "tool-adapter" });

use exports::orchard::plugin::tools::Guest;
use std::cell::RefCell;

use orchard::plugin::sandbox::{self, Command, ExecRequest, ExecResult, SessionAnswer, SessionInput};
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::Value;

struct Shell;

thread_local! {
    /// The session `bash_session` uses, opened on first use (one per rollout: a fresh instance).
    static SESSION: RefCell<Option<String>> = const { RefCell::new(None) };
}

fn render(r: &ExecResult, timeout: f64) -> ToolOutput {
    let mut out = String::new();
    if r.timed_out {
        out += &format!("[command timed out after {timeout} s and was interrupted]\n");
    }
    out += &format!("exit code: {}\n", r.exit_code);
    out += &streams(r);
    ToolOutput { content: vec![ContentPart::Text(out)], is_error: r.exit_code != 0 }
}

/// A session answer in idle mode: still running (first line says why), or finished.
fn render_answer(a: &SessionAnswer, idle: f64, timeout: Option<f64>) -> ToolOutput {
    if !a.running {
        return render(&a.output, timeout.unwrap_or(0.0));
    }
    let why = match timeout {
        Some(t) if a.output.timed_out => format!("[still running after {t} s]\n"),
        _ => format!("[still running: no new output for {idle} s]\n"),
    };
    ToolOutput { content: vec![ContentPart::Text(why + &streams(&a.output))], is_error: false }
}

fn streams(r: &ExecResult) -> String {
    let mut out = String::new();
    if !r.stdout.is_empty() {
        out += &format!("stdout:\n{}", r.stdout);
        if !r.stdout.ends_with('\n') {
            out.push('\n');
        }
    }
    if !r.stderr.is_empty() {
        out += &format!("stderr:\n{}", r.stderr);
    }
    out
}

fn text_output(text: String, is_error: bool) -> ToolOutput {
    ToolOutput { content: vec![ContentPart::Text(text)], is_error }
}

/// Commands without a timeout of their own stop after this long.
const DEFAULT_TIMEOUT_S: f64 = 600.0;
/// `is_input` without `idle_timeout`: answer after this long without new output.
const DEFAULT_IDLE_S: f64 = 30.0;

/// Every tool this adapter offers, for the error that names an unknown one.
const TOOL_NAMES: [&str; 7] =
    ["bash", "bash_session", "background_start", "background_log", "background_signal", "read_file", "write_file"];

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
                name: "bash_session".into(),
                description: "Run a command in a persistent bash session: the working directory, exported variables, \
                              functions and activated virtualenvs carry over between calls. A command that runs past its \
                              timeout is interrupted; the session stays. With idle_timeout, the answer comes once the \
                              command has printed nothing for that long (or at its timeout) and the command keeps \
                              running: send is_input with an empty command to wait, with text to type into it, or with \
                              C-c to interrupt it (C-d sends end-of-input)."
                    .into(),
                parameters: r#"{"type":"object","properties":{"command":{"type":"string"},"timeout":{"type":"number","description":"Seconds (default 600); with idle_timeout or is_input, the longest wait for an answer."},"idle_timeout":{"type":"number","description":"Answer after this many seconds without new output, leaving the command running."},"is_input":{"type":"boolean","description":"The command is input for the running command: empty to wait, C-c to interrupt, C-d for end-of-input, other text is typed followed by Enter."},"restart":{"type":"boolean","description":"Start a fresh session first."}},"required":["command"]}"#.into(),
            },
            ToolSpec {
                name: "background_start".into(),
                description: "Start a long-running command in the background (a server, a watcher). Returns its id; its output goes to a log.".into(),
                parameters: r#"{"type":"object","properties":{"command":{"type":"string"},"cwd":{"type":"string"}},"required":["command"]}"#.into(),
            },
            ToolSpec {
                name: "background_log".into(),
                description: "Read a background process's output from a byte offset (0 for the start), and whether it still runs.".into(),
                parameters: r#"{"type":"object","properties":{"id":{"type":"string"},"offset":{"type":"integer"}},"required":["id"]}"#.into(),
            },
            ToolSpec {
                name: "background_signal".into(),
                description: "Send a signal (TERM, KILL, INT...) to a background process.".into(),
                parameters: r#"{"type":"object","properties":{"id":{"type":"string"},"signal":{"type":"string"}},"required":["id","signal"]}"#.into(),
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
        // The model's mistakes (a bad argument, a missing file or process, a denied path) are
        // answers it can act on; only the sandbox failing is an error of the call.
        match dispatch(&call) {
            Err(Error::NotFound(m)) | Err(Error::Denied(m)) | Err(Error::InvalidInput(m)) => Ok(text_output(m, true)),
            other => other,
        }
    }
}

fn dispatch(call: &ToolCall) -> Result<ToolOutput, Error> {
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
            Ok(render(&sandbox::exec(&request)?, timeout))
        }
        "bash_session" => {
            let command = text("command")?;
            let restart = args.get("restart").and_then(Value::as_bool).unwrap_or(false);
            let idle = args.get("idle_timeout").and_then(Value::as_f64);
            let is_input = args.get("is_input").and_then(Value::as_bool).unwrap_or(false);
            let id = SESSION.with(|s| -> Result<String, Error> {
                let mut s = s.borrow_mut();
                if restart && let Some(old) = s.take() {
                    let _ = sandbox::session_close(&old);
                }
                if s.is_none() {
                    *s = Some(sandbox::session_open(None, &[])?);
                }
                Ok(s.clone().expect("just opened"))
            })?;
            let ms = |seconds: f64| (seconds.max(0.001) * 1000.0) as u64;
            let answer = match (idle, is_input) {
                (None, false) => {
                    let timeout = args.get("timeout").and_then(Value::as_f64).unwrap_or(DEFAULT_TIMEOUT_S);
                    sandbox::session_exec(&id, &command, Some(ms(timeout))).map(|r| render(&r, timeout))
                }
                (idle, is_input) => {
                    let idle = idle.unwrap_or(DEFAULT_IDLE_S);
                    // A command that never goes quiet is still answered, at the default timeout.
                    let timeout = Some(args.get("timeout").and_then(Value::as_f64).unwrap_or(DEFAULT_TIMEOUT_S));
                    let result = if is_input {
                        let input = match command.as_str() {
                            "" => SessionInput::Wait,
                            "C-c" => SessionInput::Interrupt,
                            "C-d" => SessionInput::Text("\u{4}".into()),
                            text => SessionInput::Text(format!("{text}\n")),
                        };
                        sandbox::session_continue(&id, &input, ms(idle), timeout.map(ms))
                    } else {
                        sandbox::session_run(&id, &command, ms(idle), timeout.map(ms))
                    };
                    result.map(|a| render_answer(&a, idle, timeout))
                }
            };
            match answer {
                Ok(out) => Ok(out),
                // The shell itself exited (`exit`): the next call starts a new one.
                Err(Error::Unavailable(m)) => {
                    SESSION.with(|s| s.borrow_mut().take());
                    Ok(text_output(format!("{m}; the next command starts a new session"), true))
                }
                Err(e) => Err(e),
            }
        }
        "background_start" => {
            let id =
                sandbox::process_start(&Command::Shell(text("command")?), args.get("cwd").and_then(Value::as_str))?;
            Ok(text_output(format!("started background process {id}"), false))
        }
        "background_log" => {
            let id = text("id")?;
            let offset = args.get("offset").and_then(Value::as_u64).unwrap_or(0);
            let (log, next) = sandbox::process_log(&id, offset)?;
            let state = sandbox::process_status(&id)?;
            let status = match (state.running, state.exit_code) {
                (true, _) => "running".to_string(),
                (false, Some(code)) => format!("exited with code {code}"),
                (false, None) => "exited".to_string(),
            };
            Ok(text_output(format!("[{status}; next offset {next}]\n{log}"), false))
        }
        "background_signal" => {
            let (id, signal) = (text("id")?, text("signal")?);
            sandbox::process_signal(&id, &signal)?;
            Ok(text_output(format!("sent {signal} to {id}"), false))
        }
        "read_file" => {
            let bytes = sandbox::read_file(&text("path")?)?;
            Ok(text_output(String::from_utf8_lossy(&bytes).into_owned(), false))
        }
        "write_file" => {
            let (path, content) = (text("path")?, text("content")?);
            sandbox::write_file(&path, content.as_bytes())?;
            Ok(text_output(format!("wrote {} bytes to {path}", content.len()), false))
        }
        other => Err(Error::NotFound(format!("no tool named {other:?} (this adapter has {})", TOOL_NAMES.join(", ")))),
    }
}

export!(Shell);
