//! The reaper: one pass over this replica's share of the sandboxes (rendezvous hashing over
//! the live replicas' leases), deleting the expired and the long-failed, and the objects left
//! behind by creates that died half-way or by pods deleted behind our back.

use std::collections::HashSet;

use kube::api::ListParams;
use orchard_sandbox::SandboxStatus;

use super::{KubernetesBackend, NotFoundIsFine, flush_interval, now};
use crate::replicas;
use crate::spec::{self, MANAGED_SELECTOR};
use crate::writes::Lane;

/// Objects without their pod (a create that died half-way) are collected after this long.
const ORPHAN_GRACE: f64 = 120.0;

/// The policy of a pod another hand deleted is collected this long after the watch said so.
/// When that hand is another replica, the policy's delete is its own next write: collecting it
/// here at once raced it (two deletes, one answered 404). When the other replica's deletes are
/// queued longer than this, the second delete still happens, harmlessly.
const VANISHED_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

impl KubernetesBackend {
    /// One reaper pass over this replica's share: expired and failed sandboxes, and objects
    /// left behind by creates that died half-way or pods deleted behind our back.
    pub(super) async fn reap_now(&self) -> Vec<String> {
        if let Err(e) = replicas::renew(&self.leases, &self.config.host_id, self.config.lease_duration).await {
            tracing::warn!("renewing this replica's lease: {e}");
        }
        let live = match replicas::live(&self.leases, &self.config.host_id).await {
            Ok(live) => live,
            Err(e) => {
                // Without the live set, reaping could double up with another replica: skip.
                tracing::warn!("listing host replicas: {e}; skipping this reaper pass");
                return Vec::new();
            }
        };
        let mine = |id: &str| replicas::owner_of(id, &live) == Some(self.config.host_id.as_str());
        let now = now();
        let mut reaped = Vec::new();
        // Which are due is decided under the cache's lock, without copying every record (a
        // pass runs every reaper interval over all of them).
        let due = self.cache.ids_where(|record| {
            if record.deleting || !mine(&record.id) {
                return false;
            }
            let info = self.info(record);
            // Other replicas write activity at most every flush interval: allow for it.
            let expired = info.expires_at() + flush_interval(record.ttl_seconds) <= now;
            let failed_long_ago = info.status == SandboxStatus::Failed && info.last_active + ORPHAN_GRACE <= now;
            expired || failed_long_ago
        });
        for id in due {
            let Some(record) = self.cache.get(&id) else { continue };
            let expired = self.info(&record).expires_at() + flush_interval(record.ttl_seconds) <= now;
            tracing::info!(sandbox = %record.id, expired, "reaping");
            if self.delete_objects(&record.id, true).await {
                reaped.push(record.id.clone());
            }
            self.forget(&record.id);
        }
        // Pods deleted behind our back, or by another replica: their policies go with the
        // orphans below, once that replica had its time to delete them itself.
        let vanished = self.cache.take_vanished(VANISHED_GRACE);
        for id in vanished.iter().filter(|id| self.cache.get(id).is_none()) {
            self.forget(id);
        }
        self.collect_orphans(&mine, &vanished, now).await;
        self.refill_pools(&live).await;
        reaped
    }

    /// Policies whose pod is gone, and the token Secrets sandboxes of earlier versions had.
    /// A policy is an orphan when its pod vanished (`vanished`, already past its grace) or when
    /// it is older than [`ORPHAN_GRACE`] with no pod (a create that died half-way).
    async fn collect_orphans(&self, mine: &(dyn Fn(&str) -> bool + Sync), vanished: &HashSet<String>, now: f64) {
        let list = ListParams::default().labels(MANAGED_SELECTOR);
        if let Ok(secrets) = self.secrets.list(&list).await {
            for id in secrets.items.iter().filter_map(|s| orphan_id(&s.metadata, vanished, now)) {
                if self.cache.get(&id).is_none() && mine(&id) {
                    let (name, params) = (spec::object_name(&id), &kube::api::DeleteParams::default());
                    let deleted =
                        self.writes.run(Lane::Delete, |_| self.secrets.delete(&name, params)).await.map(|_| ());
                    if let Err(e) = deleted.filter_not_found() {
                        tracing::warn!(sandbox = %id, "deleting an earlier version's token secret: {e}");
                    }
                }
            }
        }
        let mut orphans = Vec::new();
        if let Ok(policies) = self.policies.list(&list).await {
            orphans.extend(policies.items.iter().filter_map(|p| orphan_id(&p.metadata, vanished, now)));
        }
        orphans.sort();
        orphans.dedup();
        for id in orphans {
            // A sandbox this replica is deleting has its pod gone and its policy's delete still
            // queued: not an orphan (deleting it here too was a second, 404 write).
            if self.cache.get(&id).is_none() && !self.cache.is_deleting(&id) && mine(&id) {
                tracing::info!(sandbox = %id, "collecting objects left without their pod");
                self.delete_objects(&id, false).await;
            }
        }
    }
}

/// The sandbox id of a managed object whose pod vanished, or that was created more than
/// [`ORPHAN_GRACE`] ago (the caller checks that no pod is known).
fn orphan_id(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    vanished: &HashSet<String>,
    now: f64,
) -> Option<String> {
    let labels = meta.labels.as_ref()?;
    let id = labels.get(spec::LABEL_SANDBOX)?.clone();
    let created = meta.creation_timestamp.as_ref().map(|t| t.0.timestamp() as f64).unwrap_or(0.0);
    (created + ORPHAN_GRACE <= now || vanished.contains(&id)).then_some(id)
}
