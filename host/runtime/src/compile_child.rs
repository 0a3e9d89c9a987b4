//! Compiling a component in a child process (`orchard compile-component`, which calls
//! [`precompile`]), so that none of the compiler's memory is ever the server's.
//!
//! Why: even on an engine of its own that is dropped after (see `engine`), a compile leaves the
//! server's malloc arenas fragmented — an idle server that had just compiled the shipped plugins
//! kept 80–110 MB resident where one started on their cache keeps ~60 MB. A child's memory all
//! goes back when it exits; a compiler fault on a tenant's upload ends the child, not the server.
//!
//! The protocol: the component on the child's stdin; the child writes the precompiled artifact
//! to the path given after `--out` and exits 0, or prints why the component is invalid and
//! exits [`INVALID`], or fails some other way (then the caller compiles in process). It may
//! write at most [`MEMORY_LIMIT`] of memory and run at most 300 s.

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The child's exit code for a component that does not compile (its reason on stderr).
pub const INVALID: i32 = 2;

/// Longest a child may compile: a component that takes longer is refused (the child is killed).
const COMPILE_TIMEOUT: Duration = Duration::from_secs(300);

/// Most of the child's stderr kept for the message.
const STDERR_KEPT: u64 = 16 * 1024;

/// Most memory a child may write to (`RLIMIT_DATA`: heap, thread stacks; not address space it
/// only reserves, which many compiling threads' allocator arenas would exhaust first). The
/// shipped plugins need under 500 MB together; an upload made to blow the compiler up is
/// refused (the child aborts) instead of taking the host's memory.
pub const MEMORY_LIMIT: u64 = 4 << 30;

/// How a compile in a child did not give a component.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ChildCompileError {
    /// The component is refused: the child said why it does not compile, or the compiler died
    /// on it (a signal) or ran past the time limit. Not tried again in process.
    #[error("{0}")]
    Invalid(String),
    /// The child could not do the work (it would not start, exited with an error of its own, or
    /// wrote what does not load here): the caller compiles in process instead.
    #[error("compiling in a child process: {0}")]
    Failed(String),
}

/// Why [`precompile`] gave no artifact.
#[derive(Debug, thiserror::Error)]
pub enum PrecompileError {
    /// No engine could be made (nothing to do with the component).
    #[error("wasmtime engine: {0}")]
    Engine(String),
    /// The component does not compile.
    #[error("{0}")]
    Invalid(String),
}

/// Compiles `bytes` to the artifact a runtime of the default settings loads (what the child of
/// `compile-component` runs).
pub fn precompile(bytes: &[u8]) -> Result<Vec<u8>, PrecompileError> {
    let engine = wasmtime::Engine::new(&crate::engine::engine_config(None))
        .map_err(|e| PrecompileError::Engine(e.to_string()))?;
    engine.precompile_component(bytes).map_err(|e| PrecompileError::Invalid(crate::engine::compile_error(&e)))
}

/// Runs `command` (the program, then its arguments) with `--out out` added, `bytes` on its
/// stdin, and waits for it at most [`COMPILE_TIMEOUT`].
pub(crate) fn compile_in_child(command: &[OsString], bytes: &[u8], out: &Path) -> Result<(), ChildCompileError> {
    let failed = |e: String| ChildCompileError::Failed(e);
    let (program, args) = command.split_first().ok_or_else(|| failed("no compile command".into()))?;
    let mut command = Command::new(program);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            let limit = libc::rlimit { rlim_cur: MEMORY_LIMIT, rlim_max: MEMORY_LIMIT };
            if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command
        .args(args)
        .arg("--out")
        .arg(out)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("starting {}: {e}", program.to_string_lossy())))?;
    let stderr = child.stderr.take().map(|pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.take(STDERR_KEPT).read_to_string(&mut text);
            text
        })
    });
    // A child that dies early closes its stdin: the write fails, and its exit says why.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(bytes);
    }
    let deadline = Instant::now() + COMPILE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                break Err(ChildCompileError::Invalid(format!(
                    "compiling took longer than {} s",
                    COMPILE_TIMEOUT.as_secs()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => break Err(failed(format!("waiting for the compile: {e}"))),
        }
    };
    let said = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    let said = said.trim();
    let status = status?;
    match status.code() {
        Some(0) => Ok(()),
        Some(INVALID) => Err(ChildCompileError::Invalid(said.to_string())),
        Some(code) => Err(failed(format!("it ended with {code}: {said}"))),
        // Killed (a compiler fault, or out of memory) while compiling this component: compiling
        // it here instead could do the same to the server.
        None => {
            use std::os::unix::process::ExitStatusExt;
            Err(ChildCompileError::Invalid(format!(
                "the compiler died on this component (signal {})",
                status.signal().unwrap_or_default()
            )))
        }
    }
}
