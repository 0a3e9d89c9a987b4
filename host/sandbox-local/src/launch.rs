//! Starting a sandbox: bubblewrap, with an overlay root, inside the sandbox's cgroups.
//!
//! Why bubblewrap: it is a well-kept, setuid-free namespace tool that starts a sandbox in ~6 ms
//! here, where `runc run` takes ~39 ms for the same rootfs (see README). What bubblewrap 0.8 lacks
//! (overlay roots, joining cgroups and a network namespace made for the sandbox) is done by the
//! launcher in the forked child just before it execs bwrap (see `launcher`):
//!
//! 1. a private mount namespace holding the overlay (image lower, per-sandbox upper). It lives
//!    exactly as long as the sandbox's processes: no mount can leak on the host, even on a crash;
//! 2. joining the sandbox's cgroups, so every process of the sandbox is accounted and limited;
//! 3. entering the sandbox's network namespace when the network is open;
//! 4. handing over the agent's listening socket (fd 3) and bwrap's info pipe (fd 4).
//!
//! The agent runs as the sandbox's pid 1: commands cannot kill it, and orphans are reaped by it.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use orchard_image::Image;
use tokio::io::AsyncReadExt;

use crate::launcher::{Fds, Launcher, Request};

/// Capabilities a container's root keeps (Docker's default set, without MKNOD and NET_RAW).
const KEPT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_AUDIT_WRITE",
    "CAP_SETFCAP",
];

/// Where the agent binary appears inside every sandbox.
pub const AGENT_PATH: &str = "/.orchard/agent";
/// Where the agent keeps spilled output, logs and session files.
pub const SCRATCH_DIR: &str = "/tmp/.orchard";

pub struct LaunchSpec<'a> {
    /// Holds the overlay's upper and work directories.
    pub layer_dir: &'a Path,
    pub launcher: std::sync::Arc<Launcher>,
    pub bwrap: &'a Path,
    pub agent_binary: &'a Path,
    pub dir: &'a Path,
    pub image: &'a Image,
    pub hostname: &'a str,
    pub env: Vec<(String, String)>,
    pub workdir: String,
    pub listener: OwnedFd,
    pub cgroups: &'a [PathBuf],
    pub netns: Option<PathBuf>,
    pub file_roots: &'a [String],
}

pub struct Launched {
    /// bubblewrap's monitor process, watched through [`Monitor::exited`].
    pub monitor: Monitor,
    /// The agent's pid on the host (the sandbox's pid 1).
    pub init_pid: i32,
}

pub fn root_dir(dir: &Path) -> PathBuf {
    dir.join("root")
}

/// bubblewrap's command line for the sandbox.
fn bwrap_argv(spec: &LaunchSpec<'_>, root: &Path) -> Vec<String> {
    let mut a: Vec<String> = vec![spec.bwrap.display().to_string()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    push(&["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]);
    if spec.netns.is_none() {
        push(&["--unshare-net"]);
    }
    push(&["--new-session", "--as-pid-1", "--hostname", spec.hostname]);
    push(&["--bind", &root.display().to_string(), "/"]);
    for (src, dst) in &spec.image.ro_binds {
        push(&["--ro-bind", &src.display().to_string(), &dst.display().to_string()]);
    }
    push(&["--proc", "/proc", "--dev", "/dev"]);
    push(&["--ro-bind", &spec.agent_binary.display().to_string(), AGENT_PATH]);
    // --dir: the working directory exists even when the image does not have it.
    push(&["--dir", &spec.workdir, "--chdir", &spec.workdir, "--clearenv"]);
    for (k, v) in &spec.env {
        push(&["--setenv", k, v]);
    }
    push(&["--cap-drop", "ALL"]);
    for cap in KEPT_CAPS {
        push(&["--cap-add", cap]);
    }
    push(&["--info-fd", "4", "--", AGENT_PATH, "--listen", "fd:3", "--token-stdin", "--scratch-dir", SCRATCH_DIR]);
    for root in spec.file_roots {
        push(&["--root", root]);
    }
    let run = &spec.image.config;
    if !run.entrypoint.is_empty() || !run.cmd.is_empty() {
        push(&["--"]);
        a.extend(run.entrypoint.iter().chain(run.cmd.iter()).cloned());
    }
    a
}

pub async fn launch(spec: LaunchSpec<'_>, token: &str) -> Result<Launched, String> {
    let root = root_dir(spec.dir);
    let upper = spec.layer_dir.join("upper");
    let work = spec.layer_dir.join("work");
    for d in [&root, &upper, &work] {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    for p in [&spec.image.root, &upper, &work] {
        let s = p.as_os_str().as_bytes();
        if s.contains(&b',') || s.contains(&b':') {
            return Err(format!("{}: overlay paths cannot contain ',' or ':'", p.display()));
        }
    }
    let request = Request {
        argv: bwrap_argv(&spec, &root),
        overlay_target: root.display().to_string(),
        overlay_options: format!(
            "lowerdir={},upperdir={},workdir={}",
            spec.image.root.display(),
            upper.display(),
            work.display()
        ),
        cgroup_procs: spec.cgroups.iter().map(|c| c.join("cgroup.procs")).collect(),
        netns: spec.netns.clone(),
        rootless: !nix::unistd::geteuid().is_root(),
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
    };
    let log = File::options()
        .create(true)
        .append(true)
        .open(spec.dir.join("agent.log"))
        .map_err(|e| format!("agent.log: {e}"))?;
    let (info_read, info_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let (stdin_read, stdin_write) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    // Only the agent ever sees the token: on its stdin, never in a file or the environment.
    // A line of a few dozen bytes fits any pipe buffer: this write never blocks.
    nix::unistd::write(&stdin_write, format!("{token}\n").as_bytes()).map_err(|e| format!("token pipe: {e}"))?;
    drop(stdin_write);
    let log: OwnedFd = log.into();
    let fds = Fds { stdin: stdin_read, log, listener: spec.listener, info: info_write };
    let pid = spec.launcher.launch(&request, fds).await?;
    let monitor = Monitor::new(pid);
    match read_child_pid(info_read).await {
        Ok(init_pid) => Ok(Launched { monitor, init_pid }),
        Err(e) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            monitor.exited().await;
            let log = std::fs::read_to_string(spec.dir.join("agent.log")).unwrap_or_default();
            Err(format!("{e}; bwrap said: {}", log.trim()))
        }
    }
}

/// bwrap writes `{"child-pid": N, ...}` on its info fd once the sandbox's init is running.
async fn read_child_pid(fd: OwnedFd) -> Result<i32, String> {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(|e| e.to_string())?;
    let mut text = Vec::new();
    let mut buf = [0u8; 512];
    let read = async {
        loop {
            let n = pipe.read(&mut buf).await.map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the sandbox exited during start".to_string());
            }
            text.extend_from_slice(&buf[..n]);
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) {
                return v
                    .get("child-pid")
                    .and_then(|p| p.as_i64())
                    .map(|p| p as i32)
                    .ok_or("bwrap gave no child pid".into());
            }
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), read)
        .await
        .map_err(|_| "bwrap did not start the sandbox within 10 s".to_string())?
}

/// Watches bubblewrap's monitor process through a pidfd (the launcher reaps it).
///
/// A pidfd wakes exactly the waiter whose process exited, however many sandboxes run.
pub struct Monitor {
    pidfd: Option<tokio::io::unix::AsyncFd<OwnedFd>>,
}

impl Monitor {
    pub fn new(pid: i32) -> Self {
        // No pidfd means the process is already gone.
        Monitor { pidfd: crate::record::pidfd(pid) }
    }

    /// Resolves when the process has exited.
    pub async fn exited(self) -> String {
        if let Some(fd) = &self.pidfd {
            let _ = fd.readable().await;
        }
        "its processes ended".to_string()
    }
}
