//! Warm-pool shapes: what a pooled sandbox is, and which creates it can serve. Each backend
//! keeps its own pools; the shape is shared so that they serve exactly the same creates.

use crate::SandboxSpec;

/// The tenant of a sandbox waiting in a pool: no API key maps to it.
pub const POOL_TENANT: &str = "";

/// What a pooled sandbox is.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolShape {
    /// The image.
    pub image: String,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// CPU, in cores.
    pub cpu: Option<f64>,
    /// Most processes.
    pub pids: Option<u64>,
    /// Writable disk, in bytes.
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

    /// A short name for the shape, the same in every replica (Kubernetes pods carry it).
    pub fn key(&self) -> String {
        // FNV-1a over the fields: stable across builds and machines, unlike `Hash`.
        let text =
            format!("{}|{:?}|{:?}|{:?}|{:?}", self.image, self.memory_bytes, self.cpu, self.pids, self.disk_bytes);
        let hash =
            text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        format!("{hash:016x}")
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
