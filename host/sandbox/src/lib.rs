//! What a sandbox is, independent of where it runs: its spec, its observable state, and the
//! [`Backend`] trait that the local and Kubernetes backends implement.

mod error;
mod pool;
mod quantity;
mod spec;

use std::sync::Arc;
use std::time::Duration;

use orchard_agent_client::AgentClient;

pub use error::SandboxError;
pub use pool::{POOL_TENANT, PoolShape};
pub use quantity::{parse_cpu, parse_memory};
pub use spec::{SandboxInfo, SandboxSpec, SandboxStatus, valid_sandbox_id};

pub type Result<T> = std::result::Result<T, SandboxError>;

/// A place where sandboxes run. Every method is safe to call concurrently.
///
/// Warm pools: a backend that keeps ready sandboxes per [`PoolShape`] serves a matching `create`
/// by claiming one, so callers keep calling `create`. The local backend hands a pooled sandbox
/// over in memory; the Kubernetes one claims a pooled pod with one patch of its annotations, made
/// exclusive by a resourceVersion precondition.
#[async_trait::async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Short name: `local`, `kubernetes`.
    fn name(&self) -> &'static str;

    /// Creates a sandbox. Returns once it is ready, or with its pending state when readiness
    /// takes longer than the backend waits inline (`wait_ready` then blocks until it is).
    async fn create(&self, spec: SandboxSpec) -> Result<SandboxInfo>;

    async fn get(&self, id: &str) -> Result<SandboxInfo>;

    async fn list(&self) -> Vec<SandboxInfo>;

    /// The client for the sandbox's agent. Counts as activity for idle expiry.
    async fn agent(&self, id: &str) -> Result<Arc<AgentClient>>;

    /// Blocks until the sandbox is ready, has failed, or `timeout` passes (`NotReady`).
    async fn wait_ready(&self, id: &str, timeout: Duration) -> Result<SandboxInfo>;

    /// Marks the sandbox as alive, pushing back its idle expiry.
    async fn heartbeat(&self, id: &str) -> Result<SandboxInfo>;

    /// Deletes the sandbox and everything it held (processes, mounts, cgroups, files).
    async fn delete(&self, id: &str) -> Result<()>;

    /// Deletes sandboxes whose idle time exceeded their TTL; returns their ids.
    async fn reap_expired(&self) -> Vec<String>;

    /// How many more sandboxes may be created now (`None`: no limit).
    async fn free_slots(&self) -> Option<usize>;

    /// Called on a graceful host shutdown.
    async fn shutdown(&self);

    /// A path naming the sandbox's network namespace (for `nsenter --net=`), where the host can
    /// start a process with the sandbox's network (a rollout's browser); `None` where the backend
    /// cannot (a sandbox on another machine).
    async fn network_namespace(&self, _id: &str) -> Option<std::path::PathBuf> {
        None
    }

    /// The control-group directories a host process started for the sandbox (its browser)
    /// joins, so that its memory counts against the sandbox's limit; empty where the backend has
    /// none here.
    async fn memory_cgroups(&self, _id: &str) -> Vec<std::path::PathBuf> {
        Vec::new()
    }
}

/// How long `create` waits for readiness inline before answering `pending`.
pub const INLINE_READY_WAIT: Duration = Duration::from_secs(10);
