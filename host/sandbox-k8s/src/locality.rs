//! Which nodes already hold an image, from a watch on the nodes (`node.status.images`, which
//! each kubelet reports): a sandbox's pod then prefers those nodes (a preferred node affinity),
//! so that it starts without a pull where it can. The scheduler's own ImageLocality score
//! favours them too, but weakly beside its other scores; a preference of weight 100 is heard.
//!
//! Opt-in (`--image-locality`): watching nodes needs a ClusterRole (get, list and watch
//! nodes) that the namespaced Role of `deploy/` does not give.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::runtime::watcher::{self, Event};

/// Nodes named in one pod's preference at most (the rest still get ImageLocality's score).
const MOST_NODES: usize = 100;

/// The image names each node reports holding, normalised (`docker.io/library/python:3.12`).
#[derive(Default)]
pub struct NodeImages {
    nodes: RwLock<HashMap<String, HashSet<String>>>,
}

/// The full form of an image reference (registry, repository and tag or digest), as kubelets
/// report names; `None` for what is not a reference.
pub fn normalize(image: &str) -> Option<String> {
    oci_client::Reference::try_from(image).ok().map(|r| r.whole())
}

impl NodeImages {
    /// Nothing known yet: no node is preferred until the watch reports them.
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// Records what `node` reports holding now.
    pub fn record(&self, node: &Node) {
        let Some(name) = node.metadata.name.clone() else { return };
        let held: HashSet<String> = node
            .status
            .iter()
            .flat_map(|s| s.images.iter().flatten())
            .flat_map(|image| image.names.iter().flatten())
            .filter_map(|n| normalize(n))
            .collect();
        self.nodes.write().unwrap_or_else(|p| p.into_inner()).insert(name, held);
    }

    /// A node gone: its images no longer count.
    pub fn forget(&self, node: &str) {
        self.nodes.write().unwrap_or_else(|p| p.into_inner()).remove(node);
    }

    /// The nodes holding `image` (sorted, at most 100).
    pub fn nodes_with(&self, image: &str) -> Vec<String> {
        let Some(wanted) = normalize(image) else { return Vec::new() };
        let nodes = self.nodes.read().unwrap_or_else(|p| p.into_inner());
        let mut holding: Vec<String> =
            nodes.iter().filter(|(_, held)| held.contains(&wanted)).map(|(n, _)| n.clone()).collect();
        holding.sort();
        holding.truncate(MOST_NODES);
        holding
    }

    /// Follows the nodes until the task is dropped.
    pub async fn run(self: Arc<Self>, api: Api<Node>) {
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        let mut fresh = Vec::new();
        while let Some(event) = events.next().await {
            match event {
                Ok(Event::Init) => fresh.clear(),
                Ok(Event::InitApply(node)) => fresh.push(node),
                Ok(Event::InitDone) => {
                    self.nodes.write().unwrap_or_else(|p| p.into_inner()).clear();
                    for node in fresh.drain(..) {
                        self.record(&node);
                    }
                }
                Ok(Event::Apply(node)) => self.record(&node),
                Ok(Event::Delete(node)) => self.forget(&node.metadata.name.unwrap_or_default()),
                Err(e) => {
                    tracing::warn!("watching nodes for their images (--image-locality): {e}; retrying");
                    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, images: &[&str]) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "status": {"images": [{"names": images, "sizeBytes": 1}]}
        }))
        .unwrap()
    }

    #[test]
    fn nodes_are_matched_by_the_full_reference() {
        let images = NodeImages::new();
        images.record(&node("a", &["docker.io/library/python@sha256:aa", "docker.io/library/python:3.12"]));
        images.record(&node("b", &["registry.test/swe/astropy:1"]));
        images.record(&node("c", &["docker.io/library/python:3.11"]));
        assert_eq!(images.nodes_with("python:3.12"), ["a"]);
        assert_eq!(images.nodes_with("docker.io/library/python:3.12"), ["a"]);
        assert_eq!(images.nodes_with("registry.test/swe/astropy:1"), ["b"]);
        assert!(images.nodes_with("python:3.13").is_empty());
        images.forget("a");
        assert!(images.nodes_with("python:3.12").is_empty());
    }
}
