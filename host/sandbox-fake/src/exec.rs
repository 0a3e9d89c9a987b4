//! How a fake sandbox answers commands: with a handler the test gives, since nothing runs.
//!
//! The default handler knows a handful of commands (enough for the host's own housekeeping and
//! for tests that only need files to appear); anything else exits 127 naming the command, so a
//! test never passes on a command it did not script.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use orchard_protocol::{Command, ExecRequest, ExecResult, Output};

use crate::fs::{MemFs, normalise};

/// One command, as a handler sees it.
pub struct ExecCall<'a> {
    /// The sandbox's id.
    pub sandbox: &'a str,
    /// What was asked.
    pub request: &'a ExecRequest,
    /// The sandbox's environment with the request's on top.
    pub env: BTreeMap<String, String>,
    /// Where the command runs (the request's, the session's, or the sandbox's workdir).
    pub cwd: String,
    /// The sandbox's files, to read and change.
    pub fs: &'a mut MemFs,
}

impl ExecCall<'_> {
    /// The command as one line (argv joined by spaces).
    pub fn line(&self) -> String {
        self.request.command.display()
    }
}

/// Answers commands. Called with the sandbox's files locked: keep it quick.
pub type ExecHandler = Arc<dyn Fn(&mut ExecCall<'_>) -> ExecResult + Send + Sync>;

/// A finished command's result.
pub fn exited(code: i32, stdout: &str, stderr: &str) -> ExecResult {
    let out = |s: &str| Output { text: s.to_string(), total_bytes: s.len() as u64, ..Output::default() };
    ExecResult { exit_code: code, stdout: out(stdout), stderr: out(stderr), ..ExecResult::default() }
}

/// The words of a command: an argv as it is, a shell line split on whitespace (no quoting).
fn words(command: &Command) -> Vec<String> {
    match command {
        Command::Argv(argv) => argv.clone(),
        Command::Shell(line) => line.split_whitespace().map(str::to_string).collect(),
    }
}

/// The default handler: `true`, `false`, `exit N`, `echo …`, `pwd`, `cat FILE…`,
/// `mkdir -p DIR…`, `touch FILE…` and `rm -rf PATH…` over the sandbox's files; `bash -c`/`sh -c`
/// unwrap to their line. Anything else exits 127.
pub fn builtin(call: &mut ExecCall<'_>) -> ExecResult {
    let mut argv = words(&call.request.command);
    if argv.len() >= 3 && matches!(argv[0].as_str(), "bash" | "sh" | "/bin/sh" | "/bin/bash") && argv[1] == "-c" {
        argv = argv[2].split_whitespace().map(str::to_string).collect();
    }
    let Some((name, args)) = argv.split_first() else {
        return exited(0, "", "");
    };
    let path = |a: &String| normalise(a, &call.cwd);
    match name.as_str() {
        "true" | ":" => exited(0, "", ""),
        "false" => exited(1, "", ""),
        "exit" => exited(args.first().and_then(|c| c.parse().ok()).unwrap_or(0), "", ""),
        "echo" => exited(0, &format!("{}\n", args.join(" ")), ""),
        "pwd" => exited(0, &format!("{}\n", call.cwd), ""),
        "cat" => {
            let mut out = String::new();
            for a in args {
                match call.fs.read(&path(a)) {
                    Ok(b) => out.push_str(&String::from_utf8_lossy(&b)),
                    Err(e) => return exited(1, &out, &format!("cat: {}\n", e.message)),
                }
            }
            exited(0, &out, "")
        }
        "mkdir" => {
            for a in args.iter().filter(|a| !a.starts_with('-')) {
                if let Err(e) = call.fs.mkdir_all(&path(a)) {
                    return exited(1, "", &format!("mkdir: {}\n", e.message));
                }
            }
            exited(0, "", "")
        }
        "touch" => {
            for a in args {
                let p = path(a);
                if !call.fs.exists(&p)
                    && let Err(e) = call.fs.write(&p, Bytes::new(), None, false)
                {
                    return exited(1, "", &format!("touch: {}\n", e.message));
                }
            }
            exited(0, "", "")
        }
        "rm" => {
            for a in args.iter().filter(|a| !a.starts_with('-')) {
                let _ = call.fs.remove(&path(a), true);
            }
            exited(0, "", "")
        }
        _ => exited(127, "", &format!("{name}: the fake backend's exec handler does not run this command\n")),
    }
}
