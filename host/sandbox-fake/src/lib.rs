//! An in-process sandbox backend: no namespaces, no processes, no root.
//!
//! Each sandbox is a [`MemFs`] and a record; its agent ([`FakeAgent`]) answers the whole
//! `SandboxAgent` API from memory, and commands are answered by an [`ExecHandler`] the test
//! gives ([`exec::builtin`] by default). It exists so that everything above the sandbox layer —
//! the scheduler, evaluation, the service, groups, graders, the UI — can be tested in-process in
//! the fast tier (`cargo xtask test --fast`), with failures injected where a test wants them.
//!
//! Invariants, as the real backends keep them:
//! - ids are unique among live sandboxes and valid DNS labels; a caller's id is refused when
//!   taken ([`SandboxError::AlreadyExists`]), a full backend refuses with
//!   [`SandboxError::Capacity`];
//! - a deleted sandbox is gone from `get`/`list` at once, and an agent handed out before stops
//!   answering (an unreachable agent's error), so use after delete is caught;
//! - every agent call counts as activity; `reap_expired` deletes exactly the sandboxes idle
//!   past their TTL;
//! - a fork's children hold the source's files at one instant (all or none).
//!
//! What it does not model: time inside commands (they finish at once), a terminal, a browser,
//! services on the sandbox's loopback, resource limits other than the disk's byte total.

#![warn(missing_docs)]

mod agent;
pub mod exec;
mod fs;
mod sandbox;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orchard_agent_client::SharedAgent;
use orchard_protocol::{ExecRequest, ExecResult};
use orchard_sandbox::{
    Backend, Forked, MAX_FORK, Result, SandboxError, SandboxInfo, SandboxSpec, SandboxStatus, valid_sandbox_id,
};

pub use agent::FakeAgent;
pub use exec::{ExecCall, ExecHandler, exited};
pub use fs::{FsError, MemFs, normalise};

use sandbox::Sandbox;

/// The default idle TTL, as the local backend's.
const DEFAULT_TTL_SECONDS: u64 = 3600;

pub(crate) fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// The in-process backend. Cheap to create; share it behind an `Arc`.
pub struct FakeBackend {
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    handler: ExecHandler,
    capacity: Option<usize>,
    next_id: AtomicU64,
    created: AtomicU64,
}

impl Default for FakeBackend {
    fn default() -> Self {
        FakeBackend {
            sandboxes: Mutex::new(HashMap::new()),
            handler: Arc::new(exec::builtin),
            capacity: None,
            next_id: AtomicU64::new(1),
            created: AtomicU64::new(0),
        }
    }
}

impl FakeBackend {
    /// A backend with no capacity limit whose commands the [`exec::builtin`] handler answers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Commands answered by `handler` (for every sandbox created after).
    pub fn with_exec(mut self, handler: impl Fn(&mut ExecCall<'_>) -> ExecResult + Send + Sync + 'static) -> Self {
        self.handler = Arc::new(handler);
        self
    }

    /// At most `n` sandboxes alive at once.
    pub fn with_capacity(mut self, n: usize) -> Self {
        self.capacity = Some(n);
        self
    }

    fn sandboxes(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Sandbox>>> {
        self.sandboxes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn find(&self, id: &str) -> Result<Arc<Sandbox>> {
        self.sandboxes().get(id).cloned().ok_or_else(|| SandboxError::NotFound(id.to_string()))
    }

    /// A copy of a live sandbox's files, for a test to look at.
    pub fn files(&self, id: &str) -> Result<MemFs> {
        Ok(self.find(id)?.fs.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// Every command run in a live sandbox, in order.
    pub fn commands(&self, id: &str) -> Result<Vec<ExecRequest>> {
        Ok(self.find(id)?.commands.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// How many sandboxes were ever created (forks included).
    pub fn created(&self) -> u64 {
        self.created.load(Ordering::SeqCst)
    }

    fn make(&self, spec: SandboxSpec, fs: Option<MemFs>) -> Result<SandboxInfo> {
        if spec.tenant.is_empty() {
            return Err(SandboxError::InvalidSpec("tenant: must not be empty".into()));
        }
        if spec.image.trim().is_empty() {
            return Err(SandboxError::InvalidSpec("image: must not be empty".into()));
        }
        let mut sandboxes = self.sandboxes();
        if let Some(cap) = self.capacity
            && sandboxes.len() >= cap
        {
            return Err(SandboxError::Capacity(format!("the fake backend holds at most {cap} sandboxes")));
        }
        let id = match &spec.id {
            Some(id) => {
                valid_sandbox_id(id).map_err(SandboxError::InvalidSpec)?;
                if sandboxes.contains_key(id) {
                    return Err(SandboxError::AlreadyExists(id.clone()));
                }
                id.clone()
            }
            None => loop {
                let id = format!("fake-{}", self.next_id.fetch_add(1, Ordering::SeqCst));
                if !sandboxes.contains_key(&id) {
                    break id;
                }
            },
        };
        let mut fs = fs.unwrap_or_else(|| MemFs::new(spec.disk_bytes));
        if let Some(dir) = &spec.workdir {
            fs.mkdir_all(dir).map_err(|e| SandboxError::InvalidSpec(format!("workdir: {}", e.message)))?;
        }
        let at = now();
        let info = SandboxInfo {
            id: id.clone(),
            tenant: spec.tenant.clone(),
            image: spec.image.clone(),
            backend: "fake".into(),
            block_network: spec.block_network,
            cpu: spec.cpu,
            memory_bytes: spec.memory_bytes,
            pids: spec.pids,
            disk_bytes: spec.disk_bytes,
            created_at: at,
            last_active: at,
            ttl_seconds: spec.ttl_seconds.unwrap_or(DEFAULT_TTL_SECONDS),
            status: SandboxStatus::Ready,
            status_message: None,
            agent: format!("memory:{id}"),
        };
        let sandbox = Sandbox {
            id: id.clone(),
            spec: SandboxSpec { id: Some(id.clone()), ..spec },
            info: Mutex::new(info.clone()),
            fs: Mutex::new(fs),
            handler: self.handler.clone(),
            commands: Mutex::default(),
            processes: Mutex::default(),
            sessions: Mutex::default(),
            deleted: AtomicBool::new(false),
            defaults: Mutex::default(),
        };
        sandboxes.insert(id, Arc::new(sandbox));
        self.created.fetch_add(1, Ordering::SeqCst);
        Ok(info)
    }
}

#[async_trait::async_trait]
impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn create(&self, spec: SandboxSpec) -> Result<SandboxInfo> {
        self.make(spec, None)
    }

    async fn get(&self, id: &str) -> Result<SandboxInfo> {
        Ok(self.find(id)?.info())
    }

    async fn list(&self) -> Vec<SandboxInfo> {
        let mut infos: Vec<SandboxInfo> = self.sandboxes().values().map(|s| s.info()).collect();
        infos.sort_by(|a, b| a.created_at.total_cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        infos
    }

    async fn agent(&self, id: &str) -> Result<SharedAgent> {
        let sandbox = self.find(id)?;
        sandbox.touch();
        Ok(Arc::new(FakeAgent { sandbox }))
    }

    async fn wait_ready(&self, id: &str, _timeout: Duration) -> Result<SandboxInfo> {
        self.get(id).await
    }

    async fn heartbeat(&self, id: &str) -> Result<SandboxInfo> {
        let sandbox = self.find(id)?;
        sandbox.touch();
        Ok(sandbox.info())
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let sandbox = self.sandboxes().remove(id).ok_or_else(|| SandboxError::NotFound(id.to_string()))?;
        sandbox.deleted.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn reap_expired(&self) -> Vec<String> {
        let at = now();
        let expired: Vec<String> =
            self.sandboxes().values().filter(|s| s.info().expires_at() < at).map(|s| s.id.clone()).collect();
        let mut reaped = Vec::new();
        for id in expired {
            if self.delete(&id).await.is_ok() {
                reaped.push(id);
            }
        }
        reaped
    }

    async fn free_slots(&self) -> Option<usize> {
        self.capacity.map(|cap| cap.saturating_sub(self.sandboxes().len()))
    }

    async fn shutdown(&self) {
        let ids: Vec<String> = self.sandboxes().keys().cloned().collect();
        for id in ids {
            let _ = self.delete(&id).await;
        }
    }

    async fn fork(&self, id: &str, count: usize) -> Result<Forked> {
        if count == 0 || count > MAX_FORK {
            return Err(SandboxError::InvalidSpec(format!("count: 1 to {MAX_FORK}, not {count}")));
        }
        let source = self.find(id)?;
        // One instant: the copy is taken under the files' lock, as a frozen local fork's is.
        let files = source.fs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut made = Vec::new();
        for _ in 0..count {
            match self.make(SandboxSpec { id: None, ..source.spec.clone() }, Some(files.clone())) {
                Ok(info) => made.push(info),
                Err(e) => {
                    for child in &made {
                        let _ = self.delete(&child.id).await;
                    }
                    return Err(e);
                }
            }
        }
        Ok(Forked { sandboxes: made, source_paused: Some(Duration::ZERO) })
    }
}
