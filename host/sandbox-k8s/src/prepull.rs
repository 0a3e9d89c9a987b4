//! Images at scale: DaemonSets that pull a dataset's images onto every node sandboxes run on,
//! before the first rollout needs them.
//!
//! A sandbox's first start on a node otherwise waits for its image (SWE-bench's are gigabytes),
//! and thousands of rollouts starting at once pull the same images on every node at once. Each
//! DaemonSet's pod lists up to `per_set` images as init containers: the first copies the static
//! agent into an `emptyDir` (as a sandbox pod does), then each image runs that agent's
//! `--version` — a program every image can run, whatever it carries, so any image is pulled and
//! started once and exits 0. A pause container keeps the pod (and so its images in use) after.
//! The pods land where sandboxes do (the cluster's node selector and tolerations), hold no
//! privilege, mount no token and reach no network.
//!
//! The default scheduler's ImageLocality score then favours nodes that have a pod's image; for
//! sets larger than a node's disk, shard them (one set, one node pool) rather than pull
//! everything everywhere.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetSpec};
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EmptyDirVolumeSource, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile,
    SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use crate::spec::{ClusterConfig, LABEL_MANAGED, MANAGED_BY, label_value};

/// The pause image that keeps a pre-pull pod alive once its images are pulled.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// Label naming the image set a DaemonSet pre-pulls.
pub const LABEL_PREPULL: &str = "orchard.dev/prepull";

const AGENT_DIR: &str = "/.orchard/bin";

/// The DaemonSets that pre-pull `images` (in order, duplicates dropped) as `name-0`, `name-1`,
/// … with at most `per_set` images each.
pub fn daemonsets(
    cluster: &ClusterConfig,
    name: &str,
    images: &[String],
    per_set: usize,
    pause_image: &str,
) -> Vec<DaemonSet> {
    let mut unique: Vec<&String> = Vec::new();
    for image in images {
        if !unique.contains(&image) {
            unique.push(image);
        }
    }
    unique
        .chunks(per_set.max(1))
        .enumerate()
        .map(|(i, chunk)| daemonset(cluster, &format!("{name}-{i}"), name, chunk, pause_image))
        .collect()
}

fn daemonset(cluster: &ClusterConfig, name: &str, set: &str, images: &[&String], pause_image: &str) -> DaemonSet {
    let agent = format!("{AGENT_DIR}/orchard-agent");
    let selector = BTreeMap::from([(LABEL_PREPULL.to_string(), label_value(name))]);
    let mut labels = selector.clone();
    labels.insert(LABEL_MANAGED.to_string(), MANAGED_BY.to_string());
    let locked_down = SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
        run_as_user: Some(cluster.run_as_user.unwrap_or(65534)),
        run_as_non_root: Some(true),
        read_only_root_filesystem: Some(true),
        seccomp_profile: Some(SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }),
        ..Default::default()
    };
    // Pulling is the node's work; the containers themselves only start and exit.
    let small = ResourceRequirements {
        requests: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("10m".into())),
            ("memory".to_string(), Quantity("16Mi".into())),
        ])),
        limits: Some(BTreeMap::from([
            ("cpu".to_string(), Quantity("100m".into())),
            ("memory".to_string(), Quantity("64Mi".into())),
        ])),
        ..Default::default()
    };
    let bin = |read_only: bool| VolumeMount {
        name: "orchard-bin".into(),
        mount_path: AGENT_DIR.into(),
        read_only: Some(read_only),
        ..Default::default()
    };
    let container = |name: String, image: &str, command: Vec<String>, read_only: bool| Container {
        name,
        image: Some(image.to_string()),
        command: Some(command),
        args: Some(vec![]),
        image_pull_policy: Some("IfNotPresent".into()),
        resources: Some(small.clone()),
        security_context: Some(locked_down.clone()),
        volume_mounts: Some(vec![bin(read_only)]),
        ..Default::default()
    };
    let mut init = vec![container(
        "orchard-agent".into(),
        &cluster.agent_image,
        vec!["/orchard-agent".into(), "--install".into(), agent.clone()],
        false,
    )];
    for (i, image) in images.iter().enumerate() {
        init.push(container(format!("pull-{i}"), image, vec![agent.clone(), "--version".into()], true));
    }
    let mut pause = container("pause".into(), pause_image, vec!["/pause".into()], true);
    pause.volume_mounts = None;
    DaemonSet {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(cluster.namespace.clone()),
            labels: Some(labels.clone()),
            annotations: Some(BTreeMap::from([(
                "orchard.dev/prepull-set".to_string(),
                format!("{set}: {} images", images.len()),
            )])),
            ..Default::default()
        },
        spec: Some(DaemonSetSpec {
            selector: LabelSelector { match_labels: Some(selector), ..Default::default() },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta { labels: Some(labels), ..Default::default() }),
                spec: Some(PodSpec {
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    node_selector: (!cluster.node_selector.is_empty()).then(|| cluster.node_selector.clone()),
                    tolerations: (!cluster.tolerations.is_empty()).then(|| cluster.tolerations.clone()),
                    termination_grace_period_seconds: Some(0),
                    init_containers: Some(init),
                    containers: vec![pause],
                    volumes: Some(vec![Volume {
                        name: "orchard-bin".into(),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_split_into_sets_each_running_the_installed_agent() {
        let cluster = ClusterConfig {
            namespace: "sandboxes".into(),
            agent_image: "ghcr.io/orchard/agent:0.1.0".into(),
            agent_port: 7070,
            host_pod_labels: BTreeMap::new(),
            host_namespace: None,
            runtime_class: Some("gvisor".into()),
            run_as_user: Some(1000),
            node_selector: BTreeMap::from([("pool".into(), "sandboxes".into())]),
            tolerations: vec![],
            ephemeral_storage: None,
            user_namespaces: false,
            cilium_fqdn: false,
        };
        let images: Vec<String> = (0..120).map(|i| format!("swebench/sweb.eval.x86_64.repo__{i}:latest")).collect();
        let mut with_duplicate = images.clone();
        with_duplicate.push(images[3].clone());
        let sets = daemonsets(&cluster, "swe-bench", &with_duplicate, 50, PAUSE_IMAGE);
        assert_eq!(sets.len(), 3);
        let pods: Vec<PodSpec> = sets.iter().map(|d| d.spec.clone().unwrap().template.spec.unwrap()).collect();
        let counts: Vec<usize> = pods.iter().map(|p| p.init_containers.as_ref().unwrap().len() - 1).collect();
        assert_eq!(counts, [50, 50, 20], "duplicates dropped, at most 50 a set");
        let first = &pods[0].init_containers.as_ref().unwrap()[1];
        assert_eq!(first.image.as_deref(), Some(images[0].as_str()));
        assert_eq!(first.command.as_ref().unwrap(), &["/.orchard/bin/orchard-agent", "--version"]);
        assert_eq!(pods[0].automount_service_account_token, Some(false));
        assert_eq!(pods[0].node_selector, Some(cluster.node_selector.clone()), "placed where sandboxes run");
        assert_eq!(sets[1].metadata.name.as_deref(), Some("swe-bench-1"));
    }
}
