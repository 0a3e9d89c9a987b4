//! Turning a protocol command into a `std::process::Command`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use orchard_protocol::Command as Cmd;

use crate::error::{AgentError, AgentResult};

/// Builds the process for `cmd`: shell strings go through `shell -c` (`-lc` for a login shell),
/// argv lists are executed directly. Callers put it in its own process group (or session) so that
/// a timeout or a signal reaches everything it started, and nothing else.
pub fn build(
    shell: &Path,
    cmd: &Cmd,
    cwd: Option<&str>,
    env: &BTreeMap<String, String>,
    login_shell: bool,
) -> AgentResult<Command> {
    let mut command = match cmd {
        Cmd::Shell(script) => {
            if script.trim().is_empty() {
                return Err(AgentError::invalid("command: the command string is empty"));
            }
            let mut c = Command::new(shell);
            c.arg(if login_shell { "-lc" } else { "-c" }).arg(script);
            c
        }
        Cmd::Argv(argv) => {
            let Some((program, args)) = argv.split_first() else {
                return Err(AgentError::invalid("command: the argv list is empty"));
            };
            if program.is_empty() {
                return Err(AgentError::invalid("command: argv[0] is empty"));
            }
            let mut c = Command::new(program);
            c.args(args);
            c
        }
    };
    if let Some(cwd) = cwd {
        check_cwd(cwd)?;
        command.current_dir(cwd);
    }
    for key in env.keys() {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(AgentError::invalid(format!("env: {key:?} is not a valid variable name")));
        }
    }
    command.envs(env);
    Ok(command)
}

/// A clear error for a missing working directory, instead of the spawn's bare ENOENT (which would
/// read as if the program were missing).
pub fn check_cwd(cwd: &str) -> AgentResult<()> {
    match std::fs::metadata(cwd) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(AgentError::invalid(format!("cwd: {cwd} is not a directory"))),
        Err(e) => Err(AgentError::io(&format!("cwd: {cwd}"), e)),
    }
}

/// Maps a spawn failure to an error naming the program.
pub fn spawn_error(cmd: &Cmd, err: std::io::Error) -> AgentError {
    let program = match cmd {
        Cmd::Shell(_) => "the shell".to_string(),
        Cmd::Argv(argv) => argv.first().cloned().unwrap_or_default(),
    };
    AgentError::io(&format!("cannot start {program}"), err)
}

/// Sends `signal` to the process group `pgid`, ignoring a group that is already gone.
pub fn kill_group(pgid: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pgid), signal);
}

/// Parses `TERM`, `SIGTERM`, `term` or `15`.
pub fn parse_signal(text: &str) -> AgentResult<nix::sys::signal::Signal> {
    use std::str::FromStr;
    let bad = || AgentError::invalid(format!("signal: {text:?} is not a signal name or number"));
    if let Ok(n) = text.parse::<i32>() {
        return nix::sys::signal::Signal::try_from(n).map_err(|_| bad());
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") { upper } else { format!("SIG{upper}") };
    nix::sys::signal::Signal::from_str(&name).map_err(|_| bad())
}
