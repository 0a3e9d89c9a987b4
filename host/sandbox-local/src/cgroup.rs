//! Resource limits through cgroups, v2 (unified) or v1 (one hierarchy per controller).
//!
//! Each sandbox gets a cgroup named after it, in a group of this host instance's nested under the
//! host's own cgroup, so that whatever limits the host runs under also bound its sandboxes. The sandbox's processes join it before
//! bubblewrap even starts (see `launch`), so nothing escapes the limits by forking early.

use std::path::{Path, PathBuf};
use std::time::Duration;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, Clone, Copy, Default)]
/// Resource limits of one sandbox's control group.
pub struct Limits {
    /// Memory, in bytes (swap included).
    pub memory_bytes: Option<u64>,
    /// CPU, in cores.
    pub cpu: Option<f64>,
    /// Most processes.
    pub pids: Option<u64>,
}

/// Where sandbox cgroups go on this machine.
#[derive(Debug, Clone)]
pub enum Layout {
    /// Unified hierarchy: one directory per sandbox.
    V2 { parent: PathBuf },
    /// Legacy hierarchies: one directory per controller per sandbox.
    V1 { memory: Option<PathBuf>, cpu: Option<PathBuf>, pids: Option<PathBuf>, freezer: Option<PathBuf> },
    /// Neither usable (not root, nothing delegated): no limits can be applied.
    None,
}

/// Whether this host can limit a sandbox's memory (a writable cgroup hierarchy needs root), or
/// why not.
pub fn supported() -> Result<(), String> {
    if nix::unistd::geteuid().is_root() { Ok(()) } else { Err("memory limits need root (cgroups)".into()) }
}

impl Layout {
    /// `instance` names this host's group (`orchard-<instance>`), so that two hosts with
    /// different state directories on one machine never touch each other's sandboxes.
    pub fn detect(instance: &str) -> Layout {
        let group = format!("orchard-{instance}");
        let own = own_cgroups();
        if Path::new(CGROUP_ROOT).join("cgroup.controllers").exists() {
            let base = Path::new(CGROUP_ROOT).join(own.get("").map(|p| p.trim_start_matches('/')).unwrap_or(""));
            let parent = base.join(&group);
            if std::fs::create_dir_all(&parent).is_ok() {
                // Controllers must be enabled for the children of every level we create.
                let _ = std::fs::write(base.join("cgroup.subtree_control"), "+memory +cpu +pids");
                let _ = std::fs::write(parent.join("cgroup.subtree_control"), "+memory +cpu +pids");
                return Layout::V2 { parent };
            }
            return Layout::None;
        }
        let v1 = |controller: &str| {
            let mount = Path::new(CGROUP_ROOT).join(controller);
            let rel = own.get(controller).map(|p| p.trim_start_matches('/').to_string()).unwrap_or_default();
            let parent = mount.join(rel).join(&group);
            (mount.is_dir() && std::fs::create_dir_all(&parent).is_ok()).then_some(parent)
        };
        let (memory, cpu, pids) = (v1("memory"), v1("cpu"), v1("pids"));
        if memory.is_none() && cpu.is_none() && pids.is_none() {
            return Layout::None;
        }
        Layout::V1 { memory, cpu, pids, freezer: v1("freezer") }
    }

    /// The parent directories that hold sandbox cgroups (for reconciling leftovers).
    pub fn parents(&self) -> Vec<PathBuf> {
        match self {
            Layout::V2 { parent } => vec![parent.clone()],
            Layout::V1 { memory, cpu, pids, freezer } => {
                [memory, cpu, pids, freezer].into_iter().flatten().cloned().collect()
            }
            Layout::None => vec![],
        }
    }

    /// Removes this instance's group directories, if empty (a server stopped with no sandbox
    /// left): a machine running many short-lived hosts (tests, one-off `orchard eval`s) would
    /// otherwise gather one empty group per state directory it ever saw. A group still holding
    /// a sandbox's cgroup stays (`rmdir` refuses a group with children).
    pub fn remove_if_empty(&self) {
        remove(&self.parents());
    }

    /// The sandbox's cgroup directories by controller, as its `/sys/fs/cgroup` shows them
    /// (`""`: the unified hierarchy's one directory).
    pub fn view(&self, dirs: &[PathBuf]) -> Vec<(String, PathBuf)> {
        match self {
            Layout::V2 { .. } => dirs.iter().map(|d| (String::new(), d.clone())).take(1).collect(),
            Layout::V1 { memory, cpu, pids, .. } => dirs
                .iter()
                .filter_map(|dir| {
                    let parent = dir.parent()?;
                    let name = [("memory", memory), ("cpu", cpu), ("pids", pids)]
                        .into_iter()
                        .find(|(_, p)| p.as_deref() == Some(parent))?
                        .0;
                    Some((name.to_string(), dir.clone()))
                })
                .collect(),
            Layout::None => Vec::new(),
        }
    }

    /// Creates the sandbox's cgroup(s) with `limits`. A limit that cannot be applied is an error
    /// that names it: a sandbox never runs silently unlimited.
    pub fn create(&self, id: &str, limits: &Limits) -> Result<Vec<PathBuf>, String> {
        let mut made = Vec::new();
        let result = self.create_inner(id, limits, &mut made);
        if result.is_err() {
            remove(&made);
        }
        result.map(|()| made)
    }

    fn create_inner(&self, id: &str, limits: &Limits, made: &mut Vec<PathBuf>) -> Result<(), String> {
        let mkdir = |parent: &Path, made: &mut Vec<PathBuf>| -> Result<PathBuf, String> {
            let dir = parent.join(id);
            std::fs::create_dir(&dir).map_err(|e| format!("cgroup {}: {e}", dir.display()))?;
            made.push(dir.clone());
            Ok(dir)
        };
        match self {
            Layout::V2 { parent } => {
                let dir = mkdir(parent, made)?;
                if let Some(bytes) = limits.memory_bytes {
                    write(&dir, "memory.max", &bytes.to_string())?;
                    let _ = write(&dir, "memory.swap.max", "0");
                }
                if let Some(cpu) = limits.cpu {
                    write(&dir, "cpu.max", &format!("{} 100000", (cpu * 100_000.0).round() as u64))?;
                }
                if let Some(pids) = limits.pids {
                    write(&dir, "pids.max", &pids.to_string())?;
                }
            }
            Layout::V1 { memory, cpu, pids, freezer } => {
                // No limit: it is how a fork stops the sandbox's processes while its files are
                // copied.
                if let Some(parent) = freezer {
                    mkdir(parent, made)?;
                }
                match (memory, limits.memory_bytes) {
                    (Some(parent), bytes) => {
                        let dir = mkdir(parent, made)?;
                        if let Some(bytes) = bytes {
                            write(&dir, "memory.limit_in_bytes", &bytes.to_string())?;
                            // Without this the sandbox could swap past its limit where swap accounting is on.
                            if dir.join("memory.memsw.limit_in_bytes").exists() {
                                write(&dir, "memory.memsw.limit_in_bytes", &bytes.to_string())?;
                            }
                        }
                    }
                    (None, Some(_)) => {
                        return Err("a memory limit was asked for but the memory cgroup is not available".into());
                    }
                    (None, None) => {}
                }
                match (cpu, limits.cpu) {
                    (Some(parent), quota) => {
                        let dir = mkdir(parent, made)?;
                        if let Some(cpu) = quota {
                            write(&dir, "cpu.cfs_period_us", "100000")?;
                            write(&dir, "cpu.cfs_quota_us", &((cpu * 100_000.0).round() as u64).to_string())?;
                        }
                    }
                    (None, Some(_)) => {
                        return Err("a CPU limit was asked for but the cpu cgroup is not available".into());
                    }
                    (None, None) => {}
                }
                match (pids, limits.pids) {
                    (Some(parent), max) => {
                        let dir = mkdir(parent, made)?;
                        if let Some(max) = max {
                            write(&dir, "pids.max", &max.to_string())?;
                        }
                    }
                    (None, Some(_)) => {
                        return Err("a pids limit was asked for but the pids cgroup is not available".into());
                    }
                    (None, None) => {}
                }
            }
            Layout::None => {
                if limits.memory_bytes.is_some() || limits.cpu.is_some() || limits.pids.is_some() {
                    return Err("limits were asked for but no cgroup hierarchy is writable (run as root)".into());
                }
            }
        }
        Ok(())
    }
}

impl Layout {
    /// Freezes (or thaws) the sandbox's processes and waits until the kernel says they are:
    /// frozen, none runs, and none can fork past it. Nothing inside sees it happen.
    pub fn freeze(&self, dirs: &[PathBuf], frozen: bool) -> Result<(), String> {
        // (the cgroup, the file to write, the value, the file that says when it is done, the
        // line it then holds)
        let (dir, file, value, status, want) = match self {
            Layout::V2 { .. } => {
                let dir = dirs.first().ok_or("the sandbox has no cgroup")?;
                let (value, want) = if frozen { ("1", "frozen 1") } else { ("0", "frozen 0") };
                (dir, "cgroup.freeze", value, "cgroup.events", want)
            }
            Layout::V1 { freezer: Some(parent), .. } => {
                let dir = dirs
                    .iter()
                    .find(|d| d.parent() == Some(parent.as_path()))
                    .ok_or("the sandbox has no freezer cgroup (it was made before forks were possible)")?;
                let state = if frozen { "FROZEN" } else { "THAWED" };
                (dir, "freezer.state", state, "freezer.state", state)
            }
            _ => return Err("no freezer cgroup on this host".into()),
        };
        let done =
            |d: &Path| std::fs::read_to_string(d.join(status)).unwrap_or_default().lines().any(|l| l.trim() == want);
        write(dir, file, value)?;
        for _ in 0..2000 {
            if done(dir) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Err(format!("{}/{file}: not {value} after 1 s", dir.display()))
    }
}

fn write(dir: &Path, file: &str, value: &str) -> Result<(), String> {
    std::fs::write(dir.join(file), value).map_err(|e| format!("cgroup {}/{file} = {value}: {e}", dir.display()))
}

/// `/proc/self/cgroup` as controller → path ("" for the unified hierarchy).
fn own_cgroups() -> std::collections::HashMap<String, String> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut map = std::collections::HashMap::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next().unwrap_or("/"));
        for c in controllers.split(',') {
            map.insert(c.to_string(), path.to_string());
        }
    }
    map
}

/// Pids still in the cgroup.
pub fn members(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Kills everything left in the cgroups and removes them. rmdir fails while the kernel still
/// tears processes down, so it is retried for a while.
pub fn kill_and_remove(dirs: &[PathBuf]) -> Result<(), String> {
    for attempt in 0..200 {
        let mut busy = false;
        for dir in dirs {
            if !dir.exists() {
                continue;
            }
            for pid in members(dir) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
            if std::fs::remove_dir(dir).is_err() {
                busy = true;
            }
        }
        if !busy {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(if attempt < 20 { 1 } else { 10 }));
    }
    let left: Vec<_> = dirs.iter().filter(|d| d.exists()).map(|d| d.display().to_string()).collect();
    Err(format!("cgroups still busy after 2 s: {}", left.join(", ")))
}

fn remove(dirs: &[PathBuf]) {
    for d in dirs {
        let _ = std::fs::remove_dir(d);
    }
}
