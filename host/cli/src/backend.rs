//! `--backend local|kubernetes` and the Kubernetes flags, shared by `serve` and `eval`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, ValueEnum};
use orchard_sandbox::Backend;
use orchard_sandbox_k8s::{ClusterConfig, Kubernetes, KubernetesBackend, KubernetesConfig};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// Namespaced processes on this machine (bubblewrap), no daemon.
    Local,
    /// A pod per sandbox on the cluster of the ambient kubeconfig or service account.
    Kubernetes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FqdnPolicy {
    Cilium,
}

#[derive(Args, Debug, Clone)]
pub struct KubeArgs {
    /// Namespace of the sandbox pods.
    #[arg(long, env = "ORCHARD_KUBE_NAMESPACE", default_value = "orchard-sandboxes", help_heading = "Kubernetes")]
    kube_namespace: String,
    /// The agent image: holds only the static `/orchard-agent`.
    #[arg(
        long,
        env = "ORCHARD_AGENT_IMAGE",
        default_value = concat!("ghcr.io/orchard-env/orchard-agent:", env!("CARGO_PKG_VERSION")),
        help_heading = "Kubernetes"
    )]
    agent_image: String,
    /// Port the agent listens on inside each sandbox pod.
    #[arg(long, default_value_t = 7070, help_heading = "Kubernetes")]
    agent_port: u16,
    /// File with the key every host replica shares (≥ 16 bytes): sandbox tokens derive from it.
    /// Without it a random key is used and sandboxes do not survive a host restart.
    #[arg(long, env = "ORCHARD_TOKEN_KEY_FILE", help_heading = "Kubernetes")]
    token_key_file: Option<PathBuf>,
    /// This replica's name [default: $POD_NAME, else the hostname].
    #[arg(long, env = "POD_NAME", help_heading = "Kubernetes")]
    host_id: Option<String>,
    /// Labels of the host pods (KEY=VALUE, repeatable): only they may reach the agent port.
    #[arg(long = "host-label", value_parser = key_value, help_heading = "Kubernetes")]
    host_labels: Vec<(String, String)>,
    /// Namespace of the host pods, when not the sandboxes' one.
    #[arg(long, env = "POD_NAMESPACE", help_heading = "Kubernetes")]
    host_namespace: Option<String>,
    /// RuntimeClass for sandbox pods (e.g. gvisor, kata).
    #[arg(long, help_heading = "Kubernetes")]
    runtime_class: Option<String>,
    /// Run sandbox containers as this user id (non-root when not 0).
    #[arg(long, help_heading = "Kubernetes")]
    run_as_user: Option<i64>,
    /// Node selector for sandbox pods (KEY=VALUE, repeatable), e.g. a spot pool.
    #[arg(long = "node-selector", value_parser = key_value, help_heading = "Kubernetes")]
    node_selector: Vec<(String, String)>,
    /// Toleration for sandbox pods: KEY[=VALUE]:EFFECT (repeatable), e.g. spot=true:NoSchedule.
    #[arg(long = "toleration", value_parser = toleration, help_heading = "Kubernetes")]
    tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// Ephemeral storage request and limit per sandbox, e.g. 10Gi.
    #[arg(long, help_heading = "Kubernetes")]
    ephemeral_storage: Option<String>,
    /// `hostUsers: false` on sandbox pods: root in a sandbox is not root on the node (needs
    /// Kubernetes 1.33+, or the UserNamespacesSupport gate, and a runtime that supports it).
    #[arg(long, help_heading = "Kubernetes")]
    kube_user_namespaces: bool,
    /// Enforce domain names in `network_allow` with a CiliumNetworkPolicy (`toFQDNs`) per
    /// sandbox; without it they are refused (a NetworkPolicy filters by address only).
    #[arg(long, value_enum, help_heading = "Kubernetes")]
    fqdn_policy: Option<FqdnPolicy>,
    /// API writes per second (creates, deletes, patches) from this replica, after a burst of
    /// --kube-write-burst (client-go's QPS and Burst). Waiting writes go deletes first, then
    /// claims, creates, and last warm-pool refills.
    #[arg(long, default_value_t = 50.0, help_heading = "Kubernetes")]
    kube_write_rate: f64,
    /// API writes that may go at once before --kube-write-rate applies.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..), help_heading = "Kubernetes")]
    kube_write_burst: u32,
    /// Prefer, for each sandbox's pod, the nodes that already hold its image (from a watch on
    /// the nodes' `status.images`; needs get, list and watch on nodes: a ClusterRole).
    #[arg(long, help_heading = "Kubernetes")]
    image_locality: bool,
    /// Seconds between reaper passes (and lease renewals).
    #[arg(long, default_value_t = 5.0, help_heading = "Kubernetes")]
    reap_interval: f64,
}

fn key_value(text: &str) -> Result<(String, String), String> {
    let (k, v) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected KEY=VALUE"))?;
    Ok((k.to_string(), v.to_string()))
}

fn toleration(text: &str) -> Result<k8s_openapi::api::core::v1::Toleration, String> {
    let (kv, effect) = text.rsplit_once(':').ok_or_else(|| format!("{text:?}: expected KEY[=VALUE]:EFFECT"))?;
    if !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
        return Err(format!("{text:?}: effect must be NoSchedule, PreferNoSchedule or NoExecute"));
    }
    let (key, value) = match kv.split_once('=') {
        Some((k, v)) => (k, Some(v.to_string())),
        None => (kv, None),
    };
    Ok(k8s_openapi::api::core::v1::Toleration {
        key: Some(key.to_string()),
        operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_string()),
        value,
        effect: Some(effect.to_string()),
        toleration_seconds: None,
    })
}

impl KubeArgs {
    pub async fn open(
        &self,
        max_sandboxes: usize,
        default_ttl: Duration,
        insecure_registries: &[String],
        pools: Vec<(orchard_sandbox::PoolShape, usize)>,
        pool_lifetime: Option<Duration>,
    ) -> anyhow::Result<Arc<dyn Backend>> {
        let token_key = match &self.token_key_file {
            Some(path) => std::fs::read(path).with_context(|| format!("--token-key-file {}", path.display()))?,
            None => {
                tracing::warn!(
                    "no --token-key-file: using a random key; this host's sandboxes will be unreachable after a \
                     restart and from other replicas"
                );
                orchard_sandbox_k8s::token::random_hex(32).into_bytes()
            }
        };
        let host_id = match &self.host_id {
            Some(id) => id.clone(),
            None => nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "orchard-host".into()),
        };
        let cluster = self.cluster();
        let mut config = KubernetesConfig::new(cluster, host_id, token_key);
        config.max_sandboxes = max_sandboxes;
        config.default_ttl = default_ttl;
        config.pool_lifetime = pool_lifetime;
        config.write_rate = self.kube_write_rate;
        config.write_burst = self.kube_write_burst;
        config.image_locality = self.image_locality;
        config.reap_interval = Duration::from_secs_f64(self.reap_interval.max(0.1));
        // Long enough that a replica slowed by load is not taken for dead (which would make two
        // replicas reap the same share for a while).
        config.lease_duration = (config.reap_interval * 4).max(Duration::from_secs(15));
        config.insecure_registries = insecure_registries.to_vec();
        config.pools = pools;
        let backend =
            KubernetesBackend::connect(config).await.map_err(|e| anyhow::anyhow!("kubernetes backend: {e}"))?;
        Ok(Arc::new(Kubernetes(backend)))
    }

    /// How the cluster runs sandboxes, from the flags.
    pub fn cluster(&self) -> ClusterConfig {
        let host_pod_labels = if self.host_labels.is_empty() {
            BTreeMap::from([("app.kubernetes.io/name".to_string(), "orchard-host".to_string())])
        } else {
            self.host_labels.iter().cloned().collect()
        };
        ClusterConfig {
            namespace: self.kube_namespace.clone(),
            agent_image: self.agent_image.clone(),
            agent_port: self.agent_port,
            host_pod_labels,
            host_namespace: self.host_namespace.clone().filter(|ns| *ns != self.kube_namespace),
            runtime_class: self.runtime_class.clone(),
            run_as_user: self.run_as_user,
            node_selector: self.node_selector.iter().cloned().collect(),
            tolerations: self.tolerations.clone(),
            ephemeral_storage: self.ephemeral_storage.clone(),
            user_namespaces: self.kube_user_namespaces,
            cilium_fqdn: self.fqdn_policy == Some(FqdnPolicy::Cilium),
        }
    }
}
