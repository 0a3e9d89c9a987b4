//! [`Episode`]: a rollout whose agent is a client outside the plugins (an OpenEnv client, a
//! trainer's policy): the task's sandbox and environment made as for any rollout, its tools open
//! for the client's calls (recorded as a harness's are), graded in the sandbox when the client
//! submits or runs out of steps. The sandbox is gone once the episode is finished or abandoned.

use std::sync::Arc;
use std::time::Instant;

use orchard_agent_client::SharedAgent;
use orchard_runtime::{RolloutContext, RunOutcome, Runtime, Status, TaskInput, ToolAnswer, ToolSession, ToolSpec};
use orchard_sandbox::Backend;
use orchard_verifier::Mode;

use crate::environment::prepare_environment;
use crate::job::{Job, Placement, grade, sandbox_spec, tool_config_for};
use crate::result::{RolloutResult, VerifierRecord};
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
}

impl Episode {
    /// Makes the task's sandbox and environment and opens its tools. A task graded in a
    /// separate verifier or in steps is refused: an episode is graded in its own sandbox.
    pub async fn open(
        job: Arc<Job>,
        task: &Task,
        backend: Arc<dyn Backend>,
        runtime: Arc<Runtime>,
        placement: &Placement,
    ) -> Result<Episode, String> {
        if !task.steps.is_empty() {
            return Err(format!("task {}: multi-step tasks are not offered as episodes", task.id));
        }
        if crate::separate::mode_for(task, &job.grader_for(task)) == Mode::Separate {
            return Err(format!("task {}: graded in a separate verifier, which episodes do not make", task.id));
        }
        let started = Instant::now();
        let info = backend.create(sandbox_spec(&job, task, placement)).await.map_err(|e| format!("sandbox: {e}"))?;
        let opened = async {
            let agent = backend.agent(&info.id).await.map_err(|e| format!("sandbox: {e}"))?;
            prepare_environment(&*agent, task).await?;
            let ctx = RolloutContext::new(&task.id, Some(agent.clone()), None);
            ctx.set_tool_config(tool_config_for(&job.tool_config, &task.metadata));
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
            sandbox_id: info.id,
            agent,
            ctx,
            tools,
            result,
            started,
            calls: 0,
        })
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

    /// Ends the episode (`Completed` with the client's answer, or `LimitReached`), grades it in
    /// its sandbox, and deletes the sandbox.
    pub async fn finish(mut self, status: Status, answer: Option<String>) -> RolloutResult {
        let outcome = RunOutcome { status, answer, steps: self.calls, message: None };
        self.result.agent_seconds = self.started.elapsed().as_secs_f64();
        self.result.outcome = Some(outcome.clone());
        self.result.verifier =
            Some(VerifierRecord { environment: Mode::InPlace, sandbox_id: None, carry: None, setup_seconds: 0.0 });
        let input = TaskInput {
            id: self.task.id.clone(),
            instruction: self.task.instruction.clone(),
            metadata: self.task.metadata.clone(),
        };
        let graded = grade(
            &self.job,
            &self.task,
            &self.ctx,
            &*self.agent,
            &self.runtime,
            &input,
            &outcome,
            false,
            &mut self.result,
        )
        .await;
        if let Err(e) = graded {
            self.result.error = Some(e);
            self.result.failed_in = Some(crate::result::FailureClass::Environment);
        }
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
