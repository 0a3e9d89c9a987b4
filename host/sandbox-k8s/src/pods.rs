//! The records of a replica's view, with the ready pooled pods kept aside by pool so that a
//! claim picks candidates at random without looking at every pod (a claim among 13,700 pods
//! that scanned them all cost ~0.3 ms of CPU, and 3,600 at once a second of it).
//!
//! Invariants: a pod is in `ready[pool]` exactly when its record has that pool, is Ready and
//! is not being deleted; `coming[pool]` counts the records of that pool that are Pending or
//! Ready and not being deleted (what claims waiting for the pool can still get).

use std::collections::HashMap;

use orchard_sandbox::SandboxStatus;

use crate::record::PodRecord;

#[derive(Default)]
pub struct Pods {
    by_id: HashMap<String, PodRecord>,
    ready: HashMap<String, IdSet>,
    coming: HashMap<String, usize>,
}

/// A set of ids with random picks: a vector, and each id's place in it.
#[derive(Default)]
struct IdSet {
    ids: Vec<String>,
    at: HashMap<String, usize>,
}

impl IdSet {
    fn insert(&mut self, id: &str) {
        if !self.at.contains_key(id) {
            self.at.insert(id.to_string(), self.ids.len());
            self.ids.push(id.to_string());
        }
    }

    fn remove(&mut self, id: &str) {
        if let Some(place) = self.at.remove(id) {
            self.ids.swap_remove(place);
            if let Some(moved) = self.ids.get(place) {
                self.at.insert(moved.clone(), place);
            }
        }
    }
}

fn ready_pool(record: &PodRecord) -> Option<&str> {
    record.pool.as_deref().filter(|_| record.status == SandboxStatus::Ready && !record.deleting)
}

fn coming_pool(record: &PodRecord) -> Option<&str> {
    record
        .pool
        .as_deref()
        .filter(|_| matches!(record.status, SandboxStatus::Pending | SandboxStatus::Ready) && !record.deleting)
}

impl Pods {
    pub fn from_records(records: HashMap<String, PodRecord>) -> Pods {
        let mut pods = Pods::default();
        for (_, record) in records {
            pods.insert(record);
        }
        pods
    }

    pub fn get(&self, id: &str) -> Option<&PodRecord> {
        self.by_id.get(id)
    }

    pub fn values(&self) -> impl Iterator<Item = &PodRecord> {
        self.by_id.values()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Stores `record`; `true` when it is a ready pool pod that was not one before.
    pub fn insert(&mut self, record: PodRecord) -> bool {
        let old = self.by_id.remove(&record.id);
        if let Some(old) = &old {
            self.unindex(old);
        }
        self.index(&record);
        let newly_ready = ready_pool(&record).is_some() && old.as_ref().and_then(ready_pool).is_none();
        self.by_id.insert(record.id.clone(), record);
        newly_ready
    }

    pub fn remove(&mut self, id: &str) -> Option<PodRecord> {
        let gone = self.by_id.remove(id)?;
        self.unindex(&gone);
        Some(gone)
    }

    /// Counts `record` into the indexes it belongs to.
    fn index(&mut self, record: &PodRecord) {
        if let Some(pool) = coming_pool(record) {
            *self.coming.entry(pool.to_string()).or_default() += 1;
        }
        if let Some(pool) = ready_pool(record) {
            self.ready.entry(pool.to_string()).or_default().insert(&record.id);
        }
    }

    /// Takes `record` out of the indexes it was counted into.
    fn unindex(&mut self, record: &PodRecord) {
        if let Some(pool) = coming_pool(record)
            && let Some(count) = self.coming.get_mut(pool)
        {
            *count -= 1;
        }
        if let Some(pool) = ready_pool(record)
            && let Some(set) = self.ready.get_mut(pool)
        {
            set.remove(&record.id);
        }
    }

    /// Up to `n` ready pods of `pool`, picked at random (distinct).
    pub fn sample_ready(&self, pool: &str, n: usize) -> Vec<String> {
        let Some(set) = self.ready.get(pool) else { return Vec::new() };
        if set.ids.len() <= n {
            return set.ids.clone();
        }
        rand::seq::index::sample(&mut rand::rng(), set.ids.len(), n).into_iter().map(|i| set.ids[i].clone()).collect()
    }

    /// Pods of `pool` starting or ready (not being deleted).
    pub fn coming(&self, pool: &str) -> usize {
        self.coming.get(pool).copied().unwrap_or(0)
    }

    /// Ready pods of `pool`.
    #[cfg(test)]
    pub fn ready_count(&self, pool: &str) -> usize {
        self.ready.get(pool).map_or(0, |s| s.ids.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, pool: Option<&str>, status: SandboxStatus) -> PodRecord {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("orchard-{id}"),
                "labels": {crate::spec::LABEL_MANAGED: crate::spec::MANAGED_BY, crate::spec::LABEL_SANDBOX: id}},
            "spec": {"containers": [{"name": "sandbox", "image": "i"}]}
        }))
        .unwrap();
        let mut r = PodRecord::from_pod(&pod).unwrap();
        r.pool = pool.map(String::from);
        r.status = status;
        r
    }

    #[test]
    fn the_ready_set_follows_every_change() {
        let mut pods = Pods::default();
        for i in 0..50 {
            assert!(!pods.insert(record(&format!("p{i}"), Some("a"), SandboxStatus::Pending)));
        }
        assert_eq!((pods.ready_count("a"), pods.coming("a")), (0, 50));
        for i in 0..50 {
            assert!(pods.insert(record(&format!("p{i}"), Some("a"), SandboxStatus::Ready)), "newly ready");
        }
        assert!(!pods.insert(record("p3", Some("a"), SandboxStatus::Ready)), "ready again is no news");
        assert_eq!((pods.ready_count("a"), pods.coming("a")), (50, 50));
        // Claimed (no pool), deleted, being deleted: each leaves the set.
        pods.insert(record("p0", None, SandboxStatus::Ready));
        pods.remove("p1");
        let mut deleting = record("p2", Some("a"), SandboxStatus::Ready);
        deleting.deleting = true;
        pods.insert(deleting);
        assert_eq!((pods.ready_count("a"), pods.coming("a")), (47, 47));
        pods.insert(record("p4", Some("a"), SandboxStatus::Failed));
        assert_eq!((pods.ready_count("a"), pods.coming("a")), (46, 46));
        pods.insert(record("p4", Some("a"), SandboxStatus::Ready));
        let picked = pods.sample_ready("a", 10);
        let distinct: std::collections::HashSet<&String> = picked.iter().collect();
        assert_eq!((picked.len(), distinct.len()), (10, 10));
        assert!(picked.iter().all(|id| !["p0", "p1", "p2"].contains(&id.as_str())), "{picked:?}");
        assert!(picked.iter().all(|id| pods.get(id).is_some_and(|r| ready_pool(r) == Some("a"))));
        assert_eq!(pods.sample_ready("a", 100).len(), 47);
    }
}
