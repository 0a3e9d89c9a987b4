//! The evaluation engine `orchard eval` and `orchard serve` share: a job's spec is submitted to
//! the store (every rollout queued in work order), runners claim rollouts under leases and run
//! them, and results are read back from the store (summaries, the matrix, exports, the files
//! `orchard eval --out` leaves).

#![warn(missing_docs)]

mod plugin_sync;
mod prepare;
mod runner;

use std::sync::Arc;

use orchard_eval::{RolloutResult, Summary};
use orchard_store::{EvalRow, NewEval, NewRollout, Store, StoreError};

pub use orchard_spec::{EvalSpec, ModelSpec, TaskSource};
pub use orchard_task_files::{Limits as UploadLimits, UnpackError, unpack};
pub use plugin_sync::sync_plugins;
pub use prepare::{Env, PrepareError, Prepared, SandboxDefaults, dataset_dir, model_config};
pub use runner::{FinishedEvent, Runner, RunnerConfig, finished_record, rollout_sandbox_id};

#[derive(Debug, thiserror::Error)]
/// Why the job engine refused or failed.
pub enum SchedulerError {
    #[error("{0}")]
    /// The job asked for something wrong; the message names it.
    Invalid(String),
    #[error(transparent)]
    /// The store failed.
    Store(#[from] StoreError),
}

/// A new job id: `ev-` and 16 hex digits.
pub fn new_eval_id() -> String {
    format!("ev-{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

/// Checks the spec (tasks load, plugins exist and are of the right kinds, secrets exist) and
/// queues every rollout, in work order: task, then harness as given, then attempt.
pub async fn submit(env: &Env, eval_id: &str, tenant: &str, spec: EvalSpec) -> Result<EvalRow, SchedulerError> {
    spec.check().map_err(SchedulerError::Invalid)?;
    let prepared = Prepared::new(env, eval_id, tenant, spec.clone()).await.map_err(|e| SchedulerError::Invalid(e.0))?;
    let harness_ids: Vec<String> = spec
        .harnesses
        .iter()
        .map(|h| prepared.plugin(h, orchard_runtime::PluginKind::Harness).map(|p| p.id()))
        .collect::<Result<_, _>>()
        .map_err(|e| SchedulerError::Invalid(e.0))?;
    let mut rollouts = Vec::new();
    for task_id in &prepared.task_order {
        for harness in &harness_ids {
            for attempt in 1..=spec.attempts {
                rollouts.push(NewRollout {
                    rollout_id: RolloutResult::id_for(task_id, harness, attempt),
                    task_id: task_id.clone(),
                    harness: harness.clone(),
                    attempt,
                });
            }
        }
    }
    let new = NewEval {
        id: eval_id.to_string(),
        tenant: tenant.to_string(),
        spec: serde_json::to_string(&spec).map_err(|e| SchedulerError::Invalid(e.to_string()))?,
        fingerprint: spec.fingerprint(),
        k: spec.attempts,
        rollouts,
        group: false,
    };
    Ok(env.store.create_eval(&new).await?)
}

/// Queues a job of one task's rollouts under one harness, attempts `attempts` (a rollout
/// group: more are added with [`add_attempts`] as it grows). The caller has checked the spec
/// and resolved the harness to its id (`Prepared::plugin`), which rollout ids are made of.
pub async fn queue_attempts(
    store: &Store,
    eval_id: &str,
    tenant: &str,
    spec: &EvalSpec,
    task_id: &str,
    harness_id: &str,
    attempts: std::ops::RangeInclusive<u32>,
) -> Result<EvalRow, SchedulerError> {
    let new = NewEval {
        id: eval_id.to_string(),
        tenant: tenant.to_string(),
        spec: serde_json::to_string(spec).map_err(|e| SchedulerError::Invalid(e.to_string()))?,
        fingerprint: spec.fingerprint(),
        k: spec.attempts,
        rollouts: new_rollouts(task_id, harness_id, attempts),
        group: true,
    };
    Ok(store.create_eval(&new).await?)
}

/// Queues more attempts of a job's task (a group topping up, or replacing a rollout the
/// environment failed).
pub async fn add_attempts(
    store: &Store,
    eval_id: &str,
    task_id: &str,
    harness_id: &str,
    attempts: std::ops::RangeInclusive<u32>,
) -> Result<(), SchedulerError> {
    Ok(store.add_rollouts(eval_id, &new_rollouts(task_id, harness_id, attempts)).await?)
}

fn new_rollouts(task_id: &str, harness_id: &str, attempts: std::ops::RangeInclusive<u32>) -> Vec<NewRollout> {
    attempts
        .map(|attempt| NewRollout {
            rollout_id: RolloutResult::id_for(task_id, harness_id, attempt),
            task_id: task_id.to_string(),
            harness: harness_id.to_string(),
            attempt,
        })
        .collect()
}

/// The trajectory document of a rollout (one line of `trajectories.jsonl`).
pub fn trajectory_document(result: &RolloutResult) -> serde_json::Value {
    orchard_eval::trajectory_line(result)
}

/// Every finished rollout of a job, in work order, with its trajectory.
pub async fn results(store: &Store, eval_id: &str) -> Result<Vec<RolloutResult>, SchedulerError> {
    let mut out = Vec::new();
    let mut after = -1;
    loop {
        let page = store.results_page(eval_id, after, 500).await?;
        let Some(last) = page.last() else { break };
        after = last.0.seq;
        for (row, doc) in page {
            let Some(json) = row.result else { continue };
            let mut result: RolloutResult = serde_json::from_str(&json)
                .map_err(|e| SchedulerError::Invalid(format!("stored result {}: {e}", row.rollout_id)))?;
            if let Some(doc) = doc
                && let Ok(v) = serde_json::from_str::<serde_json::Value>(&doc)
                && let Some(t) = v.get("trajectory")
            {
                result.trajectory = serde_json::from_value(t.clone()).unwrap_or_default();
            }
            out.push(result);
        }
    }
    Ok(out)
}

/// The summary of what is finished (pass@k with k = attempts).
pub async fn summary(store: &Store, eval: &EvalRow) -> Result<Summary, SchedulerError> {
    let results = results(store, &eval.id).await?;
    Ok(orchard_eval::summarize(&results, eval.k as u32))
}

/// Keeps the results of `runner`'s store in an `Arc` for callers that only read.
pub type SharedRunner = Arc<Runner>;
