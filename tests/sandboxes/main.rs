//! Sandboxes end to end: isolation, exec, files, lifecycle, networks, images, admission,
//! hardening, forks, the HTTP contract, Kubernetes (against an API server double) and the
//! hosted service's walls. One binary (link time and disk); each module is one behaviour's tests.

mod agent_install;
mod api_contract;
mod deploy;
mod hosted_security;
mod kubernetes;
mod kubernetes_scale;
mod sandbox_admission;
mod sandbox_exec;
mod sandbox_files;
mod sandbox_fork;
mod sandbox_hardening;
mod sandbox_images;
mod sandbox_isolation;
mod sandbox_lifecycle;
mod sandbox_network;
mod sandbox_orphans;
