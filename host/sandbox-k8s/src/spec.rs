//! Pod and NetworkPolicy specs for one sandbox.
//!
//! - An init container (the agent image: the static `orchard-agent` alone) copies the agent into
//!   an `emptyDir`; the main container runs the user's image with its command set to the agent,
//!   which serves on the agent port and starts the image's own entrypoint and command after
//!   `--` — no per-image rebuild.
//! - The pod carries only the SHA-256 of its agent token (`--token-sha256`, and an annotation);
//!   the agent accepts whatever hashes to it. The token itself is derived by any replica from
//!   the installation key, so no Secret exists per sandbox: one API write less to create and one
//!   less to delete, and nothing in the sandbox's filesystem a command could read the token from.
//! - No service-account token, no privilege escalation, all capabilities dropped, the default
//!   seccomp profile; optional runtime class (gVisor, Kata), non-root user, resources, node
//!   selector and tolerations for a (spot) sandbox pool.
//! - The NetworkPolicy denies all egress unless the network is open (then only the allowlist's
//!   CIDRs when one is given), and admits ingress only to the agent port from the host's pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar, Pod, PodSecurityContext, PodSpec, Probe,
    ResourceRequirements, SeccompProfile, SecurityContext, TCPSocketAction, Toleration, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use orchard_sandbox::SandboxSpec;
use sha2::{Digest, Sha256};

/// Label and annotation keys: the pod is the record of the sandbox.
pub const LABEL_SANDBOX: &str = "orchard.dev/sandbox";
/// Label: the tenant.
pub const LABEL_TENANT: &str = "orchard.dev/tenant";
/// Label: what manages the pod (`orchard`).
pub const LABEL_MANAGED: &str = "app.kubernetes.io/managed-by";
/// Annotation: the host that created the pod.
pub const ANNOTATION_OWNER: &str = "orchard.dev/owner-host";
/// Annotation: epoch seconds of its creation.
pub const ANNOTATION_CREATED: &str = "orchard.dev/created-at";
/// Annotation: its idle TTL in seconds.
pub const ANNOTATION_TTL: &str = "orchard.dev/ttl-seconds";
/// Annotation: SHA-256 of its agent token.
pub const ANNOTATION_TOKEN_HASH: &str = "orchard.dev/token-sha256";
/// The per-pod input of the token derivation (see [`crate::token`]).
pub const ANNOTATION_NONCE: &str = "orchard.dev/token-nonce";
/// Epoch seconds of the last activity any replica recorded (flushed, not per request).
pub const ANNOTATION_LAST_ACTIVE: &str = "orchard.dev/last-active";
/// `blocked` or `open`.
pub const ANNOTATION_NETWORK: &str = "orchard.dev/network";
/// The sandbox's spec as it was asked for (JSON): what a fork makes its children from.
pub const ANNOTATION_SPEC: &str = "orchard.dev/spec";
/// On a pod waiting in a warm pool: the shape it serves (see `PoolShape::key`). Removed by the
/// claim.
pub const ANNOTATION_POOL: &str = "orchard.dev/pool";
/// The value of [`LABEL_MANAGED`].
pub const MANAGED_BY: &str = "orchard";
/// Selects every object this backend writes.
pub const MANAGED_SELECTOR: &str = "app.kubernetes.io/managed-by=orchard";

const AGENT_DIR: &str = "/.orchard/bin";

/// How the cluster runs sandboxes: set once per backend.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Where sandbox pods are made.
    pub namespace: String,
    /// The image holding only the static agent at `/orchard-agent`.
    pub agent_image: String,
    /// The port the agent listens on.
    pub agent_port: u16,
    /// Labels of the host's own pods: the only ones allowed to reach the agent port.
    pub host_pod_labels: BTreeMap<String, String>,
    /// The host's namespace, when it is not the sandboxes' one.
    pub host_namespace: Option<String>,
    /// The pods' RuntimeClass (gVisor, Kata), if any.
    pub runtime_class: Option<String>,
    /// The user the pods run as.
    pub run_as_user: Option<i64>,
    /// Which nodes may run sandboxes.
    pub node_selector: BTreeMap<String, String>,
    /// Taints sandbox pods tolerate.
    pub tolerations: Vec<Toleration>,
    /// Ephemeral storage of sandboxes that name none (`"10Gi"`).
    pub ephemeral_storage: Option<String>,
    /// `hostUsers: false`: each pod in its own user namespace (root inside is not root on the
    /// node). Needs Kubernetes 1.33+ (or the UserNamespacesSupport gate) and a runtime with
    /// id-mapped mounts; off by default because clusters without it refuse such pods.
    pub user_namespaces: bool,
    /// Allowlisted domain names are enforced by a CiliumNetworkPolicy (`toFQDNs`) when set;
    /// refused otherwise (a NetworkPolicy filters by address only).
    pub cilium_fqdn: bool,
}

/// One sandbox's pod, as placed: the spec, its id, the host that created it, and its image's
/// entrypoint and command (from the image config, or given with the request).
#[derive(Debug, Clone)]
pub struct PodPlan<'a> {
    /// The sandbox id.
    pub id: &'a str,
    /// What was asked.
    pub spec: &'a SandboxSpec,
    /// The host creating it.
    pub owner_host: &'a str,
    /// Epoch seconds.
    pub created_at: f64,
    /// Idle TTL, in seconds.
    pub ttl_seconds: u64,
    /// The agent's token.
    pub token: &'a str,
    /// The pod's nonce.
    pub nonce: &'a str,
    /// The image's own command, started behind the agent.
    pub image_command: Vec<String>,
    /// The warm pool this pod waits in, if any.
    pub pool: Option<&'a str>,
    /// Nodes that hold the image already: preferred (`--image-locality`).
    pub prefer_nodes: Vec<String>,
}

/// A preferred node affinity (weight 100) to the nodes named, by node name.
fn prefer_nodes(nodes: &[String]) -> Option<k8s_openapi::api::core::v1::Affinity> {
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
    };
    if nodes.is_empty() {
        return None;
    }
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".into(),
            operator: "In".into(),
            values: Some(nodes.to_vec()),
        }]),
        match_expressions: None,
    };
    Some(Affinity {
        node_affinity: Some(NodeAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![PreferredSchedulingTerm {
                weight: 100,
                preference: term,
            }]),
            required_during_scheduling_ignored_during_execution: None,
        }),
        ..Default::default()
    })
}

/// Every object of a sandbox is named after it.
pub fn object_name(id: &str) -> String {
    format!("orchard-{id}")
}

/// The allowlist's domain names (entries that are neither CIDRs nor IPs).
fn domains(spec: &SandboxSpec) -> Vec<&String> {
    spec.network_allow.iter().filter(|a| !a.contains('/') && a.parse::<std::net::IpAddr>().is_err()).collect()
}

/// Refuses what the cluster cannot enforce, naming the field.
pub fn check_network(cluster: &ClusterConfig, spec: &SandboxSpec) -> Result<(), String> {
    if spec.block_network {
        return Ok(());
    }
    for name in domains(spec) {
        if !cluster.cilium_fqdn {
            return Err(format!(
                "network_allow: {name:?} is a domain name; a Kubernetes NetworkPolicy filters by address only: \
                 list CIDRs or IPs, or run the host with --fqdn-policy cilium on a Cilium cluster"
            ));
        }
        let bare = name.strip_prefix("*.").unwrap_or(name);
        let valid = !bare.is_empty()
            && bare.split('.').all(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
        if !valid {
            return Err(format!("network_allow: {name:?} is neither a CIDR, an IP nor a domain name"));
        }
    }
    for cidr in spec.network_allow.iter().filter(|a| a.contains('/')) {
        let (ip, bits) = cidr.split_once('/').unwrap_or_default();
        let max = if ip.contains(':') { 128 } else { 32 };
        if ip.parse::<std::net::IpAddr>().is_err() || bits.parse::<u8>().map_or(true, |b| b > max) {
            return Err(format!("network_allow: {cidr:?} is not a CIDR"));
        }
    }
    Ok(())
}

/// SHA-256 of a token, hex.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A Kubernetes label value for arbitrary text: at most 63 of `[A-Za-z0-9-_.]`, alphanumeric
/// at both ends (the full value is in an annotation when it differs).
pub fn label_value(text: &str) -> String {
    let cleaned: String =
        text.chars().map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '-' }).take(63).collect();
    cleaned.trim_matches(|c: char| !c.is_ascii_alphanumeric()).to_string()
}

fn labels(plan: &PodPlan) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_SANDBOX.to_string(), label_value(plan.id)),
        (LABEL_TENANT.to_string(), label_value(&plan.spec.tenant)),
        (LABEL_MANAGED.to_string(), "orchard".to_string()),
    ])
}

/// The pod of a sandbox.
pub fn pod(cluster: &ClusterConfig, plan: &PodPlan) -> Pod {
    let agent = format!("{AGENT_DIR}/orchard-agent");
    let mut command = vec![
        agent.clone(),
        "--listen".to_string(),
        format!("tcp:0.0.0.0:{}", cluster.agent_port),
        "--token-sha256".to_string(),
        token_hash(plan.token),
    ];
    if !plan.image_command.is_empty() {
        command.push("--".to_string());
        command.extend(plan.image_command.iter().cloned());
    }
    let mut limits = BTreeMap::new();
    if let Some(cpu) = plan.spec.cpu {
        limits.insert("cpu".to_string(), Quantity(format!("{}m", (cpu * 1000.0).round() as u64)));
    }
    if let Some(mem) = plan.spec.memory_bytes {
        limits.insert("memory".to_string(), Quantity(mem.to_string()));
    }
    // The sandbox's own disk limit wins over the cluster-wide one.
    match (plan.spec.disk_bytes, &cluster.ephemeral_storage) {
        (Some(bytes), _) => {
            limits.insert("ephemeral-storage".to_string(), Quantity(bytes.to_string()));
        }
        (None, Some(storage)) => {
            limits.insert("ephemeral-storage".to_string(), Quantity(storage.clone()));
        }
        (None, None) => {}
    }
    let locked_down = SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        run_as_user: cluster.run_as_user,
        run_as_non_root: cluster.run_as_user.map(|uid| uid != 0),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..Default::default()
    };
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..Default::default()
    };
    let env: Vec<EnvVar> = plan
        .spec
        .env
        .iter()
        .map(|(k, v)| EnvVar { name: k.clone(), value: Some(v.clone()), value_from: None })
        .collect();
    Pod {
        metadata: ObjectMeta {
            name: Some(object_name(plan.id)),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(labels(plan)),
            annotations: Some(
                BTreeMap::from([
                    (LABEL_SANDBOX.to_string(), plan.id.to_string()),
                    (LABEL_TENANT.to_string(), plan.spec.tenant.clone()),
                    (ANNOTATION_OWNER.to_string(), plan.owner_host.to_string()),
                    (ANNOTATION_CREATED.to_string(), format!("{:.3}", plan.created_at)),
                    (ANNOTATION_TTL.to_string(), plan.ttl_seconds.to_string()),
                    (ANNOTATION_TOKEN_HASH.to_string(), token_hash(plan.token)),
                    (ANNOTATION_NONCE.to_string(), plan.nonce.to_string()),
                    (
                        ANNOTATION_NETWORK.to_string(),
                        if plan.spec.block_network { "blocked" } else { "open" }.to_string(),
                    ),
                ])
                .into_iter()
                .chain(plan.pool.map(|key| (ANNOTATION_POOL.to_string(), key.to_string())))
                .chain(serde_json::to_string(plan.spec).ok().map(|json| (ANNOTATION_SPEC.to_string(), json)))
                .collect(),
            ),
            ..Default::default()
        },
        spec: Some(PodSpec {
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            restart_policy: Some("Never".into()),
            // The hard lifetime, kept by the kubelet: the pod ends on time with no replica left.
            active_deadline_seconds: plan.spec.lifetime_seconds.map(|s| s.min(i64::MAX as u64) as i64),
            runtime_class_name: cluster.runtime_class.clone(),
            node_selector: (!cluster.node_selector.is_empty()).then(|| cluster.node_selector.clone()),
            tolerations: (!cluster.tolerations.is_empty()).then(|| cluster.tolerations.clone()),
            affinity: prefer_nodes(&plan.prefer_nodes),
            termination_grace_period_seconds: Some(0),
            host_users: cluster.user_namespaces.then_some(false),
            security_context: Some(PodSecurityContext {
                seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
                ..Default::default()
            }),
            init_containers: Some(vec![Container {
                name: "orchard-agent".into(),
                image: Some(cluster.agent_image.clone()),
                command: Some(vec!["/orchard-agent".into(), "--install".into(), agent.clone()]),
                volume_mounts: Some(vec![mount("orchard-bin", AGENT_DIR, false)]),
                security_context: Some(locked_down.clone()),
                ..Default::default()
            }]),
            containers: vec![Container {
                name: "sandbox".into(),
                image: Some(plan.spec.image.clone()),
                command: Some(command),
                args: Some(vec![]),
                working_dir: plan.spec.workdir.clone(),
                env: (!env.is_empty()).then_some(env),
                ports: Some(vec![ContainerPort {
                    container_port: cluster.agent_port as i32,
                    name: Some("agent".into()),
                    ..Default::default()
                }]),
                resources: (!limits.is_empty()).then(|| ResourceRequirements {
                    requests: Some(limits.clone()),
                    limits: Some(limits),
                    ..Default::default()
                }),
                // Ready once the agent accepts connections: the host's watch sees the pod's
                // Ready condition, never a poll of the agent.
                readiness_probe: Some(Probe {
                    tcp_socket: Some(TCPSocketAction { port: IntOrString::Int(cluster.agent_port as i32), host: None }),
                    period_seconds: Some(1),
                    ..Default::default()
                }),
                volume_mounts: Some(vec![mount("orchard-bin", AGENT_DIR, true)]),
                security_context: Some(locked_down),
                ..Default::default()
            }],
            volumes: Some(vec![Volume {
                name: "orchard-bin".into(),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The sandbox's NetworkPolicy: ingress to the agent port from the host's pods only; egress
/// denied, or open (to the allowlist's CIDRs when there is one) when the network is open.
pub fn network_policy(cluster: &ClusterConfig, plan: &PodPlan) -> NetworkPolicy {
    let select_sandbox = LabelSelector {
        match_labels: Some(BTreeMap::from([(LABEL_SANDBOX.to_string(), label_value(plan.id))])),
        ..Default::default()
    };
    let egress = if plan.spec.block_network {
        vec![]
    } else {
        let cidrs: Vec<&String> = plan
            .spec
            .network_allow
            .iter()
            .filter(|a| a.contains('/') || a.parse::<std::net::IpAddr>().is_ok())
            .collect();
        if cidrs.is_empty() && domains(plan.spec).is_empty() {
            vec![NetworkPolicyEgressRule::default()]
        } else if cidrs.is_empty() {
            // Only names: the Cilium policy allows them (and DNS); nothing else goes out.
            vec![]
        } else {
            vec![NetworkPolicyEgressRule {
                to: Some(
                    cidrs
                        .iter()
                        .map(|c| NetworkPolicyPeer {
                            ip_block: Some(IPBlock {
                                cidr: if c.contains('/') {
                                    (*c).clone()
                                } else if c.contains(':') {
                                    format!("{c}/128")
                                } else {
                                    format!("{c}/32")
                                },
                                except: None,
                            }),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ports: None,
            }]
        }
    };
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(object_name(plan.id)),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(labels(plan)),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(select_sandbox),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(cluster.host_pod_labels.clone()),
                        ..Default::default()
                    }),
                    // Without it the pod selector only matches pods of the sandboxes' namespace.
                    namespace_selector: cluster.host_namespace.as_ref().map(|ns| LabelSelector {
                        match_labels: Some(BTreeMap::from([("kubernetes.io/metadata.name".to_string(), ns.clone())])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(cluster.agent_port as i32)),
                    protocol: Some("TCP".into()),
                    end_port: None,
                }]),
            }]),
            egress: Some(egress),
        }),
    }
}

/// The CiliumNetworkPolicy that lets a sandbox resolve names and reach the allowlisted ones
/// (`*.example.com` matches subdomains); `None` without domain names in an open network.
pub fn cilium_fqdn_policy(cluster: &ClusterConfig, plan: &PodPlan) -> Option<serde_json::Value> {
    let names = domains(plan.spec);
    if plan.spec.block_network || names.is_empty() || !cluster.cilium_fqdn {
        return None;
    }
    let to_fqdns: Vec<serde_json::Value> = names
        .iter()
        .map(|n| match n.strip_prefix("*.") {
            Some(_) => serde_json::json!({"matchPattern": n}),
            None => serde_json::json!({"matchName": n}),
        })
        .collect();
    Some(serde_json::json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {"name": object_name(plan.id), "namespace": cluster.namespace, "labels": labels(plan)},
        "spec": {
            "endpointSelector": {"matchLabels": {LABEL_SANDBOX: label_value(plan.id)}},
            "egress": [
                // DNS through Cilium's proxy, which is how it learns what the names resolve to.
                {"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": "kube-system", "k8s:k8s-app": "kube-dns"}}],
                 "toPorts": [{"ports": [{"port": "53", "protocol": "ANY"}], "rules": {"dns": [{"matchPattern": "*"}]}}]},
                {"toFQDNs": to_fqdns}
            ]
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn cluster() -> ClusterConfig {
        ClusterConfig {
            namespace: "sandboxes".into(),
            agent_image: "ghcr.io/orchard/agent:0.1.0".into(),
            agent_port: 7070,
            host_pod_labels: BTreeMap::from([("app".into(), "orchard-host".into())]),
            host_namespace: Some("orchard".into()),
            runtime_class: Some("gvisor".into()),
            run_as_user: Some(1000),
            node_selector: BTreeMap::from([("pool".into(), "sandboxes".into())]),
            tolerations: vec![Toleration {
                key: Some("spot".into()),
                operator: Some("Exists".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            ephemeral_storage: Some("10Gi".into()),
            user_namespaces: false,
            cilium_fqdn: false,
        }
    }

    fn spec(block_network: bool, allow: &[&str]) -> SandboxSpec {
        let mut s = SandboxSpec::new("team/a", "python:3.12");
        s.block_network = block_network;
        s.network_allow = allow.iter().map(|a| a.to_string()).collect();
        s.cpu = Some(1.5);
        s.memory_bytes = Some(2 << 30);
        s.workdir = Some("/work".into());
        s
    }

    fn as_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn the_pod_carries_the_agent_the_record_and_no_privilege() {
        let s = SandboxSpec { lifetime_seconds: Some(3600), ..spec(true, &[]) };
        let plan = PodPlan {
            id: "sb-1",
            spec: &s,
            owner_host: "host-7",
            created_at: 1767225600.0,
            ttl_seconds: 600,
            token: "secret-token",
            nonce: "n1",
            image_command: vec!["python3".into(), "-m".into(), "http.server".into()],
            pool: None,
            prefer_nodes: Vec::new(),
        };
        let p = as_json(&pod(&cluster(), &plan));
        let spec = &p["spec"];
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert_eq!(spec["activeDeadlineSeconds"], 3600, "the hard lifetime is the kubelet's to keep");
        assert_eq!(spec["runtimeClassName"], "gvisor");
        assert_eq!(spec["nodeSelector"], json!({"pool": "sandboxes"}));
        assert_eq!(spec["tolerations"][0]["key"], "spot");
        let init = &spec["initContainers"][0];
        assert_eq!(init["image"], "ghcr.io/orchard/agent:0.1.0");
        assert_eq!(
            init["volumeMounts"][0],
            json!({"name": "orchard-bin", "mountPath": "/.orchard/bin", "readOnly": false})
        );
        let main = &spec["containers"][0];
        assert_eq!(main["image"], "python:3.12");
        assert_eq!(
            main["command"],
            json!([
                "/.orchard/bin/orchard-agent",
                "--listen",
                "tcp:0.0.0.0:7070",
                "--token-sha256",
                token_hash("secret-token"),
                "--",
                "python3",
                "-m",
                "http.server"
            ])
        );
        assert_eq!(main["workingDir"], "/work");
        assert_eq!(
            main["resources"]["limits"],
            json!({"cpu": "1500m", "memory": "2147483648", "ephemeral-storage": "10Gi"})
        );
        for c in [init, main] {
            let sc = &c["securityContext"];
            assert_eq!(
                (sc["allowPrivilegeEscalation"].as_bool(), sc["privileged"].as_bool()),
                (Some(false), Some(false))
            );
            assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
            assert_eq!((sc["runAsUser"].as_i64(), sc["runAsNonRoot"].as_bool()), (Some(1000), Some(true)));
        }
        assert_eq!(spec["volumes"][0]["emptyDir"], json!({}));
        assert_eq!(spec["volumes"].as_array().map(Vec::len), Some(1), "no Secret volume: the pod holds only a hash");
        // The record: labels select, annotations hold the full values; the token only hashed.
        let meta = &p["metadata"];
        assert_eq!(meta["labels"]["orchard.dev/tenant"], "team-a");
        assert_eq!(meta["annotations"]["orchard.dev/tenant"], "team/a");
        assert_eq!(meta["annotations"]["orchard.dev/owner-host"], "host-7");
        assert_eq!(meta["annotations"]["orchard.dev/ttl-seconds"], "600");
        assert_eq!(meta["annotations"]["orchard.dev/token-sha256"], token_hash("secret-token"));
        assert!(!p.to_string().contains("secret-token"), "the token itself is never in the pod");
    }

    #[test]
    fn network_policies_deny_egress_unless_opened_and_admit_only_the_host() {
        let plan = |s| PodPlan {
            id: "sb-2",
            spec: s,
            owner_host: "h",
            created_at: 0.0,
            ttl_seconds: 60,
            token: "t",
            nonce: "n",
            image_command: vec![],
            pool: None,
            prefer_nodes: Vec::new(),
        };
        let closed = spec(true, &[]);
        let n = as_json(&network_policy(&cluster(), &plan(&closed)));
        assert_eq!(n["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert_eq!(n["spec"]["egress"], json!([]));
        assert_eq!(n["spec"]["podSelector"]["matchLabels"], json!({"orchard.dev/sandbox": "sb-2"}));
        let ingress = &n["spec"]["ingress"][0];
        assert_eq!(ingress["from"][0]["podSelector"]["matchLabels"], json!({"app": "orchard-host"}));
        assert_eq!(
            ingress["from"][0]["namespaceSelector"]["matchLabels"],
            json!({"kubernetes.io/metadata.name": "orchard"})
        );
        assert_eq!(ingress["ports"][0], json!({"port": 7070, "protocol": "TCP"}));
        let open = spec(false, &[]);
        assert_eq!(as_json(&network_policy(&cluster(), &plan(&open)))["spec"]["egress"], json!([{}]));
        let allow = spec(false, &["10.0.0.0/8", "1.2.3.4"]);
        let n = as_json(&network_policy(&cluster(), &plan(&allow)));
        let cidrs: Vec<&str> = n["spec"]["egress"][0]["to"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ipBlock"]["cidr"].as_str().unwrap())
            .collect();
        assert_eq!(cidrs, ["10.0.0.0/8", "1.2.3.4/32"]);
    }

    #[test]
    fn allowlists_the_cluster_cannot_enforce_are_refused() {
        let c = cluster();
        assert!(check_network(&c, &spec(false, &["10.0.0.0/8", "::1"])).is_ok());
        let err = check_network(&c, &spec(false, &["10.0.0.0/8", "example.com"])).unwrap_err();
        assert!(err.starts_with("network_allow: \"example.com\" is a domain name"), "{err}");
        assert!(check_network(&c, &spec(false, &["10.0.0.0/33"])).unwrap_err().contains("not a CIDR"));
        assert!(check_network(&c, &spec(true, &["example.com"])).is_ok(), "no egress at all: nothing to enforce");
        let cilium = ClusterConfig { cilium_fqdn: true, ..cluster() };
        assert!(check_network(&cilium, &spec(false, &["example.com", "*.pypi.org"])).is_ok());
        assert!(check_network(&cilium, &spec(false, &["bad name!"])).unwrap_err().contains("neither"));
    }

    #[test]
    fn domain_allowlists_become_a_cilium_policy_and_nothing_else_goes_out() {
        let cilium = ClusterConfig { cilium_fqdn: true, ..cluster() };
        let s = spec(false, &["pypi.org", "*.pythonhosted.org"]);
        let plan = PodPlan {
            id: "sb-3",
            spec: &s,
            owner_host: "h",
            created_at: 0.0,
            ttl_seconds: 60,
            token: "t",
            nonce: "n",
            image_command: vec![],
            pool: None,
            prefer_nodes: Vec::new(),
        };
        let cnp = cilium_fqdn_policy(&cilium, &plan).expect("a policy");
        assert_eq!(cnp["spec"]["endpointSelector"]["matchLabels"], json!({"orchard.dev/sandbox": "sb-3"}));
        assert_eq!(
            cnp["spec"]["egress"][1]["toFQDNs"],
            json!([{"matchName": "pypi.org"}, {"matchPattern": "*.pythonhosted.org"}])
        );
        assert_eq!(as_json(&network_policy(&cilium, &plan))["spec"]["egress"], json!([]), "no allow-all beside it");
        assert!(cilium_fqdn_policy(&cluster(), &plan).is_none());
        let cidrs_only = spec(false, &["10.0.0.0/8"]);
        assert!(cilium_fqdn_policy(&cilium, &PodPlan { spec: &cidrs_only, ..plan.clone() }).is_none());
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(label_value("team/a"), "team-a");
        assert_eq!(label_value("-x-"), "x");
        assert_eq!(label_value(&"a".repeat(80)).len(), 63);
    }
}
