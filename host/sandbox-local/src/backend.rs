//! `LocalBackend` behind the `Backend` trait: what the server and the scheduler call. The
//! pieces it is made of (slots, pools, forks, creating and tearing down) are `LocalBackend`'s
//! own methods in `lib.rs` and the modules beside it.

use std::sync::atomic::Ordering;
use std::time::Duration;

use orchard_agent_client::SharedAgent;
use orchard_sandbox::{Backend, Result, SandboxError, SandboxInfo, SandboxSpec, SandboxStatus};

use crate::record::now;
use crate::{LocalBackend, is_mount_point, pool};

/// Longest a stop waits for creates in flight (past their image, a create takes well under a
/// second; one still resolving its image makes nothing once it sees the stop).
const CREATES_AT_STOP: Duration = Duration::from_secs(30);

#[async_trait::async_trait]
impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    async fn create(&self, spec: SandboxSpec) -> Result<SandboxInfo> {
        self.validate(&spec)?;
        let forked =
            spec.id.as_ref().is_some_and(|id| self.seeds.lock().unwrap_or_else(|p| p.into_inner()).contains_key(id));
        if !forked
            && let Some(claimed) = self.claim_pooled(&spec).await
            && let Some(info) = orchard_sandbox::finish_claim(self, claimed, &spec).await
        {
            return Ok(info);
        }
        let id = self.reserve(&spec)?;
        let Some(backend) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            return self.create_reserved(&id, &spec).await;
        };
        // Made on a task of its own: a caller that goes away half-way (a client hanging up, a
        // cancelled rollout) must not leave half a sandbox behind. One that went away gets its
        // finished sandbox deleted.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let outcome = backend.create_reserved(&id, &spec).await;
            if let Err(Ok(info)) = tx.send(outcome) {
                tracing::debug!(sandbox = %info.id, "deleting a sandbox whose creator went away");
                let _ = backend.delete(&info.id).await;
            }
        });
        rx.await.unwrap_or_else(|_| Err(SandboxError::Backend("sandbox creation was interrupted".into())))
    }

    async fn get(&self, id: &str) -> Result<SandboxInfo> {
        let sandbox = self.find(id)?;
        sandbox.notice_death();
        Ok(sandbox.info())
    }

    async fn fork(&self, id: &str, count: usize) -> Result<orchard_sandbox::Forked> {
        let (sandboxes, source_paused) = self.fork_sandbox(id, count).await?;
        Ok(orchard_sandbox::Forked { sandboxes, source_paused })
    }

    async fn list(&self) -> Vec<SandboxInfo> {
        let sandboxes: Vec<_> = self.sandboxes.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        let mut infos: Vec<_> = sandboxes
            .iter()
            .filter(|s| !s.deleting.load(Ordering::Relaxed))
            .map(|s| s.info())
            .filter(|i| i.tenant != pool::POOL_TENANT)
            .collect();
        infos.sort_by(|a, b| a.created_at.total_cmp(&b.created_at));
        infos
    }

    async fn agent(&self, id: &str) -> Result<SharedAgent> {
        let sandbox = self.find(id)?;
        sandbox.touch(false);
        Ok(sandbox.agent.clone())
    }

    async fn network_namespace(&self, id: &str) -> Option<std::path::PathBuf> {
        // The namespace of its pid 1 (the agent): the open network's named one or the closed
        // network's own.
        let pid = self.sandbox_init_pid(id).ok().filter(|p| *p > 0)?;
        Some(std::path::PathBuf::from(format!("/proc/{pid}/ns/net")))
    }

    async fn memory_cgroups(&self, id: &str) -> Vec<std::path::PathBuf> {
        // The memory controller's directory (v1), or the one unified directory (v2); never the
        // pids controller's: a browser's threads would count against the sandbox's pids limit.
        self.sandbox_cgroups(id)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| d.join("memory.limit_in_bytes").exists() || d.join("memory.max").exists())
            .collect()
    }

    async fn wait_ready(&self, id: &str, timeout: Duration) -> Result<SandboxInfo> {
        let sandbox = self.find(id)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let info = sandbox.info();
            match info.status {
                SandboxStatus::Ready | SandboxStatus::Failed | SandboxStatus::Unschedulable => return Ok(info),
                SandboxStatus::Pending if tokio::time::Instant::now() >= deadline => {
                    return Err(SandboxError::NotReady {
                        id: id.into(),
                        reason: format!("not ready after {timeout:?}"),
                    });
                }
                SandboxStatus::Pending => tokio::time::sleep(Duration::from_millis(5)).await,
            }
        }
    }

    async fn heartbeat(&self, id: &str) -> Result<SandboxInfo> {
        let sandbox = self.find(id)?;
        sandbox.touch(true);
        Ok(sandbox.info())
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let sandbox = self.find(id)?;
        for pool in &self.pools {
            pool.remove(id);
        }
        if sandbox.deleting.swap(true, Ordering::Relaxed) {
            return Err(SandboxError::NotFound(id.to_string()));
        }
        let Some(backend) = self.me.get().and_then(std::sync::Weak::upgrade) else {
            self.finish_delete(id, &sandbox).await;
            return Ok(());
        };
        // On a task of its own, like a create: once marked deleting, a caller that goes away
        // half-way (a rollout stopped by a cancel while it deleted its sandbox) must not leave
        // the sandbox marked and running, where no later delete would find it.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = id.to_string();
        tokio::spawn(async move {
            backend.finish_delete(&id, &sandbox).await;
            let _ = tx.send(());
        });
        let _ = rx.await;
        Ok(())
    }

    async fn reap_expired(&self) -> Vec<String> {
        let now = now();
        let expired: Vec<String> = self
            .sandboxes
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|s| !s.deleting.load(Ordering::Relaxed))
            .filter_map(|s| {
                let past_lifetime = s.record.lock().unwrap_or_else(|p| p.into_inner()).past_lifetime();
                let i = s.info();
                (past_lifetime || (i.tenant != pool::POOL_TENANT && i.expires_at() <= now)).then_some(i.id)
            })
            .collect();
        for id in &expired {
            tracing::info!(sandbox = %id, "idle timeout or hard lifetime reached: deleting");
            let _ = self.delete(id).await;
        }
        expired
    }

    async fn free_slots(&self) -> Option<usize> {
        // Pooled sandboxes are room too: a create takes one or deletes one for its space.
        let pooled: usize = self.pools.iter().map(pool::Pool::len).sum();
        Some(self.free_slots_now() + pooled)
    }

    async fn shutdown(&self) {
        // No create from here on (set under the lock reservations are made under), no pool
        // refill, and none still creating: a sandbox made after the passes below would outlive
        // the host, its record on the unmounted run directory. A create in flight when the stop
        // came (a rollout's, whose job was just stopped, finishing on its own task) is waited
        // for: it lands in the table the passes delete, or gives its reservation back.
        {
            let _reserving = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
            self.stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        drop(self.refilling.lock().await);
        let waited = std::time::Instant::now();
        while !self.reserved.lock().unwrap_or_else(|p| p.into_inner()).ids.is_empty() {
            if waited.elapsed() > CREATES_AT_STOP {
                tracing::warn!("creates still in flight after {} s; deleting what exists", CREATES_AT_STOP.as_secs());
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // A create that outlived that wait lands later: a few passes.
        for _ in 0..3 {
            let ids: Vec<String> = self.sandboxes.read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
            if ids.is_empty() {
                break;
            }
            futures::future::join_all(ids.iter().map(|id| self.delete(id))).await;
            self.wait_cleanups().await;
        }
        // Nothing left to record: the run directory's tmpfs can go too.
        let run = self.config.state_dir.join("run");
        let left: Vec<String> = self.sandboxes.read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        if !left.is_empty() {
            tracing::warn!(sandboxes = ?left, "could not delete every sandbox: {} stays mounted", run.display());
            return;
        }
        if is_mount_point(&run)
            && let Err(e) = nix::mount::umount2(&run, nix::mount::MntFlags::MNT_DETACH)
        {
            tracing::warn!("unmounting {}: {e}", run.display());
        }
        // And this instance's cgroup group: the next start makes it again.
        self.cgroups.remove_if_empty();
    }
}
