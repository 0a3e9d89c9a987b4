//! Rollout groups for RL trainers, on the evaluation service's job engine.
//!
//! A trainer posts a batch (`POST /v1/groups`): tasks, harness, tools, grader, the policy's
//! endpoint with its sampling and version, the group size G, and optionally BAR. Each task
//! becomes a group, and each group one job of the engine (its id is the group's id, so
//! `/v1/evals/{id}` shows it), whose rollouts are queued as the group grows and run by the
//! same runners as every evaluation, on any replica. The answer is a stream — a record per
//! rollout as it finishes (status, reward, token-faithful segments, messages, timings), a record
//! per group when it is emitted or abandoned, and an end record — so that a trainer reads groups
//! as they complete while others still run (asynchronous RL).
//!
//! Environment failures (sandbox, plugin, grader) are never rewards: the slot runs again (up to
//! `env_retries`), and is reported apart. With BAR, tasks are admitted by the probability that a
//! group will be mixed, groups top up until they are and are abandoned when that has become
//! unlikely, and advantages are computed against each task's posterior mean.

#![warn(missing_docs)]

mod driver;
mod http;
mod memory;
mod record;
mod request;
mod spend;

use std::collections::HashMap;
use std::sync::Arc;

use orchard_bar::Prior;
use orchard_evals_api::{ApiError, EvalService};
use tokio::sync::mpsc;

pub use driver::Ended;
pub use http::{openapi_paths, routes};
pub use memory::{KEEP_PER_VERSION, Memory};
pub use record::{GroupRecord, Record, RolloutKind, RolloutRecord, Timings, classify};
pub use request::{BarOptions, GroupRequest, MAX_SIZE};

/// Rollout groups for trainers (`POST /v1/groups`), on the evaluation service's engine.
pub struct GroupService {
    /// The evaluation service the groups' rollouts run on.
    pub evals: Arc<EvalService>,
    /// Each task's posterior between requests.
    pub memory: Memory,
}

impl GroupService {
    /// A group service on `evals`.
    pub fn new(evals: Arc<EvalService>) -> Arc<GroupService> {
        Arc::new(GroupService { evals, memory: Memory::default() })
    }

    /// Checks the request once (tasks exist, plugins exist and are of the right kinds), admits
    /// tasks and starts their groups; the records come on the receiver. Dropping it cancels
    /// every group still running.
    pub async fn start(
        self: &Arc<Self>,
        tenant: &str,
        request: GroupRequest,
    ) -> Result<mpsc::Receiver<Record>, ApiError> {
        request.check().map_err(ApiError::invalid)?;
        let env = &self.evals.env;
        let prepared = orchard_scheduler::Prepared::new(env, "groups-check", tenant, request.spec())
            .await
            .map_err(|e| ApiError::invalid(e.0))?;
        if let Some(missing) = request.task_ids.iter().find(|t| !prepared.tasks.contains_key(*t)) {
            return Err(ApiError::invalid(format!("task_ids: {missing:?} is not in the tasks")));
        }
        let harness = prepared
            .plugin(&request.harness, orchard_runtime::PluginKind::Harness)
            .map_err(|e| ApiError::invalid(format!("harness: {}", e.0)))?;
        if request.model.is_none() && harness.manifest.capabilities.contains(&orchard_runtime::Capability::Model) {
            return Err(ApiError::invalid(format!(
                "model: the harness {} calls a model: give the policy's endpoint",
                harness.id()
            )));
        }
        let harness = harness.id();
        let harness_name = harness.split('@').next().unwrap_or(&harness).to_string();
        let source = serde_json::to_string(&request.tasks).unwrap_or_default();
        let version = request.policy_version();
        let prior = self.prior(tenant, &request, &source, &harness_name).await?;

        let spend = spend::Spend::new(request.budget, request.groups);
        let request = Arc::new(request);
        let (tx, rx) = mpsc::channel(256);
        let mut groups = tokio::task::JoinSet::new();
        let mut skipped = 0;
        for (position, task_id) in request.task_ids.iter().enumerate() {
            let key = memory::key(tenant, &source, &harness_name, task_id);
            let posterior = self.memory.posterior(&key, prior, version.as_deref());
            if let Some(bar) = &request.bar
                && bar.admit != Some(false)
            {
                let p_mixed = posterior.p_mixed(request.size);
                let p_admit = orchard_bar::admit_probability(p_mixed);
                if memory::draw(bar.seed, task_id, position, version.as_deref()) >= p_admit {
                    skipped += 1;
                    let _ = tx
                        .send(Record::Skipped {
                            task_id: task_id.clone(),
                            p_mixed,
                            p_admit,
                            estimated_pass_rate: posterior.mean(),
                        })
                        .await;
                    continue;
                }
            }
            let run = driver::GroupRun {
                service: self.clone(),
                tenant: tenant.to_string(),
                request: request.clone(),
                task_id: task_id.clone(),
                harness_id: harness.clone(),
                posterior,
                memory_key: key,
                tx: tx.clone(),
                spend: spend.clone(),
            };
            groups.spawn(run.run());
        }
        tokio::spawn(async move {
            let (mut emitted, mut abandoned, mut stopped, mut failed, mut rollouts, mut total) = (0, 0, 0, 0, 0, 0);
            while let Some(done) = groups.join_next().await {
                total += 1;
                let Ok((ended, n)) = done else {
                    failed += 1;
                    continue;
                };
                rollouts += n;
                match ended {
                    Ended::Emitted => emitted += 1,
                    Ended::Abandoned => abandoned += 1,
                    Ended::Stopped => stopped += 1,
                    Ended::Failed | Ended::Dropped => failed += 1,
                }
            }
            let end = Record::End {
                groups: total,
                emitted,
                abandoned,
                stopped,
                skipped,
                failed,
                rollouts,
                spent: spend.spent(),
                budget: spend.budget,
                groups_wanted: spend.wanted,
            };
            let _ = tx.send(end).await;
        });
        Ok(rx)
    }

    /// The prior tasks start from: given, fitted to a warm-up evaluation (whose counts also
    /// start each of its tasks' posteriors), or the default.
    async fn prior(
        &self,
        tenant: &str,
        request: &GroupRequest,
        source: &str,
        harness_name: &str,
    ) -> Result<Prior, ApiError> {
        let Some(bar) = &request.bar else { return Ok(Prior::default()) };
        let Some(eval_id) = &bar.prior_from else { return Ok(bar.prior.unwrap_or_default()) };
        let store = &self.evals.env.store;
        let eval = orchard_evals_api::owned(&self.evals, &orchard_api_kit::Tenant(tenant.to_string()), eval_id)
            .await
            .map_err(|e| ApiError::invalid(format!("bar.prior_from: {}", e.detail)))?;
        let mut counts: HashMap<String, (u32, u32)> = HashMap::new();
        for cell in store.cells(&eval.id).await? {
            let c = counts.entry(cell.task_id.clone()).or_default();
            c.0 += cell.passed as u32;
            c.1 += cell.graded as u32;
        }
        let all: Vec<(u32, u32)> = counts.values().copied().collect();
        let prior = bar.prior.unwrap_or_else(|| Prior::fit(&all));
        let version = request.policy_version();
        for (task, (successes, trials)) in counts {
            let key = memory::key(tenant, source, harness_name, &task);
            self.memory.seed(&key, prior, successes, trials, version.as_deref());
        }
        Ok(prior)
    }
}
