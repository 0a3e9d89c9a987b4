//! Warm pools: ready sandboxes kept per shape, claimed by a create that matches one.
//!
//! A create that names no id and asks for exactly a pooled shape (image, resources, blocked
//! network, nothing else set) takes a ready sandbox instead of starting one: the claim writes the
//! tenant and idle timeout into its record, and the sandbox is the caller's from then on —
//! listed, counted against quotas and reaped like any other. A refill task keeps each shape at
//! its size, within the host's capacity. Pooled sandboxes belong to no tenant: no client sees
//! them, and a restarted host deletes them rather than adopting them.

use std::collections::VecDeque;
use std::sync::Mutex;

use orchard_sandbox::SandboxSpec;

/// The tenant of a sandbox waiting in a pool: no API key maps to it.
pub const POOL_TENANT: &str = "";

/// What a pooled sandbox is.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolShape {
    pub image: String,
    pub memory_bytes: Option<u64>,
    pub cpu: Option<f64>,
    pub pids: Option<u64>,
    pub disk_bytes: Option<u64>,
}

impl PoolShape {
    /// Whether a create of `spec` can be served by this shape.
    pub fn serves(&self, spec: &SandboxSpec) -> bool {
        spec.id.is_none()
            && spec.image == self.image
            && spec.memory_bytes == self.memory_bytes
            && spec.cpu == self.cpu
            && spec.pids == self.pids
            && spec.disk_bytes == self.disk_bytes
            && spec.block_network
            && spec.network_allow.is_empty()
            && spec.env.is_empty()
            && spec.file_roots.is_empty()
            && spec.workdir.is_none()
            && spec.entrypoint.as_ref().is_none_or(|e| e.is_empty())
    }

    /// The spec a pooled sandbox of this shape is created from.
    pub fn spec(&self) -> SandboxSpec {
        let mut spec = SandboxSpec::new(POOL_TENANT, self.image.clone());
        spec.memory_bytes = self.memory_bytes;
        spec.cpu = self.cpu;
        spec.pids = self.pids;
        spec.disk_bytes = self.disk_bytes;
        spec.entrypoint = Some(Vec::new());
        spec
    }
}

#[derive(Debug)]
pub struct Pool {
    pub shape: PoolShape,
    pub size: usize,
    /// Ids of ready sandboxes, oldest first.
    ready: Mutex<VecDeque<String>>,
}

impl Pool {
    pub fn new(shape: PoolShape, size: usize) -> Self {
        Pool { shape, size, ready: Mutex::new(VecDeque::new()) }
    }

    pub fn take(&self) -> Option<String> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).pop_front()
    }

    pub fn put(&self, id: String) {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).push_back(id);
    }

    pub fn len(&self) -> usize {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Forgets a sandbox (deleted while pooled).
    pub fn remove(&self, id: &str) {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).retain(|r| r != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_creates_of_the_same_shape_are_served() {
        let shape = PoolShape {
            image: "host".into(),
            memory_bytes: Some(1 << 30),
            cpu: Some(1.0),
            pids: Some(64),
            disk_bytes: None,
        };
        let mut spec = SandboxSpec::new("alice", "host");
        (spec.memory_bytes, spec.cpu, spec.pids) = (Some(1 << 30), Some(1.0), Some(64));
        assert!(shape.serves(&spec));
        for change in [
            (|s: &mut SandboxSpec| s.id = Some("mine".into())) as fn(&mut SandboxSpec),
            |s| s.block_network = false,
            |s| s.memory_bytes = Some(2 << 30),
            |s| s.image = "python:3.12".into(),
            |s| {
                s.env.insert("A".into(), "1".into());
            },
        ] {
            let mut other = spec.clone();
            change(&mut other);
            assert!(!shape.serves(&other));
        }
    }
}
