//! The replica's view of the sandboxes, fed by a watch on the pods (kube-runtime's watcher:
//! list, then watch, re-listing after a break). Readiness waits on this view, never on polls.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;

use crate::record::PodRecord;
use crate::spec::MANAGED_SELECTOR;

/// What the pod watch last said of every sandbox pod, and a signal for each change.
pub struct PodCache {
    pods: RwLock<HashMap<String, PodRecord>>,
    /// Bumped on every change; waiters subscribe.
    version: watch::Sender<u64>,
    synced: watch::Sender<bool>,
    /// Sandboxes whose pod went away (deleted by anyone): their secret and policy are due.
    vanished: std::sync::Mutex<HashSet<String>>,
    /// Pods this replica deleted (id → nonce), until the watch reports them gone: an update
    /// still in flight must not bring them back.
    deleted: std::sync::Mutex<HashMap<String, String>>,
}

impl PodCache {
    /// An empty cache.
    pub fn new() -> Arc<Self> {
        Arc::new(PodCache {
            pods: RwLock::new(HashMap::new()),
            version: watch::Sender::new(0),
            synced: watch::Sender::new(false),
            vanished: std::sync::Mutex::new(HashSet::new()),
            deleted: std::sync::Mutex::new(HashMap::new()),
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

    /// Records what this replica just did (a delete) before the watch reports it.
    pub fn forget(&self, id: &str) {
        if let Some(gone) = self.pods.write().unwrap_or_else(|p| p.into_inner()).remove(id) {
            self.deleted.lock().unwrap_or_else(|p| p.into_inner()).insert(gone.id, gone.nonce);
        }
        self.version.send_modify(|v| *v += 1);
    }

    /// Records what the watch said of a pod.
    pub fn upsert(&self, pod: &Pod) {
        let Some(record) = PodRecord::from_pod(pod) else { return };
        let deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner()).get(&record.id) == Some(&record.nonce);
        if !deleted {
            self.pods.write().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), record);
            self.version.send_modify(|v| *v += 1);
        }
    }

    /// The sandboxes whose pods went away since the last call.
    pub fn take_vanished(&self) -> Vec<String> {
        self.vanished.lock().unwrap_or_else(|p| p.into_inner()).drain().collect()
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
                    *self.pods.write().unwrap_or_else(|p| p.into_inner()) = std::mem::take(&mut fresh);
                    self.synced.send_replace(true);
                }
                Ok(Event::Apply(pod)) => self.upsert(&pod),
                Ok(Event::Delete(pod)) => {
                    if let Some(r) = PodRecord::from_pod(&pod) {
                        let mut deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
                        if deleted.get(&r.id) == Some(&r.nonce) {
                            deleted.remove(&r.id);
                        }
                        drop(deleted);
                        let mut pods = self.pods.write().unwrap_or_else(|p| p.into_inner());
                        // A delete of an older pod must not remove a newer one under the same id.
                        if pods.get(&r.id).is_some_and(|known| known.nonce == r.nonce) {
                            pods.remove(&r.id);
                            self.vanished.lock().unwrap_or_else(|p| p.into_inner()).insert(r.id);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!("watching sandbox pods: {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
            }
            self.version.send_modify(|v| *v += 1);
        }
    }
}
