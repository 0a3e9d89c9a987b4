//! Reading a sandbox back from its pod: the pod is the record, so everything a replica needs
//! (tenant, TTL, activity, token nonce, address, status) comes from its metadata and status.

use k8s_openapi::api::core::v1::{ContainerStatus, Pod};
use orchard_sandbox::{SandboxInfo, SandboxStatus, parse_cpu, parse_memory};

use crate::spec::{
    ANNOTATION_CREATED, ANNOTATION_LAST_ACTIVE, ANNOTATION_NETWORK, ANNOTATION_NONCE, ANNOTATION_OWNER,
    ANNOTATION_TOKEN_HASH, ANNOTATION_TTL, LABEL_MANAGED, LABEL_SANDBOX, LABEL_TENANT, MANAGED_BY,
};

/// What a replica knows about one sandbox, from its pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodRecord {
    /// The sandbox id.
    pub id: String,
    /// Its pod's name.
    pub pod_name: String,
    /// Its pod's uid, once created.
    pub uid: Option<String>,
    /// The tenant that owns it.
    pub tenant: String,
    /// Its image.
    pub image: String,
    /// The host that created it.
    pub owner: String,
    /// Epoch seconds.
    pub created_at: f64,
    /// Last activity recorded on the pod by any replica.
    pub last_active: f64,
    /// Idle TTL, in seconds.
    pub ttl_seconds: u64,
    /// No network but loopback.
    pub block_network: bool,
    /// CPU, in cores.
    pub cpu: Option<f64>,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Ephemeral storage, in bytes.
    pub disk_bytes: Option<u64>,
    /// A value fresh for each pod: its agent token is derived from it.
    pub nonce: String,
    /// SHA-256 of the agent token (checked before use).
    pub token_hash: String,
    /// The pod's IP, once it has one.
    pub pod_ip: Option<String>,
    /// Ready, pending or failed.
    pub status: SandboxStatus,
    /// Why, when not ready.
    pub status_message: Option<String>,
    /// A delete was asked for.
    pub deleting: bool,
    /// The pod's resourceVersion when seen: a claim is made conditional on it.
    pub resource_version: String,
    /// The warm pool the pod waits in (unclaimed).
    pub pool: Option<String>,
    /// The spec it was created from (absent on pods made before specs were recorded).
    pub spec: Option<orchard_sandbox::SandboxSpec>,
}

impl PodRecord {
    /// `None` for pods that are not Orchard sandboxes (or were written by something else).
    pub fn from_pod(pod: &Pod) -> Option<PodRecord> {
        let meta = &pod.metadata;
        let labels = meta.labels.as_ref()?;
        if labels.get(LABEL_MANAGED).map(String::as_str) != Some(MANAGED_BY) {
            return None;
        }
        let annotations = meta.annotations.clone().unwrap_or_default();
        let note = |key: &str| annotations.get(key).cloned();
        let id = note(LABEL_SANDBOX).or_else(|| labels.get(LABEL_SANDBOX).cloned())?;
        let created_at = note(ANNOTATION_CREATED).and_then(|v| v.parse().ok()).unwrap_or(0.0);
        let container = pod.spec.as_ref().and_then(|s| s.containers.first());
        let limits = container.and_then(|c| c.resources.as_ref()).and_then(|r| r.limits.as_ref());
        let (status, status_message) = status_of(pod);
        Some(PodRecord {
            pod_name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone(),
            tenant: note(LABEL_TENANT).or_else(|| labels.get(LABEL_TENANT).cloned()).unwrap_or_default(),
            image: container.and_then(|c| c.image.clone()).unwrap_or_default(),
            owner: note(ANNOTATION_OWNER).unwrap_or_default(),
            created_at,
            last_active: note(ANNOTATION_LAST_ACTIVE).and_then(|v| v.parse().ok()).unwrap_or(created_at),
            ttl_seconds: note(ANNOTATION_TTL).and_then(|v| v.parse().ok()).unwrap_or(0),
            block_network: note(ANNOTATION_NETWORK).as_deref() != Some("open"),
            cpu: limits.and_then(|l| l.get("cpu")).and_then(|q| parse_cpu(&q.0.as_str().into()).ok()),
            memory_bytes: limits.and_then(|l| l.get("memory")).and_then(|q| parse_memory(&q.0.as_str().into()).ok()),
            disk_bytes: limits
                .and_then(|l| l.get("ephemeral-storage"))
                .and_then(|q| parse_memory(&q.0.as_str().into()).ok()),
            nonce: note(ANNOTATION_NONCE).unwrap_or_default(),
            token_hash: note(ANNOTATION_TOKEN_HASH).unwrap_or_default(),
            pod_ip: pod.status.as_ref().and_then(|s| s.pod_ip.clone()).filter(|ip| !ip.is_empty()),
            status,
            status_message,
            deleting: meta.deletion_timestamp.is_some(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            pool: note(crate::spec::ANNOTATION_POOL),
            spec: note(crate::spec::ANNOTATION_SPEC).and_then(|json| serde_json::from_str(&json).ok()),
            id,
        })
    }

    /// The sandbox as the `Backend` trait shows it.
    pub fn info(&self, last_active: f64, agent: String) -> SandboxInfo {
        SandboxInfo {
            id: self.id.clone(),
            tenant: self.tenant.clone(),
            image: self.image.clone(),
            backend: "kubernetes".into(),
            block_network: self.block_network,
            cpu: self.cpu,
            memory_bytes: self.memory_bytes,
            pids: None,
            disk_bytes: self.disk_bytes,
            created_at: self.created_at,
            last_active: last_active.max(self.last_active),
            ttl_seconds: self.ttl_seconds,
            status: self.status,
            status_message: self.status_message.clone(),
            agent,
        }
    }
}

/// Waiting reasons that mean the container will not start without a change (or not soon).
const IMAGE_PULL: &[&str] = &["ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"];
const CANNOT_START: &[&str] =
    &["CreateContainerConfigError", "CreateContainerError", "RunContainerError", "CrashLoopBackOff"];

/// A sandbox's status from its pod's phase, conditions and container states.
pub fn status_of(pod: &Pod) -> (SandboxStatus, Option<String>) {
    if pod.metadata.deletion_timestamp.is_some() {
        return (SandboxStatus::Failed, Some("the pod is being deleted".into()));
    }
    let Some(status) = &pod.status else {
        return (SandboxStatus::Pending, Some("waiting for the scheduler".into()));
    };
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let containers = |list: &Option<Vec<ContainerStatus>>| list.clone().unwrap_or_default();
    let all = containers(&status.init_container_statuses).into_iter().chain(containers(&status.container_statuses));
    for c in all {
        let Some(state) = &c.state else { continue };
        if let Some(waiting) = &state.waiting {
            let reason = waiting.reason.as_deref().unwrap_or_default();
            let detail = waiting.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default();
            if IMAGE_PULL.contains(&reason) {
                return (SandboxStatus::Failed, Some(format!("image pull failed ({reason}) for {}{detail}", c.image)));
            }
            if CANNOT_START.contains(&reason) {
                return (SandboxStatus::Failed, Some(format!("container {} cannot start ({reason}){detail}", c.name)));
            }
        }
        if let Some(done) = &state.terminated
            && (done.exit_code != 0 || c.name == "sandbox")
        {
            let reason = done.reason.as_deref().unwrap_or("Terminated");
            return (
                SandboxStatus::Failed,
                Some(format!("container {} exited with code {} ({reason})", c.name, done.exit_code)),
            );
        }
    }
    let conditions = status.conditions.clone().unwrap_or_default();
    let condition = |kind: &str| conditions.iter().find(|c| c.type_ == kind);
    match phase {
        "Failed" | "Succeeded" => {
            let why = status.message.clone().or_else(|| status.reason.clone()).unwrap_or_else(|| phase.to_string());
            return (SandboxStatus::Failed, Some(format!("the pod stopped: {why}")));
        }
        "Running" => {
            if condition("Ready").is_some_and(|c| c.status == "True") && status.pod_ip.is_some() {
                return (SandboxStatus::Ready, None);
            }
            return (SandboxStatus::Pending, Some("running, waiting for the agent to be ready".into()));
        }
        _ => {}
    }
    if let Some(c) = condition("PodScheduled").filter(|c| c.status == "False") {
        let message = c.message.clone().unwrap_or_else(|| "no node fits".into());
        if c.reason.as_deref() == Some("Unschedulable") {
            return (SandboxStatus::Unschedulable, Some(format!("unschedulable: {message}")));
        }
    }
    (SandboxStatus::Pending, Some(format!("pod {phase}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(status: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "orchard-sb", "labels": {LABEL_MANAGED: MANAGED_BY, LABEL_SANDBOX: "sb"},
                         "annotations": {ANNOTATION_TTL: "60", ANNOTATION_CREATED: "100.5"}},
            "spec": {"containers": [{"name": "sandbox", "image": "python:3.12"}]},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn statuses_follow_the_pod() {
        let ready = pod(json!({"phase": "Running", "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True"}]}));
        assert_eq!(status_of(&ready), (SandboxStatus::Ready, None));
        let record = PodRecord::from_pod(&ready).unwrap();
        assert_eq!((record.id.as_str(), record.ttl_seconds, record.created_at), ("sb", 60, 100.5));
        assert_eq!(record.pod_ip.as_deref(), Some("10.0.0.7"));

        let unschedulable = pod(json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}));
        let (s, m) = status_of(&unschedulable);
        assert_eq!(s, SandboxStatus::Unschedulable);
        assert!(m.unwrap().contains("Insufficient cpu"));

        let pull = pod(json!({"phase": "Pending", "initContainerStatuses": [{"name": "orchard-agent",
            "image": "agent:x", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}]}));
        let (s, m) = status_of(&pull);
        assert_eq!(s, SandboxStatus::Failed);
        assert_eq!(m.unwrap(), "image pull failed (ImagePullBackOff) for agent:x: not found");

        let exited = pod(json!({"phase": "Failed", "message": "OOMKilled"}));
        assert_eq!(status_of(&exited).0, SandboxStatus::Failed);
        assert_eq!(status_of(&pod(json!({"phase": "Running"}))).0, SandboxStatus::Pending);
    }

    #[test]
    fn foreign_pods_are_not_sandboxes() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "x", "labels": {"app": "web"}}})).unwrap();
        assert!(PodRecord::from_pod(&p).is_none());
    }
}
