//! Multi-step tasks (Harbor's `[[steps]]`): one sandbox, one harness run per step with the
//! step's instruction, each graded by the step's own tests in the agent's sandbox.
//!
//! As Harbor runs them: a step's `steps/NAME/workdir/` is copied into the working directory and
//! its `setup.sh` run before the agent; a step whose agent fails, or whose reward is below its
//! `min_reward`, ends the task there; the task's reward is the last graded step's (`final`) or
//! the mean over the graded steps (`mean`, the default: a step that never ran is not counted).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use orchard_agent_client::SandboxAgent;
use orchard_runtime::{Limits, Plugin, RolloutContext, RunOutcome, Runtime, TaskInput, Verdict};
use orchard_task_config::{MinReward, RewardStrategy, StepConfig};
use orchard_task_files::TaskFiles;
use serde::{Deserialize, Serialize};

use crate::environment::upload_dir;
use crate::healthcheck::Healthcheck;
use crate::job::{Grading, Job, grade_once, record_agent_failure, record_verdict};
use crate::result::{RolloutResult, RolloutStatus};
use crate::task::{MAX_TEXT_BYTES, Task};

/// One step of a task.
#[derive(Debug, Clone)]
pub struct TaskStep {
    /// Its directory under `steps/`.
    pub name: String,
    /// What the agent is asked in this step (`steps/NAME/instruction.md`).
    pub instruction: String,
    /// The agent's time for this step, in seconds.
    pub agent_timeout_sec: f64,
    /// The verifier's time for this step, in seconds.
    pub verifier_timeout_sec: f64,
    /// The least rewards (by name) for the task to go on after this step.
    pub min_reward: BTreeMap<String, f64>,
    /// Waited for before this step's agent starts.
    pub healthcheck: Option<Healthcheck>,
}

/// What one step did, in the rollout's result.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StepRecord {
    /// The step.
    pub name: String,
    /// Graded, unknown or errored.
    pub status: RolloutStatus,
    /// Its reward, when graded.
    pub reward: Option<f64>,
    /// The grader's explanation, or why there is no grade.
    pub note: String,
    /// The agent's time in this step, in seconds.
    pub agent_seconds: f64,
}

/// The steps `task.toml` declares, read from `steps/`.
pub(crate) fn load_steps(
    files: &TaskFiles,
    steps: &[StepConfig],
    agent_timeout_sec: f64,
    verifier_timeout_sec: f64,
) -> Result<Vec<TaskStep>, String> {
    steps
        .iter()
        .map(|step| {
            let dir = Path::new("steps").join(&step.name);
            let instruction = files
                .read_string(&dir.join("instruction.md"), MAX_TEXT_BYTES)
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("steps/{}/instruction.md: no such file", step.name))?;
            let min_reward = match &step.min_reward {
                None => BTreeMap::new(),
                Some(MinReward::Reward(r)) => [("reward".to_string(), *r)].into(),
                Some(MinReward::Keys(keys)) => keys.clone(),
            };
            Ok(TaskStep {
                name: step.name.clone(),
                instruction,
                agent_timeout_sec: step.agent.timeout_sec.unwrap_or(agent_timeout_sec),
                verifier_timeout_sec: step.verifier.timeout_sec.unwrap_or(verifier_timeout_sec),
                min_reward,
                healthcheck: step.healthcheck.as_ref().map(Healthcheck::from_config),
            })
        })
        .collect()
}

/// The rewards a verdict gives, by name (`reward` and the grader's sub-scores).
fn rewards_of(verdict: &Verdict) -> Option<BTreeMap<String, f64>> {
    match verdict {
        Verdict::Graded { reward, sub_scores, .. } => {
            let mut all: BTreeMap<String, f64> = sub_scores.iter().cloned().collect();
            all.insert("reward".into(), *reward);
            Some(all)
        }
        Verdict::Unknown { .. } => None,
    }
}

/// Why the task stops after a step graded `rewards`, if it does: a gated reward below its
/// threshold or missing (Harbor counts a missing one as −∞).
fn gate(step: &TaskStep, rewards: Option<&BTreeMap<String, f64>>) -> Option<String> {
    step.min_reward.iter().find_map(|(key, min)| {
        let actual = rewards.and_then(|r| r.get(key)).copied().unwrap_or(f64::NEG_INFINITY);
        (actual < *min).then(|| format!("step {}: {key} = {actual} is below its min_reward {min}", step.name))
    })
}

/// Where a task's steps run: the rollout around them, whoever the agent is (a harness, or an
/// episode's client).
pub(crate) struct StepPlace<'a> {
    pub job: &'a Job,
    pub task: &'a Task,
    pub agent: &'a dyn SandboxAgent,
    pub runtime: &'a Runtime,
    pub ctx: &'a Arc<RolloutContext>,
    pub show_solution: bool,
}

/// Everything a step needs from the rollout around it, with the harness that acts in it.
pub(crate) struct StepRun<'a> {
    pub place: StepPlace<'a>,
    pub harness: &'a Arc<Plugin>,
}

/// Readies step `index` before its agent: its `workdir/` copied and its `setup.sh` run, its
/// healthcheck waited for, its solution for a harness granted it. `Ok(Some(note))`: `setup.sh`
/// failed, and the task ends here; `Err`: the sandbox failed.
pub(crate) async fn prepare_step(place: &StepPlace<'_>, index: usize) -> Result<Option<String>, String> {
    let (task, step) = (place.task, &place.task.steps[index]);
    let workdir = task.workdir.clone().unwrap_or_else(|| "/".into());
    let dir = PathBuf::from("steps").join(&step.name);
    if task.files.is_dir(&dir.join("workdir")) {
        upload_dir(place.agent, &task.files, &dir.join("workdir"), &workdir).await?;
        if task.files.exists(&dir.join("workdir/setup.sh")) {
            let setup = orchard_protocol::ExecRequest::new(orchard_protocol::Command::Argv(vec![
                "bash".into(),
                format!("{}/setup.sh", workdir.trim_end_matches('/')),
            ]))
            .cwd(workdir.clone());
            let ran = place.agent.exec(&setup).await.map_err(|e| format!("step {}: setup.sh: {e}", step.name))?;
            if ran.exit_code != 0 {
                return Ok(Some(format!("setup.sh exited {}: {}", ran.exit_code, ran.stderr.text.trim())));
            }
        }
    }
    if let Some(check) = &step.healthcheck {
        crate::environment::wait_healthy(place.agent, task, check)
            .await
            .map_err(|e| format!("step {}: {e}", step.name))?;
    }
    if place.show_solution && task.files.is_dir(&dir.join("solution")) {
        place
            .agent
            .remove("/solution", true)
            .await
            .or_else(crate::environment::ignore_missing)
            .map_err(|e| e.to_string())?;
        upload_dir(place.agent, &task.files, &dir.join("solution"), "/solution").await?;
    }
    Ok(None)
}

/// What grading one step decided.
pub(crate) struct StepGrade {
    /// The grader's verdict, or how it failed.
    pub verdict: Result<Verdict, orchard_runtime::PluginFailure>,
    /// Why the task stops after this step, if it does (a gate not met, the grader failing).
    pub stop: Option<String>,
}

/// Grades step `index` by its own tests after its agent gave `outcome`; its record is added to
/// `result.steps`.
pub(crate) async fn grade_step(
    place: &StepPlace<'_>,
    index: usize,
    input: &TaskInput,
    outcome: &RunOutcome,
    agent_seconds: f64,
    result: &mut RolloutResult,
) -> Result<StepGrade, String> {
    let (task, step) = (place.task, &place.task.steps[index]);
    let tests = PathBuf::from("steps").join(&step.name).join("tests");
    let how = Grading {
        tests: task.files.is_dir(&tests).then_some(tests.as_path()),
        timeout_sec: step.verifier_timeout_sec,
        clear_tests: index > 0,
    };
    let verdict = grade_once(
        place.job,
        task,
        place.ctx,
        place.agent,
        place.runtime,
        input,
        outcome,
        place.show_solution,
        &how,
        result,
    )
    .await?;
    let mut record = StepRecord {
        name: step.name.clone(),
        status: RolloutStatus::Error,
        reward: None,
        note: String::new(),
        agent_seconds,
    };
    let stop = match &verdict {
        Ok(v) => {
            match v {
                Verdict::Graded { reward, explanation, .. } => {
                    (record.status, record.reward, record.note) =
                        (RolloutStatus::Graded, Some(*reward), explanation.clone());
                }
                Verdict::Unknown { reason } => (record.status, record.note) = (RolloutStatus::Unknown, reason.clone()),
            }
            gate(step, rewards_of(v).as_ref())
        }
        Err(failure) => {
            record.note = failure.to_string();
            Some(format!("step {}: the grader failed", step.name))
        }
    };
    result.steps.push(record);
    Ok(StepGrade { verdict, stop })
}

/// Records a task's end after its steps: the grader's failure, or the verdict its graded steps
/// make together.
pub(crate) fn record_steps_verdict(
    task: &Task,
    graded: &[Verdict],
    failed: Option<orchard_runtime::PluginFailure>,
    result: &mut RolloutResult,
) {
    match failed {
        Some(failure) => record_verdict(result, Err(failure)),
        None => record_verdict(result, Ok(combine(task, graded))),
    }
}

/// Runs a multi-step task's steps in order and records the task's grade in `result`.
pub(crate) async fn run_steps(run: &StepRun<'_>, input: &TaskInput, result: &mut RolloutResult) -> Result<(), String> {
    let place = &run.place;
    let task = place.task;
    let mut graded: Vec<Verdict> = Vec::new();
    let mut last_outcome: Option<RunOutcome> = None;
    for (index, step) in task.steps.iter().enumerate() {
        if let Some(note) = prepare_step(place, index).await? {
            result.steps.push(StepRecord {
                name: step.name.clone(),
                status: RolloutStatus::Error,
                reward: None,
                note,
                agent_seconds: 0.0,
            });
            break;
        }
        let step_input = TaskInput { instruction: step.instruction.clone(), ..input.clone() };
        let limits = Limits { wall: Duration::from_secs_f64(step.agent_timeout_sec), ..place.job.limits };
        let started = Instant::now();
        let ran = place
            .runtime
            .run_harness(
                place.ctx,
                run.harness,
                &place.job.tools_for(task),
                &step_input,
                &place.job.config_for(run.harness),
                &limits,
                &place.job.grants,
            )
            .await;
        let agent_seconds = started.elapsed().as_secs_f64();
        result.agent_seconds += agent_seconds;
        let outcome = match ran {
            Ok(outcome) => outcome,
            Err(failure) => {
                // The agent failed this step: the task ends here, and is this failure.
                result.steps.push(StepRecord {
                    name: step.name.clone(),
                    status: RolloutStatus::Error,
                    reward: None,
                    note: failure.to_string(),
                    agent_seconds,
                });
                record_agent_failure(result, place.ctx, failure);
                result.error = result.error.take().map(|e| format!("step {}: {e}", step.name));
                return Ok(());
            }
        };
        let grade = grade_step(place, index, &step_input, &outcome, agent_seconds, result).await?;
        last_outcome = Some(outcome);
        match grade.verdict {
            Ok(v) => graded.push(v),
            Err(failure) => {
                record_steps_verdict(task, &graded, Some(failure), result);
                result.outcome = last_outcome;
                return Ok(());
            }
        }
        if let Some(reason) = grade.stop {
            result.stopped = Some(reason);
            break;
        }
    }
    result.outcome = last_outcome;
    record_steps_verdict(task, &graded, None, result);
    Ok(())
}

/// The task's verdict from its graded steps' (`Unknown` when none was graded).
fn combine(task: &Task, graded: &[Verdict]) -> Verdict {
    let threshold = task.metadata.pointer("/metadata/pass_threshold").and_then(|v| v.as_f64()).unwrap_or(1.0);
    let rewards: Vec<BTreeMap<String, f64>> = graded.iter().filter_map(rewards_of).collect();
    let chosen: Option<BTreeMap<String, f64>> = match task.step_reward {
        RewardStrategy::Final => rewards.last().cloned(),
        RewardStrategy::Mean if rewards.is_empty() => None,
        // Per key, over the graded steps; a key a step lacks counts 0 there.
        RewardStrategy::Mean => {
            let keys: std::collections::BTreeSet<&String> = rewards.iter().flat_map(|r| r.keys()).collect();
            Some(
                keys.into_iter()
                    .map(|k| {
                        (
                            k.clone(),
                            rewards.iter().map(|r| r.get(k).copied().unwrap_or(0.0)).sum::<f64>()
                                / rewards.len() as f64,
                        )
                    })
                    .collect(),
            )
        }
    };
    let Some(mut chosen) = chosen else {
        return Verdict::Unknown { reason: "no step was graded".into() };
    };
    let reward = chosen.remove("reward").unwrap_or(0.0);
    let how = match task.step_reward {
        RewardStrategy::Final => "the last graded step's reward",
        RewardStrategy::Mean => "the mean over the graded steps",
    };
    Verdict::Graded {
        reward,
        passed: reward >= threshold,
        sub_scores: chosen.into_iter().collect(),
        explanation: format!("{how} ({} of {} steps graded)", rewards.len(), task.steps.len()),
    }
}
