//! Turning a protocol command into a `std::process::Command`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use orchard_protocol::Command as Cmd;

use crate::error::{AgentError, AgentResult};

/// Builds the process for `cmd`: shell strings go through `shell -c` (`-lc` for a login shell),
/// argv lists are executed directly. A shell string with no shell syntax at all (`true`,
/// `git status`, `python3 -m pytest -x`) is executed directly too, as make does: bash would only
/// split it into words and exec the program (after setting `SHLVL` and `_`, which we set the
/// same way), so the result is the same without starting a shell. Callers put it in its own
/// process group (or session) so that a timeout or a signal reaches everything it started, and
/// nothing else.
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
            match (!login_shell).then(|| direct(shell, script, env)).flatten() {
                Some(c) => c,
                None => {
                    let mut c = Command::new(shell);
                    c.arg(if login_shell { "-lc" } else { "-c" }).arg(script);
                    c
                }
            }
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

/// Shell builtins and keywords: a command starting with one needs the shell (it changes the
/// shell's state, or behaves differently from a program of the same name).
const SHELL_WORDS: &[&str] = &[
    "!",
    "[[",
    "]]",
    "{",
    "}",
    ".",
    ":",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "case",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "coproc",
    "declare",
    "dirs",
    "disown",
    "do",
    "done",
    "elif",
    "else",
    "enable",
    "esac",
    "eval",
    "exec",
    "exit",
    "export",
    "fc",
    "fg",
    "fi",
    "for",
    "function",
    "getopts",
    "hash",
    "help",
    "history",
    "if",
    "in",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "pushd",
    "read",
    "readarray",
    "readonly",
    "return",
    "select",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "then",
    "time",
    "times",
    "trap",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "until",
    "wait",
    "while",
];

/// The words of `script` when it has no shell syntax: only plain characters (no quoting,
/// expansion, globbing, redirection, operators or comments), no assignment, and a first word
/// that is not a builtin or keyword.
pub fn plain_words(script: &str) -> Option<Vec<&str>> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./:,+@=%^".contains(c);
    let words: Vec<&str> = script.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    if !words.iter().all(|w| w.chars().all(plain)) || first.contains('=') || SHELL_WORDS.contains(&first) {
        return None;
    }
    Some(words)
}

/// Where the shell would find `program`: as given when it has a slash, else on `PATH`.
fn find_program(program: &str, path: Option<&str>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = Path::new(program);
        return executable(p).then(|| p.to_path_buf());
    }
    let path = path.map(str::to_string).or_else(|| std::env::var("PATH").ok())?;
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(program)).find(|p| executable(p))
}

/// `script` as a direct exec, when it needs no shell and its program exists (otherwise the
/// shell runs it, so that "command not found" reads and exits as it always does).
fn direct(shell: &Path, script: &str, env: &BTreeMap<String, String>) -> Option<Command> {
    let words = plain_words(script)?;
    let program = find_program(words[0], env.get("PATH").map(String::as_str))?;
    let mut c = Command::new(&program);
    std::os::unix::process::CommandExt::arg0(&mut c, words[0]);
    c.args(&words[1..]);
    // What bash sets before it execs a simple command: `_`, and `SHLVL` counted up at its start
    // and back down for the exec (so unset becomes 0).
    if shell.file_name().is_some_and(|n| n.to_string_lossy().contains("bash")) {
        let level = env
            .get("SHLVL")
            .cloned()
            .or_else(|| std::env::var("SHLVL").ok())
            .and_then(|l| l.parse::<i64>().ok())
            .unwrap_or(0);
        c.env("SHLVL", level.to_string());
        c.env("_", &program);
    }
    Some(c)
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

#[cfg(test)]
mod tests {
    use super::plain_words;

    #[test]
    fn only_commands_without_shell_syntax_skip_the_shell() {
        for plain in ["true", "git status", "python3 -m pytest -x tests/test_a.py", "ls -la /tmp", "make -j4 all"] {
            assert!(plain_words(plain).is_some(), "{plain}");
        }
        for shell in [
            "echo $HOME",
            "ls *.py",
            "a && b",
            "a; b",
            "cat < f",
            "echo 'q'",
            "X=1 env",
            "cd /tmp",
            "export A=1",
            "echo `id`",
            "ls ~",
            "echo {a,b}",
            "# comment",
            "a | b",
            "kill %1",
            "for x in 1; do :; done",
            "ls\nid",
            "",
        ] {
            assert!(plain_words(shell).is_none(), "{shell:?}");
        }
    }
}
