//! Capacity on this machine: what a spec may ask of this backend, the ids and capacity
//! reserved for sandboxes being created, and the identity slots each sandbox holds while it
//! lives (what its own user ids are derived from).

use crate::*;
use orchard_sandbox::{Result, SandboxError, SandboxSpec, valid_sandbox_id};

impl LocalBackend {
    pub(crate) fn validate(&self, spec: &SandboxSpec) -> Result<()> {
        if let Some(id) = &spec.id {
            valid_sandbox_id(id).map_err(SandboxError::InvalidSpec)?;
        }
        if let Some(w) = &spec.workdir
            && (!w.starts_with('/') || w.split('/').any(|c| c == ".."))
        {
            return Err(SandboxError::InvalidSpec(format!("workdir: {w:?} must be an absolute path without '..'")));
        }
        for root in &spec.file_roots {
            if !root.starts_with('/') {
                return Err(SandboxError::InvalidSpec(format!("file_roots: {root:?} is not an absolute path")));
            }
        }
        for key in spec.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                return Err(SandboxError::InvalidSpec(format!("env: {key:?} is not a valid variable name")));
            }
        }
        if spec.block_network && !spec.network_allow.is_empty() {
            return Err(SandboxError::InvalidSpec("network_allow needs block_network: false".into()));
        }
        if let (Some(_), Err(why)) = (spec.disk_bytes, &self.disks) {
            return Err(SandboxError::InvalidSpec(format!("disk: this host cannot enforce disk limits: {why}")));
        }
        if let Some(bytes) = spec.disk_bytes
            && bytes < disk::MIN_DISK_BYTES
        {
            return Err(SandboxError::InvalidSpec(format!(
                "disk: {bytes} bytes is too small (at least {} MiB)",
                disk::MIN_DISK_BYTES >> 20
            )));
        }
        if spec.ttl_seconds == Some(0) {
            return Err(SandboxError::InvalidSpec("timeout: must be at least 1 second".into()));
        }
        Ok(())
    }

    /// Reserves an id (and capacity) for a sandbox being created.
    pub(crate) fn reserve(&self, spec: &SandboxSpec) -> Result<String> {
        let sandboxes = self.sandboxes.read().unwrap_or_else(|p| p.into_inner());
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        // Read under the lock `shutdown` sets it under: no reservation is made after it waits.
        self.refuse_if_stopping()?;
        if sandboxes.len() + reserved.ids.len() >= self.config.max_sandboxes {
            return Err(SandboxError::Capacity(format!(
                "{} sandboxes is this host's limit",
                self.config.max_sandboxes
            )));
        }
        let id = spec.id.clone().unwrap_or_else(|| format!("sb-{}", random_hex(6)));
        if sandboxes.contains_key(&id) || reserved.ids.contains(&id) || self.sandbox_dir(&id).exists() {
            return Err(SandboxError::AlreadyExists(id));
        }
        reserved.ids.insert(id.clone());
        Ok(id)
    }

    /// No sandbox is made once the backend is stopping (see `shutdown`).
    pub(crate) fn refuse_if_stopping(&self) -> Result<()> {
        if self.stopping.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(SandboxError::Backend("the server is stopping: no sandbox is created now".into()));
        }
        Ok(())
    }

    pub(crate) fn release(&self, id: &str) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).ids.remove(id);
    }

    pub(crate) fn free_slot(&self, slot: u32) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.remove(&slot);
    }

    /// Takes the lowest free identity slot.
    pub(crate) fn take_id_slot(&self) -> Result<u32> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        let slot = ids::free_slot(&reserved.id_slots)
            .ok_or_else(|| SandboxError::Capacity("every user-namespace id range is in use".into()))?;
        reserved.id_slots.insert(slot);
        Ok(slot)
    }

    /// Marks an identity slot as used (a sandbox adopted after a restart).
    pub(crate) fn claim_id_slot(&self, slot: u32) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).id_slots.insert(slot);
    }

    pub(crate) fn free_id_slot(&self, slot: u32) {
        self.reserved.lock().unwrap_or_else(|p| p.into_inner()).id_slots.remove(&slot);
    }
}
