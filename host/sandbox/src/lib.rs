//! What a sandbox is, independent of where it runs: its spec, its observable state, and the
//! [`Backend`] trait that the local and Kubernetes backends implement.

#![warn(missing_docs)]

mod error;
mod pool;
mod quantity;
mod spec;

use std::time::Duration;

use orchard_agent_client::SharedAgent;

pub use error::SandboxError;
pub use pool::{POOL_TENANT, PoolShape, finish_claim};
pub use quantity::{parse_bytes, parse_cpu, parse_memory};
pub use spec::{SandboxInfo, SandboxSpec, SandboxStatus, valid_sandbox_id};

/// What every backend operation answers.
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

    /// A sandbox's state.
    async fn get(&self, id: &str) -> Result<SandboxInfo>;

    /// Every sandbox.
    async fn list(&self) -> Vec<SandboxInfo>;

    /// The client for the sandbox's agent. Counts as activity for idle expiry.
    async fn agent(&self, id: &str) -> Result<SharedAgent>;

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

    /// `count` new sandboxes of the same tenant whose filesystem is this one's at this moment
    /// (processes are not carried: each starts as a fresh sandbox of the source's spec, with the
    /// source's files). All or none: on a failure the ones made are deleted.
    async fn fork(&self, id: &str, _count: usize) -> Result<Forked> {
        self.get(id).await?;
        Err(SandboxError::InvalidSpec(format!("the {} backend cannot fork sandboxes", self.name())))
    }
}

/// What a fork made.
#[derive(Debug, Clone)]
pub struct Forked {
    /// The new sandboxes.
    pub sandboxes: Vec<SandboxInfo>,
    /// How long the source was paused for its copy (`None`: it was not; the copy went by tar
    /// from a running source).
    pub source_paused: Option<Duration>,
}

/// Most children of one fork.
pub const MAX_FORK: usize = 64;

/// Where a fork by tar carries files from: the directories an agent's work lands in. The image's
/// system directories (`/etc`, `/var`, `/usr`) come from the image itself: a change there (a
/// package installed) is not carried by tar — only a local fork, which copies the whole writable
/// layer, carries everything.
/// (`/tmp` is left out: the agent keeps its own scratch there.)
pub const FORK_PATHS: &[&str] = &["/workspace", "/root", "/home", "/opt", "/srv", "/usr/local"];

/// A fork where the backend cannot copy the writable layer itself (a sandbox on another machine,
/// a layer inside a disk image): `count` sandboxes from `spec`, then each of `paths` that exists
/// in the source streamed across as a tar through the agents. The source keeps running (the
/// copy is of a moving target, unlike a frozen local fork), and it is slower: every byte passes
/// through this host.
pub async fn fork_by_tar(
    backend: &dyn Backend,
    spec: &SandboxSpec,
    source: &str,
    count: usize,
    paths: &[&str],
) -> Result<Vec<SandboxInfo>> {
    let from = backend.agent(source).await?;
    let mut made: Vec<SandboxInfo> = Vec::new();
    let result: Result<()> = async {
        for _ in 0..count {
            let info = backend.create(SandboxSpec { id: None, ..spec.clone() }).await?;
            made.push(backend.wait_ready(&info.id, Duration::from_secs(120)).await?);
        }
        for path in paths {
            if from.stat(path).await.is_err() {
                continue;
            }
            let response = from.tar_download(path).await?;
            let bytes = http_body_util::BodyExt::collect(response.into_body())
                .await
                .map_err(|e| SandboxError::backend(&format!("reading {path} from {source}"), e))?
                .to_bytes();
            for child in &made {
                let to = backend.agent(&child.id).await?;
                match to.tar_upload(path, orchard_agent_client::full(bytes.clone())).await {
                    // Read-only in the image (a bind): the source could not have changed it.
                    Err(e) if e.to_string().contains("Read-only file system") => break,
                    other => {
                        other?;
                    }
                }
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        for child in &made {
            let _ = backend.delete(&child.id).await;
        }
        return Err(e);
    }
    Ok(made)
}

/// How long `create` waits for readiness inline before answering `pending`.
pub const INLINE_READY_WAIT: Duration = Duration::from_secs(10);
