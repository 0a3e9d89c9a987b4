//! Summaries and the files an evaluation leaves behind.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::Serialize;

use crate::metrics::{pass_at_k, pass_hat_k};
use crate::result::{RolloutResult, RolloutStatus};

#[derive(Debug, Clone, Serialize)]
/// One task under one harness.
pub struct TaskSummary {
    /// The task.
    pub task_id: String,
    /// Its domain.
    pub domain: String,
    /// The harness.
    pub harness: String,
    /// Attempts run.
    pub attempts: u32,
    /// Attempts graded.
    pub graded: u32,
    /// Attempts that passed.
    pub passed: u32,
    /// Attempts the grader could not decide.
    pub unknown: u32,
    /// Attempts that errored.
    pub errors: u32,
    /// Over graded rollouts; `None` when none was graded.
    pub mean_reward: Option<f64>,
    /// Each attempt's reward (`None`: not graded).
    pub rewards: Vec<Option<f64>>,
    /// pass@1 and pass@k (k = attempts), over the graded attempts alone: an errored rollout
    /// (the environment failed) or an unknown one (the grader could not decide) is neither a
    /// pass nor a failure, and is counted apart. pass@k is `None` until k attempts are graded
    /// (never a pass@k figure computed from fewer).
    pub pass_at_1: Option<f64>,
    /// pass@k (k = attempts).
    pub pass_at_k: Option<f64>,
    /// pass^k: all k attempts passed.
    pub pass_hat_k: Option<f64>,
}

/// One harness's totals (a column of the cross-harness matrix).
#[derive(Debug, Clone, Serialize)]
pub struct HarnessSummary {
    /// The harness.
    pub harness: String,
    /// Rollouts run.
    pub rollouts: usize,
    /// Rollouts that passed.
    pub passed: usize,
    /// Rollouts the grader could not decide.
    pub unknown: usize,
    /// Rollouts that errored.
    pub errors: usize,
    /// Mean reward of the graded ones.
    pub mean_reward: Option<f64>,
    /// pass@1.
    pub pass_at_1: Option<f64>,
    /// pass@k.
    pub pass_at_k: Option<f64>,
    /// pass^k.
    pub pass_hat_k: Option<f64>,
}

/// One domain under one harness (the summary rows of a matrix spanning domains).
#[derive(Debug, Clone, Serialize)]
pub struct DomainSummary {
    /// The domain.
    pub domain: String,
    /// The harness.
    pub harness: String,
    /// Tasks.
    pub tasks: usize,
    /// Rollouts run.
    pub rollouts: usize,
    /// Rollouts that passed.
    pub passed: usize,
    /// Mean reward of the graded ones.
    pub mean_reward: Option<f64>,
    /// pass@1.
    pub pass_at_1: Option<f64>,
    /// pass@k.
    pub pass_at_k: Option<f64>,
    /// pass^k.
    pub pass_hat_k: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
/// A run's results in numbers.
pub struct Summary {
    /// Rollouts run.
    pub rollouts: usize,
    /// Rollouts graded.
    pub graded: usize,
    /// Rollouts that passed.
    pub passed: usize,
    /// Rollouts the grader could not decide.
    pub unknown: usize,
    /// Rollouts that errored.
    pub errors: usize,
    /// Attempts per task and harness.
    pub k: u32,
    /// Mean reward of the graded ones.
    pub mean_reward: Option<f64>,
    /// pass@1.
    pub pass_at_1: Option<f64>,
    /// pass@k.
    pub pass_at_k: Option<f64>,
    /// pass^k.
    pub pass_hat_k: Option<f64>,
    /// Per harness.
    pub harnesses: Vec<HarnessSummary>,
    /// One row per domain and harness, domains in the order first met.
    pub domains: Vec<DomainSummary>,
    /// One row per task and harness.
    pub tasks: Vec<TaskSummary>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Sums up results whose tasks had `k` attempts each.
pub fn summarize(results: &[RolloutResult], k: u32) -> Summary {
    let mut by_task: BTreeMap<(&str, &str), Vec<&RolloutResult>> = BTreeMap::new();
    for r in results {
        by_task.entry((&r.task_id, &r.harness)).or_default().push(r);
    }
    let tasks: Vec<TaskSummary> = by_task
        .into_iter()
        .map(|((id, harness), mut rs)| {
            rs.sort_by_key(|r| r.attempt);
            let count = |s: RolloutStatus| rs.iter().filter(|r| r.status == s).count() as u32;
            let (graded, unknown, errors) =
                (count(RolloutStatus::Graded), count(RolloutStatus::Unknown), count(RolloutStatus::Error));
            let passed = rs.iter().filter(|r| r.passed).count() as u32;
            // Only graded attempts are scored: errors and unknowns are reported apart.
            let n = graded;
            let at = |kk: u32| (n >= kk && kk > 0).then(|| pass_at_k(n, passed, kk));
            TaskSummary {
                task_id: id.to_string(),
                domain: rs[0].domain.clone(),
                harness: harness.to_string(),
                attempts: rs.len() as u32,
                graded,
                passed,
                unknown,
                errors,
                mean_reward: mean(rs.iter().filter_map(|r| r.reward)),
                rewards: rs.iter().map(|r| r.reward).collect(),
                pass_at_1: at(1),
                pass_at_k: at(k),
                pass_hat_k: (n >= k && k > 0).then(|| pass_hat_k(n, passed, k)),
            }
        })
        .collect();
    // Columns in the order the harnesses were given (the results come in work order).
    let mut harness_names: Vec<&str> = Vec::new();
    for r in results {
        if !harness_names.contains(&r.harness.as_str()) {
            harness_names.push(&r.harness);
        }
    }
    let harnesses = harness_names
        .into_iter()
        .map(|h| {
            let rs: Vec<&RolloutResult> = results.iter().filter(|r| r.harness == h).collect();
            let ts: Vec<&TaskSummary> = tasks.iter().filter(|t| t.harness == h).collect();
            HarnessSummary {
                harness: h.to_string(),
                rollouts: rs.len(),
                passed: rs.iter().filter(|r| r.passed).count(),
                unknown: rs.iter().filter(|r| r.status == RolloutStatus::Unknown).count(),
                errors: rs.iter().filter(|r| r.status == RolloutStatus::Error).count(),
                mean_reward: mean(rs.iter().filter_map(|r| r.reward)),
                pass_at_1: mean(ts.iter().filter_map(|t| t.pass_at_1)),
                pass_at_k: mean(ts.iter().filter_map(|t| t.pass_at_k)),
                pass_hat_k: mean(ts.iter().filter_map(|t| t.pass_hat_k)),
            }
        })
        .collect::<Vec<_>>();
    let mut domain_names: Vec<&str> = Vec::new();
    for r in results {
        if !domain_names.contains(&r.domain.as_str()) {
            domain_names.push(&r.domain);
        }
    }
    let mut domains = Vec::new();
    for d in &domain_names {
        for h in &harnesses {
            let rs: Vec<&RolloutResult> = results.iter().filter(|r| r.domain == *d && r.harness == h.harness).collect();
            let ts: Vec<&TaskSummary> = tasks.iter().filter(|t| t.domain == *d && t.harness == h.harness).collect();
            if rs.is_empty() {
                continue;
            }
            domains.push(DomainSummary {
                domain: d.to_string(),
                harness: h.harness.clone(),
                tasks: ts.len(),
                rollouts: rs.len(),
                passed: rs.iter().filter(|r| r.passed).count(),
                mean_reward: mean(rs.iter().filter_map(|r| r.reward)),
                pass_at_1: mean(ts.iter().filter_map(|t| t.pass_at_1)),
                pass_at_k: mean(ts.iter().filter_map(|t| t.pass_at_k)),
                pass_hat_k: mean(ts.iter().filter_map(|t| t.pass_hat_k)),
            });
        }
    }
    Summary {
        harnesses,
        domains,
        rollouts: results.len(),
        graded: results.iter().filter(|r| r.status == RolloutStatus::Graded).count(),
        passed: results.iter().filter(|r| r.passed).count(),
        unknown: results.iter().filter(|r| r.status == RolloutStatus::Unknown).count(),
        errors: results.iter().filter(|r| r.status == RolloutStatus::Error).count(),
        k,
        mean_reward: mean(results.iter().filter_map(|r| r.reward)),
        pass_at_1: mean(tasks.iter().filter_map(|t| t.pass_at_1)),
        pass_at_k: mean(tasks.iter().filter_map(|t| t.pass_at_k)),
        pass_hat_k: mean(tasks.iter().filter_map(|t| t.pass_hat_k)),
        tasks,
    }
}

/// Writes `DIR/rollouts/<id>.json` whole or not at all (a temporary file in `DIR`, renamed):
/// a run killed mid-write leaves no half file for a reader or a resume to take as a result.
/// An id that is not one plain file name (a remote server's `../x`) is refused.
pub fn write_rollout(dir: &Path, id: &str, json: &[u8]) -> std::io::Result<()> {
    let plain = !id.is_empty() && id != "." && id != ".." && !id.contains(['/', '\\', '\0']);
    if !plain {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("rollout id {id:?} is not a file name"),
        ));
    }
    let temporary = dir.join(format!(".rollout-{id}.json.partial"));
    std::fs::write(&temporary, json)?;
    std::fs::rename(&temporary, dir.join("rollouts").join(format!("{id}.json")))
}

/// `DIR/rollouts/<task>__<attempt>.json`, `DIR/trajectories.jsonl`, `DIR/summary.json`.
pub fn write_outputs(dir: &Path, results: &[RolloutResult], summary: &Summary) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("rollouts"))?;
    let mut trajectories = std::io::BufWriter::new(std::fs::File::create(dir.join("trajectories.jsonl"))?);
    for r in results {
        write_rollout(dir, &r.rollout_id, &serde_json::to_vec_pretty(r)?)?;
        serde_json::to_writer(&mut trajectories, &trajectory_line(r))?;
        trajectories.write_all(b"\n")?;
    }
    trajectories.flush()?;
    std::fs::write(dir.join("summary.json"), serde_json::to_vec_pretty(summary)?)?;
    Ok(())
}

/// One line of `trajectories.jsonl`: the rollout's identity, grade and trajectory.
pub fn trajectory_line(r: &RolloutResult) -> serde_json::Value {
    let mut line = serde_json::json!({
            "rollout_id": r.rollout_id,
            "task_id": r.task_id,
            "domain": r.domain,
            "attempt": r.attempt,
            "harness": r.harness,
            "tools": r.tools,
            "grader": r.grader,
            "model": r.model,
            "status": r.status,
            "reward": r.reward,
            "passed": r.passed,
            "outcome": r.outcome,
            "verdict": r.verdict,
            "error": r.error,
            "trajectory": r.trajectory,
    });
    // What trainers learn from, when the endpoint gave token ids: never re-rendered text.
    let segments = r.trajectory.segments();
    if !segments.is_empty() {
        line["segments"] = serde_json::to_value(segments).unwrap_or_default();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::write_rollout;

    #[test]
    fn a_rollout_file_is_written_whole_beneath_its_directory_or_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("rollouts")).unwrap();
        write_rollout(dir.path(), "t__oracle__0", b"{}").unwrap();
        assert_eq!(std::fs::read(dir.path().join("rollouts/t__oracle__0.json")).unwrap(), b"{}");
        for id in ["../escape", "a/b", "..", ".", "", "a\\b"] {
            let e = write_rollout(dir.path(), id, b"{}").unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{id:?}");
        }
        // Nothing but the one file and no temporary left beside it.
        let names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        assert_eq!(names, ["rollouts"]);
        assert!(!dir.path().parent().unwrap().join("escape.json").exists());
    }

    #[test]
    fn a_result_read_back_is_written_byte_for_byte_the_same() {
        // A resumed run reads finished rollouts and writes them out again: serde_json's default
        // float parser read 1.433728896 as 1.4337288959999999 (the workspace turns on its exact
        // `float_roundtrip` parser).
        for seconds in [1.433728896, 0.1 + 0.2, 1e-7, 123456.789012345] {
            let text = serde_json::to_string(&serde_json::json!({"total_seconds": seconds})).unwrap();
            let back: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), text);
        }
    }
}
