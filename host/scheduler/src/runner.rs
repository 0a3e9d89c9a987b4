//! The runner: claims rollouts from the store and runs them, `capacity` at a time.
//!
//! Every replica (and `orchard eval`, with a store of its own) runs one. Each pass it renews the
//! leases of what it runs, queues again what dead runners held, stops rollouts of cancelled jobs
//! (their sandboxes go with them), and fills its free slots: tenants with the fewest rollouts
//! running go first, a tenant never beyond its quota, a job never beyond its own concurrency, so
//! one tenant's 10,000 queued rollouts do not starve another's 10. A finished rollout's result
//! and trajectory are written in one transaction before anything else hears of it.

use std::collections::{BTreeMap, HashMap};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use orchard_eval::{FailureClass, RolloutResult, RolloutStatus};
use orchard_runtime::{PluginKind, Runtime};
use orchard_sandbox::Backend;
use orchard_store::{Claim, Finished, Store};
use tokio::sync::{Notify, broadcast};

use crate::prepare::{Env, Prepared};
use orchard_spec::EvalSpec;

/// How a runner claims and runs rollouts.
pub struct RunnerConfig {
    /// This runner's name in the store's leases (unique per process).
    pub owner: String,
    /// What every life of this replica's owner names starts with (`replica/`): claims of an
    /// earlier life (a crash, a kill -9) are taken back at start rather than after their lease.
    /// `None` where the owner is not tied to a stable replica name.
    pub predecessors: Option<String>,
    /// The tenant sandboxes of rollouts are created for: how a restarted runner finds its own.
    pub sandbox_tenant: String,
    /// Rollouts at once on this runner.
    pub capacity: usize,
    /// How long a claim holds without renewal.
    pub lease: Duration,
    /// Most rollouts one tenant may have running (over every runner).
    pub tenant_quota: Option<usize>,
}

/// A rollout that finished here (for progress bars and live pages on this replica).
#[derive(Debug, Clone)]
pub struct FinishedEvent {
    /// The job it belongs to.
    pub eval_id: String,
    /// How it ended.
    pub result: Arc<RolloutResult>,
}

struct Running {
    handle: tokio::task::AbortHandle,
    sandbox_id: String,
}

/// Claims rollouts from the store, runs them, and records their results, within its capacity and the tenants' quotas.
pub struct Runner {
    env: Arc<Env>,
    backend: Arc<dyn Backend>,
    runtime: Arc<Runtime>,
    config: RunnerConfig,
    running: Mutex<HashMap<(String, String), Running>>,
    prepared: tokio::sync::Mutex<HashMap<String, Arc<Prepared>>>,
    events: broadcast::Sender<FinishedEvent>,
    wake: Notify,
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Runner {
    /// A runner that runs nothing until started.
    pub fn new(env: Arc<Env>, backend: Arc<dyn Backend>, runtime: Arc<Runtime>, config: RunnerConfig) -> Arc<Runner> {
        Arc::new(Runner {
            env,
            backend,
            runtime,
            config,
            running: Mutex::new(HashMap::new()),
            prepared: tokio::sync::Mutex::new(HashMap::new()),
            events: broadcast::channel(4096).0,
            wake: Notify::new(),
        })
    }

    /// The store it claims from.
    pub fn store(&self) -> &Store {
        &self.env.store
    }

    /// What it prepares jobs with.
    pub fn env(&self) -> &Arc<Env> {
        &self.env
    }

    /// Where its rollouts' sandboxes run.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The engine its plugins run on.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Rollouts as they finish on this runner.
    pub fn subscribe(&self) -> broadcast::Receiver<FinishedEvent> {
        self.events.subscribe()
    }

    /// Makes the next pass start now (a job was submitted).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Rollouts running here now.
    pub fn running_count(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Runs passes until `stop` resolves; then stops claiming, hands back what it holds
    /// (its rollouts run again elsewhere or at the next start) and deletes their sandboxes.
    pub async fn run(self: &Arc<Self>, stop: impl std::future::Future<Output = ()>) {
        self.reconcile_sandboxes().await;
        if let Some(prefix) = &self.config.predecessors {
            // Their sandboxes were just deleted: nothing of theirs still runs.
            match self.env.store.release_predecessors(prefix, &self.config.owner).await {
                Ok(n) if n > 0 => tracing::info!(rollouts = n, "took back the claims of this replica's last run"),
                Ok(_) => {}
                Err(e) => tracing::warn!("taking back the last run's claims: {e}"),
            }
        }
        tokio::pin!(stop);
        let mut last_housekeeping = std::time::Instant::now() - Duration::from_secs(60);
        loop {
            if last_housekeeping.elapsed() >= self.config.lease / 4 {
                self.housekeeping().await;
                last_housekeeping = std::time::Instant::now();
            }
            if let Err(e) = self.fill().await {
                tracing::warn!("claiming rollouts: {e}");
            }
            tokio::select! {
                _ = &mut stop => break,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        self.hand_back().await;
    }

    /// Stops every rollout here and queues them again.
    pub async fn hand_back(&self) {
        let stopped: Vec<Running> =
            self.running.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, r)| r).collect();
        for r in &stopped {
            r.handle.abort();
        }
        for r in &stopped {
            self.delete_sandboxes_of(&r.sandbox_id).await;
        }
        match self.env.store.release(&self.config.owner).await {
            Ok(n) if n > 0 => tracing::info!(rollouts = n, "handed back to the queue"),
            Ok(_) => {}
            Err(e) => tracing::warn!("handing rollouts back: {e}"),
        }
    }

    /// Sandboxes this runner's earlier life left (a crash, a kill -9): deleted.
    async fn reconcile_sandboxes(&self) {
        let mine: Vec<String> = self
            .backend
            .list()
            .await
            .into_iter()
            .filter(|s| s.tenant == self.config.sandbox_tenant)
            .map(|s| s.id)
            .collect();
        for id in &mine {
            let _ = self.backend.delete(id).await;
        }
        if !mine.is_empty() {
            tracing::info!(
                sandboxes = mine.len(),
                "deleted the sandboxes of rollouts that were running before a restart"
            );
        }
    }

    async fn housekeeping(&self) {
        let store = &self.env.store;
        match crate::plugin_sync::sync_plugins(store, &self.env.registry).await {
            Ok(n) if n > 0 => tracing::info!(plugins = n, "loaded plugins uploaded elsewhere"),
            Ok(_) => {}
            Err(e) => tracing::warn!("reading uploaded plugins: {e}"),
        }
        let lease_until = now() + self.config.lease.as_secs_f64();
        if let Err(e) = store.renew(&self.config.owner, lease_until).await {
            tracing::warn!("renewing leases: {e}");
        }
        match store.requeue_expired().await {
            Ok(n) if n > 0 => tracing::info!(rollouts = n, "queued again: their runner's lease lapsed"),
            Ok(_) => {}
            Err(e) => tracing::warn!("requeueing lapsed leases: {e}"),
        }
        // Jobs cancelled while their rollouts run here.
        let evals: Vec<String> = {
            let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            let mut ids: Vec<String> = running.keys().map(|(e, _)| e.clone()).collect();
            ids.sort();
            ids.dedup();
            ids
        };
        for eval_id in evals {
            if let Ok(Some(e)) = store.eval(&eval_id).await
                && e.status == "cancelled"
            {
                self.stop_eval(&eval_id).await;
            }
        }
    }

    /// Stops this runner's rollouts of a cancelled job and deletes their sandboxes.
    pub async fn stop_eval(&self, eval_id: &str) {
        let stopped: Vec<((String, String), Running)> = {
            let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<_> = running.keys().filter(|(e, _)| e == eval_id).cloned().collect();
            keys.into_iter().filter_map(|k| running.remove(&k).map(|r| (k, r))).collect()
        };
        for ((eval_id, rollout_id), r) in stopped {
            r.handle.abort();
            self.delete_sandboxes_of(&r.sandbox_id).await;
            let _ = self.env.store.abandon(&self.config.owner, &eval_id, &rollout_id).await;
        }
    }

    /// Claims what fits in the free slots, fairly between tenants, and starts it.
    async fn fill(self: &Arc<Self>) -> Result<(), orchard_store::StoreError> {
        let mut free = self.config.capacity.saturating_sub(self.running_count());
        if free == 0 {
            return Ok(());
        }
        let store = &self.env.store;
        let waiting = store.evals_waiting().await?;
        if waiting.is_empty() {
            return Ok(());
        }
        let mut tenant_running = store.running_per_tenant().await?;
        let mut by_tenant: BTreeMap<String, Vec<(String, i64, i64)>> = BTreeMap::new();
        for (eval_id, tenant, queued, running) in waiting {
            by_tenant.entry(tenant).or_default().push((eval_id, queued, running));
        }
        // Rounds: each takes a little for the tenant with the fewest running, so that tenants
        // share the free slots instead of the oldest job taking them all.
        let mut progressed = true;
        while free > 0 && progressed {
            progressed = false;
            let mut tenants: Vec<String> = by_tenant.keys().cloned().collect();
            tenants.sort_by_key(|t| tenant_running.get(t).copied().unwrap_or(0));
            let share = (free / tenants.len().max(1)).max(1);
            let mut claimed_this_round = Vec::new();
            for tenant in tenants {
                if free == 0 {
                    break;
                }
                let running_now = tenant_running.get(&tenant).copied().unwrap_or(0);
                let quota_left =
                    self.config.tenant_quota.map(|q| (q as i64 - running_now).max(0) as usize).unwrap_or(usize::MAX);
                let mut budget = share.min(free).min(quota_left);
                for (eval_id, queued, running) in by_tenant.get_mut(&tenant).into_iter().flatten() {
                    if budget == 0 || *queued == 0 {
                        continue;
                    }
                    let concurrency = self.eval_concurrency(eval_id).await;
                    let room = (concurrency as i64 - *running).max(0) as usize;
                    let want = budget.min(room).min(*queued as usize);
                    if want == 0 {
                        continue;
                    }
                    let lease_until = now() + self.config.lease.as_secs_f64();
                    let claims = store.claim(&self.config.owner, eval_id, lease_until, want as i64).await?;
                    let n = claims.len();
                    *queued -= n as i64;
                    *running += n as i64;
                    budget -= n;
                    free -= n;
                    *tenant_running.entry(tenant.clone()).or_default() += n as i64;
                    claimed_this_round.extend(claims);
                }
            }
            if !claimed_this_round.is_empty() {
                progressed = true;
            }
            for claim in claimed_this_round {
                self.start(claim).await;
            }
        }
        Ok(())
    }

    async fn eval_concurrency(&self, eval_id: &str) -> usize {
        if let Some(p) = self.prepared.lock().await.get(eval_id) {
            return p.spec.concurrency;
        }
        match self.env.store.eval(eval_id).await {
            Ok(Some(e)) => serde_json::from_str::<EvalSpec>(&e.spec).map(|s| s.concurrency).unwrap_or(1),
            _ => 1,
        }
    }

    async fn prepared(&self, eval_id: &str) -> Result<Arc<Prepared>, String> {
        let mut cache = self.prepared.lock().await;
        if let Some(p) = cache.get(eval_id) {
            return Ok(p.clone());
        }
        let eval = self.env.store.eval(eval_id).await.map_err(|e| e.to_string())?.ok_or("the job is gone")?;
        let spec: EvalSpec = serde_json::from_str(&eval.spec).map_err(|e| format!("the job's spec: {e}"))?;
        let prepared =
            Arc::new(Prepared::new(&self.env, eval_id, &eval.tenant, spec).await.map_err(|e| e.to_string())?);
        cache.insert(eval_id.to_string(), prepared.clone());
        Ok(prepared)
    }

    /// Forgets prepared jobs (a replaced dataset, a finished job); the next rollout prepares again.
    pub async fn forget(&self, eval_id: &str) {
        self.prepared.lock().await.remove(eval_id);
    }

    async fn start(self: &Arc<Self>, claim: Claim) {
        let sandbox_id = sandbox_id(&claim);
        let key = (claim.eval_id.clone(), claim.rollout_id.clone());
        let this = self.clone();
        let sandbox = sandbox_id.clone();
        // Every log line of the rollout (sandbox, plugins, grading) carries the job and rollout.
        let span = tracing::info_span!("rollout", eval = %claim.eval_id, rollout = %claim.rollout_id);
        // Held while the task is spawned and registered, so that a rollout ending at once
        // cannot remove itself before it is there (it would stay counted as running).
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                let forget = || {
                    this.running
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&(claim.eval_id.clone(), claim.rollout_id.clone()));
                };
                // Claimed just before its job was cancelled: no sandbox for it.
                if let Ok(Some(e)) = this.env.store.eval(&claim.eval_id).await
                    && e.status == "cancelled"
                {
                    let _ = this.env.store.abandon(&this.config.owner, &claim.eval_id, &claim.rollout_id).await;
                    forget();
                    return;
                }
                let metrics = orchard_metrics::metrics();
                let result = match AssertUnwindSafe(this.execute(&claim, &sandbox)).catch_unwind().await {
                    Ok(result) => result,
                    // A bug: the rollout still ends (an error, its sandbox deleted) instead of
                    // holding its slot and its renewed lease, and its job never finishing.
                    Err(panic) => {
                        this.delete_sandboxes_of(&sandbox).await;
                        panicked(&claim, panic.as_ref())
                    }
                };
                let status = match result.status {
                    RolloutStatus::Graded => "graded",
                    RolloutStatus::Unknown => "unknown",
                    RolloutStatus::Error => "error",
                };
                // Label values are the operator's plugin names only: a tenant's own upload is
                // `private` (its name is the tenant's choice, and labels must stay bounded).
                let shared = |id: &str| {
                    let name = id.split('@').next().unwrap_or(id);
                    if this.env.registry.get(name).is_some() { name.to_string() } else { "private".to_string() }
                };
                metrics.rollout_finished(
                    status,
                    &shared(&result.harness),
                    &shared(&result.grader),
                    Duration::from_secs_f64(result.total_seconds.max(0.0)),
                    Duration::from_secs_f64(result.grade_seconds.max(0.0)),
                );
                tracing::info!(status, reward = ?result.reward, seconds = result.total_seconds, error = ?result.error, "rollout finished");
                this.record(&claim, result).await;
                forget();
                this.wake.notify_one();
            },
            span,
        ));
        running.insert(key, Running { handle: task.abort_handle(), sandbox_id });
    }

    /// Deletes a stopped rollout's sandbox and its verifier's, now and again a little later: a
    /// rollout stopped in the middle of creating its sandbox leaves the backend to finish the
    /// creation after the first delete found nothing.
    async fn delete_sandboxes_of(&self, sandbox_id: &str) {
        let ids = [sandbox_id.to_string(), orchard_eval::verifier_id(sandbox_id)];
        for id in &ids {
            let _ = self.backend.delete(id).await;
        }
        let backend = self.backend.clone();
        tokio::spawn(async move {
            for wait in [1, 4, 10] {
                tokio::time::sleep(Duration::from_secs(wait)).await;
                for id in &ids {
                    let _ = backend.delete(id).await;
                }
            }
        });
    }

    async fn execute(&self, claim: &Claim, sandbox_id: &str) -> RolloutResult {
        // The job could not be prepared for this rollout (its tasks, its plugins).
        let failed = |e: String| RolloutResult {
            error: Some(e),
            failed_in: Some(FailureClass::Environment),
            ..RolloutResult::pending(&claim.task_id, &claim.harness, claim.attempt)
        };
        let prepared = match self.prepared(&claim.eval_id).await {
            Ok(p) => p,
            Err(e) => return failed(format!("preparing the job: {e}")),
        };
        let Some(task) = prepared.tasks.get(&claim.task_id) else {
            return failed(format!("task {} is not in the job's tasks", claim.task_id));
        };
        let (job, harness) = match (prepared.job(), prepared.plugin(&claim.harness, PluginKind::Harness)) {
            (Ok(job), Ok(harness)) => (job, harness),
            (Err(e), _) | (_, Err(e)) => return failed(e.to_string()),
        };
        let placement = orchard_eval::Placement {
            tenant: self.config.sandbox_tenant.clone(),
            sandbox_id: Some(sandbox_id.to_string()),
        };
        let mut result =
            orchard_eval::rollout(&job, &harness, task, claim.attempt, &*self.backend, &self.runtime, &placement).await;
        // The id and harness stay as queued (a plugin replaced mid-job keeps its matrix column;
        // `plugins` says which version ran).
        result.rollout_id = claim.rollout_id.clone();
        result.harness = claim.harness.clone();
        result
    }

    async fn record(&self, claim: &Claim, result: RolloutResult) {
        let finished = finished_record(&result);
        match self.env.store.finish(&self.config.owner, &claim.eval_id, &claim.rollout_id, &finished).await {
            Ok(true) => {
                let _ = self.events.send(FinishedEvent { eval_id: claim.eval_id.clone(), result: Arc::new(result) });
            }
            Ok(false) => tracing::warn!(rollout = %claim.rollout_id, "finished after losing its lease: not recorded"),
            Err(e) => tracing::error!(rollout = %claim.rollout_id, "recording a finished rollout: {e}"),
        }
    }
}

/// The result of a rollout whose task panicked: an error of the host's own, with the panic's
/// message (the panic hook has logged where it happened).
fn panicked(claim: &Claim, panic: &(dyn std::any::Any + Send)) -> RolloutResult {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "no message".into());
    tracing::error!(rollout = %claim.rollout_id, "the rollout's task panicked: {message}");
    RolloutResult {
        error: Some(format!("the host failed running this rollout (a bug in Orchard): {message}")),
        rollout_id: claim.rollout_id.clone(),
        failed_in: Some(FailureClass::Host),
        ..RolloutResult::pending(&claim.task_id, &claim.harness, claim.attempt)
    }
}

/// The sandbox of one try of a rollout: known before it exists, so that a cancel can delete it.
fn sandbox_id(claim: &Claim) -> String {
    rollout_sandbox_id(&claim.eval_id, &claim.rollout_id, claim.tries)
}

/// The sandbox a rollout's `tries`-th claim runs in (under the runner's own tenant): derived from
/// the job and the rollout, so that a restarted runner, or a page showing the rollout live, finds
/// it again.
pub fn rollout_sandbox_id(eval_id: &str, rollout_id: &str, tries: i64) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{eval_id}/{rollout_id}").as_bytes());
    format!("ro-{}-{}", &hex::encode(digest)[..20], tries)
}

/// What the store keeps of a finished rollout: its status, reward, result and trajectory.
pub fn finished_record(result: &RolloutResult) -> Finished {
    let status = match result.status {
        RolloutStatus::Graded => "graded",
        RolloutStatus::Unknown => "unknown",
        RolloutStatus::Error => "error",
    };
    Finished {
        status: status.into(),
        reward: result.reward,
        passed: result.passed,
        error: result.error.clone(),
        result: serde_json::to_string(result).unwrap_or_default(),
        trajectory: serde_json::to_string(&crate::trajectory_document(result)).unwrap_or_default(),
    }
}
