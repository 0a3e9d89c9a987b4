//! The records a group stream carries: one per rollout as it finishes, one per group when it is
//! emitted or abandoned, one per task BAR did not admit, and one at the end.

use std::collections::BTreeMap;

use orchard_eval::{RolloutResult, RolloutStatus};
use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
/// One line of a group stream.
pub enum Record {
    /// A finished rollout.
    Rollout(Box<RolloutRecord>),
    /// A decided group.
    Group(Box<GroupRecord>),
    /// BAR did not admit the task this time: a group of it was unlikely to be mixed.
    Skipped {
        /// The task.
        task_id: String,
        /// Probability that its group would have both outcomes.
        p_mixed: f64,
        /// The probability it was admitted with.
        p_admit: f64,
        /// Its posterior mean pass rate.
        estimated_pass_rate: f64,
    },
    /// A group could not run at all (its job was refused).
    Error {
        /// The task.
        task_id: String,
        /// The group, if it was made.
        group_id: Option<String>,
        /// Why.
        message: String,
    },
    /// The last line: what the request did.
    End {
        /// Groups run.
        groups: usize,
        /// Groups emitted.
        emitted: usize,
        /// Groups abandoned.
        abandoned: usize,
        /// Ended because as many groups as wanted were emitted.
        stopped: usize,
        /// Tasks BAR did not admit.
        skipped: usize,
        /// Groups that could not run.
        failed: usize,
        /// Rollout records streamed (in groups, surplus, or of abandoned groups).
        rollouts: usize,
        /// Rollouts launched (retries included): what the request spent.
        spent: u32,
        /// The request's budget.
        budget: Option<u32>,
        /// The groups the request wanted.
        groups_wanted: Option<u32>,
    },
}

/// How a rollout ended, for a trainer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RolloutKind {
    /// Graded.
    Completed,
    /// Graded, but the harness stopped at its step or token limit.
    Truncated,
    /// The policy's endpoint failed: no reward, not counted.
    ModelError,
    /// The sandbox, a plugin, or the grader failed (or could not decide): no reward, not
    /// counted, retried.
    EnvError,
}

impl RolloutKind {
    /// Whether its reward is evidence about the policy.
    pub fn counted(self) -> bool {
        matches!(self, RolloutKind::Completed | RolloutKind::Truncated)
    }
}

#[derive(Debug, Clone, Serialize)]
/// How long a rollout took.
pub struct Timings {
    /// The harness's run.
    pub agent_seconds: f64,
    /// Grading.
    pub grade_seconds: f64,
    /// All of it, sandbox included.
    pub total_seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
/// One rollout, for a trainer.
pub struct RolloutRecord {
    /// Its id.
    pub rollout_id: String,
    /// Its group.
    pub group_id: String,
    /// Its task.
    pub task_id: String,
    /// The slot in the group (launch order); a retried slot keeps its index.
    pub index: usize,
    /// Runs of its slot so far (retries).
    pub attempt: u32,
    /// How it ended.
    pub status: RolloutKind,
    /// Whether BAR counted it (an environment or model error never is).
    pub counted: bool,
    /// It finished after its group was decided (emitted or abandoned): streamed so that every
    /// rollout the server ran reaches the trainer once, but in no group and not counted.
    pub surplus: bool,
    /// The grader's reward.
    pub reward: Option<f64>,
    /// Reward ≥ 0.5.
    pub passed: bool,
    /// The grader's sub-scores by name.
    pub reward_parts: BTreeMap<String, f64>,
    /// What failed, if it did.
    pub error: Option<String>,
    /// The policy version it sampled from.
    pub policy_version: Option<String>,
    /// Token-faithful training segments (see `orchard-segments`), when the endpoint gave ids.
    pub segments: Value,
    /// The conversation as OpenAI chat messages.
    pub messages: Value,
    /// The tools offered, as OpenAI tool definitions.
    pub tools: Value,
    /// How long it took.
    pub timings: Timings,
}

#[derive(Debug, Clone, Serialize)]
/// One decided group, for a trainer.
pub struct GroupRecord {
    /// Its id.
    pub group_id: String,
    /// Its task.
    pub task_id: String,
    /// emitted | abandoned
    pub outcome: String,
    /// Why it stopped, in words.
    pub reason: String,
    /// The emitted rollouts (ids), in launch order.
    pub selected: Vec<String>,
    /// The selected rollouts' rewards.
    pub rewards: Vec<f64>,
    /// `reward − baseline` for each selected rollout.
    pub advantages: Vec<f64>,
    /// What each reward is compared with.
    pub baseline: f64,
    /// `posterior_mean` (BAR) or `group_mean`.
    pub baseline_kind: &'static str,
    /// Rollouts launched for it.
    pub generated: u32,
    /// Passed rollouts counted.
    pub positives: u32,
    /// Failed rollouts counted.
    pub negatives: u32,
    /// Rollouts the environment failed (not counted).
    pub env_errors: u32,
    /// Rollouts the model failed (not counted).
    pub model_errors: u32,
    /// The task's posterior mean pass rate after this group.
    pub estimated_pass_rate: f64,
    /// The policy version its rollouts sampled from.
    pub policy_version: Option<String>,
    /// Every BAR decision, in order.
    pub decisions: Vec<orchard_bar::Decision>,
}

/// What kind of ending a finished rollout had; `doc` is its trajectory document.
pub fn classify(result: &RolloutResult, doc: &Value) -> RolloutKind {
    match result.status {
        RolloutStatus::Graded => {
            if result.outcome.as_ref().is_some_and(|o| o.status == orchard_runtime::Status::LimitReached) {
                RolloutKind::Truncated
            } else {
                RolloutKind::Completed
            }
        }
        RolloutStatus::Unknown => RolloutKind::EnvError,
        RolloutStatus::Error => match result.failed_in {
            Some(orchard_eval::FailureClass::Model) => RolloutKind::ModelError,
            Some(_) => RolloutKind::EnvError,
            // A result stored before failures were typed: read from its trajectory.
            None => {
                let model_failed = doc["trajectory"]["steps"]
                    .as_array()
                    .is_some_and(|steps| steps.iter().any(|s| s["type"] == "model_error"));
                if model_failed { RolloutKind::ModelError } else { RolloutKind::EnvError }
            }
        },
    }
}

/// The record of a finished rollout.
pub fn rollout_record(
    result: &RolloutResult,
    doc: &Value,
    group_id: &str,
    index: usize,
    policy_version: Option<String>,
) -> RolloutRecord {
    let status = classify(result, doc);
    let reward_parts = match &result.verdict {
        Some(orchard_runtime::Verdict::Graded { sub_scores, .. }) => sub_scores.iter().cloned().collect(),
        _ => BTreeMap::new(),
    };
    let openai = orchard_eval::export::openai(doc);
    RolloutRecord {
        rollout_id: result.rollout_id.clone(),
        group_id: group_id.to_string(),
        task_id: result.task_id.clone(),
        index,
        attempt: result.attempt,
        status,
        counted: status.counted(),
        surplus: false,
        reward: if status.counted() { result.reward } else { None },
        passed: status.counted() && result.passed,
        reward_parts,
        error: result.error.clone().or_else(|| {
            (status == RolloutKind::EnvError && result.status == RolloutStatus::Unknown)
                .then(|| "the grader could not decide".to_string())
        }),
        policy_version,
        segments: doc.get("segments").cloned().unwrap_or(Value::Array(vec![])),
        messages: openai["messages"].clone(),
        tools: openai.get("tools").cloned().unwrap_or(Value::Array(vec![])),
        timings: Timings {
            agent_seconds: result.agent_seconds,
            grade_seconds: result.grade_seconds,
            total_seconds: result.total_seconds,
        },
    }
}
