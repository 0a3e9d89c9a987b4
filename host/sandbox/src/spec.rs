use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// What to create.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxSpec {
    /// Chosen by the caller, or generated.
    pub id: Option<String>,
    /// The tenant that owns it; only that tenant's keys can see or touch it.
    pub tenant: String,
    /// `host`, a rootfs directory, an OCI image layout or archive, or a registry reference.
    pub image: String,
    /// No network but loopback (the default).
    pub block_network: bool,
    /// With the network open: the only destinations allowed (CIDRs, IPs or domain names).
    pub network_allow: Vec<String>,
    /// CPU cores.
    pub cpu: Option<f64>,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Maximum number of processes.
    pub pids: Option<u64>,
    /// Size limit of the sandbox's writable layer (what it may add to its root), in bytes.
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// Deleted after this many seconds without activity (exec, files, heartbeat).
    pub ttl_seconds: Option<u64>,
    /// Hard lifetime: ended this many seconds after it starts whatever it does, by something
    /// below the server (the sandbox's own init locally, `activeDeadlineSeconds` on
    /// Kubernetes), so that it dies on time even when no server is left to delete it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_seconds: Option<u64>,
    /// Added to the image's environment.
    pub env: BTreeMap<String, String>,
    /// Directories the agent's file API is confined to (default: the whole sandbox).
    pub file_roots: Vec<String>,
    /// Working directory (created if missing); the image's when absent.
    pub workdir: Option<String>,
    /// The image's own entrypoint and command, started behind the agent as background process
    /// `entrypoint`. `None`: the Kubernetes backend reads it from the image config; `[]`: none.
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
}

impl SandboxSpec {
    /// A spec for `tenant` with the defaults: no network, no limits beyond the backend's.
    pub fn new(tenant: impl Into<String>, image: impl Into<String>) -> Self {
        SandboxSpec {
            id: None,
            tenant: tenant.into(),
            image: image.into(),
            block_network: true,
            network_allow: Vec::new(),
            cpu: None,
            memory_bytes: None,
            pids: None,
            disk_bytes: None,
            ttl_seconds: None,
            lifetime_seconds: None,
            env: BTreeMap::new(),
            file_roots: Vec::new(),
            workdir: None,
            entrypoint: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
/// How a sandbox is doing.
pub enum SandboxStatus {
    /// Being made.
    Pending,
    /// Ready for work.
    Ready,
    /// No node can take it (Kubernetes).
    Unschedulable,
    /// It could not be made, or its init died.
    Failed,
}

/// What a sandbox is and how it is doing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxInfo {
    /// Its id.
    pub id: String,
    /// The tenant that owns it.
    pub tenant: String,
    /// Its image.
    pub image: String,
    /// The backend it runs on.
    pub backend: String,
    /// No network but loopback.
    pub block_network: bool,
    /// CPU, in cores.
    pub cpu: Option<f64>,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Most processes.
    pub pids: Option<u64>,
    /// Size limit of the writable layer, when one is enforced.
    #[serde(default)]
    pub disk_bytes: Option<u64>,
    /// Epoch seconds.
    pub created_at: f64,
    /// Epoch seconds of the last exec, file operation or heartbeat.
    pub last_active: f64,
    /// Idle TTL, in seconds.
    pub ttl_seconds: u64,
    /// How it is doing.
    pub status: SandboxStatus,
    /// Why, when not ready.
    pub status_message: Option<String>,
    /// Where its agent listens (a unix socket or ip:port), for operators.
    pub agent: String,
}

impl SandboxInfo {
    /// When it expires if nothing touches it, in epoch seconds.
    pub fn expires_at(&self) -> f64 {
        self.last_active + self.ttl_seconds as f64
    }
}

/// Ids are DNS-label-like so that they can name pods, cgroups and directories:
/// 1 to 63 characters of `a-z`, `0-9` and `-`, starting and ending with a letter or digit.
pub fn valid_sandbox_id(id: &str) -> Result<(), String> {
    let ok_chars = id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = id.bytes().next().is_some_and(|b| b != b'-') && id.bytes().last().is_some_and(|b| b != b'-');
    if id.is_empty() || id.len() > 63 || !ok_chars || !ok_ends {
        return Err(format!(
            "sandbox_id {id:?}: use 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit"
        ));
    }
    Ok(())
}
