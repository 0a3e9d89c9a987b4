//! Rollouts: a harness run (with its tool adapters) and a grading, each plugin instance in a
//! fresh store with its own limits.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use wasmtime::{Store, StoreLimitsBuilder, UpdateDeadline};

use crate::engine::Runtime;
use crate::failure::{CPU_EXCEEDED, within_wall_clock};
use crate::failure::{FailureKind, PluginFailure};
use crate::host::{HostState, ToolRouter};
use crate::manifest::{Capability, PluginKind};
use crate::plugin::Plugin;

pub use crate::context::RolloutContext;

#[derive(Debug, Clone, Copy)]
/// Limits of one plugin instance.
pub struct Limits {
    /// Largest linear memory per plugin instance.
    pub memory_bytes: u64,
    /// Guest CPU per plugin instance (time waiting on the host is not counted).
    pub cpu: Duration,
    /// Wall clock for the whole call (harness run or grading).
    pub wall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { memory_bytes: 512 << 20, cpu: Duration::from_secs(60), wall: Duration::from_secs(3600) }
    }
}

/// Capabilities the operator allows for a run. A plugin gets those it also asks for.
#[derive(Debug, Clone)]
pub struct Grants(pub BTreeSet<Capability>);

impl Default for Grants {
    fn default() -> Self {
        Grants(
            [
                Capability::Sandbox,
                Capability::Model,
                Capability::Tools,
                Capability::Browser,
                Capability::Desktop,
                Capability::Log,
            ]
            .into(),
        )
    }
}

impl Grants {
    /// Whether a capability is granted.
    pub fn allows(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }
}

/// Puts a run's tools in its context, and takes them out again however the run ends (including
/// a wall-clock timeout that drops the run's future).
struct ToolsInUse<'a>(&'a RolloutContext);

impl<'a> ToolsInUse<'a> {
    fn set(ctx: &'a RolloutContext, router: Arc<ToolRouter>) -> Self {
        *ctx.tools.lock().unwrap_or_else(|p| p.into_inner()) = Some(router);
        ToolsInUse(ctx)
    }
}

impl Drop for ToolsInUse<'_> {
    fn drop(&mut self) {
        self.0.tools.lock().unwrap_or_else(|p| p.into_inner()).take();
    }
}

/// A task as plugins see it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TaskInput {
    /// The task's id.
    pub id: String,
    /// What the agent is asked.
    pub instruction: String,
    /// The task's metadata.
    pub metadata: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// How a harness's run ended.
pub enum Status {
    /// It finished.
    Completed,
    /// It reached a step or token limit.
    LimitReached,
    /// The model's output could not be parsed.
    FormatError,
    /// It stopped without finishing.
    GaveUp,
}

/// How the harness said its run ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunOutcome {
    /// How it ended.
    pub status: Status,
    /// The agent's answer, if it gave one.
    pub answer: Option<String>,
    /// Steps taken.
    pub steps: u32,
    /// Why, in words.
    pub message: Option<String>,
}

/// A grader's decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// A reward.
    Graded {
        /// In [0, 1].
        reward: f64,
        /// Whether it passed.
        passed: bool,
        /// Named parts of the reward.
        sub_scores: Vec<(String, f64)>,
        /// Why.
        explanation: String,
    },
    /// The grader could not decide; not a zero.
    Unknown {
        /// Why not.
        reason: String,
    },
}

impl Runtime {
    pub(crate) fn new_store(
        &self,
        plugin: &Plugin,
        ctx: &Arc<RolloutContext>,
        limits: &Limits,
        grants: &Grants,
    ) -> Store<HostState> {
        let granted = plugin.manifest.capabilities.iter().copied().filter(|c| grants.allows(*c)).collect();
        let store_limits = StoreLimitsBuilder::new()
            .memory_size(limits.memory_bytes as usize)
            .instances(64)
            .tables(64)
            .memories(16)
            .trap_on_grow_failure(true)
            .build();
        let state = HostState::new(
            plugin.id(),
            plugin.kind() == PluginKind::Grader,
            granted,
            ctx.clone(),
            store_limits,
            limits.cpu,
            self.ticker.ticking(),
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // Checked every tick: over budget traps; otherwise yield, so that one busy plugin does
        // not hold an executor thread from other rollouts.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(|mut ctx| {
            let meter = &mut ctx.data_mut().meter;
            if meter.sample() > meter.budget_ns {
                return Err(wasmtime::Error::msg(CPU_EXCEEDED));
            }
            Ok(UpdateDeadline::Yield(1))
        });
        store
    }

    /// Instantiates a rollout's plugins (harness, adapters, grader), each in a fresh store, and
    /// drops them: what a rollout pays before its first call. For benchmarks.
    pub async fn instantiate_rollout(
        &self,
        ctx: &Arc<RolloutContext>,
        plugins: &[Arc<Plugin>],
        limits: &Limits,
        grants: &Grants,
    ) -> Result<(), PluginFailure> {
        for plugin in plugins {
            let mut store = self.new_store(plugin, ctx, limits, grants);
            let fail = |e: wasmtime::Error, store: &Store<HostState>| {
                PluginFailure::from_error(plugin, "instantiate", e, store)
            };
            plugin.pre.instantiate(&mut store).await.map_err(|e| fail(e, &store))?;
        }
        Ok(())
    }

    /// The tools a tool adapter or browser driver offers under `config` (its tool configuration,
    /// as a task's `[metadata.tool_config.NAME]` gives it): name, description, JSON Schema.
    pub async fn list_tools(
        &self,
        plugin: &Arc<Plugin>,
        config: serde_json::Value,
    ) -> Result<Vec<crate::ToolSpec>, PluginFailure> {
        let ctx = RolloutContext::new("list-tools", None, None);
        ctx.set_tool_config([(plugin.manifest.name.clone(), config)].into());
        let mut store = self.new_store(plugin, &ctx, &Limits::default(), &Grants::default());
        let fail = |call: &str, e: wasmtime::Error, store: &Store<HostState>| {
            PluginFailure::from_error(plugin, call, e, store)
        };
        match plugin.pre.bind_tools(&mut store).await.map_err(|(call, e)| fail(call, e, &store))? {
            Some((_, specs)) => Ok(specs),
            None => Err(PluginFailure::config(plugin, "not a tool adapter or browser driver".into())),
        }
    }

    /// Calls `tools.list` on one tool-adapter instance `n` times: the host→guest call cost.
    /// Returns the time per call. For benchmarks.
    pub async fn time_tools_list(&self, plugin: &Arc<Plugin>, n: u32) -> Result<Duration, PluginFailure> {
        let ctx = RolloutContext::new("bench", None, None);
        let mut store = self.new_store(plugin, &ctx, &Limits::default(), &Grants::default());
        let fail = |call: &str, e: wasmtime::Error, store: &Store<HostState>| {
            PluginFailure::from_error(plugin, call, e, store)
        };
        let Some((bound, _)) = plugin.pre.bind_tools(&mut store).await.map_err(|(call, e)| fail(call, e, &store))?
        else {
            return Err(PluginFailure::config(plugin, "not a tool adapter".into()));
        };
        let started = Instant::now();
        for _ in 0..n {
            bound.list(&mut store).await.map_err(|e| fail("tools.list", e, &store))?;
        }
        Ok(started.elapsed() / n.max(1))
    }

    /// Runs a harness on a task with the given tool adapters. The trajectory accumulates in `ctx`.
    #[allow(clippy::too_many_arguments)]
    pub async fn run_harness(
        &self,
        ctx: &Arc<RolloutContext>,
        harness: &Arc<Plugin>,
        adapters: &[Arc<Plugin>],
        task: &TaskInput,
        config: &serde_json::Value,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<RunOutcome, PluginFailure> {
        if harness.pre.kind() != crate::PluginKind::Harness {
            return Err(PluginFailure::config(
                harness,
                format!("{} is a {}, not a harness", harness.id(), harness.kind()),
            ));
        }
        let work = async {
            let router = ToolRouter::build(self, ctx, adapters, limits, grants).await?;
            let router = Arc::new(router);
            let _in_use = ToolsInUse::set(ctx, router.clone());
            let mut store = self.new_store(harness, ctx, limits, grants);
            let result = harness.pre.run(&mut store, task, &config.to_string()).await.expect("checked above");
            ctx.record_output(store.data());
            router.drain_output().await;
            let result = result.map_err(|(call, e)| PluginFailure::from_error(harness, call, e, &store))?;
            // An adapter that failed under the harness fails the rollout, whatever the harness made of it.
            if let Some(fatal) = ctx.take_fatal() {
                return Err(fatal);
            }
            match result {
                Ok(outcome) => Ok(outcome),
                Err(e) => Err(PluginFailure::returned(harness, "agent.run", e)),
            }
        };
        within_wall_clock(harness, "agent.run", limits.wall, work).await
    }

    /// Grades a finished run, in `environment` (the agent's sandbox or a separate verifier's).
    #[allow(clippy::too_many_arguments)]
    pub async fn run_grader(
        &self,
        ctx: &Arc<RolloutContext>,
        grader: &Arc<Plugin>,
        task: &TaskInput,
        outcome: &RunOutcome,
        environment: &GradingEnvironment,
        limits: &Limits,
        grants: &Grants,
    ) -> Result<Verdict, PluginFailure> {
        if grader.pre.kind() != crate::PluginKind::Grader {
            return Err(PluginFailure::config(grader, format!("{} is a {}, not a grader", grader.id(), grader.kind())));
        }
        let t = ctx.trajectory();
        ctx.grading.store(true, std::sync::atomic::Ordering::SeqCst);
        let duration_ms = ctx.started.elapsed().as_millis() as u64;
        let work = async {
            let mut store = self.new_store(grader, ctx, limits, grants);
            let input = crate::contract::GradeInput { task, outcome, trajectory: &t, duration_ms, environment };
            let result = grader.pre.grade(&mut store, &input).await.expect("checked above");
            ctx.record_output(store.data());
            match result.map_err(|(call, e)| PluginFailure::from_error(grader, call, e, &store))? {
                Ok(verdict) => Ok(verdict),
                Err(e) => Err(PluginFailure::returned(grader, "grading.grade", e)),
            }
        };
        let verdict = within_wall_clock(grader, "grading.grade", limits.wall, work).await;
        match verdict {
            // A grader past its own limits decided nothing: unknown, never a pass or a zero.
            Err(f) if matches!(f.kind, FailureKind::WallClock | FailureKind::CpuBudget | FailureKind::Memory) => {
                Ok(Verdict::Unknown { reason: format!("the grader exceeded its limits: {f}") })
            }
            Ok(v) => Ok(v.bounded()),
            Err(f) => Err(f),
        }
    }
}

/// Where a grader works, as contract 0.2.0's `grading.environment` tells it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GradingEnvironment {
    /// A separate verifier's clean sandbox, not the agent's.
    pub separate: bool,
    /// The commit a carried repository's diff was taken against.
    pub base_commit: Option<String>,
    /// What was carried from the agent's sandbox.
    pub carried: Vec<String>,
    /// (path, why)
    pub dropped: Vec<(String, String)>,
    /// Artifacts collected.
    pub artifacts: Vec<String>,
    /// Why the environment could not be made as declared, if it could not.
    pub problem: Option<String>,
}

/// The most a grader may answer (explanation and sub-score names together).
pub const GRADER_OUTPUT_LIMIT: usize = 1 << 20;

impl Verdict {
    /// A verdict within the grader's output limit and with a finite reward; otherwise unknown.
    fn bounded(self) -> Verdict {
        match self {
            Verdict::Graded { ref sub_scores, ref explanation, .. }
                if explanation.len() + sub_scores.iter().map(|(n, _)| n.len() + 8).sum::<usize>()
                    > GRADER_OUTPUT_LIMIT =>
            {
                Verdict::Unknown {
                    reason: format!(
                        "the grader's answer is over its output limit of {GRADER_OUTPUT_LIMIT} bytes (explanation {} bytes, {} sub-scores)",
                        explanation.len(),
                        sub_scores.len()
                    ),
                }
            }
            Verdict::Graded { reward, .. } if !reward.is_finite() => {
                Verdict::Unknown { reason: format!("the grader answered a reward of {reward}, not a number") }
            }
            Verdict::Graded { ref sub_scores, .. } if sub_scores.iter().any(|(_, v)| !v.is_finite()) => {
                Verdict::Unknown { reason: "the grader answered a sub-score that is not a number".into() }
            }
            Verdict::Unknown { reason } if reason.len() > GRADER_OUTPUT_LIMIT => {
                let mut cut = 4096;
                while !reason.is_char_boundary(cut) {
                    cut -= 1;
                }
                Verdict::Unknown { reason: format!("{}… ({} bytes, cut)", &reason[..cut], reason.len()) }
            }
            v => v,
        }
    }
}
