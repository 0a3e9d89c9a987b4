//! The replica's view of the sandboxes, fed by a watch on the pods (kube-runtime's watcher:
//! list, then watch, re-listing after a break). Readiness waits on this view, never on polls.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::pods::Pods;
use crate::record::PodRecord;
use crate::spec::MANAGED_SELECTOR;

/// What the pod watch last said of every sandbox pod, and a signal for each change.
pub struct PodCache {
    pods: RwLock<Pods>,
    /// Bumped on every change; waiters subscribe.
    version: watch::Sender<u64>,
    synced: watch::Sender<bool>,
    /// Sandboxes whose pod went away not by this replica's hand, and when this replica saw it:
    /// their policy is due, once the replica that deleted the pod (if one did) had its time to
    /// delete the policy itself.
    vanished: std::sync::Mutex<HashMap<String, std::time::Instant>>,
    /// Pods this replica deleted (id → nonce), until the watch reports them gone: an update
    /// still in flight must not bring them back.
    deleted: std::sync::Mutex<HashMap<String, String>>,
    /// Pods this replica just wrote (id → the resourceVersion its write returned), until the
    /// watch delivers that version or a later one: the watch's older events of them, still in
    /// flight, must not take the view back (a claimed pod seen claimable again is claimed twice,
    /// and its tenant answered 404).
    written: std::sync::Mutex<HashMap<String, String>>,
    /// Sandboxes this replica is deleting: their pod's going is no news (not "vanished").
    deleting: std::sync::Mutex<HashSet<String>>,
    /// Per pool, one wake-up per pod that became ready: one waiting claim each, not all.
    pool_ready: std::sync::Mutex<HashMap<String, Arc<tokio::sync::Notify>>>,
}

impl PodCache {
    /// An empty cache.
    pub fn new() -> Arc<Self> {
        Arc::new(PodCache {
            pods: RwLock::new(Pods::default()),
            version: watch::Sender::new(0),
            synced: watch::Sender::new(false),
            vanished: std::sync::Mutex::new(HashMap::new()),
            deleted: std::sync::Mutex::new(HashMap::new()),
            written: std::sync::Mutex::new(HashMap::new()),
            deleting: std::sync::Mutex::new(HashSet::new()),
            pool_ready: std::sync::Mutex::new(HashMap::new()),
        })
    }

    /// One sandbox's record.
    pub fn get(&self, id: &str) -> Option<PodRecord> {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned()
    }

    /// Every sandbox's record.
    pub fn all(&self) -> Vec<PodRecord> {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect()
    }

    /// The ids of the records `keep` accepts, without copying the records (a claim among
    /// thousands of pods looks at every one).
    pub fn ids_where(&self, keep: impl Fn(&PodRecord) -> bool) -> Vec<String> {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).values().filter(|r| keep(r)).map(|r| r.id.clone()).collect()
    }

    /// Up to `n` ready pods of warm pool `pool`, picked at random.
    pub fn sample_ready(&self, pool: &str, n: usize) -> Vec<String> {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).sample_ready(pool, n)
    }

    /// How many records `keep` accepts.
    pub fn count_where(&self, keep: impl Fn(&PodRecord) -> bool) -> usize {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).values().filter(|r| keep(r)).count()
    }

    /// How many pods are known.
    pub fn len(&self) -> usize {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// No pods known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A receiver woken at every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    /// This replica is about to delete the sandbox's pod (until [`Self::forget`]).
    pub fn deleting(&self, id: &str) {
        self.deleting.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string());
    }

    /// Whether this replica is deleting the sandbox (between [`Self::deleting`] and
    /// [`Self::forget`]).
    pub fn is_deleting(&self, id: &str) -> bool {
        self.deleting.lock().unwrap_or_else(|p| p.into_inner()).contains(id)
    }

    /// Records what this replica just did (a delete) before the watch reports it.
    pub fn forget(&self, id: &str) {
        self.deleting.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        if let Some(gone) = self.pods.write().unwrap_or_else(|p| p.into_inner()).remove(id) {
            self.deleted.lock().unwrap_or_else(|p| p.into_inner()).insert(gone.id, gone.nonce);
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Records what this replica's write of a pod returned, before the watch reports it.
    pub fn upsert(&self, pod: &Pod) {
        if let (Some(id), Some(version)) = (PodRecord::from_pod(pod).map(|r| r.id), &pod.metadata.resource_version) {
            self.written.lock().unwrap_or_else(|p| p.into_inner()).insert(id, version.clone());
        }
        self.apply(pod);
    }

    /// Records what the watch said of a pod, unless it is older than this replica's own write.
    fn watched(&self, pod: &Pod) {
        let Some(id) = PodRecord::from_pod(pod).map(|r| r.id) else { return };
        {
            let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(mine) = written.get(&id) {
                match is_older(pod.metadata.resource_version.as_deref(), mine) {
                    true => return,
                    false => {
                        written.remove(&id);
                    }
                }
            }
        }
        self.apply(pod);
    }

    /// Records that the watch saw a pod deleted; one this replica did not delete is vanished.
    fn gone(&self, pod: &Pod) {
        let Some(r) = PodRecord::from_pod(pod) else { return };
        self.written.lock().unwrap_or_else(|p| p.into_inner()).remove(&r.id);
        let mut deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
        if deleted.get(&r.id) == Some(&r.nonce) {
            deleted.remove(&r.id);
        }
        drop(deleted);
        let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
        // A delete of an older pod must not remove a newer one under the same id.
        if pods.get(&r.id).is_some_and(|known| known.nonce == r.nonce) {
            pods.remove(&r.id);
            if !self.deleting.lock().unwrap_or_else(|p| p.into_inner()).contains(&r.id) {
                self.vanished.lock().unwrap_or_else(|p| p.into_inner()).insert(r.id, std::time::Instant::now());
            }
        }
    }

    fn apply(&self, pod: &Pod) {
        let Some(record) = PodRecord::from_pod(pod) else { return };
        let deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner()).get(&record.id) == Some(&record.nonce);
        if !deleted {
            let pool = record.pool.clone();
            let newly_ready = self.pods.write().unwrap_or_else(|p| p.into_inner()).insert(record);
            if newly_ready && let Some(pool) = pool {
                self.pool_notify(&pool).notify_one();
            }
            self.version.send_modify(|v| *v += 1);
        }
    }

    /// Pods of warm pool `pool` starting or ready.
    pub fn pool_coming(&self, pool: &str) -> usize {
        self.pods.read().unwrap_or_else(|p| p.into_inner()).coming(pool)
    }

    fn pool_notify(&self, pool: &str) -> Arc<tokio::sync::Notify> {
        self.pool_ready.lock().unwrap_or_else(|p| p.into_inner()).entry(pool.to_string()).or_default().clone()
    }

    /// Resolves when a pod of warm pool `pool` has become ready (one waiter per pod that did).
    pub async fn pool_pod_ready(&self, pool: &str) {
        self.pool_notify(pool).notified().await;
    }

    /// Passes a wake-up of `pool` on to its next waiter (this one could not use it).
    pub fn pass_pool_ready(&self, pool: &str) {
        self.pool_notify(pool).notify_one();
    }

    /// The sandboxes whose pods went away at least `grace` ago (and not by this replica's
    /// hand), taken out of the set; the younger ones stay for a later call.
    pub fn take_vanished(&self, grace: std::time::Duration) -> HashSet<String> {
        let mut vanished = self.vanished.lock().unwrap_or_else(|p| p.into_inner());
        vanished.extract_if(|_, at| at.elapsed() >= grace).map(|(id, _)| id).collect()
    }

    /// Resolves once the first full list has arrived.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|synced| *synced).await;
    }

    /// Runs the watch until the task is dropped.
    pub async fn run(self: Arc<Self>, api: Api<Pod>) {
        // The selector is also applied here: some API servers (and test doubles) ignore it.
        let config = watcher::Config::default().labels(MANAGED_SELECTOR);
        let mut events = watcher::watcher(api, config).boxed();
        let mut fresh: HashMap<String, PodRecord> = HashMap::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => fresh.clear(),
                Ok(Event::InitApply(pod)) => {
                    if let Some(r) = PodRecord::from_pod(&pod) {
                        let deleted =
                            self.deleted.lock().unwrap_or_else(|p| p.into_inner()).get(&r.id) == Some(&r.nonce);
                        if !deleted {
                            fresh.insert(r.id.clone(), r);
                        }
                    }
                }
                Ok(Event::InitDone) => {
                    // A fresh list is newer than any write made before it.
                    self.written.lock().unwrap_or_else(|p| p.into_inner()).clear();
                    *self.pods.write().unwrap_or_else(|p| p.into_inner()) =
                        Pods::from_records(std::mem::take(&mut fresh));
                    self.synced.send_replace(true);
                }
                Ok(Event::Apply(pod)) => self.watched(&pod),
                Ok(Event::Delete(pod)) => self.gone(&pod),
                Err(e) => {
                    tracing::warn!("watching sandbox pods: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
            self.version.send_modify(|v| *v += 1);
        }
    }
}

/// Whether the watch's `seen` version of a pod is older than `mine`, the one this replica's
/// write returned. Versions are opaque to clients in principle; every API server in use
/// (etcd's revisions, and the doubles) counts them up, so numbers compare. One that is not a
/// number is taken as not older: the view follows the watch, as it did before.
fn is_older(seen: Option<&str>, mine: &str) -> bool {
    match (seen.and_then(|v| v.parse::<u64>().ok()), mine.parse::<u64>().ok()) {
        (Some(seen), Some(mine)) => seen < mine,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(version: &str, tenant: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "orchard-a", "resourceVersion": version,
                "labels": {crate::spec::LABEL_MANAGED: crate::spec::MANAGED_BY, crate::spec::LABEL_SANDBOX: "a"},
                "annotations": {crate::spec::LABEL_TENANT: tenant}},
            "spec": {"containers": [{"name": "sandbox", "image": "i"}]}
        }))
        .unwrap()
    }

    #[test]
    fn the_watchs_older_versions_never_take_back_this_replicas_own_write() {
        let cache = PodCache::new();
        cache.watched(&pod("4", "pool"));
        // This replica claims it: its write returned version 6.
        cache.upsert(&pod("6", "alice"));
        // The watch is behind: version 5 (the kubelet's status write) arrives after the claim.
        cache.watched(&pod("5", "pool"));
        assert_eq!(cache.get("a").unwrap().tenant, "alice", "a stale event undid the claim");
        cache.watched(&pod("6", "alice"));
        cache.watched(&pod("7", "alice-renamed"));
        assert_eq!(cache.get("a").unwrap().tenant, "alice-renamed", "newer events apply again");
    }

    #[test]
    fn a_pod_this_replica_did_not_delete_is_vanished_once_its_grace_is_over() {
        let (grace, none) = (std::time::Duration::from_secs(3600), std::time::Duration::ZERO);
        let cache = PodCache::new();
        cache.watched(&pod("4", "alice"));
        cache.gone(&pod("5", "alice"));
        assert!(cache.get("a").is_none());
        assert!(cache.take_vanished(grace).is_empty(), "taken before its grace");
        assert_eq!(cache.take_vanished(none), HashSet::from(["a".to_string()]));
        assert!(cache.take_vanished(none).is_empty(), "taken twice");
        // One this replica deletes is not news.
        cache.watched(&pod("6", "alice"));
        cache.deleting("a");
        cache.gone(&pod("7", "alice"));
        assert!(cache.take_vanished(none).is_empty(), "its own delete taken as vanished");
    }
}
