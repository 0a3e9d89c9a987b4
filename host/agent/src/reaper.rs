//! Child reaping.
//!
//! The agent is usually the sandbox's pid 1, so every orphan in the sandbox becomes its child and
//! must be reaped. One thread waits for any child to exit; if the child was started through
//! [`Reaper::spawn`], its exit status and resource usage go to whoever awaits it.
//!
//! The thread first *peeks* at an exited child (`waitid(WNOWAIT)`) and reaps it only while holding
//! the registry lock that `spawn` also holds. That keeps us from stealing the status of a child that
//! `std::process::Command::spawn` is still setting up (it waits for its own child when exec fails).

use std::collections::HashMap;
use std::process::{Child, Command};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;

/// How a child ended, with what it consumed.
#[derive(Debug, Clone, Copy)]
pub struct ExitInfo {
    /// The exit code; for a signal death, `128 + signal`.
    pub code: i32,
    pub signal: Option<i32>,
    /// User + system CPU seconds of the child and the descendants it waited for.
    pub cpu_seconds: f64,
    /// Peak RSS in KiB of the largest process among the child and its waited descendants.
    pub peak_rss_kb: u64,
}

#[derive(Default)]
struct Registry {
    waiters: HashMap<i32, oneshot::Sender<ExitInfo>>,
}

#[derive(Clone)]
pub struct Reaper {
    registry: Arc<(Mutex<Registry>, Condvar)>,
}

impl Reaper {
    pub fn start() -> Self {
        let registry = Arc::new((Mutex::new(Registry::default()), Condvar::new()));
        let for_thread = registry.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .stack_size(64 * 1024)
            .spawn(move || reap_forever(&for_thread))
            .expect("cannot start the reaper thread");
        Reaper { registry }
    }

    /// Spawns `command` and returns the child with a receiver for its exit.
    pub fn spawn(&self, command: &mut Command) -> std::io::Result<(Child, oneshot::Receiver<ExitInfo>)> {
        let (lock, wake) = &*self.registry;
        let mut registry = lock.lock().unwrap_or_else(|p| p.into_inner());
        let child = command.spawn()?;
        let (tx, rx) = oneshot::channel();
        registry.waiters.insert(child.id() as i32, tx);
        wake.notify_one();
        Ok((child, rx))
    }
}

fn reap_forever(registry: &(Mutex<Registry>, Condvar)) {
    let (lock, wake) = registry;
    loop {
        // SAFETY: siginfo_t is plain data; waitid fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a siginfo_t; WNOWAIT leaves the child waitable.
        let rc = unsafe { libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOWAIT) };
        if rc != 0 {
            match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::EINTR) => continue,
                // No children at all: sleep until a spawn wakes us, or a second passes (orphans
                // may be re-parented to us at any time).
                _ => {
                    let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
                    let _ = wake.wait_timeout(guard, Duration::from_secs(1));
                    continue;
                }
            }
        }
        // SAFETY: waitid succeeded with WEXITED, so si_pid is set.
        let pid = unsafe { info.si_pid() };
        let mut registry = lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut status = 0;
        // SAFETY: rusage is plain data that wait4 fills.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers; WNOHANG because the child may have been reaped by std already.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if reaped != pid {
            continue;
        }
        if let Some(tx) = registry.waiters.remove(&pid) {
            let _ = tx.send(exit_info(status, &usage));
        }
    }
}

fn exit_info(status: i32, usage: &libc::rusage) -> ExitInfo {
    let (code, signal) = if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        (128 + sig, Some(sig))
    } else {
        (libc::WEXITSTATUS(status), None)
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    ExitInfo {
        code,
        signal,
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        peak_rss_kb: usage.ru_maxrss.max(0) as u64,
    }
}
