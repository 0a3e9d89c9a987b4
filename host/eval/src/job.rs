//! Running an evaluation: every task × attempt as a rollout on a fresh sandbox, graded (the
//! result in `result.rs`, the task's environment in `environment.rs`).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use orchard_agent_client::{SandboxAgent, SharedAgent};
use orchard_model::ModelClient;
use orchard_runtime::{
    BrowserOptions, Capability, FailureKind, GradingEnvironment, Grants, Limits, Plugin, PluginFailure, RolloutContext,
    RunOutcome, Runtime, Step, TaskInput, Verdict,
};
use orchard_sandbox::{Backend, SandboxSpec};
use orchard_verifier::Mode;

use crate::environment::{ignore_missing, prepare_environment, upload_dir};
use crate::result::{FailureClass, RolloutResult, RolloutStatus, VerifierRecord};
use crate::separate;
use crate::task::Task;

/// What a job runs: tasks under harnesses with tools and a grader, and how.
pub struct Job {
    /// The tasks.
    pub tasks: Vec<Task>,
    /// Every task runs under each harness (a cross-harness matrix when there are several).
    pub harnesses: Vec<Arc<Plugin>>,
    /// Tool adapters offered to the harnesses.
    pub tools: Vec<Arc<Plugin>>,
    /// The tool adapters tasks name in `[agent] tools`, by name: such a task runs with those
    /// instead of `tools`.
    pub named_tools: std::collections::BTreeMap<String, Arc<Plugin>>,
    /// The grader.
    pub grader: Arc<Plugin>,
    /// The graders tasks name in `[verifier] grader`, by name.
    pub named_graders: std::collections::BTreeMap<String, Arc<Plugin>>,
    /// The model the harnesses call.
    pub model: Option<Arc<ModelClient>>,
    /// The grader's own endpoint (a judge model); the run's when absent.
    pub grader_model: Option<Arc<ModelClient>>,
    /// For tasks that name no prebuilt image.
    pub default_image: String,
    /// Attempts per task and harness.
    pub attempts: u32,
    /// Rollouts at once.
    pub concurrency: usize,
    /// Handed to every harness.
    pub harness_config: serde_json::Value,
    /// Each harness's own keys over `harness_config`, by plugin name.
    pub harness_configs: std::collections::BTreeMap<String, serde_json::Value>,
    /// Tool adapters' and browser drivers' configuration by plugin name; a task's
    /// `[metadata.tool_config.NAME]` keys win over these.
    pub tool_config: std::collections::BTreeMap<String, serde_json::Value>,
    /// Per plugin instance; the wall clock comes from each task's timeouts.
    pub limits: Limits,
    /// What the plugins are granted (the solution, the network, ...).
    pub grants: Grants,
    /// Limits of each rollout's sandbox beyond what tasks declare (a server's defaults).
    pub sandbox_pids: Option<u64>,
    /// Writable disk of each sandbox, in bytes.
    pub sandbox_disk_bytes: Option<u64>,
    /// The operator's cap on a sandbox's hard lifetime, in seconds (`--max-sandbox-lifetime`;
    /// `None`: no cap). A rollout's sandbox lives at most its own bound within it.
    pub sandbox_max_lifetime_seconds: Option<u64>,
    /// Where a browser a plugin opens runs, and how long one of its calls may take.
    pub browser: BrowserPlacement,
}

/// Where a rollout's browser runs: in the sandbox's network namespace, started by the host
/// (where the backend can place it there), or inside the sandbox by its agent (`in_sandbox`; on
/// Kubernetes the task's image then carries `chromium`). Given by the caller (the CLI reads it
/// from the operator's environment); libraries read no environment.
#[derive(Debug, Clone, PartialEq)]
pub struct BrowserPlacement {
    /// Started inside the sandbox by its agent, rather than by the host.
    pub in_sandbox: bool,
    /// The host's Chromium, for browsers the host starts.
    pub chromium: std::path::PathBuf,
    /// How long one DevTools call may take: a page whose script never yields costs a driver
    /// this much per call, never the whole rollout.
    pub call_timeout: Duration,
}

impl Default for BrowserPlacement {
    fn default() -> Self {
        BrowserPlacement { in_sandbox: false, chromium: "chromium".into(), call_timeout: Duration::from_secs(20) }
    }
}

impl Job {
    /// What `harness` is handed: the run's configuration with its own keys over it.
    pub fn config_for(&self, harness: &Plugin) -> serde_json::Value {
        let mut config = self.harness_config.clone();
        if let (Some(base), Some(serde_json::Value::Object(own))) =
            (config.as_object_mut(), self.harness_configs.get(&harness.manifest.name))
        {
            base.extend(own.clone());
        }
        config
    }

    /// The tool adapters `task` runs with: those it names in `[agent] tools` (resolved when the
    /// job was prepared), else the run's.
    pub fn tools_for(&self, task: &Task) -> Vec<Arc<Plugin>> {
        let mut tools: Vec<Arc<Plugin>> = match &task.tools {
            Some(names) => names.iter().filter_map(|n| self.named_tools.get(n).cloned()).collect(),
            None => self.tools.clone(),
        };
        // The MCP servers a task declares are offered to every harness.
        if task.mcp
            && let Some(mcp) = self.named_tools.get("mcp")
            && !tools.iter().any(|t| t.manifest.name == "mcp")
        {
            tools.push(mcp.clone());
        }
        tools
    }

    /// The grader of `task`: the one it names in `[verifier] grader`, else the run's.
    pub fn grader_for(&self, task: &Task) -> Arc<Plugin> {
        task.grader.as_ref().and_then(|g| self.named_graders.get(g)).cloned().unwrap_or_else(|| self.grader.clone())
    }
}

/// Where a rollout's sandbox goes: the tenant it is created for and, when the caller needs to
/// find it again (to stop it), the id it gets.
#[derive(Debug, Clone)]
pub struct Placement {
    /// The tenant it is created for.
    pub tenant: String,
    /// The id it gets, when the caller chooses one.
    pub sandbox_id: Option<String>,
}

/// Runs one rollout on a fresh sandbox and grades it; the sandbox is gone when this returns.
pub async fn rollout(
    job: &Job,
    harness: &Arc<Plugin>,
    task: &Task,
    attempt: u32,
    backend: &dyn Backend,
    runtime: &Runtime,
    placement: &Placement,
) -> RolloutResult {
    let started = Instant::now();
    let tools = job.tools_for(task);
    let grader = job.grader_for(task);
    let mut result = RolloutResult {
        tools: tools.iter().map(|t| t.id()).collect(),
        grader: grader.id(),
        plugins: std::iter::once(harness)
            .chain(&tools)
            .chain(std::iter::once(&grader))
            .map(|p| (p.id(), p.info.sha256.clone()))
            .collect(),
        model: job.model.as_ref().map(|m| m.config().model.clone()),
        domain: task.domain.clone(),
        ..RolloutResult::pending(&task.id, &harness.id(), attempt)
    };
    let spec = sandbox_spec(job, task, placement);
    let spec_copy = spec.clone();
    let sandbox = match backend.create(spec).await {
        Ok(info) => info,
        Err(e) => {
            result.error = Some(format!("sandbox: {e}"));
            result.failed_in = Some(FailureClass::Sandbox);
            result.total_seconds = started.elapsed().as_secs_f64();
            return result;
        }
    };
    result.sandbox_id = Some(sandbox.id.clone());
    let outcome = match backend.agent(&sandbox.id).await {
        Ok(agent) => {
            let mut verifier_spec = spec_copy;
            verifier_spec.id = verifier_spec.id.or(Some(sandbox.id.clone()));
            let verifier = VerifierSetup { backend, spec: verifier_spec };
            run_in_sandbox(job, harness, task, &agent, runtime, &mut result, &verifier).await
        }
        Err(e) => {
            result.failed_in = Some(FailureClass::Sandbox);
            Err(format!("sandbox: {e}"))
        }
    };
    if let Err(e) = outcome {
        result.error = Some(e);
        // What failed before a plugin could: preparing the task's environment.
        result.failed_in = result.failed_in.or(Some(FailureClass::Environment));
    }
    if let Err(e) = backend.delete(&sandbox.id).await {
        tracing::warn!(sandbox = %sandbox.id, "deleting the rollout's sandbox: {e}");
    }
    result.total_seconds = started.elapsed().as_secs_f64();
    result
}

/// The sandbox a rollout of `task` runs in: the task's image and resources within the job's.
pub(crate) fn sandbox_spec(job: &Job, task: &Task, placement: &Placement) -> SandboxSpec {
    let mut spec =
        SandboxSpec::new(placement.tenant.clone(), task.image.clone().unwrap_or_else(|| job.default_image.clone()));
    spec.id = placement.sandbox_id.clone();
    spec.block_network = !task.allow_internet;
    spec.network_allow = task.network_allow.clone();
    spec.cpu = task.cpus;
    spec.memory_bytes = task.memory_bytes;
    spec.pids = job.sandbox_pids;
    // The task's storage_mb, within the server's limit.
    spec.disk_bytes = match (task.disk_bytes, job.sandbox_disk_bytes) {
        (Some(t), Some(j)) => Some(t.min(j)),
        (t, j) => t.or(j),
    };
    spec.env = task.env.clone();
    spec.workdir = task.workdir.clone();
    spec.ttl_seconds = Some((task.agent_timeout_sec + task.verifier_timeout_sec + 600.0) as u64);
    let bound = rollout_lifetime_seconds(task);
    spec.lifetime_seconds = Some(job.sandbox_max_lifetime_seconds.map_or(bound, |cap| bound.min(cap)));
    spec
}

/// Time for what a rollout does besides its timed parts: the image pull (Kubernetes counts it
/// against `activeDeadlineSeconds`), copying files in, starting a desktop and the task's service.
const SETUP_ALLOWANCE_SECONDS: f64 = 3600.0;

/// A rollout's sandbox's hard lifetime: everything the rollout can take — each step's agent and
/// verifier time with a grader's extra minute, each healthcheck's longest wait — plus
/// [`SETUP_ALLOWANCE_SECONDS`]. Enforced below the server (the sandbox's init locally,
/// `activeDeadlineSeconds` on Kubernetes), so a server that dies for good leaves no rollout's
/// sandbox running for ever; the runner times a rollout out long before it.
pub(crate) fn rollout_lifetime_seconds(task: &Task) -> u64 {
    let timed = |agent: f64, verifier: f64, health: Option<&crate::healthcheck::Healthcheck>| {
        agent.max(0.0) + verifier.max(0.0) + 60.0 + health.map_or(0.0, |h| h.longest_wait().as_secs_f64())
    };
    let steps: f64 =
        task.steps.iter().map(|s| timed(s.agent_timeout_sec, s.verifier_timeout_sec, s.healthcheck.as_ref())).sum();
    let total = timed(task.agent_timeout_sec, task.verifier_timeout_sec, task.healthcheck.as_ref())
        + steps
        + SETUP_ALLOWANCE_SECONDS;
    // `as` saturates: an absurd timeout means the operator's cap, not an overflow.
    total.ceil() as u64
}

/// How a rollout makes its separate verifier's sandbox: the agent's spec, with the id the
/// verifier's is derived from.
pub(crate) struct VerifierSetup<'a> {
    pub backend: &'a dyn Backend,
    pub spec: SandboxSpec,
}

async fn run_in_sandbox(
    job: &Job,
    harness: &Arc<Plugin>,
    task: &Task,
    agent: &SharedAgent,
    runtime: &Runtime,
    result: &mut RolloutResult,
    verifier: &VerifierSetup<'_>,
) -> Result<(), String> {
    let mut input =
        TaskInput { id: task.id.clone(), instruction: task.instruction.clone(), metadata: task.metadata.clone() };
    let ctx = RolloutContext::new(&task.id, Some(agent.clone()), job.model.clone());
    ctx.set_tool_config(tool_config_for(&job.tool_config, &task.metadata));
    if let Some(m) = &job.grader_model {
        ctx.set_grader_model(m.clone());
    }
    // A browser, if a plugin opens one, runs in the sandbox's network: started here inside its
    // namespace where the backend can place it there, else inside the sandbox by its agent (on
    // Kubernetes, in the task's pod; the image then carries `chromium`).
    if let Some(id) = &verifier.spec.id {
        let placement = &job.browser;
        let netns = match placement.in_sandbox {
            true => None,
            false => verifier.backend.network_namespace(id).await,
        };
        let options = match netns {
            Some(netns) => BrowserOptions {
                netns: Some(netns),
                cgroups: verifier.backend.memory_cgroups(id).await,
                binary: placement.chromium.clone(),
                call_timeout: placement.call_timeout,
                ..Default::default()
            },
            None => BrowserOptions {
                in_sandbox: true,
                binary: "chromium".into(),
                call_timeout: placement.call_timeout,
                ..Default::default()
            },
        };
        ctx.set_browser(options);
    }
    prepare_environment(&**agent, task).await?;
    if let Some(desktop) = &task.desktop {
        ctx.set_desktop(desktop.port);
    }
    // The reference solution reaches the sandbox only for a harness granted it (the oracle).
    let show_solution =
        job.grants.allows(Capability::Solution) && harness.manifest.capabilities.contains(&Capability::Solution);
    if show_solution && task.has_solution && task.steps.is_empty() {
        upload_dir(&**agent, &task.files, Path::new("solution"), "/solution").await?;
        // A solution recorded as tool calls (a browsing task's clicks) reaches the harness
        // itself: it has no file access of its own.
        let calls = task.files.read_string(Path::new("solution/calls.json"), crate::MAX_PATCH_BYTES);
        if let Some(text) = calls.map_err(|e| e.to_string())? {
            let calls: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| format!("solution/calls.json: not JSON: {e}"))?;
            if let Some(m) = input.metadata.as_object_mut() {
                m.insert("solution_calls".into(), calls);
            }
        }
    }
    if !task.steps.is_empty() {
        // Graded step by step in the agent's sandbox (task.toml refuses a separate verifier).
        result.verifier =
            Some(VerifierRecord { environment: Mode::InPlace, sandbox_id: None, carry: None, setup_seconds: 0.0 });
        let place = crate::steps::StepPlace { job, task, agent: &**agent, runtime, ctx: &ctx, show_solution };
        let run = crate::steps::StepRun { place, harness };
        let ran = crate::steps::run_steps(&run, &input, result).await;
        ctx.close_browser();
        return ran;
    }
    let carry = separate::carry_for(task, &job.grader_for(task))?;
    let limits = Limits { wall: Duration::from_secs_f64(task.agent_timeout_sec), ..job.limits };
    let agent_started = Instant::now();
    let harness_run = runtime
        .run_harness(&ctx, harness, &job.tools_for(task), &input, &job.config_for(harness), &limits, &job.grants)
        .await;
    result.agent_seconds = agent_started.elapsed().as_secs_f64();
    // The agent is done with the browser (graders look at the sandbox and the trajectory).
    ctx.close_browser();
    let outcome = match harness_run {
        Ok(outcome) => outcome,
        Err(failure) => {
            record_agent_failure(result, &ctx, failure);
            return Ok(());
        }
    };
    result.outcome = Some(outcome.clone());
    // A desktop app that crashed under the agent is named in the trajectory (the grade says what
    // the desktop was left as).
    if let Some(why) = crate::environment::app_crash(&**agent, task).await {
        ctx.record(orchard_runtime::Step::Event {
            plugin: "orchard".into(),
            level: "error".into(),
            name: "app-crashed".into(),
            data: serde_json::json!({"message": why}),
            at_ms: ctx.at_ms(),
        });
    }
    verify(job, task, &ctx, agent, runtime, &input, &outcome, show_solution, carry.as_ref(), verifier, result).await
}

/// The verifier's turn after the agent's: grades in a clean sandbox carrying the agent's change
/// (`carry`, for a task graded in a separate verifier), or in the agent's own.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn verify(
    job: &Job,
    task: &Task,
    ctx: &Arc<RolloutContext>,
    agent: &SharedAgent,
    runtime: &Runtime,
    input: &TaskInput,
    outcome: &RunOutcome,
    show_solution: bool,
    carry: Option<&orchard_verifier::CarrySpec>,
    verifier: &VerifierSetup<'_>,
    result: &mut RolloutResult,
) -> Result<(), String> {
    let setup_started = (Instant::now(), ctx.at_ms());
    let (grading_sandbox, verifier_sandbox) = match carry {
        Some(carry) => {
            let (sandbox, report) =
                separate::prepare(verifier.backend, verifier.spec.clone(), &**agent, task, carry).await?;
            ctx.set_verifier_sandbox(sandbox.client.clone());
            let record = VerifierRecord {
                environment: Mode::Separate,
                sandbox_id: Some(sandbox.id.clone()),
                carry: Some(report),
                setup_seconds: setup_started.0.elapsed().as_secs_f64(),
            };
            ctx.record(Step::Verifier {
                mode: "separate".into(),
                detail: serde_json::to_value(&record).unwrap_or_default(),
                at_ms: setup_started.1,
                duration_ms: ctx.at_ms() - setup_started.1,
            });
            result.verifier = Some(record);
            (sandbox.client.clone(), Some(sandbox.id))
        }
        None => {
            result.verifier =
                Some(VerifierRecord { environment: Mode::InPlace, sandbox_id: None, carry: None, setup_seconds: 0.0 });
            (agent.clone(), None)
        }
    };
    let graded = grade(job, task, ctx, &*grading_sandbox, runtime, input, outcome, show_solution, result).await;
    if let Some(id) = verifier_sandbox
        && let Err(e) = verifier.backend.delete(&id).await
    {
        tracing::warn!(sandbox = %id, "deleting the verifier's sandbox: {e}");
    }
    graded
}

/// Prepares the grading sandbox (no solution, the tests, a fresh /logs/verifier) and grades.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn grade(
    job: &Job,
    task: &Task,
    ctx: &Arc<RolloutContext>,
    sandbox: &dyn SandboxAgent,
    runtime: &Runtime,
    input: &TaskInput,
    outcome: &RunOutcome,
    show_solution: bool,
    result: &mut RolloutResult,
) -> Result<(), String> {
    let how = Grading {
        tests: task.has_tests.then_some(Path::new("tests")),
        timeout_sec: task.verifier_timeout_sec,
        clear_tests: false,
    };
    let verdict = grade_once(job, task, ctx, sandbox, runtime, input, outcome, show_solution, &how, result).await?;
    record_verdict(result, verdict);
    Ok(())
}

/// What one grading uses: the folder of the task's tests copied to `/tests`, and its time.
pub(crate) struct Grading<'a> {
    pub tests: Option<&'a Path>,
    pub timeout_sec: f64,
    /// Remove what `/tests` holds first (a previous step's tests; an image's own `/tests` is
    /// kept for the first grading).
    pub clear_tests: bool,
}

/// Prepares the grading sandbox and runs the grader once: its verdict, or how it failed.
/// Records the trajectory and the grading time in `result`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn grade_once(
    job: &Job,
    task: &Task,
    ctx: &Arc<RolloutContext>,
    sandbox: &dyn SandboxAgent,
    runtime: &Runtime,
    input: &TaskInput,
    outcome: &RunOutcome,
    show_solution: bool,
    how: &Grading<'_>,
    result: &mut RolloutResult,
) -> Result<Result<Verdict, PluginFailure>, String> {
    if show_solution {
        sandbox
            .remove("/solution", true)
            .await
            .or_else(ignore_missing)
            .map_err(|e| format!("removing /solution: {e}"))?;
    }
    if how.clear_tests {
        sandbox.remove("/tests", true).await.or_else(ignore_missing).map_err(|e| format!("removing /tests: {e}"))?;
    }
    if let Some(tests) = how.tests {
        upload_dir(sandbox, &task.files, tests, "/tests").await?;
    }
    let prepare = orchard_protocol::ExecRequest::shell("rm -rf /logs/verifier && mkdir -p /logs/verifier");
    sandbox.exec(&prepare).await.map_err(|e| format!("preparing /logs/verifier: {e}"))?;
    let grade_limits = Limits { wall: Duration::from_secs_f64(how.timeout_sec + 60.0), ..job.limits };
    let grade_started = Instant::now();
    let environment = grading_environment(result.verifier.as_ref());
    let verdict =
        runtime.run_grader(ctx, &job.grader_for(task), input, outcome, &environment, &grade_limits, &job.grants).await;
    result.grade_seconds += grade_started.elapsed().as_secs_f64();
    result.trajectory = ctx.trajectory();
    // Whatever the grader says, the grade records what its environment left out.
    let carried_note = result.verifier.as_ref().and_then(|v| v.carry.as_ref()).and_then(carry_note);
    Ok(verdict.map(|v| match (v, &carried_note) {
        (Verdict::Graded { reward, passed, sub_scores, explanation }, Some(note)) => {
            Verdict::Graded { reward, passed, sub_scores, explanation: format!("{explanation} [{note}]") }
        }
        (Verdict::Unknown { reason }, Some(note)) => Verdict::Unknown { reason: format!("{reason} [{note}]") },
        (v, None) => v,
    }))
}

/// A rollout whose harness failed: a limit it reached, the model, or the plugin itself.
pub(crate) fn record_agent_failure(result: &mut RolloutResult, ctx: &RolloutContext, failure: PluginFailure) {
    result.trajectory = ctx.trajectory();
    let model_failed = result.trajectory.steps.iter().any(|s| matches!(s, orchard_runtime::Step::ModelError { .. }));
    result.failed_in = Some(match failure.kind {
        FailureKind::CpuBudget | FailureKind::Memory | FailureKind::WallClock => FailureClass::Limit,
        _ if model_failed => FailureClass::Model,
        _ => FailureClass::Plugin,
    });
    result.error = Some(failure.to_string());
    result.failure = Some(failure);
}

/// A rollout's grade from its grader's verdict (or failure).
pub(crate) fn record_verdict(result: &mut RolloutResult, verdict: Result<Verdict, PluginFailure>) {
    match verdict {
        Ok(Verdict::Graded { reward, passed, sub_scores, explanation }) => {
            result.status = RolloutStatus::Graded;
            result.reward = Some(reward);
            result.passed = passed;
            result.verdict = Some(Verdict::Graded { reward, passed, sub_scores, explanation });
        }
        Ok(v @ Verdict::Unknown { .. }) => {
            result.status = RolloutStatus::Unknown;
            result.verdict = Some(v);
        }
        Err(failure) => {
            result.failed_in = Some(match failure.kind {
                FailureKind::CpuBudget | FailureKind::Memory | FailureKind::WallClock => FailureClass::Limit,
                _ => FailureClass::Grader,
            });
            result.error = Some(failure.to_string());
            result.failure = Some(failure);
        }
    }
}

/// What the grader is told of its environment (contract 0.2.0).
fn grading_environment(record: Option<&VerifierRecord>) -> GradingEnvironment {
    let Some(carry) = record.and_then(|r| r.carry.as_ref()) else { return GradingEnvironment::default() };
    GradingEnvironment {
        separate: true,
        base_commit: carry.base_commit.clone(),
        carried: carry.carried.clone(),
        dropped: carry.dropped.iter().map(|d| (d.path.clone(), d.reason.clone())).collect(),
        artifacts: carry.artifacts.clone(),
        problem: carry.problem.clone(),
    }
}

/// What a separate verifier left out of the agent's change, in a sentence (`None`: nothing).
fn carry_note(report: &orchard_verifier::CarryReport) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(problem) = &report.problem {
        parts.push(format!("the agent's change was not carried: {problem}"));
    }
    if !report.dropped.is_empty() {
        let list: Vec<String> = report.dropped.iter().map(|d| format!("{} ({})", d.path, d.reason)).collect();
        parts.push(format!("verifier dropped {}", list.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Each plugin's configuration for one task: the run's, with the task's
/// `[metadata.tool_config.NAME]` keys over it.
pub(crate) fn tool_config_for(
    run: &std::collections::BTreeMap<String, serde_json::Value>,
    metadata: &serde_json::Value,
) -> std::collections::BTreeMap<String, serde_json::Value> {
    let mut merged = run.clone();
    let task = metadata.pointer("/metadata/tool_config").or_else(|| metadata.get("tool_config"));
    if let Some(task) = task.and_then(serde_json::Value::as_object) {
        for (name, keys) in task {
            let entry = merged.entry(name.clone()).or_insert_with(|| serde_json::json!({}));
            match (entry.as_object_mut(), keys.as_object()) {
                (Some(e), Some(k)) => e.extend(k.clone()),
                _ => *entry = keys.clone(),
            }
        }
    }
    merged
}

#[cfg(test)]
mod tool_config_tests {
    #[test]
    fn the_tasks_keys_win_over_the_runs() {
        let run = [("browser".to_string(), serde_json::json!({"mode": "coords", "screenshot_width": 800}))].into();
        let meta = serde_json::json!({"metadata": {"tool_config": {"browser": {"mode": "marks"}, "shell": {"x": 1}}}});
        let merged = super::tool_config_for(&run, &meta);
        assert_eq!(merged["browser"], serde_json::json!({"mode": "marks", "screenshot_width": 800}));
        assert_eq!(merged["shell"], serde_json::json!({"x": 1}));
        assert_eq!(super::tool_config_for(&run, &serde_json::json!({})), run);
    }
}

#[cfg(test)]
mod lifetime_tests {
    fn task(toml: &str) -> crate::task::Task {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("instruction.md"), "Do it").unwrap();
        std::fs::write(t.join("task.toml"), toml).unwrap();
        crate::task::load_tasks(dir.path()).unwrap().remove(0)
    }

    #[test]
    fn a_rollouts_lifetime_covers_its_timeouts_and_set_up() {
        let timed = task("version = \"1.0\"\n[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 12.5\n");
        // 30 + 12.5 + a grader's minute + the set-up hour, rounded up.
        assert_eq!(super::rollout_lifetime_seconds(&timed), 3703);
        let waited = task(
            "version = \"1.0\"\n[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 12.5\n\
             [environment.healthcheck]\ncommand = \"true\"\ninterval_sec = 5\ntimeout_sec = 2\n\
             start_period_sec = 10\nretries = 3\n",
        );
        // The healthcheck's longest wait: 10 + 2 + 3 × (5 + 2).
        assert_eq!(super::rollout_lifetime_seconds(&waited), 3703 + 33);
        let absurd = task(
            "version = \"1.0\"\n[environment.healthcheck]\ncommand = \"true\"\ninterval_sec = 86400\n\
             retries = 4000000000\n",
        );
        // Far past any operator's cap (which then holds), and no overflow on the way.
        assert!(super::rollout_lifetime_seconds(&absurd) >= 4_000_000_000 * 86_400);
    }
}
