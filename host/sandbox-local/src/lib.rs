//! The `local` sandbox backend: sandboxes on this machine, no daemon.
//!
//! Each sandbox is a bubblewrap process tree in its own namespaces with an overlay root, inside
//! cgroups of its own, with `orchard-agent` as its pid 1 listening on a unix socket that only the
//! host can reach. Sandboxes are recorded on disk (`<state>/sandboxes/<id>/sandbox.json`) so that
//! a host that crashed adopts the live ones and cleans up the rest when it starts again.

mod backend;
mod cgroup;
mod disk;

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

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use orchard_agent_client::{AgentAddr, AgentClient};
use orchard_image::{ImageStore, RegistryOptions};
use orchard_sandbox::{Backend, Result, SandboxError, SandboxInfo, SandboxSpec, SandboxStatus, valid_sandbox_id};
use tokio::sync::watch;

pub use cgroup::Limits;
pub use launcher::Launcher;
pub use pool::PoolShape;
use record::{Record, now};

/// The working directory of a sandbox whose image and spec name none (created at start).
pub const DEFAULT_WORKDIR: &str = "/workspace";

#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Holds `sandboxes/` and `images/`.
    pub state_dir: PathBuf,
    /// The static `orchard-agent` binary bound into every sandbox.
    pub agent_binary: PathBuf,
    pub bwrap: PathBuf,
    pub max_sandboxes: usize,
    /// Idle expiry when a create does not give one.
    pub default_ttl: Duration,
    /// Process limit when a create does not give one (fork bombs stop here).
    pub default_pids: u64,
    pub registry: RegistryOptions,
    /// Warm pools: ready sandboxes kept per shape, and how many of each.
    pub pools: Vec<(PoolShape, usize)>,
    /// Forks bubblewrap for every sandbox; start it with [`Launcher::start`] before any thread.
    pub launcher: Arc<Launcher>,
}

impl LocalConfig {
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
        }
    }
}

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
}

impl LocalSandbox {
    /// A sandbox asked about by itself answers with what is true now: the watching task can be
    /// a moment late on a loaded host (its init killed, a caller already told 503 by the agent's
    /// socket), so a ready sandbox whose init is gone is failed from here on. One /proc read, on
    /// the single-sandbox query only.
    fn notice_death(&self) {
        let (pid, start) = {
            let r = self.record.lock().unwrap_or_else(|p| p.into_inner());
            (r.init_pid, r.init_start)
        };
        let mut status = self.status.lock().unwrap_or_else(|p| p.into_inner());
        if status.0 == SandboxStatus::Ready
            && pid > 0
            && start > 0
            && !record::is_alive(pid, start)
            && !self.deleting.load(Ordering::Relaxed)
        {
            *status = (SandboxStatus::Failed, Some("the sandbox exited unexpectedly".into()));
        }
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

fn random_hex(bytes: usize) -> String {
    use rand::RngCore;
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    hex::encode(buf)
}

impl LocalBackend {
    /// Opens the backend: checks the tools, then adopts or cleans up what an earlier host left.
    pub async fn open(config: LocalConfig) -> Result<Arc<Self>> {
        if !config.agent_binary.is_file() {
            return Err(SandboxError::Backend(format!(
                "orchard-agent binary not found at {} (build it with `cargo xtask agent`, or set ORCHARD_AGENT_BIN)",
                config.agent_binary.display()
            )));
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

    /// A ready sandbox of the shape `spec` asks for, now the caller's.
    fn claim_pooled(&self, spec: &SandboxSpec) -> Option<SandboxInfo> {
        let pool = self.pools.iter().find(|p| p.shape.serves(spec))?;
        let claimed = loop {
            let id = pool.take()?;
            // One that died while it waited is dropped (the refill task replaces it).
            match self.find(&id) {
                Ok(sandbox) if sandbox.info().status == SandboxStatus::Ready => break sandbox,
                _ => continue,
            }
        };
        {
            let mut r = claimed.record.lock().unwrap_or_else(|p| p.into_inner());
            r.tenant = spec.tenant.clone();
            r.ttl_seconds = spec.ttl_seconds.unwrap_or(self.config.default_ttl.as_secs());
            r.created_at = now();
            r.last_active = now();
            if let Err(e) = r.save(&claimed.dir) {
                tracing::warn!(sandbox = %r.id, "claiming a pooled sandbox: {e}");
            }
        }
        self.refill.notify_one();
        Some(claimed.info())
    }

    /// Creates what the pools lack, one sandbox at a time per pool, within capacity.
    async fn refill_once(&self) {
        for pool in &self.pools {
            while pool.len() < pool.size && self.free_slots_now() > 0 {
                let spec = pool.shape.spec();
                let created = match self.reserve(&spec) {
                    Ok(id) => {
                        let made = self.create_inner(&id, &spec).await;
                        if let Ok(sandbox) = &made {
                            // Warm: the agent's first command pays for threads and page cache
                            // that later ones find ready; a pooled sandbox pays it now.
                            let _ = sandbox
                                .agent
                                .exec(&orchard_protocol::ExecRequest::new(orchard_protocol::Command::Argv(vec![
                                    "true".into(),
                                ])))
                                .await;
                        }
                        let made = made.map(|sandbox| {
                            self.sandboxes.write().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), sandbox);
                            id.clone()
                        });
                        self.release(&id);
                        made
                    }
                    Err(e) => Err(e),
                };
                match created {
                    Ok(id) => pool.put(id),
                    Err(e) => {
                        tracing::warn!(image = %pool.shape.image, "warm pool: {e}");
                        break;
                    }
                }
            }
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

    fn validate(&self, spec: &SandboxSpec) -> Result<()> {
        if let Some(id) = &spec.id {
            valid_sandbox_id(id).map_err(SandboxError::InvalidSpec)?;
        }
        if let Some(w) = &spec.workdir
            && (!w.starts_with('/') || w.split('/').any(|c| c == ".."))
        {
            return Err(SandboxError::InvalidSpec(format!("workdir: {w:?} must be an absolute path without '..'")));
        }
        for root in &spec.file_roots {
            if !root.starts_with('/') {
                return Err(SandboxError::InvalidSpec(format!("file_roots: {root:?} is not an absolute path")));
            }
        }
        for key in spec.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(SandboxError::InvalidSpec(format!("env: {key:?} is not a valid variable name")));
            }
        }
        if spec.block_network && !spec.network_allow.is_empty() {
            return Err(SandboxError::InvalidSpec("network_allow needs block_network: false".into()));
        }
        if let (Some(_), Err(why)) = (spec.disk_bytes, &self.disks) {
            return Err(SandboxError::InvalidSpec(format!("disk: this host cannot enforce disk limits: {why}")));
        }
        if let Some(bytes) = spec.disk_bytes
            && bytes < disk::MIN_DISK_BYTES
        {
            return Err(SandboxError::InvalidSpec(format!(
                "disk: {bytes} bytes is too small (at least {} MiB)",
                disk::MIN_DISK_BYTES >> 20
            )));
        }
        if spec.ttl_seconds == Some(0) {
            return Err(SandboxError::InvalidSpec("timeout: must be at least 1 second".into()));
        }
        Ok(())
    }

    /// Reserves an id (and capacity) for a sandbox being created.
    fn reserve(&self, spec: &SandboxSpec) -> Result<String> {
        let sandboxes = self.sandboxes.read().unwrap_or_else(|p| p.into_inner());
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        if sandboxes.len() + reserved.ids.len() >= self.config.max_sandboxes {
            return Err(SandboxError::Capacity(format!(
                "{} sandboxes is this host's limit",
                self.config.max_sandboxes
            )));
        }
        let id = spec.id.clone().unwrap_or_else(|| format!("sb-{}", random_hex(6)));
        if sandboxes.contains_key(&id) || reserved.ids.contains(&id) || self.sandbox_dir(&id).exists() {
            return Err(SandboxError::AlreadyExists(id));
        }
        reserved.ids.insert(id.clone());
        Ok(id)
    }

    fn release(&self, id: &str) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).ids.remove(id);
    }

    fn free_slot(&self, slot: u32) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.remove(&slot);
    }

    /// Takes the lowest free identity slot.
    fn take_id_slot(&self) -> Result<u32> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let slot = ids::free_slot(&reserved.id_slots)
            .ok_or_else(|| SandboxError::Capacity("every user-namespace id range is in use".into()))?;
        reserved.id_slots.insert(slot);
        Ok(slot)
    }

    /// Marks an identity slot as used (a sandbox adopted after a restart).
    fn claim_id_slot(&self, slot: u32) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).id_slots.insert(slot);
    }

    fn free_id_slot(&self, slot: u32) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).id_slots.remove(&slot);
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

    /// The rest of a delete, once the sandbox is marked: answered once its processes are gone
    /// (nothing of it runs any more); its cgroups, network and files are removed behind the
    /// answer. Its id stays taken until they are.
    async fn finish_delete(&self, id: &str, sandbox: &Arc<LocalSandbox>) {
        let record = self.stop(sandbox).await;
        self.sandboxes.write().unwrap_or_else(|p| p.into_inner()).remove(id);
        let dir = sandbox.dir.clone();
        if let Some(backend) = self.me.get().and_then(std::sync::Weak::upgrade) {
            self.cleanups.0.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                backend.cleanup_record(&dir, &record).await;
                backend.cleanups.0.fetch_sub(1, Ordering::SeqCst);
                backend.cleanups.1.notify_waiters();
            });
        } else {
            self.cleanup_record(&dir, &record).await;
        }
    }

    async fn create_reserved(&self, id: &str, spec: &SandboxSpec) -> Result<SandboxInfo> {
        let created = self.create_inner(id, spec).await;
        let outcome = created.map(|sandbox| {
            let info = sandbox.info();
            self.sandboxes.write().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), sandbox);
            info
        });
        self.release(id);
        outcome
    }

    async fn create_inner(&self, id: &str, spec: &SandboxSpec) -> Result<Arc<LocalSandbox>> {
        let t0 = std::time::Instant::now();
        let image = self.images.resolve(&spec.image).await.map_err(|e| SandboxError::Image {
            image: spec.image.clone(),
            reason: match e {
                orchard_image::ImageError::Invalid { reason, .. } => reason,
                other => other.to_string(),
            },
        })?;
        let dir = self.sandbox_dir(id);
        std::fs::create_dir(&dir).map_err(|e| SandboxError::backend(&format!("{}", dir.display()), e))?;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        // The default pids limit applies where cgroups can enforce it; asked-for limits always
        // do (and fail the create when they cannot be enforced).
        let default_pids = (!matches!(self.cgroups, cgroup::Layout::None)).then_some(self.config.default_pids);
        let limits = Limits { memory_bytes: spec.memory_bytes, cpu: spec.cpu, pids: spec.pids.or(default_pids) };
        let mut record = Record {
            id: id.to_string(),
            tenant: spec.tenant.clone(),
            image: spec.image.clone(),
            image_id: image.id.clone(),
            block_network: spec.block_network,
            network_allow: spec.network_allow.clone(),
            cpu: spec.cpu,
            memory_bytes: spec.memory_bytes,
            pids: limits.pids,
            disk_bytes: spec.disk_bytes,
            // Root hosts give every sandbox its own user namespace; rootless ones run in theirs.
            slot: if nix::unistd::geteuid().is_root() { Some(self.take_id_slot()?) } else { None },
            created_at: now(),
            last_active: now(),
            ttl_seconds: spec.ttl_seconds.unwrap_or(self.config.default_ttl.as_secs()),
            token: random_hex(24),
            init_pid: 0,
            init_start: 0,
            cgroups: Vec::new(),
            network: None,
            spec: Some(SandboxSpec { id: Some(id.to_string()), ..spec.clone() }),
        };
        // Saved before anything is made, so that a crash mid-create is cleaned up at next start.
        record.save(&dir).map_err(SandboxError::Backend)?;
        let t1 = t0.elapsed();
        let result = self.start(&dir, &mut record, &image, spec, &limits).await;
        let t2 = t0.elapsed();
        match result {
            Ok((monitor, init_pid)) => {
                record.init_pid = init_pid;
                record.init_start = record::process_start(init_pid).unwrap_or(0);
                record.save(&dir).map_err(SandboxError::Backend)?;
                let agent = Arc::new(AgentClient::new(AgentAddr::Unix(dir.join(record::SOCKET_FILE)), &record.token));
                let (exited_tx, exited) = watch::channel(false);
                let sandbox = Arc::new(LocalSandbox {
                    record: Mutex::new(record),
                    dir: dir.clone(),
                    agent: agent.clone(),
                    status: Mutex::new((SandboxStatus::Pending, None)),
                    exited,
                    deleting: AtomicBool::new(false),
                });
                let watched = sandbox.clone();
                tokio::spawn(async move {
                    let status = monitor.exited().await;
                    if !watched.deleting.load(Ordering::Relaxed) {
                        let message = format!("the sandbox exited unexpectedly ({status})");
                        tracing::warn!(sandbox = %watched.record.lock().unwrap_or_else(|p| p.into_inner()).id, "{message}");
                        *watched.status.lock().unwrap_or_else(|p| p.into_inner()) =
                            (SandboxStatus::Failed, Some(message));
                    }
                    let _ = exited_tx.send(true);
                });
                let health = agent.wait_healthy(Duration::from_secs(10)).await;
                tracing::debug!(sandbox = id, prepare = ?t1, launch = ?(t2 - t1), ready = ?(t0.elapsed() - t2), "created");
                let started = match (health, spec.entrypoint.as_deref()) {
                    (Ok(_), Some(argv)) if !argv.is_empty() => agent
                        .start_process(&orchard_protocol::ProcessStart {
                            command: orchard_protocol::Command::Argv(argv.to_vec()),
                            cwd: None,
                            env: Default::default(),
                        })
                        .await
                        .map(|_| ()),
                    (health, _) => health.map(|_| ()),
                };
                match started {
                    Ok(()) => {
                        *sandbox.status.lock().unwrap_or_else(|p| p.into_inner()) = (SandboxStatus::Ready, None);
                        Ok(sandbox)
                    }
                    Err(e) => {
                        let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
                        self.destroy(&sandbox).await;
                        Err(SandboxError::Backend(format!(
                            "the sandbox did not start (agent, or the entrypoint): {e}; the agent log: {}",
                            log.trim()
                        )))
                    }
                }
            }
            Err(e) => {
                self.cleanup_record(&dir, &record).await;
                Err(e)
            }
        }
    }

    /// Makes the cgroups and the network, then launches bubblewrap.
    async fn start(
        &self,
        dir: &Path,
        record: &mut Record,
        image: &orchard_image::Image,
        spec: &SandboxSpec,
        limits: &Limits,
    ) -> Result<(launch::Monitor, i32)> {
        let t0 = std::time::Instant::now();
        // Cgroups and namespaces are named after the sandbox: a crash before the record is saved
        // again leaves nothing that reconciliation cannot find by name.
        record.cgroups = self.cgroups.create(&record.id, limits).map_err(SandboxError::InvalidSpec)?;
        let netns = if spec.block_network {
            None
        } else {
            let prepared = self
                .network_ready
                .get_or_init(|| async {
                    tokio::task::spawn_blocking(network::prepare_host).await.unwrap_or_else(|e| Err(e.to_string()))
                })
                .await;
            prepared.clone().map_err(|e| SandboxError::Backend(format!("network setup: {e}")))?;
            let allow = network::resolve_allow(&spec.network_allow).await.map_err(SandboxError::InvalidSpec)?;
            // One attach at a time within this host, so that two never race for a slot.
            let _one_at_a_time = self.network_lock.lock().await;
            let taken = self.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.clone();
            let (instance, id) = (self.instance.clone(), record.id.clone());
            let attachment =
                tokio::task::spawn_blocking(move || network::attach(&instance, &id, &|s| taken.contains(&s), allow))
                    .await
                    .map_err(|e| SandboxError::backend("network setup", e))?
                    .map_err(|e| SandboxError::Backend(format!("network setup: {e}")))?;
            self.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.insert(attachment.slot);
            let path = network::netns_path(&attachment);
            record.network = Some(attachment);
            // Firewall rules carry no name: record them before anything can crash.
            record.save(dir).map_err(SandboxError::Backend)?;
            Some(path)
        };
        tracing::debug!(sandbox = %record.id, cgroups_and_network = ?t0.elapsed(), "prepared");
        let socket = dir.join(record::SOCKET_FILE);
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket)
            .map_err(|e| SandboxError::backend(&format!("binding {}", socket.display()), e))?;
        let mut env: Vec<(String, String)> = image
            .config
            .env
            .iter()
            .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        for (k, v) in [("HOME", "/root"), ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")] {
            if !env.iter().any(|(key, _)| key == k) {
                env.push((k.into(), v.into()));
            }
        }
        env.push(("HOSTNAME".into(), record.id.clone()));
        env.push(("ORCHARD_SANDBOX_ID".into(), record.id.clone()));
        for (k, v) in &spec.env {
            env.retain(|(key, _)| key != k);
            env.push((k.clone(), v.clone()));
        }
        let layer_dir = self.layers_dir().join(&record.id);
        let disk_image = match (spec.disk_bytes, &self.disks) {
            (Some(bytes), Ok(disks)) => {
                std::fs::create_dir_all(&layer_dir).map_err(|e| SandboxError::backend("layer dir", e))?;
                let image = layer_dir.join("disk.img");
                disks.make(bytes, &image).map_err(SandboxError::Backend)?;
                Some(image)
            }
            _ => None,
        };
        // A forked child's layer: owners moved to its id range, then its upper directory (or,
        // inside a disk image, copied in once the image is mounted).
        let seed = self.seeds.lock().unwrap_or_else(|p| p.into_inner()).remove(&record.id);
        let mut disk_seed = None;
        if let Some(seed) = seed {
            let to = record.slot.map(ids::host_id_base);
            let upper = layer_dir.join("upper");
            let into_disk = disk_image.is_some();
            let placed = seed.upper.clone();
            tokio::task::spawn_blocking(move || -> std::result::Result<(), String> {
                if let (Some(from), Some(to)) = (seed.from_base, to) {
                    fork::shift_owners(&seed.upper, from, to)?;
                }
                if into_disk {
                    return Ok(());
                }
                std::fs::create_dir_all(upper.parent().unwrap_or(&upper)).map_err(|e| e.to_string())?;
                std::fs::rename(&seed.upper, &upper).map_err(|e| format!("{}: {e}", upper.display()))
            })
            .await
            .map_err(|e| SandboxError::backend("placing the forked layer", e))?
            .map_err(|e| SandboxError::Backend(format!("placing the forked layer: {e}")))?;
            if into_disk {
                disk_seed = Some(placed);
            }
        }
        let launched = launch::launch(
            launch::LaunchSpec {
                disk_image: disk_image.as_deref(),
                loop_index: record.slot.map(ids::loop_index),
                seed: disk_seed,
                layer_dir: &layer_dir,
                launcher: self.config.launcher.clone(),
                bwrap: &self.config.bwrap,
                agent_binary: &self.config.agent_binary,
                dir,
                image,
                hostname: &record.id,
                env,
                // Orchard Env's sandboxes work in /workspace when the image names no directory;
                // its clients expect exec and apply_patch to start there.
                workdir: spec
                    .workdir
                    .clone()
                    .or_else(|| image.config.working_dir.clone().filter(|w| !w.is_empty()))
                    .unwrap_or_else(|| DEFAULT_WORKDIR.into()),
                listener: listener.into(),
                cgroups: &record.cgroups,
                file_roots: &spec.file_roots,
                id_base: record.slot.map(ids::host_id_base),
                cgroup_view: self.cgroups.view(&record.cgroups),
                etc_files: etc_files(&record.id, record.network.as_ref().map(|a| a.sandbox_ip), netns.is_some()),
                netns,
            },
            &record.token,
        )
        .await
        .map_err(|e| SandboxError::Backend(format!("starting the sandbox: {e}")))?;
        Ok((launched.monitor, launched.init_pid))
    }

    /// Tears a sandbox down completely: processes, cgroups, network, files.
    async fn destroy(&self, sandbox: &LocalSandbox) {
        let record = self.stop(sandbox).await;
        let started = std::time::Instant::now();
        self.cleanup_record(&sandbox.dir, &record).await;
        tracing::debug!(sandbox = %record.id, elapsed = ?started.elapsed(), "sandbox cleaned up");
    }

    /// Kills the sandbox's processes and waits until they are gone; returns its record.
    async fn stop(&self, sandbox: &LocalSandbox) -> Record {
        sandbox.deleting.store(true, Ordering::Relaxed);
        let record = sandbox.record.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if record::is_alive(record.init_pid, record.init_start) {
            // The sandbox's pid 1: its death takes the whole pid namespace with it.
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(record.init_pid), nix::sys::signal::Signal::SIGKILL);
        }
        let started = std::time::Instant::now();
        let mut exited = sandbox.exited.clone();
        let _ = tokio::time::timeout(Duration::from_secs(5), exited.wait_for(|e| *e)).await;
        tracing::debug!(sandbox = %record.id, elapsed = ?started.elapsed(), "sandbox processes gone");
        record
    }

    /// Removes what a record says exists, whether or not its processes still run.
    async fn cleanup_record(&self, dir: &Path, record: &Record) {
        if record.init_pid > 0 && record::is_alive(record.init_pid, record.init_start) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(record.init_pid), nix::sys::signal::Signal::SIGKILL);
        }
        let cgroups = record.cgroups.clone();
        let network = record.network.clone();
        let layer = self.layers_dir().join(&record.id);
        let dir = dir.to_path_buf();
        let outcome = tokio::task::spawn_blocking(move || {
            let t = std::time::Instant::now();
            let cg = cgroup::kill_and_remove(&cgroups);
            let _ = remove_tree(&layer);
            tracing::debug!(cgroups = ?t.elapsed(), "cgroups removed");
            if let Some(a) = &network {
                network::detach(a);
            }
            // The overlay lived in the sandbox's own mount namespace; it is gone with its processes.
            let fs = remove_tree(&dir);
            (cg, fs)
        })
        .await;
        match outcome {
            Ok((Err(e), _)) => tracing::warn!(sandbox = %record.id, "cleanup: {e}"),
            Ok((_, Err(e))) => tracing::warn!(sandbox = %record.id, "cleanup: removing the sandbox directory: {e}"),
            Err(e) => tracing::warn!(sandbox = %record.id, "cleanup task failed: {e}"),
            _ => {}
        }
        if let Some(a) = &record.network {
            self.free_slot(a.slot);
        }
        if let Some(slot) = record.slot {
            self.free_id_slot(slot);
        }
    }
}

/// /etc/hosts, /etc/hostname and /etc/resolv.conf for a sandbox, as Docker writes them: its
/// name resolves to its own address (loopback without a network), and name servers are the
/// host's, except those on the host's loopback, which a sandbox cannot reach.
fn etc_files(hostname: &str, address: Option<std::net::Ipv4Addr>, open_network: bool) -> [String; 3] {
    let own = address.map(|a| a.to_string()).unwrap_or_else(|| "127.0.1.1".into());
    let hosts = format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n\
         ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n{own}\t{hostname}\n"
    );
    let host_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut resolv: String = host_resolv
        .lines()
        .filter(|l| {
            let mut words = l.split_whitespace();
            match (words.next(), words.next()) {
                (Some("nameserver"), Some(addr)) => {
                    addr.parse::<std::net::IpAddr>().map(|ip| !ip.is_loopback()).unwrap_or(false)
                }
                _ => true,
            }
        })
        .map(|l| format!("{l}\n"))
        .collect();
    if open_network && !resolv.lines().any(|l| l.starts_with("nameserver")) {
        resolv.push_str("nameserver 8.8.8.8\nnameserver 8.8.4.4\n");
    }
    [hosts, format!("{hostname}\n"), resolv]
}

/// Keeps the pools full: refills at start, shortly after claims, and every few seconds (pooled
/// sandboxes that died are replaced). A refill waits until claims have paused for a moment: the
/// sandbox just claimed gets the machine for its first commands, and a burst of claims is made
/// up for in one go.
async fn refill_pools(backend: std::sync::Weak<LocalBackend>) {
    const QUIET: Duration = Duration::from_millis(100);
    loop {
        let Some(strong) = backend.upgrade() else { return };
        strong.refill_once().await;
        if tokio::time::timeout(Duration::from_secs(5), strong.refill.notified()).await.is_ok() {
            while tokio::time::timeout(QUIET, strong.refill.notified()).await.is_ok() {}
        }
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

fn open_up(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&entry.path());
            }
        }
    }
}

/// Mounts a tmpfs for the run directory, as /run is on most systems: the records, sockets and
/// logs of sandboxes are small files created and deleted at a high rate, which costs a journaled
/// disk filesystem dearly (ext4 scans its inode tables past recently deleted inodes), and none of
/// them needs to outlive a reboot (the sandboxes do not). Without root, a plain directory.
fn mount_run_dir(dir: &Path) {
    let _ = std::fs::create_dir_all(dir);
    if !nix::unistd::geteuid().is_root() || is_mount_point(dir) {
        return;
    }
    let mounted = nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV | nix::mount::MsFlags::MS_NOEXEC,
        Some("mode=0700,size=256m"),
    );
    if let Err(e) = mounted {
        tracing::warn!("cannot mount a tmpfs on {}: {e}; using the disk", dir.display());
    }
}

fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(dir), dir.parent().map(std::fs::metadata)) {
        (Ok(d), Some(Ok(p))) => d.dev() != p.dev(),
        _ => false,
    }
}

/// Takes the state directory for this process. Two hosts on one state directory would each take
/// the other's sandboxes for leftovers of a crash.
fn lock_state_dir(state_dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let path = state_dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| SandboxError::backend(&path.display().to_string(), e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        SandboxError::Backend(format!(
            "the state directory {} is in use by another orchard process; give this one its own with --state-dir",
            state_dir.display()
        ))
    })
}
