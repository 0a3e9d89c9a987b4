//! Starting a sandbox: bubblewrap, with an overlay root, inside the sandbox's cgroups.
//!
//! Why bubblewrap: it is a well-kept, setuid-free namespace tool that starts a sandbox in ~6 ms
//! here, where `runc run` takes ~39 ms for the same rootfs (see README). What bubblewrap 0.8 lacks
//! (overlay roots, id-mapped layers, /sys, joining cgroups and a network namespace made for the
//! sandbox) is done by the launcher in the forked child just before it execs bwrap (see
//! `launcher` and `rootfs`):
//!
//! 1. joining the sandbox's cgroups, so every process of the sandbox is accounted and limited;
//! 2. a network namespace: the open network's, or a new one with only loopback;
//! 3. a private mount namespace holding the root (id-mapped image lower, per-sandbox upper,
//!    /sys). It lives exactly as long as the sandbox's processes: no mount can leak on the host;
//! 4. entering the sandbox's own user namespace (root inside is an unprivileged id range on the
//!    host), from which bubblewrap makes the pid, ipc, uts, cgroup and mount namespaces, /proc
//!    with Docker's read-only and masked paths, /dev, and applies Docker's seccomp profile;
//! 5. handing over the agent's listening socket (fd 3), bwrap's info pipe (fd 4) and a second
//!    reader of it (fd 10, so that bwrap's write cannot fail when the host has died), and what
//!    bwrap reads by descriptor (seccomp programs, the root, the agent, /etc files).
//!
//! The agent runs as the sandbox's pid 1: commands cannot kill it, and orphans are reaped by it.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use orchard_image::Image;
use tokio::io::AsyncReadExt;

use crate::launcher::{ETC_FDS, Fds, Launcher, Request, SECCOMP_FDS};
use crate::rootfs::RootSpec;

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
/// The mock services inside every sandbox (when the host has them beside the agent); the same
/// path as on Kubernetes, where the agent's init container installs both.
pub const MOCK_SERVICES_PATH: &str = "/.orchard/bin/orchard-mock-services";
/// Where the agent keeps spilled output, logs and session files.
pub const SCRATCH_DIR: &str = "/tmp/.orchard";

pub struct LaunchSpec<'a> {
    /// Holds the overlay's upper and work directories.
    pub layer_dir: &'a Path,
    pub launcher: std::sync::Arc<Launcher>,
    pub bwrap: &'a Path,
    pub agent_binary: &'a Path,
    /// Bound read-only at [`crate::PROGRAMS_PATH`].
    pub program_cache: Option<&'a Path>,
    pub dir: &'a Path,
    pub image: &'a Image,
    pub hostname: &'a str,
    pub env: Vec<(String, String)>,
    pub workdir: String,
    pub listener: OwnedFd,
    pub cgroups: &'a [PathBuf],
    pub netns: Option<PathBuf>,
    pub file_roots: &'a [String],
    /// Root inside maps to host ids from here on (root hosts; `None` when rootless).
    pub id_base: Option<u32>,
    /// The sandbox's cgroup directories, by controller (`""` for a unified hierarchy).
    pub cgroup_view: Vec<(String, PathBuf)>,
    /// Contents of /etc/hosts, /etc/hostname and /etc/resolv.conf.
    pub etc_files: [String; 3],
    /// The writable layer's own filesystem image, when the sandbox has a disk limit.
    pub disk_image: Option<&'a Path>,
    /// Its loop device.
    pub loop_device: crate::rootfs::LoopDevice,
    /// A forked child's layer to start from, when its upper lives inside the disk image.
    pub seed: Option<PathBuf>,
    /// The hard lifetime's end (Unix seconds), kept by the agent.
    pub die_at: Option<u64>,
    /// `die_at` is a warm pool's, which the deadline a claim sets replaces.
    pub die_at_until_claimed: bool,
}

/// /proc paths Docker makes read-only: global kernel settings and hardware.
const PROC_READ_ONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// /proc files Docker masks (an empty read-only file over them): kernel memory, other tenants'
/// keys, timers and scheduler internals.
const PROC_MASKED_FILES: &[&str] = &["kcore", "keys", "timer_list", "timer_stats", "sched_debug", "latency_stats"];
/// /proc directories Docker masks (an empty read-only tmpfs over them).
const PROC_MASKED_DIRS: &[&str] = &["acpi", "scsi"];
/// Docker's default /dev/shm size.
const SHM_BYTES: &str = "67108864";

/// The /proc paths of this kernel among `names` (the sandbox runs on the same kernel).
fn existing_proc(names: &'static [&'static str]) -> Vec<&'static str> {
    names.iter().copied().filter(|n| Path::new("/proc").join(n).exists()).collect()
}

pub struct Launched {
    /// bubblewrap's monitor process, watched through [`Monitor::exited`].
    pub monitor: Monitor,
    /// The agent's pid on the host (the sandbox's pid 1).
    pub init_pid: i32,
}

/// bubblewrap's command line for the sandbox.
fn bwrap_argv(spec: &LaunchSpec<'_>) -> Vec<String> {
    static PROC: std::sync::OnceLock<[Vec<&'static str>; 3]> = std::sync::OnceLock::new();
    let [read_only, masked_files, masked_dirs] = PROC.get_or_init(|| {
        [existing_proc(PROC_READ_ONLY), existing_proc(PROC_MASKED_FILES), existing_proc(PROC_MASKED_DIRS)]
    });
    let mut a: Vec<String> = vec![spec.bwrap.display().to_string()];
    let mut push = |items: &[&str]| a.extend(items.iter().map(|s| s.to_string()));
    // The network namespace was made (or entered) before bwrap starts.
    push(&["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]);
    push(&["--new-session", "--as-pid-1", "--hostname", spec.hostname]);
    push(&["--bind", crate::rootfs::STAGED_ROOT, "/"]);
    push(&["--proc", "/proc"]);
    for name in read_only {
        let path = format!("/proc/{name}");
        push(&["--ro-bind", &path, &path]);
    }
    for name in masked_files {
        push(&["--ro-bind", "/dev/null", &format!("/proc/{name}")]);
    }
    for name in masked_dirs {
        let path = format!("/proc/{name}");
        push(&["--perms", "0555", "--tmpfs", &path, "--remount-ro", &path]);
    }
    push(&["--dev", "/dev", "--perms", "1777", "--size", SHM_BYTES, "--tmpfs", "/dev/shm"]);
    push(&["--ro-bind", crate::rootfs::STAGED_AGENT, AGENT_PATH]);
    push(&["--ro-bind-try", crate::rootfs::STAGED_MOCK_SERVICES, MOCK_SERVICES_PATH]);
    for (fd, path) in ETC_FDS.iter().zip(["/etc/hosts", "/etc/hostname", "/etc/resolv.conf"]) {
        push(&["--perms", "0644", "--bind-data", &fd.to_string(), path]);
    }
    // --dir: the working directory exists even when the image does not have it.
    push(&["--dir", &spec.workdir, "--chdir", &spec.workdir, "--clearenv"]);
    for (k, v) in &spec.env {
        push(&["--setenv", k, v]);
    }
    push(&["--cap-drop", "ALL"]);
    for cap in KEPT_CAPS {
        push(&["--cap-add", cap]);
    }
    for fd in SECCOMP_FDS {
        push(&["--add-seccomp-fd", &fd.to_string()]);
    }
    push(&["--info-fd", "4", "--", AGENT_PATH, "--listen", "fd:3", "--token-stdin", "--scratch-dir", SCRATCH_DIR]);
    if let Some(die_at) = spec.die_at {
        push(&[if spec.die_at_until_claimed { "--pool-die-at" } else { "--die-at" }, &die_at.to_string()]);
    }
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
    let mapped_lower = spec.dir.join("lower");
    let (upper, work, disk) = match spec.disk_image {
        Some(image) => {
            let mount_point = spec.dir.join("disk");
            let disk = crate::rootfs::DiskMount {
                image: image.to_path_buf(),
                mount_point: mount_point.clone(),
                device: spec.loop_device,
            };
            (mount_point.join("upper"), mount_point.join("work"), Some(disk))
        }
        None => (spec.layer_dir.join("upper"), spec.layer_dir.join("work"), None),
    };
    std::fs::create_dir_all(&mapped_lower).map_err(|e| format!("{}: {e}", mapped_lower.display()))?;
    match &disk {
        Some(d) => std::fs::create_dir_all(&d.mount_point).map_err(|e| format!("{}: {e}", d.mount_point.display()))?,
        None => std::fs::create_dir_all(spec.layer_dir).map_err(|e| format!("{}: {e}", spec.layer_dir.display()))?,
    }
    // The merged root's `/` is the upper directory: it gets the image root's mode.
    let upper_mode = std::fs::metadata(&spec.image.root)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o7777)
        .unwrap_or(0o755);
    for p in [&spec.image.root, &upper, &work] {
        let s = p.as_os_str().as_bytes();
        if s.contains(&b',') || s.contains(&b':') {
            return Err(format!("{}: overlay paths cannot contain ',' or ':'", p.display()));
        }
    }
    let request = Request {
        argv: bwrap_argv(&spec),
        root: RootSpec {
            lower: spec.image.root.clone(),
            mapped_lower: mapped_lower.clone(),
            upper: upper.clone(),
            work: work.clone(),
            disk,
            upper_owner: spec.id_base,
            upper_mode,
            ro_binds: spec
                .image
                .ro_binds
                .iter()
                .cloned()
                .chain(spec.program_cache.map(|c| (c.to_path_buf(), std::path::PathBuf::from(crate::PROGRAMS_PATH))))
                .collect(),
            cgroups: spec.cgroup_view.clone(),
            agent: spec.agent_binary.to_path_buf(),
            seed: spec.seed.clone(),
        },
        etc_files: spec.etc_files.clone(),
        cgroup_procs: spec.cgroups.iter().map(|c| c.join("cgroup.procs")).collect(),
        netns: spec.netns.clone(),
        rootless: !nix::unistd::geteuid().is_root(),
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
        id_base: spec.id_base,
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
    let info_reader = info_read.try_clone().map_err(|e| format!("dup: {e}"))?;
    let fds = Fds { stdin: stdin_read, log, listener: spec.listener, info: info_write, info_reader };
    let started = spec.launcher.launch(&request, fds).await?;
    let pid = started.pid;
    let monitor = Monitor::new(pid);
    let setup = setup_outcome(started.setup).await;
    let child_pid = match setup {
        Ok(()) => read_child_pid(info_read).await,
        Err(e) => Err(e),
    };
    match child_pid {
        Ok(init_pid) => Ok(Launched { monitor, init_pid }),
        Err(e) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            monitor.exited().await;
            let log = std::fs::read_to_string(spec.dir.join("agent.log")).unwrap_or_default();
            Err(format!("{e}; bwrap said: {}", log.trim()))
        }
    }
}

/// Waits for the setup pipe: closed (the setup exec'd bubblewrap) or carrying why it failed.
async fn setup_outcome(fd: OwnedFd) -> Result<(), String> {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(|e| e.to_string())?;
    let mut message = Vec::new();
    let read = pipe.read_to_end(&mut message);
    tokio::time::timeout(std::time::Duration::from_secs(30), read)
        .await
        .map_err(|_| "the sandbox's setup did not finish within 30 s".to_string())?
        .map_err(|e| format!("setup pipe: {e}"))?;
    if message.is_empty() { Ok(()) } else { Err(String::from_utf8_lossy(&message).into_owned()) }
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
