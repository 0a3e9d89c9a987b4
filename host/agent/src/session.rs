//! Persistent shell sessions.
//!
//! A session is an interactive shell on a pseudo-terminal, so that it has job control: every
//! command it runs gets its own foreground process group, and a timeout can interrupt that group
//! (SIGINT, then SIGKILL) while the shell itself, with its cwd, variables, functions and activated
//! virtualenvs, lives on.
//!
//! Each command is written to a file and sourced with its output redirected to two files; a marker
//! that the shell prints afterwards tells us it finished and with what status. The marker is
//! assembled by `printf` so that the text we send never contains it literally.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use orchard_protocol::{
    EXIT_CODE_TIMEOUT, ExecRequest, ExecResult, Output, OutputLimit, SessionContinue, SessionInfo, SessionStart,
};
use tokio::sync::Mutex;

use crate::error::{AgentError, AgentResult};
use crate::output::bounded_from_file;
use crate::pty::{self, PtyMaster};
use crate::spawn;
use crate::state::AgentState;

/// How long the shell may take to come up or to answer a resync after SIGKILL. Generous: on a
/// loaded machine (a full test run with browsers beside it) 3 s was seen to pass, and a session
/// given up for lost is worse for the agent than a slow answer.
const SYNC_WAIT: Duration = Duration::from_secs(10);
/// How often an idle-mode wait looks at the command's output files.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// How long a signal gets to reach its target before the shell is asked for a marker.
const SIGNAL_SETTLE: Duration = Duration::from_millis(50);
/// How long an interrupted command gets to die of SIGINT before SIGKILL.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

pub struct Session {
    pub id: String,
    pub pid: i32,
    shell: PathBuf,
    dir: PathBuf,
    master: PtyMaster,
    alive: Arc<AtomicBool>,
    io: Mutex<SessionIo>,
}

struct SessionIo {
    /// Terminal output not yet consumed (noise such as job notices, and markers).
    pending: Vec<u8>,
    commands: u64,
    /// The command left running by an idle answer, if any.
    running: Option<Running>,
}

/// A command sent to the shell whose end marker has not been read yet.
struct Running {
    script: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
    marker: String,
    /// How much of stdout and stderr earlier answers already returned.
    offsets: (u64, u64),
    /// An earlier answer pointed at the output files (truncated): keep them.
    spilled: bool,
    started: Instant,
}

impl Running {
    /// A session command's result: no CPU or memory figures (the shell runs it, not us).
    fn result(&self, exit_code: i32, timed_out: bool, (stdout, stderr): (Output, Output), running: bool) -> ExecResult {
        ExecResult {
            exit_code,
            signal: None,
            timed_out,
            stdout,
            stderr,
            wall_seconds: self.started.elapsed().as_secs_f64(),
            cpu_seconds: 0.0,
            peak_rss_kb: 0,
            running,
        }
    }
}

/// How long one call waits.
#[derive(Clone, Copy)]
struct Wait {
    deadline: Option<Instant>,
    idle: Option<Duration>,
    limit: OutputLimit,
}

impl Wait {
    fn new(timeout_ms: Option<u64>, idle_ms: Option<u64>, limit: OutputLimit) -> Wait {
        Wait {
            deadline: timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
            idle: idle_ms.map(Duration::from_millis),
            limit,
        }
    }
}

impl Session {
    pub fn info(&self) -> SessionInfo {
        SessionInfo {
            id: self.id.clone(),
            pid: self.pid,
            shell: self.shell.display().to_string(),
            alive: self.alive.load(Ordering::Relaxed),
        }
    }

    pub async fn start(state: &AgentState, id: String, req: SessionStart) -> AgentResult<Arc<Session>> {
        let shell = state.config.shell.clone();
        let mut command = std::process::Command::new(&shell);
        if shell.ends_with("bash") {
            command.args(["--norc", "--noprofile", "--noediting", "-i"]);
        } else {
            command.arg("-i");
        }
        let (cwd, env) = state.defaults.apply(req.cwd.as_deref(), &req.env);
        if let Some(cwd) = &cwd {
            spawn::check_cwd(cwd)?;
            command.current_dir(cwd);
        }
        command
            .env("PS1", "")
            .env("PS2", "")
            .env("PS0", "")
            .env("PROMPT_COMMAND", "")
            .env("TERM", "dumb")
            .env("HISTFILE", "/dev/null")
            .envs(&env);
        let child = pty::spawn(&state.reaper, command, 24, 200, false)?;
        let alive = Arc::new(AtomicBool::new(true));
        let alive_flag = alive.clone();
        tokio::spawn(async move {
            let _ = child.exit.await;
            alive_flag.store(false, Ordering::Relaxed);
        });
        let dir = state.scratch("sessions", &id);
        std::fs::create_dir_all(&dir).map_err(|e| AgentError::io("creating the session directory", e))?;
        let session = Arc::new(Session {
            id,
            pid: child.pid,
            shell,
            dir,
            master: child.master,
            alive,
            io: Mutex::new(SessionIo { pending: Vec::new(), commands: 0, running: None }),
        });
        let mut io = session.io.lock().await;
        if session.sync(&mut io, Instant::now() + SYNC_WAIT).await.is_none() {
            drop(io);
            session.kill();
            return Err(AgentError::other("the session shell did not come up"));
        }
        drop(io);
        Ok(session)
    }

    /// Runs one command in the session. Commands in one session run one at a time: while one is
    /// still running (after an idle answer), only [`Session::resume`] may touch the session.
    pub async fn exec(&self, req: ExecRequest) -> AgentResult<ExecResult> {
        let script = match &req.command {
            orchard_protocol::Command::Shell(s) => s.clone(),
            orchard_protocol::Command::Argv(argv) => argv.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" "),
        };
        let mut io = self.io.lock().await;
        self.check_alive()?;
        if let Some(running) = &io.running {
            return Err(AgentError::invalid(format!(
                "session {} is still running a command (for {:.0} s): continue it, type into it or interrupt it \
                 before sending another",
                self.id,
                running.started.elapsed().as_secs_f64()
            )));
        }
        io.commands += 1;
        let n = io.commands;
        let running = Running {
            script: self.dir.join(format!("{n}.sh")),
            stdout: self.dir.join(format!("{n}.stdout")),
            stderr: self.dir.join(format!("{n}.stderr")),
            marker: format!("__ORCHARD_{}_", crate::ids::nonce()),
            offsets: (0, 0),
            spilled: false,
            started: Instant::now(),
        };
        std::fs::write(&running.script, script).map_err(|e| AgentError::io("writing the command file", e))?;
        let cd = req.cwd.as_deref().map(|c| format!("cd {} && ", shell_quote(c))).unwrap_or_default();
        // An idle-mode command reads the terminal, so that it can be typed into; otherwise stdin
        // is empty and a command waiting for input ends instead of hanging.
        let stdin = if req.idle_timeout_ms.is_some() { "" } else { " </dev/null" };
        let nonce = running.marker.trim_start_matches("__ORCHARD_").trim_end_matches('_');
        let line = format!(
            " {cd}. {}{stdin} >{} 2>{}; printf '\\n__ORCH%sARD_{nonce}_%s__\\n' '' \"$?\"\n",
            shell_quote(&running.script.display().to_string()),
            shell_quote(&running.stdout.display().to_string()),
            shell_quote(&running.stderr.display().to_string()),
        );
        // Text typed into an earlier command that it never read must not run as a command.
        self.master.discard_input();
        self.write_all(line.as_bytes()).await?;
        let wait = Wait::new(req.timeout_ms, req.idle_timeout_ms, req.output_limit);
        self.wait(&mut io, running, wait).await
    }

    /// Continues the command left running by an idle answer: types `input`, or interrupts it,
    /// then waits again. The answer holds the output printed since the previous answer.
    pub async fn resume(&self, req: SessionContinue) -> AgentResult<ExecResult> {
        let mut io = self.io.lock().await;
        self.check_alive()?;
        let running = io
            .running
            .take()
            .ok_or_else(|| AgentError::invalid(format!("session {} has no running command to continue", self.id)))?;
        if req.interrupt {
            self.interrupt(&mut io).await?;
            return Ok(self.answer(&running, 128 + Signal::SIGINT as i32, false, req.output_limit));
        }
        if let Some(input) = &req.input
            && let Err(e) = self.write_all(input.as_bytes()).await
        {
            io.running = Some(running);
            return Err(e);
        }
        let wait = Wait::new(req.timeout_ms, req.idle_timeout_ms, req.output_limit);
        self.wait(&mut io, running, wait).await
    }

    fn check_alive(&self) -> AgentResult<()> {
        if self.alive.load(Ordering::Relaxed) {
            return Ok(());
        }
        Err(AgentError::new(orchard_protocol::ErrorKind::Unavailable, format!("session {} has exited", self.id)))
    }

    /// Waits for the command's end marker, its timeout (interrupt) or, in idle mode, for its
    /// output files to stop growing for the idle time (the command is left running).
    async fn wait(&self, io: &mut SessionIo, mut running: Running, wait: Wait) -> AgentResult<ExecResult> {
        let size = |r: &Running| {
            let len = |p: &PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            (len(&r.stdout), len(&r.stderr))
        };
        let (mut last_size, mut last_change) = (size(&running), Instant::now());
        loop {
            let step = match (wait.deadline, wait.idle) {
                (None, None) => None,
                (Some(d), None) => Some(d),
                (d, Some(_)) => Some(d.map_or(Instant::now() + IDLE_POLL, |d| d.min(Instant::now() + IDLE_POLL))),
            };
            match self.read_marker(io, &running.marker, step).await {
                MarkerRead::Found(code) => return Ok(self.answer(&running, code, false, wait.limit)),
                MarkerRead::ShellGone => {
                    // The terminal closed: the shell is gone, whether or not its exit was reaped yet.
                    self.alive.store(false, Ordering::Relaxed);
                    let _ = std::fs::remove_file(&running.script);
                    return Err(AgentError::new(
                        orchard_protocol::ErrorKind::Unavailable,
                        format!("session {} exited while running the command", self.id),
                    ));
                }
                MarkerRead::TimedOut => {
                    if wait.deadline.is_some_and(|d| Instant::now() >= d) {
                        if wait.idle.is_none() {
                            self.interrupt(io).await?;
                            return Ok(self.answer(&running, EXIT_CODE_TIMEOUT, true, wait.limit));
                        }
                        // Idle mode: the timeout bounds the wait, the command keeps running.
                        let result = self.partial(&mut running, wait.limit, true);
                        io.running = Some(running);
                        return Ok(result);
                    }
                    let Some(idle) = wait.idle else { continue };
                    let now = size(&running);
                    if now != last_size {
                        (last_size, last_change) = (now, Instant::now());
                    } else if last_change.elapsed() >= idle {
                        let result = self.partial(&mut running, wait.limit, false);
                        io.running = Some(running);
                        return Ok(result);
                    }
                }
            }
        }
    }

    /// The answer for a command that ended (or was interrupted): output since the last answer.
    fn answer(&self, running: &Running, exit_code: i32, timed_out: bool, limit: OutputLimit) -> ExecResult {
        let _ = std::fs::remove_file(&running.script);
        let (stdout, _) = bounded_from_file(&running.stdout, running.offsets.0, limit, !running.spilled);
        let (stderr, _) = bounded_from_file(&running.stderr, running.offsets.1, limit, !running.spilled);
        running.result(exit_code, timed_out, (stdout, stderr), false)
    }

    /// The answer for a command still running: its output so far, remembered as read.
    /// `timed_out` says the wait hit its timeout rather than the idle time.
    fn partial(&self, running: &mut Running, limit: OutputLimit, timed_out: bool) -> ExecResult {
        let (stdout, out_end) = bounded_from_file(&running.stdout, running.offsets.0, limit, false);
        let (stderr, err_end) = bounded_from_file(&running.stderr, running.offsets.1, limit, false);
        running.offsets = (out_end, err_end);
        running.spilled |= stdout.truncated || stderr.truncated;
        running.result(0, timed_out, (stdout, stderr), true)
    }

    /// Interrupts the running command: SIGINT to the foreground group, then SIGKILL, until the
    /// shell answers a resync. A shell that never answers is killed and the session is lost.
    async fn interrupt(&self, io: &mut SessionIo) -> AgentResult<()> {
        for signal in [Signal::SIGINT, Signal::SIGKILL] {
            let foreground = self.master.foreground_group().unwrap_or(self.pid);
            if foreground > 0 && foreground != self.pid {
                spawn::kill_group(foreground, signal);
            }
            if signal == Signal::SIGKILL || foreground <= 0 || foreground == self.pid {
                // A loop runs in the shell itself (`while …; do sleep 1; done` starts child after
                // child); an interactive shell abandons it on SIGINT. The second round sends it
                // too: a busy machine can let the loop start its next child before the shell
                // sees that the last one was interrupted.
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), Signal::SIGINT);
            }
            // Let the signal land before the sync line goes in: a command reading the terminal
            // (`read` in the shell itself) would otherwise take that line as its input.
            tokio::time::sleep(SIGNAL_SETTLE).await;
            self.master.discard_input();
            let wait = if signal == Signal::SIGINT { INTERRUPT_GRACE } else { SYNC_WAIT };
            if self.sync(io, Instant::now() + wait).await.is_some() {
                return Ok(());
            }
        }
        self.kill();
        Err(AgentError::new(
            orchard_protocol::ErrorKind::Unavailable,
            format!("session {} did not recover from an interrupted command and was closed", self.id),
        ))
    }

    /// Asks the shell to print a fresh marker and waits for it, dropping everything before it.
    async fn sync(&self, io: &mut SessionIo, deadline: Instant) -> Option<()> {
        let nonce = crate::ids::nonce();
        let line = format!(" printf '\\n__ORCH%sARD_{nonce}_%s__\\n' '' 0\n");
        self.write_all(line.as_bytes()).await.ok()?;
        match self.read_marker(io, &format!("__ORCHARD_{nonce}_"), Some(deadline)).await {
            MarkerRead::Found(_) => Some(()),
            _ => None,
        }
    }

    async fn read_marker(&self, io: &mut SessionIo, marker: &str, deadline: Option<Instant>) -> MarkerRead {
        loop {
            if let Some(code) = take_marker(&mut io.pending, marker.as_bytes()) {
                return MarkerRead::Found(code);
            }
            let read = self.read_some(&mut io.pending);
            let outcome = match deadline {
                Some(d) => match tokio::time::timeout_at(d.into(), read).await {
                    Ok(r) => r,
                    Err(_) => return MarkerRead::TimedOut,
                },
                None => read.await,
            };
            if outcome.is_err() {
                return MarkerRead::ShellGone;
            }
        }
    }

    /// Appends whatever the terminal has to `pending`. Errors when the shell side is closed.
    async fn read_some(&self, pending: &mut Vec<u8>) -> std::io::Result<()> {
        let mut buf = [0u8; 8192];
        let n = self.master.read(&mut buf).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        pending.extend_from_slice(&buf[..n]);
        // Bound what noise can pile up between markers.
        if pending.len() > 1 << 20 {
            pending.drain(..pending.len() - (1 << 16));
        }
        Ok(())
    }

    async fn write_all(&self, bytes: &[u8]) -> AgentResult<()> {
        self.master
            .write_all(bytes)
            .await
            .map_err(|e| AgentError::new(orchard_protocol::ErrorKind::Unavailable, format!("session {}: {e}", self.id)))
    }

    /// Kills the shell and everything in its session.
    pub fn kill(&self) {
        spawn::kill_group(self.pid, Signal::SIGHUP);
        spawn::kill_group(self.pid, Signal::SIGKILL);
        if let Some(foreground) = self.master.foreground_group() {
            spawn::kill_group(foreground, Signal::SIGKILL);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

enum MarkerRead {
    Found(i32),
    TimedOut,
    ShellGone,
}

/// Finds `marker<code>__` in `pending`; consumes everything up to and including it.
fn take_marker(pending: &mut Vec<u8>, marker: &[u8]) -> Option<i32> {
    let start = pending.windows(marker.len()).position(|w| w == marker)?;
    let rest = &pending[start + marker.len()..];
    let end = rest.windows(2).position(|w| w == b"__")?;
    let code = std::str::from_utf8(&rest[..end]).ok()?.trim().parse().ok()?;
    let consumed = start + marker.len() + end + 2;
    pending.drain(..consumed);
    Some(code)
}

/// Single-quotes `s` for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_is_found_after_noise_and_consumed() {
        let mut pending = b"noise\r\n[1]+ Done\r\n\r\n__ORCHARD_ab12_3__\r\nafter".to_vec();
        assert_eq!(take_marker(&mut pending, b"__ORCHARD_ab12_"), Some(3));
        assert_eq!(pending, b"\r\nafter");
        assert_eq!(take_marker(&mut pending, b"__ORCHARD_ab12_"), None);
    }

    #[test]
    fn partial_marker_waits_for_more_output() {
        let mut pending = b"__ORCHARD_ab12_12".to_vec();
        assert_eq!(take_marker(&mut pending, b"__ORCHARD_ab12_"), None);
        pending.extend_from_slice(b"7__\n");
        assert_eq!(take_marker(&mut pending, b"__ORCHARD_ab12_"), Some(127));
    }

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
