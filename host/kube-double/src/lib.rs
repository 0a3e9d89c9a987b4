//! An in-memory Kubernetes API server double, for measuring the Kubernetes backend at scale.
//!
//! The tests' double (`tests/k8s/apiserver.py`, on kmock) answers ~60 creates and ~20 patches a
//! second with a few hundred pods: too slow to show anything about 10,000. This one keeps the
//! objects in a map and serves what kube-rs's client and watcher use, over real HTTP:
//! namespaced list (label selectors), watch (replayed from a resourceVersion, 410 when too old),
//! get, create, merge patch (and the `status` subresource) and delete, for any resource path.
//!
//! Invariants, as a real API server keeps them:
//! - every write gives the object a new resourceVersion, from one counter, and emits one event;
//! - a patch naming a `metadata.resourceVersion` other than the object's is refused with 409;
//! - a watch from version V sees every event after V exactly once, in order, or a 410.
//!
//! Costs a real control plane has can be injected ([`Costs`]): a latency per request, a delay
//! on each watch event, and priority-and-fairness's 429 when more requests are in flight than a
//! limit. A [`Kubelet`] plays the nodes: each pod created runs the real agent, on an address of
//! its own, and is reported Running and Ready by a status write like a kubelet's.

mod kubelet;
mod labels;
mod merge;
mod serve;
mod store;

pub use kubelet::Kubelet;
pub use serve::{Costs, Double, Requests};
