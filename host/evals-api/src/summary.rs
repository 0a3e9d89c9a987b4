//! A job's summary and task × harness matrix from per-cell counts (one aggregate query, not the
//! job's results): mean reward, pass@1 and pass@k (unbiased) and pass^k per cell, per harness
//! and overall, with unknowns counted apart (neither passes nor failures).

use orchard_eval::{pass_at_k, pass_hat_k};
use orchard_store::{EvalRow, TaskCell};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, Serialize)]
/// One task × harness cell of a job's matrix.
pub struct CellView {
    /// The task.
    pub task_id: String,
    /// The harness.
    pub harness: String,
    /// Rollouts finished.
    pub done: i64,
    /// Rollouts that passed.
    pub passed: i64,
    /// Rollouts that errored.
    pub errored: i64,
    /// Rollouts whose grade is unknown.
    pub unknown: i64,
    /// Mean reward of the graded ones.
    pub mean_reward: Option<f64>,
    /// pass@1.
    pub pass_at_1: Option<f64>,
    /// pass@k.
    pub pass_at_k: Option<f64>,
    /// pass^k: all k passed.
    pub pass_hat_k: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
/// One harness over all tasks.
pub struct HarnessTotal {
    /// The harness.
    pub harness: String,
    /// Rollouts finished.
    pub done: i64,
    /// Rollouts that passed.
    pub passed: i64,
    /// Rollouts that errored.
    pub errored: i64,
    /// Rollouts whose grade is unknown.
    pub unknown: i64,
    /// Mean reward of the graded ones.
    pub mean_reward: Option<f64>,
    /// pass@1.
    pub pass_at_1: Option<f64>,
    /// pass@k.
    pub pass_at_k: Option<f64>,
    /// pass^k: all k passed.
    pub pass_hat_k: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
/// A job's results as a task × harness matrix.
pub struct Matrix {
    /// Attempts per task and harness.
    pub k: i64,
    /// The columns.
    pub harnesses: Vec<String>,
    /// The rows.
    pub tasks: Vec<String>,
    /// Every cell.
    pub cells: Vec<CellView>,
    /// Per harness, over all tasks.
    pub totals: Vec<HarnessTotal>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn cell(c: &TaskCell, k: u32) -> CellView {
    // The one definition (`orchard_eval::TaskSummary`): graded attempts alone.
    let n = c.graded as u32;
    let passed = c.passed as u32;
    let at = |kk: u32| (n >= kk && kk > 0).then(|| pass_at_k(n, passed, kk));
    CellView {
        task_id: c.task_id.clone(),
        harness: c.harness.clone(),
        done: c.done,
        passed: c.passed,
        errored: c.errored,
        unknown: c.unknown,
        mean_reward: (c.graded > 0).then(|| c.reward_sum / c.graded as f64),
        pass_at_1: at(1),
        pass_at_k: at(k),
        pass_hat_k: (n >= k && k > 0).then(|| pass_hat_k(n, passed, k)),
    }
}

/// The summary (overall figures) and the matrix of a job, from what is done so far.
pub fn summary_of(eval: &EvalRow, cells: &[TaskCell]) -> (Value, Matrix) {
    let k = eval.k.max(1) as u32;
    let views: Vec<CellView> = cells.iter().map(|c| cell(c, k)).collect();
    // Harness columns in the order the job gave them.
    let spec: Value = serde_json::from_str(&eval.spec).unwrap_or(Value::Null);
    let order: Vec<String> = spec["harnesses"]
        .as_array()
        .map(|a| a.iter().filter_map(|h| h.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let mut harnesses: Vec<String> = Vec::new();
    for c in &views {
        if !harnesses.contains(&c.harness) {
            harnesses.push(c.harness.clone());
        }
    }
    let rank = |h: &str| {
        order
            .iter()
            .position(|o| h == o || h.starts_with(&format!("{}@", o.split('@').next().unwrap_or(o))))
            .unwrap_or(usize::MAX)
    };
    harnesses.sort_by_key(|h| rank(h));
    let mut tasks: Vec<String> = views.iter().map(|c| c.task_id.clone()).collect();
    tasks.sort();
    tasks.dedup();
    let totals: Vec<HarnessTotal> = harnesses
        .iter()
        .map(|h| {
            let cs: Vec<&CellView> = views.iter().filter(|c| &c.harness == h).collect();
            let raw: Vec<&TaskCell> = cells.iter().filter(|c| &c.harness == h).collect();
            let graded: i64 = raw.iter().map(|c| c.graded).sum();
            HarnessTotal {
                harness: h.clone(),
                done: cs.iter().map(|c| c.done).sum(),
                passed: cs.iter().map(|c| c.passed).sum(),
                errored: cs.iter().map(|c| c.errored).sum(),
                unknown: cs.iter().map(|c| c.unknown).sum(),
                mean_reward: (graded > 0).then(|| raw.iter().map(|c| c.reward_sum).sum::<f64>() / graded as f64),
                pass_at_1: mean(cs.iter().filter_map(|c| c.pass_at_1)),
                pass_at_k: mean(cs.iter().filter_map(|c| c.pass_at_k)),
                pass_hat_k: mean(cs.iter().filter_map(|c| c.pass_hat_k)),
            }
        })
        .collect();
    let graded: i64 = cells.iter().map(|c| c.graded).sum();
    let summary = json!({
        "k": k,
        "done": eval.done,
        "passed": eval.passed,
        "errored": eval.errored,
        "unknown": eval.unknown,
        "mean_reward": (graded > 0).then(|| cells.iter().map(|c| c.reward_sum).sum::<f64>() / graded as f64),
        "pass_at_1": mean(views.iter().filter_map(|c| c.pass_at_1)),
        "pass_at_k": mean(views.iter().filter_map(|c| c.pass_at_k)),
        "pass_hat_k": mean(views.iter().filter_map(|c| c.pass_hat_k)),
    });
    (summary, Matrix { k: k as i64, harnesses, tasks, cells: views, totals })
}
