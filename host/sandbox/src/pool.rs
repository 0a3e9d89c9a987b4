//! Warm-pool shapes: what a pooled sandbox is, and which creates it can serve. Each backend
//! keeps its own pools; the shape is shared so that they serve exactly the same creates.

use crate::{Backend, SandboxInfo, SandboxSpec};

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
    /// Whether its network is cut off (the default); a pool with the network serves creates
    /// that ask for it without an allowlist.
    pub block_network: bool,
}

impl PoolShape {
    /// Whether a create of `spec` can be served by this shape. Its working directory and
    /// environment need not match: the claim sets them as the agent's defaults
    /// ([`PoolShape::defaults_of`]).
    pub fn serves(&self, spec: &SandboxSpec) -> bool {
        spec.id.is_none()
            && spec.image == self.image
            && spec.memory_bytes == self.memory_bytes
            && spec.cpu == self.cpu
            && spec.pids == self.pids
            && spec.disk_bytes == self.disk_bytes
            && spec.block_network == self.block_network
            && spec.network_allow.is_empty()
            && spec.file_roots.is_empty()
            && spec.entrypoint.as_ref().is_none_or(|e| e.is_empty())
    }

    /// What a claim of `spec` must set in the claimed sandbox: its working directory and
    /// environment (`None`: nothing).
    pub fn defaults_of(spec: &SandboxSpec) -> Option<(Option<&str>, &std::collections::BTreeMap<String, String>)> {
        (spec.workdir.is_some() || !spec.env.is_empty()).then_some((spec.workdir.as_deref(), &spec.env))
    }

    /// A short name for the shape, the same in every replica (Kubernetes pods carry it).
    pub fn key(&self) -> String {
        // FNV-1a over the fields: stable across builds and machines, unlike `Hash`.
        let mut text =
            format!("{}|{:?}|{:?}|{:?}|{:?}", self.image, self.memory_bytes, self.cpu, self.pids, self.disk_bytes);
        // Only a pool with the network says so: the keys of network-less pools stay as they were.
        if !self.block_network {
            text += "|network";
        }
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
        spec.block_network = self.block_network;
        spec.entrypoint = Some(Vec::new());
        spec
    }
}

/// Completes a claim of a pooled sandbox for `spec`: its working directory and environment set
/// as the agent's defaults. `None` when they could not be: the sandbox is deleted, and the
/// caller makes a fresh one instead.
pub async fn finish_claim(backend: &dyn Backend, info: SandboxInfo, spec: &SandboxSpec) -> Option<SandboxInfo> {
    let Some((cwd, env)) = PoolShape::defaults_of(spec) else { return Some(info) };
    let set = match backend.agent(&info.id).await {
        Ok(agent) => agent.set_defaults(cwd, env).await.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    match set {
        Ok(()) => Some(info),
        Err(e) => {
            tracing::warn!(sandbox = %info.id, "a claimed sandbox refused its working directory and environment: {e}");
            let _ = backend.delete(&info.id).await;
            None
        }
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
            block_network: true,
        };
        let mut spec = SandboxSpec::new("alice", "host");
        (spec.memory_bytes, spec.cpu, spec.pids) = (Some(1 << 30), Some(1.0), Some(64));
        assert!(shape.serves(&spec));
        for change in [
            (|s: &mut SandboxSpec| s.id = Some("mine".into())) as fn(&mut SandboxSpec),
            |s| s.block_network = false,
            |s| s.memory_bytes = Some(2 << 30),
            |s| s.image = "python:3.12".into(),
            |s| s.network_allow = vec!["example.com".into()],
        ] {
            let mut other = spec.clone();
            change(&mut other);
            assert!(!shape.serves(&other));
        }
        // A working directory and environment are the claim's to set.
        let mut own = spec.clone();
        own.env.insert("A".into(), "1".into());
        own.workdir = Some("/app".into());
        assert!(shape.serves(&own));
        assert_eq!(PoolShape::defaults_of(&own).map(|(cwd, env)| (cwd, env.len())), Some((Some("/app"), 1)));
        assert!(PoolShape::defaults_of(&spec).is_none());
        // A pool with the network serves creates that want it, and only those.
        let open = PoolShape { block_network: false, ..shape.clone() };
        let mut online = spec.clone();
        online.block_network = false;
        assert!(open.serves(&online) && !open.serves(&spec) && !shape.serves(&online));
    }
}
