//! `orchard-agent`: the in-sandbox agent.
//!
//! A static binary put into every sandbox at start. It serves the agent protocol
//! (`orchard-protocol`) over HTTP/1.1 on TCP, a unix socket or an inherited listening socket,
//! and authenticates every request with the sandbox's token. It is meant to run as the
//! sandbox's init (pid 1): then the commands it runs cannot kill it, and it reaps orphans.

mod browser;
mod config;
mod defaults;
mod desktop;
mod error;
mod exec;
mod files;
mod http;
mod http_proxy;
mod ids;
mod lifetime;
mod output;
mod process;
mod pty;
mod pty_ws;
mod reaper;
mod relay;
mod session;
mod spawn;
mod state;
mod tar_io;
mod tunnel;
mod utf8;

use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

fn main() -> anyhow::Result<()> {
    // `orchard-agent model-relay …`: not the agent, a program's model-call relay (see `relay`).
    if std::env::args().nth(1).as_deref() == Some("model-relay") {
        let code = relay::main(std::env::args().skip(1).collect())?;
        std::process::exit(code);
    }
    // `orchard-agent desktop …`: an X desktop and OSWorld's controller protocol (see `desktop`).
    if std::env::args().nth(1).as_deref() == Some("desktop") {
        let code = desktop::main(std::env::args().skip(1).collect())?;
        std::process::exit(code);
    }
    let args = config::Args::parse();
    if let Some(to) = &args.install {
        config::install(to).context("orchard-agent --install")?;
        return Ok(());
    }
    // Non-dumpable: processes in the sandbox (same uid) cannot read our memory, environment or
    // file descriptors through /proc, so the token and the listening socket stay ours.
    // SAFETY: prctl with PR_SET_DUMPABLE takes plain integer arguments.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    trim_bounding_set();

    reset_signal_dispositions();
    if let Some(die_at) = args.die_at {
        lifetime::set(die_at);
    }
    if let Some(die_at) = args.pool_die_at {
        lifetime::set_pool(die_at);
    }
    lifetime::start_watchdog().context("starting the lifetime watchdog")?;
    let config = config::Config::from_args(args).context("orchard-agent: bad configuration")?;
    close_inherited_descriptors(&config.listen);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(16)
        .thread_stack_size(256 * 1024)
        .build()?;
    runtime.block_on(async move {
        let state = Arc::new(state::AgentState::new(config)?);
        state.start_entrypoint()?;
        http::serve(state).await
    })
}

/// Closes every descriptor we were handed beyond stdio and our listening sockets: whoever
/// started us may have passed more (the local backend's second reader of bubblewrap's info
/// pipe), and no command of the sandbox may inherit them. Runs while we have one thread and
/// have opened nothing of our own.
fn close_inherited_descriptors(listen: &[config::Listen]) {
    let keep: Vec<i32> = listen
        .iter()
        .filter_map(|l| match l {
            config::Listen::Fd(fd) => Some(*fd),
            _ => None,
        })
        .collect();
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    // Collected first: the listing's own descriptor is among them, closed when it is dropped.
    let open: Vec<i32> = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    for fd in open.into_iter().filter(|fd| *fd > 2 && !keep.contains(fd)) {
        // SAFETY: closing a descriptor no Rust object of ours owns (we opened none yet); the
        // listing's own is already closed, and closing it again only fails with EBADF.
        unsafe { libc::close(fd) };
    }
}

/// Narrows the capability bounding set to the capabilities we were given. Whoever started us
/// may have granted a few (bubblewrap's `--cap-add`) yet left the bounding set full, and then a
/// command run as root would regain every capability at exec. Dropping needs CAP_SETPCAP; where
/// it is missing there is nothing to narrow (we were started unprivileged).
fn trim_bounding_set() {
    let permitted = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("CapPrm:").map(|v| v.trim().to_string())))
        .and_then(|hex| u64::from_str_radix(&hex, 16).ok());
    // Ambient capabilities would survive a switch to a non-root user; `docker run` has none.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    let Some(permitted) = permitted else { return };
    for cap in 0..64 {
        if permitted & (1 << cap) == 0 {
            // SAFETY: prctl with integer arguments; EINVAL past the last capability is ignored.
            unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
        }
    }
}

/// Whoever started us may have left signals ignored (a shell ignores SIGINT in background jobs)
/// or blocked; our children inherit both, and then a timeout's SIGINT would not interrupt them.
/// SIGPIPE stays ignored for the agent itself; std restores it in children.
fn reset_signal_dispositions() {
    use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, signal, sigprocmask};
    for sig in Signal::iterator() {
        if matches!(sig, Signal::SIGKILL | Signal::SIGSTOP | Signal::SIGPIPE) {
            continue;
        }
        // SAFETY: installing the default disposition runs no handler code.
        let _ = unsafe { signal(sig, SigHandler::SigDfl) };
    }
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
}
