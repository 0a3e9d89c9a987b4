//! [`Episode`]: a rollout whose agent is a client outside the plugins (an OpenEnv client, a
//! trainer's policy): the task's sandbox and environment made as for any rollout, its tools open
//! for the client's calls (recorded as a harness's are), graded when the client submits or runs
//! out of steps — in the sandbox, or in a separate verifier's carrying the agent's change, as the
//! task says. A multi-step task is played step by step: each submission grades the step by its
//! own tests and, unless the task stops there, readies the next ([`Episode::next_step`]). The
//! sandboxes are gone once the episode is finished or abandoned.

use std::sync::Arc;
use std::time::Instant;

use orchard_agent_client::SharedAgent;
use orchard_runtime::{
    PluginFailure, RolloutContext, RunOutcome, Runtime, Status, TaskInput, ToolAnswer, ToolSession, ToolSpec, Verdict,
};
use orchard_sandbox::{Backend, SandboxSpec};
use orchard_verifier::Mode;

use crate::environment::prepare_environment;
use crate::job::{Job, Placement, VerifierSetup, sandbox_spec, tool_config_for, verify};
use crate::result::{RolloutResult, VerifierRecord};
use crate::steps::{StepPlace, grade_step, prepare_step, record_steps_verdict};
use crate::task::Task;

/// What an episode's result names as its harness.
pub const EPISODE_AGENT: &str = "client";

/// One task's episode, open.
pub struct Episode {
    job: Arc<Job>,
    task: Task,
    backend: Arc<dyn Backend>,
    runtime: Arc<Runtime>,
    sandbox_id: String,
    agent: SharedAgent,
    ctx: Arc<RolloutContext>,
    tools: ToolSession,
    result: RolloutResult,
    started: Instant,
    calls: u32,
    /// The spec its sandbox was made from (a separate verifier's is derived from it).
    spec: SandboxSpec,
    /// A multi-step task's progress.
    steps: StepProgress,
}

/// Where a multi-step episode is: the step the client is in, what the graded ones gave, and why
/// the task stopped early, if it did.
struct StepProgress {
    current: usize,
    step_started: Instant,
    graded: Vec<Verdict>,
    failed: Option<PluginFailure>,
    /// The current step is graded and the task ends with it.
    over: bool,
}

/// Where an episode's steps run: the client acts in them, never shown the solution.
fn client_place<'a>(
    job: &'a Job,
    task: &'a Task,
    agent: &'a SharedAgent,
    runtime: &'a Runtime,
    ctx: &'a Arc<RolloutContext>,
) -> StepPlace<'a> {
    StepPlace { job, task, agent: &**agent, runtime, ctx, show_solution: false }
}

/// The next step of a multi-step episode, after the client submitted the one before.
#[derive(Debug, Clone)]
pub struct NextStep {
    /// The step just graded, and its reward (`None`: no grade).
    pub graded: String,
    pub reward: Option<f64>,
    /// The step now running, and what it asks.
    pub name: String,
    pub instruction: String,
}

impl Episode {
    /// Makes the task's sandbox and environment (and its first step's, for a multi-step task)
    /// and opens its tools.
    pub async fn open(
        job: Arc<Job>,
        task: &Task,
        backend: Arc<dyn Backend>,
        runtime: Arc<Runtime>,
        placement: &Placement,
    ) -> Result<Episode, String> {
        let started = Instant::now();
        let mut spec = sandbox_spec(&job, task, placement);
        // The client paces an episode, not the task's timeouts: only the operator's cap holds.
        spec.lifetime_seconds = job.sandbox_max_lifetime_seconds;
        let info = backend.create(spec.clone()).await.map_err(|e| format!("sandbox: {e}"))?;
        let opened = async {
            let agent = backend.agent(&info.id).await.map_err(|e| format!("sandbox: {e}"))?;
            prepare_environment(&*agent, task).await?;
            let ctx = RolloutContext::new(&task.id, Some(agent.clone()), None);
            ctx.set_tool_config(tool_config_for(&job.tool_config, &task.metadata));
            if let Some(desktop) = &task.desktop {
                ctx.set_desktop(desktop.port);
            }
            if !task.steps.is_empty() {
                let place = client_place(&job, task, &agent, &runtime, &ctx);
                if let Some(note) = prepare_step(&place, 0).await? {
                    return Err(format!("step {}: {note}", task.steps[0].name));
                }
            }
            let tools = runtime
                .open_tools(&ctx, &job.tools_for(task), &job.limits, &job.grants, EPISODE_AGENT)
                .await
                .map_err(|f| format!("tools: {f}"))?;
            Ok::<_, String>((agent, ctx, tools))
        }
        .await;
        let (agent, ctx, tools) = match opened {
            Ok(parts) => parts,
            Err(e) => {
                let _ = backend.delete(&info.id).await;
                return Err(e);
            }
        };
        let tools_used = job.tools_for(task);
        let grader = job.grader_for(task);
        let result = RolloutResult {
            tools: tools_used.iter().map(|t| t.id()).collect(),
            grader: grader.id(),
            plugins: tools_used
                .iter()
                .chain(std::iter::once(&grader))
                .map(|p| (p.id(), p.info.sha256.clone()))
                .collect(),
            domain: task.domain.clone(),
            sandbox_id: Some(info.id.clone()),
            ..RolloutResult::pending(&task.id, EPISODE_AGENT, 1)
        };
        Ok(Episode {
            job,
            task: task.clone(),
            backend,
            runtime,
            sandbox_id: info.id.clone(),
            agent,
            ctx,
            tools,
            result,
            started,
            calls: 0,
            spec: SandboxSpec { id: spec.id.clone().or(Some(info.id.clone())), ..spec },
            steps: StepProgress { current: 0, step_started: started, graded: Vec::new(), failed: None, over: false },
        })
    }

    /// What the client is asked now: the current step's instruction for a multi-step task.
    pub fn instruction(&self) -> &str {
        match self.task.steps.get(self.steps.current) {
            Some(step) => &step.instruction,
            None => &self.task.instruction,
        }
    }

    /// The current step's name (`None`: a task without steps).
    pub fn step_name(&self) -> Option<&str> {
        self.task.steps.get(self.steps.current).map(|s| s.name.as_str())
    }

    /// Ends the current step of a multi-step task with the client's `answer`: grades it by its
    /// own tests and, unless it was the last or the task stops after it (a `min_reward` gate, the
    /// grader failing, the next step's setup failing), readies the next step and answers it.
    /// `None`: the episode is over, and [`Episode::finish`] records its grade.
    pub async fn next_step(&mut self, answer: Option<String>) -> Option<NextStep> {
        if self.task.steps.is_empty() || self.steps.over {
            return None;
        }
        let graded = self.grade_current_step(Status::Completed, answer).await;
        let index = self.steps.current;
        if self.steps.over || index + 1 >= self.task.steps.len() {
            self.steps.over = true;
            return None;
        }
        let place = client_place(&self.job, &self.task, &self.agent, &self.runtime, &self.ctx);
        let next = &self.task.steps[index + 1];
        match prepare_step(&place, index + 1).await {
            Ok(None) => {}
            Ok(Some(note)) => {
                self.result.stopped = Some(format!("step {}: {note}", next.name));
                self.steps.over = true;
                return None;
            }
            Err(e) => {
                self.result.stopped = Some(e);
                self.steps.over = true;
                return None;
            }
        }
        self.steps.current = index + 1;
        self.steps.step_started = Instant::now();
        Some(NextStep {
            graded: self.task.steps[index].name.clone(),
            reward: graded,
            name: next.name.clone(),
            instruction: next.instruction.clone(),
        })
    }

    /// Grades the current step; its reward. Marks the task over when it stops here.
    async fn grade_current_step(&mut self, status: Status, answer: Option<String>) -> Option<f64> {
        let index = self.steps.current;
        let step = &self.task.steps[index];
        let outcome = RunOutcome { status, answer, steps: self.calls, message: None };
        let input = TaskInput {
            id: self.task.id.clone(),
            instruction: step.instruction.clone(),
            metadata: self.task.metadata.clone(),
        };
        let agent_seconds = self.steps.step_started.elapsed().as_secs_f64();
        self.result.verifier =
            Some(VerifierRecord { environment: Mode::InPlace, sandbox_id: None, carry: None, setup_seconds: 0.0 });
        let place = client_place(&self.job, &self.task, &self.agent, &self.runtime, &self.ctx);
        let grade = grade_step(&place, index, &input, &outcome, agent_seconds, &mut self.result).await;
        self.result.outcome = Some(outcome);
        match grade {
            Err(e) => {
                self.result.error = Some(e);
                self.result.failed_in = Some(crate::result::FailureClass::Environment);
                self.steps.over = true;
                None
            }
            Ok(grade) => {
                let reward = match &grade.verdict {
                    Ok(Verdict::Graded { reward, .. }) => Some(*reward),
                    _ => None,
                };
                match grade.verdict {
                    Ok(v) => self.steps.graded.push(v),
                    Err(failure) => {
                        self.steps.failed = Some(failure);
                        self.steps.over = true;
                    }
                }
                if let Some(reason) = grade.stop {
                    self.result.stopped = Some(reason);
                    self.steps.over = true;
                }
                reward
            }
        }
    }

    /// The sandbox it runs in.
    pub fn sandbox_id(&self) -> &str {
        &self.sandbox_id
    }

    /// The task.
    pub fn task(&self) -> &Task {
        &self.task
    }

    /// The tools offered.
    pub fn tools(&self) -> Vec<ToolSpec> {
        self.tools.specs()
    }

    /// Tool calls made so far.
    pub fn calls(&self) -> u32 {
        self.calls
    }

    /// Calls a tool; `Err` is an adapter failing, after which the episode can only be finished.
    pub async fn call(&mut self, name: &str, arguments: &serde_json::Value) -> Result<ToolAnswer, String> {
        self.calls += 1;
        self.tools.call(name, arguments).await.map_err(|f| f.to_string())
    }

    /// Ends the episode (`Completed` with the client's answer, or `LimitReached`), grades it —
    /// in its sandbox or a separate verifier's; a multi-step task's current step by its tests,
    /// the task by its graded steps — and deletes the sandboxes.
    pub async fn finish(mut self, status: Status, answer: Option<String>) -> RolloutResult {
        self.result.agent_seconds = self.started.elapsed().as_secs_f64();
        if !self.task.steps.is_empty() {
            if !self.steps.over {
                self.grade_current_step(status, answer).await;
            }
            let failed = self.steps.failed.take();
            if self.result.error.is_none() {
                record_steps_verdict(&self.task, &self.steps.graded, failed, &mut self.result);
            }
            return self.close().await;
        }
        let outcome = RunOutcome { status, answer, steps: self.calls, message: None };
        self.result.outcome = Some(outcome.clone());
        let input = TaskInput {
            id: self.task.id.clone(),
            instruction: self.task.instruction.clone(),
            metadata: self.task.metadata.clone(),
        };
        let carry = match crate::separate::carry_for(&self.task, &self.job.grader_for(&self.task)) {
            Ok(carry) => carry,
            Err(e) => {
                self.result.error = Some(e);
                self.result.failed_in = Some(crate::result::FailureClass::Environment);
                return self.close().await;
            }
        };
        let verifier = VerifierSetup { backend: &*self.backend, spec: self.spec.clone() };
        let graded = verify(
            &self.job,
            &self.task,
            &self.ctx,
            &self.agent,
            &self.runtime,
            &input,
            &outcome,
            false,
            carry.as_ref(),
            &verifier,
            &mut self.result,
        )
        .await;
        if let Err(e) = graded {
            self.result.error = Some(e);
            self.result.failed_in = Some(crate::result::FailureClass::Environment);
        }
        self.close().await
    }

    /// The result with its trajectory, once the sandbox is deleted.
    async fn close(mut self) -> RolloutResult {
        self.result.trajectory = self.ctx.trajectory();
        let _ = self.backend.delete(&self.sandbox_id).await;
        self.result.total_seconds = self.started.elapsed().as_secs_f64();
        self.result
    }

    /// Drops the episode ungraded; the sandbox is deleted.
    pub async fn abandon(self) {
        let _ = self.backend.delete(&self.sandbox_id).await;
    }
}
