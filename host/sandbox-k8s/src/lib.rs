//! The `kubernetes` sandbox backend (in progress): what it writes to the API server.
//!
//! [`spec`] turns a sandbox spec into the Pod and NetworkPolicy that carry it. The pod itself is
//! the source of truth — its labels and annotations hold the sandbox id, tenant, owner host,
//! creation time, TTL and a hash of the agent token — so any host replica can serve any sandbox
//! and a restarted host reconciles from the pods.
//!
//! Not yet here (issue 6 continues): the backend trait implementation on kube-rs (create with
//! rate limit and backoff, readiness from a watcher, delete, TTL reaper, reconcile), the agent
//! image, and tests against a Kubernetes API server double. The agent's side of injection is
//! in place: `orchard-agent --install PATH` (the init container's copy) and a trailing
//! `-- CMD...` that it starts as background process `entrypoint`.

pub mod spec;
