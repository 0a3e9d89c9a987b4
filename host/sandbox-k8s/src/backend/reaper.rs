//! The reaper: one pass over this replica's share of the sandboxes (rendezvous hashing over
//! the live replicas' leases), deleting the expired and the long-failed, and the objects left
//! behind by creates that died half-way or by pods deleted behind our back.

use kube::api::ListParams;
use orchard_sandbox::SandboxStatus;

use super::{KubernetesBackend, NotFoundIsFine, flush_interval, now};
use crate::replicas;
use crate::spec::{self, MANAGED_SELECTOR};
use crate::writes::Lane;

/// Objects without their pod (a create that died half-way) are collected after this long.
const ORPHAN_GRACE: f64 = 120.0;

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
        // Pods deleted behind our back (or by another replica): their objects go now.
        for id in self.cache.take_vanished() {
            if self.cache.get(&id).is_none() && mine(&id) {
                tracing::info!(sandbox = %id, "its pod is gone: deleting its policy");
                self.delete_objects(&id, false).await;
                self.forget(&id);
            }
        }
        self.collect_orphans(&mine, now).await;
        self.refill_pools(&live).await;
        reaped
    }

    /// Policies whose pod is gone, and the token Secrets sandboxes of earlier versions had.
    async fn collect_orphans(&self, mine: &(dyn Fn(&str) -> bool + Sync), now: f64) {
        let list = ListParams::default().labels(MANAGED_SELECTOR);
        if let Ok(secrets) = self.secrets.list(&list).await {
            for id in secrets.items.iter().filter_map(|s| orphan_id(&s.metadata, now)) {
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
            orphans.extend(policies.items.iter().filter_map(|p| orphan_id(&p.metadata, now)));
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

/// The sandbox id of a managed object created more than [`ORPHAN_GRACE`] ago.
fn orphan_id(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta, now: f64) -> Option<String> {
    let labels = meta.labels.as_ref()?;
    let id = labels.get(spec::LABEL_SANDBOX)?.clone();
    let created = meta.creation_timestamp.as_ref().map(|t| t.0.timestamp() as f64).unwrap_or(0.0);
    (created + ORPHAN_GRACE <= now).then_some(id)
}
