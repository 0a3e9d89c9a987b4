//! Rollouts: a harness run (with its tool adapters) and a grading, each plugin instance in a
//! fresh store with its own limits.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orchard_agent_client::AgentClient;
use orchard_model::ModelClient;
use serde::{Deserialize, Serialize};
use wasmtime::{Store, StoreLimitsBuilder, UpdateDeadline};

use crate::contract::v0_1::{ContentPart, ToolCall, ToolOutput, WitError};
use crate::engine::Runtime;
use crate::failure::{CPU_EXCEEDED, within_wall_clock};
use crate::failure::{FailureKind, PluginFailure};
use crate::host::{HostState, ToolRouter};
use crate::manifest::{Capability, PluginKind};
use crate::plugin::Plugin;
use crate::trajectory::{Step, Trajectory};

#[derive(Debug, Clone, Copy)]
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
        Grants([Capability::Sandbox, Capability::Model, Capability::Tools, Capability::Browser, Capability::Log].into())
    }
}

impl Grants {
    pub fn allows(&self, c: Capability) -> bool {
        self.0.contains(&c)
    }
}

/// Everything one rollout's plugins share: its sandbox, its model, its tools, its trajectory.
pub struct RolloutContext {
    pub task_id: String,
    pub sandbox: Option<Arc<AgentClient>>,
    pub model: Option<Arc<ModelClient>>,
    /// The run's tool adapters, while the harness runs. Their stores point back at this context,
    /// so the router must be dropped when the run ends (see `ToolsInUse`), or every rollout's
    /// instances would stay alive (and hold pool slots) for ever.
    pub(crate) tools: Mutex<Option<Arc<ToolRouter>>>,
    trajectory: Mutex<Trajectory>,
    fatal: Mutex<Option<PluginFailure>>,
    pub(crate) started: Instant,
    /// Set when the grader's turn comes: its model calls are recorded apart from the run's.
    grading: std::sync::atomic::AtomicBool,
    /// The grader's own endpoint (a judge model), when it differs from the run's.
    grader_model: std::sync::OnceLock<Arc<ModelClient>>,
    /// The clean sandbox the grader works in, when the task is verified apart from the agent's.
    verifier_sandbox: std::sync::OnceLock<Arc<AgentClient>>,
    /// How this rollout's browser is started (in the sandbox's network), when it may have one.
    browser_options: std::sync::OnceLock<orchard_browser::BrowserOptions>,
    /// The rollout's browser, started at the first tab a plugin opens; killed with the context.
    browser: tokio::sync::OnceCell<Result<Arc<orchard_browser::Browser>, String>>,
    /// Each tool adapter's and browser driver's configuration, by plugin name (`config.get`).
    tool_config: std::sync::OnceLock<std::collections::BTreeMap<String, serde_json::Value>>,
}

impl RolloutContext {
    pub fn new(task_id: &str, sandbox: Option<Arc<AgentClient>>, model: Option<Arc<ModelClient>>) -> Arc<Self> {
        Arc::new(RolloutContext {
            task_id: task_id.to_string(),
            sandbox,
            model,
            tools: Mutex::new(None),
            trajectory: Mutex::new(Trajectory::default()),
            fatal: Mutex::new(None),
            started: Instant::now(),
            grading: std::sync::atomic::AtomicBool::new(false),
            grader_model: std::sync::OnceLock::new(),
            verifier_sandbox: std::sync::OnceLock::new(),
            browser_options: std::sync::OnceLock::new(),
            browser: tokio::sync::OnceCell::new(),
            tool_config: std::sync::OnceLock::new(),
        })
    }

    /// Lets the rollout's plugins open browser tabs: one Chromium, started as `options` say at
    /// the first `session.open`.
    pub fn set_browser(&self, options: orchard_browser::BrowserOptions) {
        let _ = self.browser_options.set(options);
    }

    /// The configuration each plugin gets from `config.get`, by plugin name.
    pub fn set_tool_config(&self, config: std::collections::BTreeMap<String, serde_json::Value>) {
        let _ = self.tool_config.set(config);
    }

    /// `plugin`'s configuration (a JSON object; `{}` when none was chosen).
    pub(crate) fn tool_config(&self, plugin: &str) -> serde_json::Value {
        self.tool_config.get().and_then(|c| c.get(plugin)).cloned().unwrap_or_else(|| serde_json::json!({}))
    }

    /// A new tab of the rollout's browser (started now if it is not yet).
    pub(crate) async fn open_tab(&self) -> Result<Arc<orchard_browser::Tab>, orchard_browser::BrowserError> {
        let options = self.browser_options.get().ok_or_else(|| {
            orchard_browser::BrowserError::Unconfigured("no browser is configured for this run".into())
        })?;
        let browser = self
            .browser
            .get_or_init(|| async {
                if options.in_sandbox {
                    return self.browser_in_sandbox(options).await;
                }
                orchard_browser::Browser::launch(options.clone()).await.map(Arc::new).map_err(|e| e.to_string())
            })
            .await
            .as_ref()
            .map_err(|e| orchard_browser::BrowserError::Launch(e.clone()))?;
        browser.open().await.map(Arc::new)
    }

    /// A browser the sandbox's agent starts inside the sandbox, its DevTools pipe relayed over
    /// the agent's connection.
    async fn browser_in_sandbox(
        &self,
        options: &orchard_browser::BrowserOptions,
    ) -> Result<Arc<orchard_browser::Browser>, String> {
        let agent = self.sandbox.clone().ok_or("this run has no sandbox to start a browser in")?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let profile = format!("/tmp/orchard-chromium-{nanos:x}");
        let mut argv = vec![options.binary.display().to_string()];
        argv.extend(orchard_browser::command_line(options, &profile));
        let stream = agent.open_browser(&argv).await.map_err(|e| format!("starting chromium in the sandbox: {e}"))?;
        orchard_browser::Browser::over(stream, options.clone()).await.map(Arc::new).map_err(|e| e.to_string())
    }

    /// How the rollout's browser ended, if it has one and it has.
    pub(crate) fn browser_exit(&self) -> Option<String> {
        self.browser.get()?.as_ref().ok()?.exit_reason()
    }

    /// Ends the rollout's browser (if one was started), recording its memory at the end in the
    /// trajectory.
    pub fn close_browser(&self) {
        let Some(Ok(browser)) = self.browser.get() else { return };
        let detail = serde_json::json!({
            "rss_bytes": browser.rss_bytes(),
            "exit": browser.exit_reason(),
        });
        browser.kill();
        let at_ms = self.started.elapsed().as_millis() as u64;
        self.record(Step::Sandbox { plugin: "host".into(), op: "browser-close".into(), detail, at_ms, duration_ms: 0 });
    }

    /// Gives the grader a sandbox of its own (a separate verifier environment) instead of the
    /// agent's.
    pub fn set_verifier_sandbox(&self, sandbox: Arc<AgentClient>) {
        let _ = self.verifier_sandbox.set(sandbox);
    }

    /// The sandbox a `sandbox` call reaches now: the verifier's while grading, if it has one.
    pub(crate) fn current_sandbox(&self) -> Option<Arc<AgentClient>> {
        match self.verifier_sandbox.get() {
            Some(s) if self.is_grading() => Some(s.clone()),
            _ => self.sandbox.clone(),
        }
    }

    /// Gives the grader its own model endpoint (e.g. a judge), instead of the run's.
    pub fn set_grader_model(&self, model: Arc<ModelClient>) {
        let _ = self.grader_model.set(model);
    }

    fn is_grading(&self) -> bool {
        self.grading.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The endpoint a `model` call goes to now: the grader's own while grading, if it has one.
    pub(crate) fn current_model(&self) -> Option<Arc<ModelClient>> {
        match self.grader_model.get() {
            Some(m) if self.is_grading() => Some(m.clone()),
            _ => self.model.clone(),
        }
    }

    /// Milliseconds since the rollout started.
    pub fn at_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub fn trajectory(&self) -> Trajectory {
        self.trajectory.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn record(&self, step: Step) {
        self.trajectory.lock().unwrap_or_else(|p| p.into_inner()).steps.push(step);
    }

    /// Records a model call; `(at_ms, duration_ms)` is when it started in the rollout and how
    /// long it took.
    pub(crate) fn record_model_call(
        &self,
        plugin: &str,
        (request, tools): (Vec<orchard_model::Message>, Vec<orchard_model::ToolSpec>),
        sampling: &orchard_model::Sampling,
        c: &orchard_model::Completion,
        (at_ms, duration_ms): (u64, u64),
    ) {
        let grading = self.is_grading();
        let mut t = self.trajectory.lock().unwrap_or_else(|p| p.into_inner());
        t.steps.push(Step::ModelCall {
            plugin: plugin.into(),
            at_ms,
            duration_ms,
            request_messages: request.len(),
            tools: tools.iter().map(|s| s.name.clone()).collect(),
            response: c.message.clone(),
            finish_reason: c.finish_reason,
            usage: c.usage,
            model: c.model.clone(),
            attempts: c.attempts,
            logprobs: c.logprobs.clone(),
            token_ids: c.token_ids.clone(),
            prompt_token_ids: c.prompt_token_ids.clone(),
            policy_version: c.policy_version.clone(),
        });
        // A judge's calls are steps of the record, but the conversation, tools, sampling and
        // usage stay the run's: they are what exports train on.
        if grading {
            return;
        }
        if t.opening.is_empty() {
            t.opening = request.iter().take_while(|m| m.role != orchard_model::Role::Assistant).cloned().collect();
        }
        t.conversation = request;
        t.conversation.push(c.message.clone());
        t.tools = tools;
        t.sampling = Some(sampling.clone());
        t.usage.prompt_tokens += c.usage.prompt_tokens;
        t.usage.completion_tokens += c.usage.completion_tokens;
        t.usage.total_tokens += c.usage.total_tokens;
        t.model_calls += 1;
    }

    pub(crate) fn record_tool_call(
        &self,
        plugin: &str,
        adapter: &str,
        call: &ToolCall,
        result: &Result<ToolOutput, WitError>,
        at_ms: u64,
        duration_ms: u64,
    ) {
        let (output, is_error) = match result {
            Ok(out) => (text_of(&out.content), out.is_error),
            Err(e) => (format!("error: {}", crate::contract::v0_1::convert::error_text(e)), true),
        };
        let mut t = self.trajectory.lock().unwrap_or_else(|p| p.into_inner());
        t.steps.push(Step::ToolCall {
            plugin: plugin.into(),
            adapter: adapter.into(),
            call: crate::contract::v0_1::convert::call_to_model(call),
            output: output.clone(),
            is_error,
            at_ms,
            duration_ms,
        });
        // The conversation keeps what the tool answered, screenshots included (judges read them).
        let mut message = match result {
            Ok(out) if out.content.iter().any(|p| matches!(p, ContentPart::Image(_))) => orchard_model::Message {
                role: orchard_model::Role::Tool,
                content: crate::contract::v0_1::convert::parts_to_model(&out.content),
                tool_calls: vec![],
                tool_call_id: None,
                reasoning: None,
            },
            _ => orchard_model::Message::text(orchard_model::Role::Tool, output),
        };
        message.tool_call_id = Some(call.id.clone());
        t.conversation.push(message);
        t.tool_calls += 1;
    }

    pub(crate) fn record_output(&self, state: &HostState) {
        for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
            let bytes = pipe.contents();
            if !bytes.is_empty() {
                self.record(Step::Output {
                    plugin: state.plugin.clone(),
                    stream: stream.into(),
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                });
            }
        }
    }

    pub(crate) fn set_fatal(&self, failure: PluginFailure) {
        let mut f = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(failure);
        }
    }

    fn take_fatal(&self) -> Option<PluginFailure> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

fn text_of(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .map(|p| match p {
            ContentPart::Text(t) => t.clone(),
            ContentPart::Image(i) => format!("[image {} bytes]", i.data.len()),
        })
        .collect()
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
    pub id: String,
    pub instruction: String,
    pub metadata: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Completed,
    LimitReached,
    FormatError,
    GaveUp,
}

/// How the harness said its run ended.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunOutcome {
    pub status: Status,
    pub answer: Option<String>,
    pub steps: u32,
    pub message: Option<String>,
}

/// A grader's decision.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Graded {
        reward: f64,
        passed: bool,
        sub_scores: Vec<(String, f64)>,
        explanation: String,
    },
    /// The grader could not decide; not a zero.
    Unknown {
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
    pub base_commit: Option<String>,
    pub carried: Vec<String>,
    /// (path, why)
    pub dropped: Vec<(String, String)>,
    pub artifacts: Vec<String>,
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
