//! The on-disk record of a sandbox: enough for a restarted host to find it again, talk to it,
//! or clean up everything it held.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const RECORD_FILE: &str = "sandbox.json";
pub const SOCKET_FILE: &str = "agent.sock";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub tenant: String,
    pub image: String,
    pub image_id: String,
    pub block_network: bool,
    #[serde(default)]
    pub network_allow: Vec<String>,
    pub cpu: Option<f64>,
    pub memory_bytes: Option<u64>,
    pub pids: Option<u64>,
    /// Size limit of the writable layer (a project quota), when one is enforced.
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// The sandbox's slot among live sandboxes: picks its user-namespace id range and its
    /// disk-quota project (see `ids`).
    #[serde(default)]
    pub slot: Option<u32>,
    pub created_at: f64,
    pub last_active: f64,
    pub ttl_seconds: u64,
    /// The hard lifetime's end (Unix seconds): the agent ends the sandbox then by itself.
    #[serde(default)]
    pub die_at: Option<f64>,
    /// The agent's token. The record lives in a 0700 directory outside every sandbox.
    pub token: String,
    /// The sandbox's pid 1 (the agent) on the host, and its start time in clock ticks, which
    /// tells it apart from a later process that got the same pid.
    pub init_pid: i32,
    pub init_start: u64,
    pub cgroups: Vec<PathBuf>,
    #[serde(default)]
    pub network: Option<crate::network::Attachment>,
    /// What it was created from (a fork makes its children from it).
    #[serde(default)]
    pub spec: Option<orchard_sandbox::SandboxSpec>,
}

impl Record {
    /// Whether the sandbox is past its hard lifetime.
    pub fn past_lifetime(&self) -> bool {
        self.ends_within(std::time::Duration::ZERO)
    }

    /// Whether its hard lifetime ends within `margin` from now (or has ended).
    pub fn ends_within(&self, margin: std::time::Duration) -> bool {
        self.die_at.is_some_and(|t| t <= now() + margin.as_secs_f64())
    }

    pub fn load(dir: &Path) -> Result<Record, String> {
        let path = dir.join(RECORD_FILE);
        let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Written to a temporary file and renamed, so a crash never leaves half a record.
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        let tmp = dir.join(format!("{RECORD_FILE}.tmp"));
        let bytes = serde_json::to_vec_pretty(self).expect("records serialise");
        std::fs::write(&tmp, bytes).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, dir.join(RECORD_FILE)).map_err(|e| format!("{}: {e}", dir.display()))
    }
}

/// The state letter and start time (fields 3 and 22 of /proc/PID/stat) of a process.
fn stat_of(pid: i32) -> Option<(u8, u64)> {
    if pid <= 0 {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may contain spaces and parentheses: skip past its last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    Some((*rest.as_bytes().first()?, rest.split(' ').nth(19)?.parse().ok()?))
}

/// The start time (field 22 of /proc/PID/stat) of a live process.
pub fn process_start(pid: i32) -> Option<u64> {
    stat_of(pid).map(|(_, start)| start)
}

/// True while the process that the record names is still the one running (and not a zombie):
/// one read of /proc/PID/stat.
pub fn is_alive(pid: i32, start: u64) -> bool {
    stat_of(pid).is_some_and(|(state, started)| state != b'Z' && started == start)
}

pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// A pidfd for `pid`, readable once the process has exited.
pub fn pidfd(pid: i32) -> Option<tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>> {
    let owned = open_pidfd(pid)?;
    // SAFETY: the OwnedFd moves into the AsyncFd and stays open as long as it does.
    unsafe { tokio::io::unix::AsyncFd::register(owned) }.ok()
}

/// A plain (blocking-mode) pidfd for `pid`, for [`has_exited`].
pub fn open_pidfd(pid: i32) -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    if pid <= 0 {
        return None;
    }
    // SAFETY: pidfd_open takes a pid and flags; a non-negative result is a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: the fd was just returned to us and is owned by nothing else.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

/// Whether the process behind `pidfd` has exited (a zombie counts): one `poll` that does not
/// wait, where reading /proc would open, format and parse two files.
pub fn has_exited(pidfd: &std::os::fd::OwnedFd) -> bool {
    use std::os::fd::AsRawFd;
    let mut poll = libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd, a zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready > 0 && poll.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A child killed but not yet reaped is a zombie: gone for both checks, before any wait.
    #[test]
    fn a_killed_process_has_exited_even_as_a_zombie() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        let start = process_start(pid).unwrap();
        let pidfd = open_pidfd(pid).unwrap();
        assert!(!has_exited(&pidfd));
        assert!(is_alive(pid, start));
        assert!(!is_alive(pid, start + 1), "another process under a reused pid is not ours");
        child.kill().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !has_exited(&pidfd) {
            assert!(std::time::Instant::now() < deadline, "the pidfd never said the child exited");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!is_alive(pid, start), "a zombie is not alive");
        child.wait().unwrap();
        assert!(has_exited(&pidfd));
        assert!(!is_alive(pid, start));
        assert!(open_pidfd(0).is_none() && !is_alive(0, 0));
    }
}
