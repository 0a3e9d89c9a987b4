//! A rollout's result: its status, reward and verdict, the plugins that ran, where grading
//! happened, and the trajectory (the file `rollouts/<id>.json` and a store row are this).

use orchard_runtime::{PluginFailure, RunOutcome, Trajectory, Verdict};
use serde::{Deserialize, Serialize};

/// Where a rollout failed. Only `Model` is the policy's endpoint; every other class is the
/// environment's (never a reward, never a negative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// The sandbox could not be created or reached.
    Sandbox,
    /// The task's environment could not be prepared (files, its service, a verifier sandbox).
    Environment,
    /// The harness or a tool adapter failed (a trap, its own error, its configuration).
    Plugin,
    /// The model endpoint failed the harness.
    Model,
    /// The grader failed (it could not grade at all: an unknown grade is not a failure).
    Grader,
    /// A plugin ran out of its CPU, memory or wall-clock budget.
    Limit,
    /// The host itself failed (a bug in Orchard, such as a panic while running the rollout).
    Host,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How a rollout ended.
pub enum RolloutStatus {
    /// Graded: `reward` and `passed` hold.
    Graded,
    /// The grader could not decide.
    Unknown,
    /// The rollout failed before a grade (a plugin fault, a sandbox that would not start).
    Error,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
/// One rollout: what ran, how it ended, what it was graded, and its trajectory.
pub struct RolloutResult {
    /// Its id.
    pub rollout_id: String,
    /// Its task.
    pub task_id: String,
    /// The task's domain (see `Task::domain`), for per-domain summaries.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub domain: String,
    /// Its attempt (0-based).
    pub attempt: u32,
    /// The harness plugin.
    pub harness: String,
    /// The tool adapters offered.
    pub tools: Vec<String>,
    /// The grader.
    pub grader: String,
    /// The content hash (sha256) of each plugin the rollout ran, by `name@version`.
    #[serde(default)]
    pub plugins: std::collections::BTreeMap<String, String>,
    /// The model the harness called.
    pub model: Option<String>,
    /// Graded, unknown or errored.
    pub status: RolloutStatus,
    /// The grader's reward.
    pub reward: Option<f64>,
    /// Whether it passed.
    pub passed: bool,
    /// The grader's whole verdict.
    pub verdict: Option<Verdict>,
    /// How the harness's run ended.
    pub outcome: Option<RunOutcome>,
    /// What failed, if it did.
    pub error: Option<String>,
    /// A plugin's failure, when one failed.
    pub failure: Option<PluginFailure>,
    /// Where an errored rollout failed, typed where it happened (never guessed afterwards from
    /// the trajectory): what a trainer, the API and the UI branch on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_in: Option<FailureClass>,
    /// The sandbox it ran in.
    pub sandbox_id: Option<String>,
    /// The harness's run, in seconds.
    pub agent_seconds: f64,
    /// Grading, in seconds.
    pub grade_seconds: f64,
    /// All of it, sandbox included, in seconds.
    pub total_seconds: f64,
    /// Where the grader worked and, in a separate environment, what was carried into it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<VerifierRecord>,
    /// A multi-step task's steps, as far as they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<crate::steps::StepRecord>,
    /// Why a multi-step task stopped before its last step (a `min_reward` not met).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    #[serde(skip)]
    /// Every step: model calls, tool calls, observations.
    pub trajectory: Trajectory,
}

/// The verifier's environment of one rollout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VerifierRecord {
    /// Where it was graded: in its own sandbox or a separate one.
    pub environment: orchard_verifier::Mode,
    /// The verifier's own sandbox (separate environments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// What was carried and dropped (separate environments).
    #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
    pub carry: Option<orchard_verifier::CarryReport>,
    /// Creating, preparing and carrying into the verifier's sandbox.
    pub setup_seconds: f64,
}

impl RolloutResult {
    /// The id of a rollout: `<task>__<harness name>__<attempt>`, the name of its file in
    /// `rollouts/`.
    pub fn id_for(task_id: &str, harness_id: &str, attempt: u32) -> String {
        let harness_name = harness_id.split('@').next().unwrap_or(harness_id);
        format!("{task_id}__{harness_name}__{attempt}")
    }

    /// A rollout not yet run: an error until it says otherwise.
    pub fn pending(task_id: &str, harness_id: &str, attempt: u32) -> RolloutResult {
        RolloutResult {
            rollout_id: Self::id_for(task_id, harness_id, attempt),
            task_id: task_id.into(),
            domain: String::new(),
            attempt,
            harness: harness_id.into(),
            tools: vec![],
            grader: String::new(),
            plugins: Default::default(),
            model: None,
            status: RolloutStatus::Error,
            reward: None,
            passed: false,
            verdict: None,
            outcome: None,
            error: None,
            failure: None,
            failed_in: None,
            sandbox_id: None,
            agent_seconds: 0.0,
            grade_seconds: 0.0,
            total_seconds: 0.0,
            verifier: None,
            steps: Vec::new(),
            stopped: None,
            trajectory: Trajectory::default(),
        }
    }
}
