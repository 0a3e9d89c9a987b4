//! Tearing a sandbox down: its processes first, then its cgroups, network and files — from its
//! record, whatever state a crash left it in.

use crate::*;

use record::Record;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl LocalBackend {
    /// The rest of a delete, once the sandbox is marked: answered once its processes are gone
    /// (nothing of it runs any more); its cgroups, network and files are removed behind the
    /// answer. Its id stays taken until they are.
    pub(crate) async fn finish_delete(&self, id: &str, sandbox: &Arc<LocalSandbox>) {
        let record = self.stop(sandbox).await;
        self.sandboxes.write().unwrap_or_else(|p| p.into_inner()).remove(id);
        let dir = sandbox.dir.clone();
        if let Some(backend) = self.me.get().and_then(std::sync::Weak::upgrade) {
            self.cleanups.0.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                backend.cleanup_record(&dir, &record).await;
                backend.cleanups.0.fetch_sub(1, Ordering::SeqCst);
                backend.cleanups.1.notify_waiters();
            });
        } else {
            self.cleanup_record(&dir, &record).await;
        }
    }

    /// Tears a sandbox down completely: processes, cgroups, network, files.
    pub(crate) async fn destroy(&self, sandbox: &LocalSandbox) {
        let record = self.stop(sandbox).await;
        let started = std::time::Instant::now();
        self.cleanup_record(&sandbox.dir, &record).await;
        tracing::debug!(sandbox = %record.id, elapsed = ?started.elapsed(), "sandbox cleaned up");
    }

    /// Kills the sandbox's processes and waits until they are gone; returns its record.
    pub(crate) async fn stop(&self, sandbox: &LocalSandbox) -> Record {
        sandbox.deleting.store(true, Ordering::Relaxed);
        let record = sandbox.record.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if record::is_alive(record.init_pid, record.init_start) {
            // The sandbox's pid 1: its death takes the whole pid namespace with it.
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(record.init_pid), nix::sys::signal::Signal::SIGKILL);
        }
        let started = std::time::Instant::now();
        let mut exited = sandbox.exited.clone();
        let _ = tokio::time::timeout(Duration::from_secs(5), exited.wait_for(|e| *e)).await;
        tracing::debug!(sandbox = %record.id, elapsed = ?started.elapsed(), "sandbox processes gone");
        record
    }

    /// Removes what a record says exists, whether or not its processes still run.
    pub(crate) async fn cleanup_record(&self, dir: &Path, record: &Record) {
        if record.init_pid > 0 && record::is_alive(record.init_pid, record.init_start) {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(record.init_pid), nix::sys::signal::Signal::SIGKILL);
        }
        let cgroups = record.cgroups.clone();
        let network = record.network.clone();
        let layer = self.layers_dir().join(&record.id);
        let dir = dir.to_path_buf();
        let outcome = tokio::task::spawn_blocking(move || {
            let t = std::time::Instant::now();
            let cg = cgroup::kill_and_remove(&cgroups);
            let _ = remove_tree(&layer);
            tracing::debug!(cgroups = ?t.elapsed(), "cgroups removed");
            if let Some(a) = &network {
                network::detach(a);
            }
            // The overlay lived in the sandbox's own mount namespace; it is gone with its processes.
            let fs = remove_tree(&dir);
            (cg, fs)
        })
        .await;
        match outcome {
            Ok((Err(e), _)) => tracing::warn!(sandbox = %record.id, "cleanup: {e}"),
            Ok((_, Err(e))) => tracing::warn!(sandbox = %record.id, "cleanup: removing the sandbox directory: {e}"),
            Err(e) => tracing::warn!(sandbox = %record.id, "cleanup task failed: {e}"),
            _ => {}
        }
        if let Some(a) = &record.network {
            self.free_slot(a.slot);
        }
        if let Some(slot) = record.slot {
            self.free_id_slot(slot);
        }
    }
}
