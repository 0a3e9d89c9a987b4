//! The `local` sandbox backend: sandboxes on this machine, no daemon.
//!
//! Each sandbox is a bubblewrap process tree in its own namespaces with an overlay root, inside
//! cgroups of its own, with `orchard-agent` as its pid 1 listening on a unix socket that only the
//! host can reach. Sandboxes are recorded on disk (`<state>/sandboxes/<id>/sandbox.json`) so that
//! a host that crashed adopts the live ones and cleans up the rest when it starts again.

#![warn(missing_docs)]

mod backend;
mod cgroup;
mod cgroup_favor;
mod create;
mod disk;
mod disk_stock;
mod pool_fill;
mod slots;
mod state_dir;
mod teardown;

pub use cgroup::supported as memory_limits_supported;
pub use disk::supported as disk_limits_supported;
mod fork;
mod ids;
mod launch;
mod launcher;
mod network;
mod pool;
mod reconcile;
mod record;
mod rootfs;
mod seccomp;
mod userns;

use pool_fill::refill_pools;
pub(crate) use state_dir::is_mount_point;
use state_dir::{lock_state_dir, mount_run_dir, open_up};
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use orchard_agent_client::AgentClient;
use orchard_image::{ImageStore, RegistryOptions};
use orchard_sandbox::{Backend, Result, SandboxError, SandboxInfo, SandboxSpec, SandboxStatus};
use tokio::sync::watch;

pub use cgroup::Limits;
pub use launcher::Launcher;
pub use pool::PoolShape;
use record::{Record, now};

/// The working directory of a sandbox whose image and spec name none (created at start).
pub const DEFAULT_WORKDIR: &str = "/workspace";

#[derive(Debug, Clone)]
/// How the local backend runs sandboxes.
pub struct LocalConfig {
    /// Holds `sandboxes/` and `images/`.
    pub state_dir: PathBuf,
    /// The static `orchard-agent` binary bound into every sandbox.
    pub agent_binary: PathBuf,
    /// The bubblewrap binary.
    pub bwrap: PathBuf,
    /// Most sandboxes alive at once.
    pub max_sandboxes: usize,
    /// Idle expiry when a create does not give one.
    pub default_ttl: Duration,
    /// Process limit when a create does not give one (fork bombs stop here).
    pub default_pids: u64,
    /// How registry images are pulled.
    pub registry: RegistryOptions,
    /// Warm pools: ready sandboxes kept per shape, and how many of each.
    pub pools: Vec<(PoolShape, usize)>,
    /// How long a pooled sandbox may wait unclaimed: its hard lifetime until a claim gives it
    /// its own (kept by its agent, so that a pool outlives a dead server no longer than any
    /// sandbox would). One this close to its end is not handed out ([`POOL_CLAIM_MARGIN`]).
    pub pool_lifetime: Option<Duration>,
    /// Forks bubblewrap for every sandbox; start it with [`Launcher::start`] before any thread.
    pub launcher: Arc<Launcher>,
    /// The operator's program cache (agent programs prepared ahead, for the `program` harness):
    /// bound read-only at [`PROGRAMS_PATH`] in every sandbox, so no sandbox reaches a registry.
    pub program_cache: Option<PathBuf>,
}

/// A pooled sandbox with less life left than this is left to die, not handed out.
pub const POOL_CLAIM_MARGIN: Duration = Duration::from_secs(60);

/// Where the operator's program cache appears inside every sandbox.
pub const PROGRAMS_PATH: &str = "/opt/orchard/programs";

impl LocalConfig {
    /// A configuration with the defaults, keeping state under `state_dir` and carrying `agent_binary` into every sandbox.
    pub fn new(state_dir: impl Into<PathBuf>, agent_binary: impl Into<PathBuf>, launcher: Arc<Launcher>) -> Self {
        LocalConfig {
            launcher,
            state_dir: state_dir.into(),
            agent_binary: agent_binary.into(),
            bwrap: PathBuf::from("bwrap"),
            max_sandboxes: 4096,
            default_ttl: Duration::from_secs(3600),
            default_pids: 4096,
            registry: RegistryOptions::default(),
            pools: Vec::new(),
            pool_lifetime: None,
            program_cache: None,
        }
    }
}

/// Sandboxes on this machine: bubblewrap, namespaces, seccomp, cgroups (see the module doc).
pub struct LocalBackend {
    /// Held for the backend's life: one host process per state directory.
    _lock: nix::fcntl::Flock<std::fs::File>,
    config: LocalConfig,
    /// Short hash of the state directory: names this host's cgroup group and namespaces.
    instance: String,
    images: ImageStore,
    cgroups: cgroup::Layout,
    /// Writable-layer size limits, or why this host cannot enforce them.
    disks: std::result::Result<disk::Disks, String>,
    sandboxes: RwLock<HashMap<String, Arc<LocalSandbox>>>,
    /// Ids being created (not yet in `sandboxes`), and network slots in use.
    reserved: Mutex<Reserved>,
    network_ready: tokio::sync::OnceCell<std::result::Result<(), String>>,
    network_lock: tokio::sync::Mutex<()>,
    pools: Vec<pool::Pool>,
    /// Wakes the refill task.
    refill: tokio::sync::Notify,
    /// Set by `shutdown`: pools are no longer refilled.
    stopping: std::sync::atomic::AtomicBool,
    /// Held while a refill pass creates sandboxes: `shutdown` waits for it, so that no pooled
    /// sandbox lands after its last pass (and outlives the host with its record unmounted).
    refilling: tokio::sync::Mutex<()>,
    /// This backend, for the cleanups it leaves running behind a delete.
    me: std::sync::OnceLock<std::sync::Weak<LocalBackend>>,
    /// Cleanups still running behind deletes, and their end (waited for at shutdown).
    cleanups: (std::sync::atomic::AtomicUsize, tokio::sync::Notify),
    /// Forked children's copied layers, by child id, until their launch takes them.
    seeds: Mutex<HashMap<String, fork::Seed>>,
}

#[derive(Default)]
struct Reserved {
    ids: HashSet<String>,
    /// Network slots in use.
    slots: HashSet<u32>,
    /// Identity slots in use (user-namespace id ranges, disk-quota projects): see `ids`.
    id_slots: HashSet<u32>,
}

struct LocalSandbox {
    record: Mutex<Record>,
    dir: PathBuf,
    agent: Arc<AgentClient>,
    status: Mutex<(SandboxStatus, Option<String>)>,
    /// Becomes true when the sandbox's process tree is gone.
    exited: watch::Receiver<bool>,
    deleting: AtomicBool,
    /// A pidfd on the sandbox's init (opened as its start time is recorded after launch, or on
    /// adoption just before the start-time check), so that asking whether it still runs is one
    /// `poll`; `None` falls back to /proc.
    init: Option<std::os::fd::OwnedFd>,
}

impl LocalSandbox {
    /// A sandbox asked about by itself answers with what is true now: the watching task can be
    /// a moment late on a loaded host (its init killed, a caller already told 503 by the agent's
    /// socket), so a ready sandbox whose init is gone is failed from here on. One `poll` of the
    /// init's pidfd (every exec asks), on the single-sandbox query only.
    fn notice_death(&self) {
        let gone = || match &self.init {
            Some(pidfd) => record::has_exited(pidfd),
            None => {
                let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
                r.init_pid > 0 && r.init_start > 0 && !record::is_alive(r.init_pid, r.init_start)
            }
        };
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        if status.0 == SandboxStatus::Ready && !self.deleting.load(Ordering::Relaxed) && gone() {
            *status = (SandboxStatus::Failed, Some("the sandbox exited unexpectedly".into()));
        }
    }

    /// Whether its hard lifetime ends within [`POOL_CLAIM_MARGIN`].
    fn ends_soon(&self) -> bool {
        self.record.lock().unwrap_or_else(|p| p.into_inner()).ends_within(POOL_CLAIM_MARGIN)
    }

    fn info(&self) -> SandboxInfo {
        let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        // Kept current by the task that watches the sandbox's processes: no /proc reads here,
        // on the path of every request.
        let (status, message) = self.status.lock().unwrap_or_else(|p| p.into_inner()).clone();
        SandboxInfo {
            id: r.id.clone(),
            tenant: r.tenant.clone(),
            image: r.image.clone(),
            backend: "local".into(),
            block_network: r.block_network,
            cpu: r.cpu,
            memory_bytes: r.memory_bytes,
            pids: r.pids,
            disk_bytes: r.disk_bytes,
            created_at: r.created_at,
            last_active: r.last_active,
            ttl_seconds: r.ttl_seconds,
            status,
            status_message: message,
            agent: self.agent.addr().to_string(),
        }
    }

    /// Records activity; written through to disk at most every 30 s (heartbeats always are).
    fn touch(&self, persist: bool) {
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        let now = now();
        let stale = now - r.last_active > 30.0;
        r.last_active = now;
        if persist || stale {
            let _ = r.save(&self.dir);
        }
    }
}

/// `program` as PATH finds it (unchanged when it names a directory or is not found).
fn find_in_path(program: &Path) -> PathBuf {
    if program.components().count() > 1 {
        return program.to_path_buf();
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
        .unwrap_or_else(|| program.to_path_buf())
}

fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

impl LocalBackend {
    /// Opens the backend: checks the tools, then adopts or cleans up what an earlier host left.
    pub async fn open(mut config: LocalConfig) -> Result<Arc<Self>> {
        // Found once: every launch execs it by its path, not by a search of PATH.
        config.bwrap = find_in_path(&config.bwrap);
        if !config.agent_binary.is_file() {
            return Err(SandboxError::Backend(format!(
                "orchard-agent binary not found at {} (build it with `cargo xtask agent`, or set ORCHARD_AGENT_BIN)",
                config.agent_binary.display()
            )));
        }
        if let Some(cache) = &config.program_cache
            && !cache.is_dir()
        {
            return Err(SandboxError::Backend(format!("program cache {}: not a directory", cache.display())));
        }
        let bwrap_ok = std::process::Command::new(&config.bwrap)
            .arg("--version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !bwrap_ok {
            return Err(SandboxError::Backend(format!(
                "bubblewrap ({}) is not runnable: install it (apt-get install bubblewrap)",
                config.bwrap.display()
            )));
        }
        std::fs::create_dir_all(&config.state_dir).map_err(|e| SandboxError::backend("state dir", e))?;
        let _ = std::fs::set_permissions(&config.state_dir, std::fs::Permissions::from_mode(0o700));
        let lock = lock_state_dir(&config.state_dir)?;
        mount_run_dir(&config.state_dir.join("run"));
        for dir in [config.state_dir.join("run/sandboxes"), config.state_dir.join("layers")] {
            std::fs::create_dir_all(&dir).map_err(|e| SandboxError::backend("state dir", e))?;
        }
        let images = ImageStore::new(config.state_dir.join("images"), config.registry.clone())
            .map_err(|e| SandboxError::backend("image cache", e))?;
        let canonical = std::fs::canonicalize(&config.state_dir).unwrap_or_else(|_| config.state_dir.clone());
        let instance = {
            use sha2::Digest;
            hex::encode(&sha2::Sha256::digest(canonical.as_os_str().as_encoded_bytes())[..4])
        };
        if nix::unistd::geteuid().is_root() {
            match cgroup_favor::favor_dynamic_modifications() {
                Ok(Some(mount)) => tracing::info!(
                    "cgroups: set favordynmods on {} (moving a sandbox into its cgroups: ~9 ms → ~0.5 ms)",
                    mount.display()
                ),
                Ok(None) => {}
                Err(e) => tracing::warn!("cgroups: favordynmods not set, each create waits for the kernel: {e}"),
            }
        }
        let disks = disk::Disks::open(&config.state_dir.join("disks"));
        if let Err(why) = &disks {
            tracing::warn!("sandboxes cannot have disk limits here: {why}");
        }
        let backend = Arc::new(LocalBackend {
            disks,
            _lock: lock,
            cgroups: cgroup::Layout::detect(&instance),
            instance,
            images,
            sandboxes: RwLock::new(HashMap::new()),
            reserved: Mutex::new(Reserved::default()),
            network_ready: tokio::sync::OnceCell::new(),
            network_lock: tokio::sync::Mutex::new(()),
            pools: config.pools.iter().map(|(shape, size)| pool::Pool::new(shape.clone(), *size)).collect(),
            refill: tokio::sync::Notify::new(),
            stopping: Default::default(),
            refilling: tokio::sync::Mutex::new(()),
            me: std::sync::OnceLock::new(),
            cleanups: Default::default(),
            seeds: Mutex::new(HashMap::new()),
            config,
        });
        let _ = backend.me.set(Arc::downgrade(&backend));
        let report = reconcile::run(&backend).await;
        tracing::info!(adopted = report.adopted, cleaned = report.cleaned, "local backend ready");
        if !backend.pools.is_empty() {
            tokio::spawn(refill_pools(Arc::downgrade(&backend)));
        }
        Ok(backend)
    }

    /// Removes this instance's cgroup groups if no sandbox holds one: for a one-off user of the
    /// state directory (`orchard run`), which must not delete sandboxes it adopted the way a
    /// stop does, yet should not leave an empty group behind either.
    pub fn remove_empty_cgroup_groups(&self) {
        self.cgroups.remove_if_empty();
    }

    /// Waits until the cleanups left running behind deletes are done.
    pub async fn wait_cleanups(&self) {
        loop {
            let done = self.cleanups.1.notified();
            if self.cleanups.0.load(Ordering::SeqCst) == 0 {
                return;
            }
            let _ = tokio::time::timeout(Duration::from_millis(100), done).await;
        }
    }

    fn free_slots_now(&self) -> usize {
        let used = self.sandboxes.read().unwrap_or_else(|p| p.into_inner()).len()
            + self.reserved.lock().unwrap_or_else(|p| p.into_inner()).ids.len();
        self.config.max_sandboxes.saturating_sub(used)
    }

    /// Records, sockets and logs: small files that come and go with sandboxes.
    fn sandboxes_dir(&self) -> PathBuf {
        self.config.state_dir.join("run/sandboxes")
    }

    /// Writable layers (overlay upper and work directories), on disk.
    fn layers_dir(&self) -> PathBuf {
        self.config.state_dir.join("layers")
    }

    fn find(&self, id: &str) -> Result<Arc<LocalSandbox>> {
        self.sandboxes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .filter(|s| !s.deleting.load(Ordering::Relaxed))
            .cloned()
            .ok_or_else(|| SandboxError::NotFound(id.to_string()))
    }

    /// Where the sandbox with this id keeps its record, socket and log.
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.sandboxes_dir().join(id)
    }

    /// The cgroup directories of a sandbox (for tests and operators).
    pub fn sandbox_cgroups(&self, id: &str) -> Result<Vec<PathBuf>> {
        Ok(self.find(id)?.record.lock().unwrap_or_else(|p| p.into_inner()).cgroups.clone())
    }

    /// The host pid of the sandbox's init (its agent).
    pub fn sandbox_init_pid(&self, id: &str) -> Result<i32> {
        Ok(self.find(id)?.record.lock().unwrap_or_else(|p| p.into_inner()).init_pid)
    }

    /// Creates the sandbox whose id `reserve` took, and registers it.
    /// Forks `id` into `count` new sandboxes (see `fork`); also answers how long the source
    /// was frozen (`None` when it forked by tar).
    pub async fn fork_sandbox(&self, id: &str, count: usize) -> Result<(Vec<SandboxInfo>, Option<Duration>)> {
        let source = self.find(id)?;
        let record = source.record.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut spec = record.spec.clone().ok_or_else(|| {
            SandboxError::InvalidSpec(format!("sandbox {id} was created before this host could fork sandboxes"))
        })?;
        spec.id = None;
        spec.tenant = record.tenant.clone();
        if count == 0 {
            return Ok((Vec::new(), None));
        }
        // Without a freezer (no cgroups here): by tar.
        if matches!(self.cgroups, cgroup::Layout::None) {
            let children = orchard_sandbox::fork_by_tar(self, &spec, id, count, orchard_sandbox::FORK_PATHS).await?;
            return Ok((children, None));
        }
        let upper = match record.disk_bytes {
            None => self.layers_dir().join(id).join("upper"),
            Some(_) => fork::upper_in_disk(&record, &source.dir).map_err(SandboxError::Backend)?,
        };
        let staging = self.layers_dir().join(format!(".fork-{id}-{}", random_hex(6)));
        let (cgroups, dirs) = (self.cgroups.clone(), record.cgroups.clone());
        let copies: Vec<PathBuf> = (0..count).map(|i| staging.with_extension(i.to_string())).collect();
        let first = copies[0].clone();
        let frozen = tokio::task::spawn_blocking(move || fork::snapshot(&cgroups, &dirs, &upper, &first))
            .await
            .map_err(|e| SandboxError::backend("forking", e))?
            .map_err(|e| SandboxError::Backend(format!("forking {id}: {e}")))?;
        let more = copies.clone();
        let copied =
            tokio::task::spawn_blocking(move || more[1..].iter().try_for_each(|dst| fork::copy_tree(&more[0], dst)))
                .await
                .map_err(|e| SandboxError::backend("forking", e))
                .and_then(|r| r.map_err(|e| SandboxError::Backend(format!("forking {id}: {e}"))));
        // The source agent's scratch (spilled output, session files) is its own, not the task's.
        let scratch = launch::SCRATCH_DIR.trim_start_matches('/');
        for copy in &copies {
            let _ = remove_tree(&copy.join(scratch));
        }
        let from_base = record.slot.map(ids::host_id_base);
        let mut children = Vec::new();
        let mut failure = copied.err();
        for copy in &copies {
            if failure.is_some() {
                break;
            }
            let child = format!("sb-{}", random_hex(6));
            self.seeds
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(child.clone(), fork::Seed { upper: copy.clone(), from_base });
            let made = self.create(SandboxSpec { id: Some(child.clone()), ..spec.clone() }).await;
            self.seeds.lock().unwrap_or_else(|p| p.into_inner()).remove(&child);
            match made {
                Ok(info) => children.push(info),
                Err(e) => failure = Some(e),
            }
        }
        for copy in &copies {
            let _ = remove_tree(copy);
        }
        if let Some(e) = failure {
            for child in &children {
                let _ = self.delete(&child.id).await;
            }
            return Err(e);
        }
        tracing::debug!(sandbox = id, children = count, ?frozen, "forked");
        Ok((children, Some(frozen)))
    }
}

/// Removes a sandbox directory. Overlayfs leaves its work directory without permissions
/// (`d---------`); as root that does not matter, without root those directories are opened up
/// first.
pub(crate) fn remove_tree(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            open_up(dir);
            std::fs::remove_dir_all(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
