//! The PTY WebSocket, speaking Orchard Env's frame protocol.
//!
//! client: `init {cmd, env, cwd, rows, cols}`, `stdin {data: base64}`, `signal {sig}`,
//! `resize {rows, cols}`, `close`; agent: `ready {pid}`, `stdout {data: base64}`, `exit {code}`,
//! `error {message}`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ws::{Message, WebSocket};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};

use crate::pty;
use crate::spawn;
use crate::state::AgentState;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ClientFrame {
    Init {
        #[serde(default)]
        cmd: Option<orchard_protocol::Command>,
        #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
        env: BTreeMap<String, String>,
        #[serde(default)]
        cwd: Option<String>,
        #[serde(default)]
        rows: Option<u16>,
        #[serde(default)]
        cols: Option<u16>,
        /// Run `cmd` in a login shell that reads `~/.bashrc` (Orchard Env's init field).
        #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
        login_shell: bool,
    },
    Stdin {
        data: String,
    },
    Signal {
        sig: serde_json::Value,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    Close,
}

/// A terminal's size when the client gives none (or `null`, or 0).
const DEFAULT_ROWS: u16 = 24;
const DEFAULT_COLS: u16 = 80;

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum AgentFrame {
    Ready { pid: i32 },
    Stdout { data: String },
    Exit { code: i32 },
    Error { message: String },
}

async fn send(socket: &mut WebSocket, frame: AgentFrame) -> bool {
    let text = serde_json::to_string(&frame).expect("frames serialise");
    socket.send(Message::Text(text.into())).await.is_ok()
}

fn parse(msg: &Message) -> Result<Option<ClientFrame>, String> {
    match msg {
        Message::Text(t) => serde_json::from_str(t).map(Some).map_err(|e| format!("bad frame: {e}")),
        Message::Binary(b) => serde_json::from_slice(b).map(Some).map_err(|e| format!("bad frame: {e}")),
        _ => Ok(None),
    }
}

/// `cmd` run by an interactive login bash that also reads `~/.bashrc`, as Orchard Env does.
fn login_wrapped(cmd: orchard_protocol::Command) -> orchard_protocol::Command {
    let joined = match cmd {
        orchard_protocol::Command::Shell(s) => s,
        orchard_protocol::Command::Argv(argv) => argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "),
    };
    orchard_protocol::Command::Argv(vec![
        "bash".into(),
        "--login".into(),
        "-i".into(),
        "-c".into(),
        format!("if [ -f ~/.bashrc ]; then . ~/.bashrc; fi; {joined}"),
    ])
}

fn shell_quote(arg: &str) -> String {
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b)) {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', "'\\''"))
    }
}

pub async fn run(state: Arc<AgentState>, mut socket: WebSocket) {
    let init = match tokio::time::timeout(Duration::from_secs(30), socket.recv()).await {
        Ok(Some(Ok(msg))) => parse(&msg),
        _ => return,
    };
    let (cmd, env, cwd, rows, cols, login_shell) = match init {
        Ok(Some(ClientFrame::Init { cmd, env, cwd, rows, cols, login_shell })) => {
            let size = |v: Option<u16>, default| v.filter(|n| *n > 0).unwrap_or(default);
            (cmd, env, cwd, size(rows, DEFAULT_ROWS), size(cols, DEFAULT_COLS), login_shell)
        }
        Ok(_) => {
            send(&mut socket, AgentFrame::Error { message: "the first frame must be init".into() }).await;
            return;
        }
        Err(message) => {
            send(&mut socket, AgentFrame::Error { message }).await;
            return;
        }
    };
    let cmd = cmd.unwrap_or_else(|| orchard_protocol::Command::Argv(vec![state.config.shell.display().to_string()]));
    let cmd = if login_shell { login_wrapped(cmd) } else { cmd };
    let (cwd, mut env) = state.defaults.apply(cwd.as_deref(), &env);
    env.entry("TERM".into()).or_insert_with(|| "xterm-256color".into());
    let child = match spawn::build(&state.config.shell, &cmd, cwd.as_deref(), &env, false)
        .and_then(|command| pty::spawn(&state.reaper, command, rows, cols, true))
    {
        Ok(child) => child,
        Err(e) => {
            send(&mut socket, AgentFrame::Error { message: e.message }).await;
            return;
        }
    };
    let pid = child.pid;
    let master = child.master;
    let mut exit = child.exit;
    if !send(&mut socket, AgentFrame::Ready { pid }).await {
        spawn::kill_group(pid, Signal::SIGKILL);
        return;
    }
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        tokio::select! {
            read = master.read(&mut buf) => match read {
                Ok(n) if n > 0 => {
                    if !send(&mut socket, AgentFrame::Stdout { data: B64.encode(&buf[..n]) }).await {
                        break;
                    }
                }
                // The terminal closed: every process holding it is gone.
                _ => {
                    let code = (&mut exit).await.map(|e| e.code).unwrap_or(-1);
                    send(&mut socket, AgentFrame::Exit { code }).await;
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
            },
            status = &mut exit => {
                let code = status.map(|e| e.code).unwrap_or(-1);
                // Output still buffered in the terminal is read by the branch above; background
                // processes that keep it open do not hold the client hostage.
                if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(100), master.read(&mut buf)).await && n > 0 {
                    send(&mut socket, AgentFrame::Stdout { data: B64.encode(&buf[..n]) }).await;
                }
                send(&mut socket, AgentFrame::Exit { code }).await;
                let _ = socket.send(Message::Close(None)).await;
                spawn::kill_group(pid, Signal::SIGHUP);
                return;
            },
            msg = socket.recv() => {
                let Some(Ok(msg)) = msg else { break };
                if matches!(msg, Message::Close(_)) {
                    break;
                }
                match parse(&msg) {
                    Ok(Some(ClientFrame::Stdin { data })) => match B64.decode(data.as_bytes()) {
                        Ok(bytes) => { let _ = master.write_all(&bytes).await; }
                        Err(e) => { send(&mut socket, AgentFrame::Error { message: format!("stdin: bad base64: {e}") }).await; }
                    },
                    Ok(Some(ClientFrame::Resize { rows, cols })) => {
                        if let Err(e) = master.resize(rows, cols) {
                            send(&mut socket, AgentFrame::Error { message: e.message }).await;
                        }
                    }
                    Ok(Some(ClientFrame::Signal { sig })) => {
                        let text = match &sig { serde_json::Value::String(s) => s.clone(), other => other.to_string() };
                        match spawn::parse_signal(&text) {
                            Ok(signal) => spawn::kill_group(master.foreground_group().unwrap_or(pid), signal),
                            Err(e) => { send(&mut socket, AgentFrame::Error { message: e.message }).await; }
                        }
                    }
                    Ok(Some(ClientFrame::Close)) => break,
                    Ok(Some(ClientFrame::Init { .. })) => {
                        send(&mut socket, AgentFrame::Error { message: "already initialised".into() }).await;
                    }
                    Ok(None) => {}
                    Err(message) => { send(&mut socket, AgentFrame::Error { message }).await; }
                }
            }
        }
    }
    // The client went away or asked to close: hang up the terminal's session.
    spawn::kill_group(pid, Signal::SIGHUP);
    tokio::time::sleep(Duration::from_millis(50)).await;
    spawn::kill_group(pid, Signal::SIGKILL);
}
