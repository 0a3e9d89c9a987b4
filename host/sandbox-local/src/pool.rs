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

pub use orchard_sandbox::{POOL_TENANT, PoolShape};

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
