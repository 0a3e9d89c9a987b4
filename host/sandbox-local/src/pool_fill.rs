//! Warm pools on this machine: a matching create claims a ready sandbox in memory; a
//! background task keeps each pool filled to its size.

use crate::*;
use orchard_agent_client::SandboxAgent;
use orchard_sandbox::{SandboxInfo, SandboxSpec, SandboxStatus};
use record::now;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl LocalBackend {
    /// A ready sandbox of the shape `spec` asks for, now the caller's, with its hard lifetime
    /// counted from the claim: recorded with the claim in one save (the reaper and a restarted
    /// server keep it from then on) and in force in its agent before the claim answers, so the
    /// caller never holds a sandbox whose deadline is not kept yet. An agent that does not take
    /// it gets its sandbox deleted (and the create starts one from nothing). Answering first
    /// and telling the agent behind the answer saved the create ~0.3 ms but cost its first
    /// command more: that call raced it to the agent and took a connection of its own.
    pub(crate) async fn claim_pooled(&self, spec: &SandboxSpec) -> Option<SandboxInfo> {
        let pool = self.pools.iter().find(|p| p.shape.serves(spec))?;
        let claimed = loop {
            let id = pool.take()?;
            // One that died while it waited is dropped (the refill task replaces it).
            // So is one about to reach its pool lifetime (the reaper deletes it then).
            match self.find(&id) {
                Ok(sandbox) if sandbox.info().status == SandboxStatus::Ready && !sandbox.ends_soon() => break sandbox,
                _ => continue,
            }
        };
        let die_at = spec.lifetime_seconds.map(|seconds| (now() + seconds as f64).ceil());
        let id = {
            let mut r = claimed.record.lock().unwrap_or_else(|p| p.into_inner());
            r.tenant = spec.tenant.clone();
            r.ttl_seconds = spec.ttl_seconds.unwrap_or(self.config.default_ttl.as_secs());
            r.created_at = now();
            r.last_active = now();
            // Without a lifetime asked for, it keeps its pool's (if any).
            r.die_at = die_at.or(r.die_at);
            if let Err(e) = r.save(&claimed.dir) {
                tracing::warn!(sandbox = %r.id, "claiming a pooled sandbox: {e}");
            }
            r.id.clone()
        };
        self.refill.notify_one();
        if let Some(die_at) = die_at
            && let Err(e) = claimed.agent.set_lifetime(die_at as u64).await
        {
            tracing::warn!(sandbox = %id, "a claimed sandbox refused its lifetime, deleting it: {e}");
            let _ = orchard_sandbox::Backend::delete(self, &id).await;
            return None;
        }
        Some(claimed.info())
    }

    /// Creates what the pools lack, one sandbox at a time per pool, within capacity.
    pub(crate) async fn refill_once(&self) {
        let _refilling = self.refilling.lock().await;
        for pool in &self.pools {
            while !self.stopping.load(Ordering::Relaxed) && pool.len() < pool.size && self.free_slots_now() > 0 {
                let mut spec = pool.shape.spec();
                spec.lifetime_seconds = self.config.pool_lifetime.map(|l| l.as_secs().max(1));
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
}

/// Keeps the pools full: refills at start, shortly after claims, and every few seconds (pooled
/// sandboxes that died are replaced). A refill waits until claims have paused for a moment: the
/// sandbox just claimed gets the machine for its first commands, and a burst of claims is made
/// up for in one go.
pub(crate) async fn refill_pools(backend: std::sync::Weak<LocalBackend>) {
    const QUIET: Duration = Duration::from_millis(100);
    loop {
        let Some(strong) = backend.upgrade() else { return };
        if strong.stopping.load(Ordering::Relaxed) {
            return;
        }
        strong.refill_once().await;
        if tokio::time::timeout(Duration::from_secs(5), strong.refill.notified()).await.is_ok() {
            while tokio::time::timeout(QUIET, strong.refill.notified()).await.is_ok() {}
        }
    }
}
