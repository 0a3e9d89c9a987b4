//! One-shot commands: buffered (one result) or streamed (frames as output arrives).

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use orchard_protocol::{EXIT_CODE_TIMEOUT, ExecFrame, ExecRequest, ExecResult};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};

use crate::error::{AgentError, AgentResult};
use crate::output::BoundedOutput;
use crate::spawn;
use crate::state::AgentState;
use crate::utf8::Utf8Chunker;

/// After the command exits, how long we keep reading output that its leftover background
/// children may still hold open. Without it, `sleep 100 &` would hold the exec for 100 s.
const DRAIN_GRACE: Duration = Duration::from_millis(200);

pub async fn run(
    state: &AgentState,
    req: ExecRequest,
    frames: Option<mpsc::Sender<ExecFrame>>,
) -> AgentResult<ExecResult> {
    if req.idle_timeout_ms.is_some() {
        return Err(AgentError::invalid("idle_timeout_ms applies to session commands only (POST /sessions/{id}/exec)"));
    }
    let (cwd, env) = state.defaults.apply(req.cwd.as_deref(), &req.env);
    let mut command = spawn::build(&state.config.shell, &req.command, cwd.as_deref(), &env, req.login_shell)?;
    command.process_group(0);
    command.stdin(if req.stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    command.stdout(Stdio::piped()).stderr(Stdio::piped());

    let started = Instant::now();
    let (mut child, exit_rx) = state.reaper.spawn(&mut command).map_err(|e| spawn::spawn_error(&req.command, e))?;
    let pgid = child.id() as i32;
    let pipe_err = |e: std::io::Error| AgentError::other(format!("cannot read the command's output: {e}"));
    let stdout = pipe::Receiver::from_owned_fd(child.stdout.take().expect("piped").into()).map_err(pipe_err)?;
    let stderr = pipe::Receiver::from_owned_fd(child.stderr.take().expect("piped").into()).map_err(pipe_err)?;
    if let (Some(input), Some(stdin)) = (req.stdin, child.stdin.take()) {
        let mut stdin = pipe::Sender::from_owned_fd(stdin.into()).map_err(pipe_err)?;
        // A command that never reads its stdin must not block us: write in the background.
        tokio::spawn(async move {
            let _ = stdin.write_all(input.as_bytes()).await;
        });
    }

    let id = state.next_id("exec");
    let mut out = BoundedOutput::new(req.output_limit, state.scratch("output", &format!("{id}.stdout")));
    let mut err = BoundedOutput::new(req.output_limit, state.scratch("output", &format!("{id}.stderr")));
    let (exited_tx, mut exited_rx) = watch::channel(false);

    let wait_exit = async {
        let deadline = req.timeout_ms.map(|ms| started + Duration::from_millis(ms));
        let mut exit_rx = exit_rx;
        let mut timed_out = false;
        let info = match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline.into(), &mut exit_rx).await {
                Ok(info) => info,
                Err(_) => {
                    timed_out = true;
                    spawn::kill_group(pgid, Signal::SIGKILL);
                    exit_rx.await
                }
            },
            None => exit_rx.await,
        };
        let _ = exited_tx.send(true);
        (info, timed_out)
    };
    let read_output = async {
        let pumps = async {
            tokio::join!(
                pump(stdout, &mut out, frames.as_ref(), |data| { ExecFrame::Stdout { data } }),
                pump(stderr, &mut err, frames.as_ref(), |data| { ExecFrame::Stderr { data } }),
            )
        };
        let grace = async {
            let _ = exited_rx.wait_for(|exited| *exited).await;
            tokio::time::sleep(DRAIN_GRACE).await;
        };
        tokio::select! {
            _ = pumps => {}
            _ = grace => {}
        }
    };
    let (_, (info, timed_out)) = tokio::join!(read_output, wait_exit);
    let info = info.map_err(|_| AgentError::other("the reaper lost the command's exit status"))?;

    Ok(ExecResult {
        exit_code: if timed_out { EXIT_CODE_TIMEOUT } else { info.code },
        signal: info.signal,
        timed_out,
        stdout: out.finish(),
        stderr: err.finish(),
        wall_seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: info.cpu_seconds,
        peak_rss_kb: info.peak_rss_kb,
        running: false,
    })
}

/// Reads `source` to its end into `sink`, forwarding text frames when streaming.
async fn pump(
    mut source: impl AsyncRead + Unpin,
    sink: &mut BoundedOutput,
    frames: Option<&mpsc::Sender<ExecFrame>>,
    frame: fn(String) -> ExecFrame,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut text = Utf8Chunker::default();
    let mut frames = frames.cloned();
    loop {
        let n = match source.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        sink.push(&buf[..n]);
        if let Some(tx) = &frames {
            let data = text.push(&buf[..n]);
            // A client that went away stops getting frames; the command still runs to its end.
            if !data.is_empty() && tx.send(frame(data)).await.is_err() {
                frames = None;
            }
        }
    }
    if let Some(tx) = &frames {
        let rest = text.finish();
        if !rest.is_empty() {
            let _ = tx.send(frame(rest)).await;
        }
    }
}
