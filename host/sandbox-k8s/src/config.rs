//! How one host replica runs sandboxes on a cluster.

use std::time::Duration;

use crate::spec::ClusterConfig;

#[derive(Debug, Clone)]
/// How the Kubernetes backend works.
pub struct KubernetesConfig {
    /// How the cluster runs sandboxes.
    pub cluster: ClusterConfig,
    /// This replica's name (its pod name in a Deployment): recorded as the pod's owner and used
    /// to share the reaper's work between replicas.
    pub host_id: String,
    /// Secret shared by all replicas: a sandbox's agent token is derived from it and the pod's
    /// nonce, so any replica can talk to any sandbox without reading Secrets back.
    pub token_key: Vec<u8>,
    /// Most sandboxes this installation keeps at once (all replicas together).
    pub max_sandboxes: usize,
    /// The idle TTL of sandboxes that name none.
    pub default_ttl: Duration,
    /// API writes (create, delete, patch) per second, after a burst of `write_burst`; more
    /// wait, deletes first (see [`crate::writes`]).
    pub write_rate: f64,
    /// Writes that may go at once before `write_rate` applies.
    pub write_burst: u32,
    /// Retries of a write answered 429 or 5xx, with exponential backoff.
    pub write_retries: u32,
    /// How often this replica renews its lease and runs the reaper.
    pub reap_interval: Duration,
    /// A replica whose lease is older than this is gone; the others take over its share.
    pub lease_duration: Duration,
    /// Registries read over plain HTTP when looking up an image's entrypoint.
    pub insecure_registries: Vec<String>,
    /// Prefer, for each pod, the nodes that already hold its image (a watch on the nodes;
    /// needs get/list/watch on nodes): see [`crate::locality`].
    pub image_locality: bool,
    /// Warm pools: ready pods kept per shape (by the replica that owns each pool), claimed by a
    /// create of that shape with a resourceVersion precondition.
    pub pools: Vec<(orchard_sandbox::PoolShape, usize)>,
    /// The operator's cap on a sandbox's hard lifetime, for the warm pools' pods (`None`: no
    /// cap, and pool pods get no deadline): see [`KubernetesConfig::pool_deadline_seconds`].
    pub pool_lifetime: Option<Duration>,
}

/// Slack in a pool pod's deadline past its idle TTL: covers the reaper's interval and the
/// activity flush before an unclaimed pod is reaped.
const POOL_DEADLINE_SLACK_SECONDS: u64 = 3600;

impl KubernetesConfig {
    /// A pool pod's `activeDeadlineSeconds`: the kubelet ends it on time when no replica is
    /// left. A claim sets the pod's age plus the claimer's lifetime (at most the cap), and the
    /// API server only lets a deadline come down: so the pool's is the idle TTL after which
    /// the reaper replaces an unclaimed pod, plus the cap, plus slack, and a pod older than
    /// that TTL plus the slack is never claimed ([`KubernetesConfig::pool_pod_claimable_at`]).
    pub fn pool_deadline_seconds(&self) -> Option<u64> {
        self.pool_lifetime.map(|cap| self.default_ttl.as_secs() + POOL_DEADLINE_SLACK_SECONDS + cap.as_secs())
    }

    /// Whether a pool pod this many seconds old may still be claimed: its deadline, lowered to
    /// its age plus the cap, is then still a decrease.
    pub fn pool_pod_claimable_at(&self, age_seconds: f64) -> bool {
        match (self.pool_deadline_seconds(), self.pool_lifetime) {
            (Some(deadline), Some(cap)) => age_seconds + cap.as_secs_f64() <= deadline as f64,
            _ => true,
        }
    }

    /// A configuration with the defaults, for host `host_id`, deriving agent tokens from `token_key`.
    pub fn new(cluster: ClusterConfig, host_id: impl Into<String>, token_key: Vec<u8>) -> Self {
        KubernetesConfig {
            cluster,
            host_id: host_id.into(),
            token_key,
            max_sandboxes: 10_000,
            pools: Vec::new(),
            pool_lifetime: None,
            image_locality: false,
            default_ttl: Duration::from_secs(3600),
            write_rate: 50.0,
            write_burst: 100,
            write_retries: 8,
            reap_interval: Duration::from_secs(5),
            lease_duration: Duration::from_secs(20),
            insecure_registries: Vec::new(),
        }
    }
}
