//! The `kubernetes` sandbox backend (in progress): what it writes to the API server.
//!
//! [`spec`] turns a sandbox spec into the Pod and NetworkPolicy that carry it. The pod itself is
//! the source of truth — its labels and annotations hold the sandbox id, tenant, owner host,
//! creation time, TTL and a hash of the agent token — so any host replica can serve any sandbox
//! and a restarted host reconciles from the pods.
//!
//! Not yet here (issue 6 continues): the backend trait implementation on kube-rs (create with
//! rate limit and backoff, readiness from a watcher, delete, TTL reaper, reconcile), and the
//! agent's side of injection — `orchard-agent --install PATH` (copy itself) and a trailing
//! `-- CMD...` it starts after it listens — which the pod spec below already uses.

pub mod spec;
