//! Start-up reconciliation: whatever an earlier host process left behind is either adopted (the
//! sandbox still runs, its agent answers, its idle time is not up) or removed completely.

use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orchard_agent_client::{AgentAddr, AgentClient};
use orchard_sandbox::SandboxStatus;
use tokio::sync::watch;

use crate::record::{self, Record};
use crate::{LocalBackend, LocalSandbox, cgroup, network};

#[derive(Debug, Default)]
pub struct Report {
    pub adopted: usize,
    pub cleaned: usize,
}

pub async fn run(backend: &Arc<LocalBackend>) -> Report {
    let mut report = Report::default();
    let mut known_ids = HashSet::new();
    let mut known_netns = HashSet::new();
    let entries: Vec<_> = std::fs::read_dir(backend.sandboxes_dir()).map(|d| d.flatten().collect()).unwrap_or_default();
    for entry in entries {
        let dir = entry.path();
        let Some(id) = entry.file_name().to_str().map(str::to_string) else { continue };
        let record = match Record::load(&dir) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(sandbox = %id, "unreadable record, removing: {e}");
                // Without a record, the cgroups named after the sandbox are all that can be found.
                let cgroups: Vec<_> = backend.cgroups.parents().iter().map(|p| p.join(&id)).collect();
                let _ = tokio::task::spawn_blocking(move || {
                    let _ = cgroup::kill_and_remove(&cgroups);
                    let _ = crate::remove_tree(&dir);
                })
                .await;
                report.cleaned += 1;
                continue;
            }
        };
        if let Some(a) = &record.network {
            known_netns.insert(a.netns.clone());
        }
        // A sandbox still waiting in a warm pool belongs to nobody: made again, not adopted.
        if record.tenant != crate::pool::POOL_TENANT && adopt(backend, &dir, &record).await {
            known_ids.insert(id);
            report.adopted += 1;
        } else {
            tracing::info!(sandbox = %id, "cleaning up a sandbox left by an earlier run");
            backend.cleanup_record(&dir, &record).await;
            report.cleaned += 1;
        }
    }
    // Writable layers, cgroups and namespaces that no record accounts for.
    for entry in std::fs::read_dir(backend.layers_dir()).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !known_ids.contains(&name) {
            let path = entry.path();
            let _ = tokio::task::spawn_blocking(move || crate::remove_tree(&path)).await;
        }
    }
    for parent in backend.cgroups.parents() {
        for entry in std::fs::read_dir(&parent).map(|d| d.flatten().collect::<Vec<_>>()).unwrap_or_default() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if entry.path().is_dir() && !known_ids.contains(&name) {
                let path = entry.path();
                let _ = tokio::task::spawn_blocking(move || cgroup::kill_and_remove(&[path])).await;
            }
        }
    }
    for name in network::stray_namespaces(&backend.instance, &known_netns) {
        let _ = tokio::task::spawn_blocking(move || network::delete_namespace(&name)).await;
    }
    report
}

async fn adopt(backend: &Arc<LocalBackend>, dir: &std::path::Path, record: &Record) -> bool {
    if !record::is_alive(record.init_pid, record.init_start) {
        return false;
    }
    if record.last_active + record.ttl_seconds as f64 <= record::now() || record.past_lifetime() {
        return false;
    }
    let agent = Arc::new(AgentClient::new(AgentAddr::Unix(dir.join(record::SOCKET_FILE)), &record.token));
    if agent.wait_healthy(Duration::from_secs(2)).await.is_err() {
        return false;
    }
    let (exited_tx, exited) = watch::channel(false);
    let sandbox = Arc::new(LocalSandbox {
        record: Mutex::new(record.clone()),
        dir: dir.to_path_buf(),
        agent,
        status: Mutex::new((SandboxStatus::Ready, None)),
        exited,
        deleting: AtomicBool::new(false),
        init: record::open_pidfd(record.init_pid),
    });
    // Not our child any more: a pidfd tells us when it exits.
    let Some(pidfd) = record::pidfd(record.init_pid) else { return false };
    if !record::is_alive(record.init_pid, record.init_start) {
        return false;
    }
    let watched = sandbox.clone();
    tokio::spawn(async move {
        let _ = pidfd.readable().await;
        if !watched.deleting.load(std::sync::atomic::Ordering::Relaxed) {
            *watched.status.lock().unwrap_or_else(|p| p.into_inner()) =
                (SandboxStatus::Failed, Some("the sandbox's processes ended".into()));
        }
        let _ = exited_tx.send(true);
    });
    if let Some(a) = &record.network {
        backend.reserved.lock().unwrap_or_else(|p| p.into_inner()).slots.insert(a.slot);
    }
    if let Some(slot) = record.slot {
        backend.claim_id_slot(slot);
    }
    backend.sandboxes.write().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), sandbox);
    true
}
