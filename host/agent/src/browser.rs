//! `/browser`: a Chromium started inside the sandbox (its network, its control groups: on
//! Kubernetes, in the task's pod beside the agent) and relayed to the host.
//!
//! The first WebSocket message is text, `{"argv": [program, args...]}` — the host's command
//! line, which must ask for `--remote-debugging-pipe`; the agent answers `{"ready": PID}` (or
//! `{"error": "..."}` and closes); then binary messages carry the DevTools
//! pipe's bytes both ways, unchanged (NUL-delimited JSON). Chromium reads fd 3 and writes fd 4,
//! held by the agent: the channel is the agent's authenticated connection, not a port. The
//! browser's process group is killed when the socket closes, and the socket closes when the
//! browser exits.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;

use axum::extract::ws::{Message, WebSocket};
use futures::StreamExt;
use tokio::net::unix::pipe;

#[derive(serde::Deserialize)]
struct Start {
    argv: Vec<String>,
}

fn pipe_pair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

async fn say(socket: &mut WebSocket, text: String) {
    let _ = socket.send(Message::Text(serde_json::json!({"error": text}).to_string().into())).await;
    let _ = socket.send(Message::Close(None)).await;
}

pub async fn run(mut socket: WebSocket) {
    let start = match socket.next().await {
        Some(Ok(Message::Text(t))) => serde_json::from_str::<Start>(&t),
        _ => return,
    };
    let argv = match start {
        Ok(s) if !s.argv.is_empty() && s.argv.iter().any(|a| a == "--remote-debugging-pipe") => s.argv,
        _ => return say(&mut socket, "expected {\"argv\": [...]} asking for --remote-debugging-pipe".into()).await,
    };
    let (child, commands, answers) = match spawn(&argv) {
        Ok(parts) => parts,
        Err(e) => return say(&mut socket, format!("starting {}: {e}", argv[0])).await,
    };
    let pgid = child.id() as i32;
    let (to_browser, from_browser) =
        match (pipe::Sender::from_owned_fd(commands), pipe::Receiver::from_owned_fd(answers)) {
            (Ok(w), Ok(r)) => (w, r),
            _ => {
                let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
                return say(&mut socket, "the DevTools pipe could not be opened".into()).await;
            }
        };
    let ready = serde_json::json!({"ready": pgid}).to_string();
    if socket.send(Message::Text(ready.into())).await.is_err() {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
        return;
    }
    // Reaped in the background: its exit ends the pipe, which ends the relay.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    crate::tunnel::relay_bytes(socket, from_browser, to_browser).await;
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), nix::sys::signal::Signal::SIGKILL);
}

/// Where images keep Chromium when asked for plain `chromium`: the real binary first (Debian's
/// `/usr/bin/chromium` is a wrapper script that needs `/etc/chromium.d`).
const CHROMIUM: [&str; 5] = [
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium",
    "/usr/bin/chromium-browser",
    "/usr/bin/google-chrome",
    "/headless-shell/headless-shell",
];

fn program(name: &str) -> String {
    if name == "chromium"
        && let Some(found) = CHROMIUM.iter().find(|p| std::path::Path::new(p).is_file())
    {
        return found.to_string();
    }
    name.to_string()
}

/// Starts the browser in its own process group, with fd 3 (commands) and fd 4 (answers).
fn spawn(argv: &[String]) -> std::io::Result<(std::process::Child, OwnedFd, OwnedFd)> {
    let (cmd_read, cmd_write) = pipe_pair()?;
    let (ans_read, ans_write) = pipe_pair()?;
    let (cr, aw) = (cmd_read.as_raw_fd(), ans_write.as_raw_fd());
    let mut command = std::process::Command::new(program(&argv[0]));
    command
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::setpgid(0, 0) != 0 || libc::dup2(cr, 3) < 0 || libc::dup2(aw, 4) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    drop((cmd_read, ans_write));
    Ok((child, cmd_write, ans_read))
}
