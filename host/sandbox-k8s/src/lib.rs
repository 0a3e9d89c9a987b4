//! The `kubernetes` sandbox backend.
//!
//! - A pod per sandbox whose labels and annotations are the record (sandbox id, tenant, owner
//!   host, created-at, TTL, last activity, token nonce and hash): no database, any replica
//!   serves any sandbox, and a restarted host adopts the pods it finds ([`record`], [`cache`]).
//! - Agent injection: an init container copies the static agent into an `emptyDir`; the user's
//!   image runs it as its command, with the image's own entrypoint after `--` ([`spec`]).
//! - Direct routing: exec, files and PTY go to `podIP:agentPort` with a per-sandbox token
//!   derived from a key the replicas share ([`token`]); the API server sees lifecycle only.
//! - Writes are paced and retried on 429/5xx ([`writes`]); the reaper's work is split between
//!   replicas by rendezvous hashing over their leases ([`replicas`]).

#![warn(missing_docs)]

mod backend;
pub mod cache;
mod config;
pub mod locality;
mod pods;
mod pool_wait;
pub mod prepull;
pub mod record;
pub mod replicas;
pub mod spec;
pub mod token;
pub mod writes;

pub use backend::{Kubernetes, KubernetesBackend};
pub use config::KubernetesConfig;
pub use spec::ClusterConfig;
