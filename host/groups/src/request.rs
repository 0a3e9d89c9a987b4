//! What a trainer asks for: tasks (one group each), the harness, tools and grader, the policy's
//! endpoint with its sampling and version, the group size, and BAR's options.

use std::collections::BTreeMap;

use orchard_scheduler::{EvalSpec, ModelSpec, TaskSource};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
/// `POST /v1/groups`: which tasks, how many rollouts each, run how.
pub struct GroupRequest {
    /// Where the tasks are: an uploaded archive or a registered dataset.
    pub tasks: TaskSource,
    /// One group per task id (the same id twice gives two groups).
    pub task_ids: Vec<String>,
    /// The harness plugin.
    pub harness: String,
    #[serde(default)]
    /// Tool adapters offered to the harness.
    pub tools: Vec<String>,
    /// The grader plugin.
    pub grader: String,
    /// The policy's OpenAI-compatible endpoint. Token ids and logprobs are always asked for;
    /// `sampling` is fixed for every request whatever the harness asks. Needed by every
    /// harness that calls a model (all but `oracle`).
    #[serde(default)]
    pub model: Option<ModelSpec>,
    #[serde(default)]
    /// The model a judging grader calls.
    pub grader_model: Option<ModelSpec>,
    /// Recorded with every model call and rollout (overrides `model.policy_version`).
    #[serde(default)]
    pub policy_version: Option<String>,
    /// Rollouts per emitted group (G).
    #[serde(default = "eight")]
    pub size: u32,
    /// Grow groups with BAR; without it every group is exactly `size` rollouts, emitted whole.
    #[serde(default)]
    pub bar: Option<BarOptions>,
    /// Rollouts the environment failed are run again this many times per slot before the slot
    /// is given up (never counted as a negative either way).
    #[serde(default = "two")]
    pub env_retries: u32,
    /// The most rollouts this request may launch, over every group (retries included). Groups
    /// are not given rollouts past it: one that cannot be completed is abandoned ("budget").
    #[serde(default)]
    pub budget: Option<u32>,
    /// Stop once this many groups were emitted: the groups still growing are ended
    /// (abandoned, "enough groups") and what they were running is cancelled.
    #[serde(default)]
    pub groups: Option<u32>,
    #[serde(default)]
    /// Grants given to the plugins (`solution`, ...).
    pub grants: Vec<String>,
    #[serde(default = "host")]
    /// The sandboxes' image.
    pub image: String,
    /// Handed to the harness.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    #[serde(default)]
    /// Configuration per tool adapter.
    pub tool_config: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
/// How BAR grows groups.
pub struct BarOptions {
    /// At least a quarter of each outcome per group, not just one.
    #[serde(default)]
    pub balanced: bool,
    /// Most rollouts per group (default 2 × size).
    #[serde(default)]
    pub cap: Option<u32>,
    /// Rollouts per top-up (default size / 4).
    #[serde(default)]
    pub stride: Option<u32>,
    /// Abandon when a usable group within the cap is less likely than this (default 0.1).
    #[serde(default)]
    pub abandon_below: Option<f64>,
    /// The first launch of a group (default G/4, at least 2): a task that gives the same
    /// outcome every time costs this many rollouts before it is abandoned, not G.
    #[serde(default)]
    pub probe: Option<u32>,
    /// Keep growing a group only while a usable group is at least this many times as likely as
    /// a fresh task's would be mixed (default 1: the next rollouts would do better elsewhere).
    #[serde(default)]
    pub opportunity: Option<f64>,
    /// Admit each task with probability p(mixed group)⁶ (at least 0.03) under its posterior;
    /// skipped tasks get a `skipped` record. Default true.
    #[serde(default)]
    pub admit: Option<bool>,
    /// The prior every task starts from (`pi0`, `a`, `b`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub prior: Option<orchard_bar::Prior>,
    /// A finished evaluation of these tasks (a warm-up `--attempts K`): the prior is fitted to
    /// its pass counts and each task's posterior starts from its own.
    #[serde(default)]
    pub prior_from: Option<String>,
    /// Seeds the admission draws (the same seed, tasks and evidence admit the same tasks).
    #[serde(default)]
    pub seed: u64,
}

fn eight() -> u32 {
    8
}
fn two() -> u32 {
    2
}
fn host() -> String {
    "host".into()
}
fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}

/// Most rollouts one group may ask for.
pub const MAX_SIZE: u32 = 256;

impl GroupRequest {
    /// The first field that is not acceptable, by name.
    pub fn check(&self) -> Result<(), String> {
        if self.task_ids.is_empty() {
            return Err("task_ids: give at least one".into());
        }
        if self.task_ids.len() > 4096 {
            return Err("task_ids: at most 4096 groups per request".into());
        }
        if !(2..=MAX_SIZE).contains(&self.size) {
            return Err(format!("size: between 2 and {MAX_SIZE}"));
        }
        if self.env_retries > 10 {
            return Err("env_retries: at most 10".into());
        }
        if self.budget == Some(0) {
            return Err("budget: at least 1 rollout".into());
        }
        if let Some(g) = self.groups
            && (g == 0 || g as usize > self.task_ids.len())
        {
            return Err(format!("groups: between 1 and the number of task_ids ({})", self.task_ids.len()));
        }
        if let Some(bar) = &self.bar {
            if let Some(cap) = bar.cap
                && !(self.size..=4 * self.size).contains(&cap)
            {
                return Err(format!("bar.cap: between size and 4 × size ({}..={})", self.size, 4 * self.size));
            }
            if bar.stride == Some(0) {
                return Err("bar.stride: at least 1".into());
            }
            if bar.probe.is_some_and(|p| p == 0 || p > self.size) {
                return Err(format!("bar.probe: between 1 and size ({})", self.size));
            }
            if bar.opportunity.is_some_and(|o| !(0.0..=4.0).contains(&o)) {
                return Err("bar.opportunity: between 0 and 4".into());
            }
            if let Some(p) = bar.abandon_below
                && !(0.0..=1.0).contains(&p)
            {
                return Err("bar.abandon_below: a probability".into());
            }
            if let Some(p) = bar.prior
                && !(p.pi0 >= 0.0 && p.pi0 < 1.0 && p.a > 0.0 && p.b > 0.0)
            {
                return Err("bar.prior: pi0 in [0, 1), a and b positive".into());
            }
        }
        self.spec().check()
    }

    /// The group's cap: the most rollouts it may run (retries of environment errors aside).
    pub fn cap(&self) -> u32 {
        self.bar.as_ref().map(|b| b.cap.unwrap_or(2 * self.size)).unwrap_or(self.size)
    }

    /// The job each group runs as (one task, one harness; attempts are added as it grows).
    pub fn spec(&self) -> EvalSpec {
        let model = self.model.clone().map(|mut model| {
            model.logprobs = true;
            if self.policy_version.is_some() {
                model.policy_version = self.policy_version.clone();
            }
            model
        });
        EvalSpec {
            tasks: self.tasks.clone(),
            harnesses: vec![self.harness.clone()],
            tools: self.tools.clone(),
            grader: self.grader.clone(),
            model,
            grader_model: self.grader_model.clone(),
            attempts: self.cap().max(1),
            concurrency: self.cap().max(1) as usize,
            grants: self.grants.clone(),
            image: self.image.clone(),
            config: self.config.clone(),
            harness_config: BTreeMap::new(),
            tool_config: self.tool_config.clone(),
            plugin_cpu: 120.0,
            plugin_memory: "512Mi".into(),
            pins: BTreeMap::new(),
        }
    }

    /// The group configuration these options make.
    pub fn group_config(&self) -> orchard_bar::GroupConfig {
        let mut c = orchard_bar::GroupConfig::new(self.size);
        if let Some(bar) = &self.bar {
            c.cap = self.cap();
            c.balanced = bar.balanced;
            if let Some(s) = bar.stride {
                c.stride = s;
            }
            if let Some(p) = bar.abandon_below {
                c.abandon_below = p;
            }
            c.first = Some(bar.probe.unwrap_or((self.size / 4).max(2)).clamp(1, self.size));
            c.opportunity = bar.opportunity.unwrap_or(orchard_bar::DEFAULT_OPPORTUNITY);
        }
        c
    }

    /// The policy version recorded with the rollouts.
    pub fn policy_version(&self) -> Option<String> {
        self.policy_version.clone().or_else(|| self.model.as_ref().and_then(|m| m.policy_version.clone()))
    }
}
