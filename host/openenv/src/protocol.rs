//! One OpenEnv connection: its messages (`reset`, `step`, `state`, `close`, `mcp`) and the
//! episode they drive. Every answer is one JSON message; a bad one is an `error` message naming
//! what was wrong, and the connection goes on.

use std::sync::Arc;

use axum::extract::ws::{Message, WebSocket};
use orchard_eval::{Episode, Placement, RolloutResult};
use orchard_runtime::{Runtime, Status};
use orchard_sandbox::Backend;
use serde_json::{Value, json};

use crate::Session;

/// The connection's episode: running, or finished with its result.
enum Current {
    None,
    Running(Box<Episode>, String),
    Done(Box<RolloutResult>, String),
}

fn error(message: impl Into<String>, code: &str) -> Value {
    json!({"type": "error", "data": {"message": message.into(), "code": code}})
}

fn observation(observation: Value, reward: Option<f64>, done: bool) -> Value {
    json!({"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}})
}

fn tool_list(episode: &Episode) -> Vec<Value> {
    episode
        .tools()
        .into_iter()
        .map(|t| {
            let schema: Value = serde_json::from_str(&t.parameters).unwrap_or_else(|_| json!({"type": "object"}));
            json!({"name": t.name, "description": t.description, "input_schema": schema})
        })
        .collect()
}

/// What a connection's episodes run on.
pub(crate) struct Engine {
    pub backend: Arc<dyn Backend>,
    pub runtime: Arc<Runtime>,
    /// The server's rules: an episode's sandbox holds its tenant's quota like any other.
    pub admission: Option<Arc<orchard_admission::Admission>>,
    /// Where finished episodes are recorded, as rollouts of the session's job.
    pub store: orchard_store::Store,
}

impl Engine {
    fn release(&self, sandbox_id: &str) {
        if let Some(admission) = &self.admission {
            admission.quotas.release(sandbox_id);
        }
    }
}

pub(crate) async fn serve(mut socket: WebSocket, session: Arc<Session>, engine: Engine) {
    let mut current = Current::None;
    while let Some(Ok(message)) = socket.recv().await {
        let text = match message {
            Message::Text(t) => t.to_string(),
            Message::Close(_) => break,
            _ => continue,
        };
        session.touch();
        let reply = match serde_json::from_str::<Value>(&text) {
            Err(e) => error(format!("invalid JSON: {e}"), "INVALID_JSON"),
            Ok(message) => match message["type"].as_str().unwrap_or_default() {
                "close" => break,
                "reset" => reset(&session, &engine, &mut current, &message["data"]).await,
                "step" => step(&session, &engine, &mut current, &message["data"]).await,
                "state" => state(&current),
                "mcp" => mcp(&session, &engine, &mut current, &message["data"]).await,
                other => {
                    error(format!("unknown message type {other:?}: reset, step, state, mcp or close"), "UNKNOWN_TYPE")
                }
            },
        };
        if socket.send(Message::Text(reply.to_string().into())).await.is_err() {
            break;
        }
    }
    if let Current::Running(episode, _) = current {
        engine.release(episode.sandbox_id());
        episode.abandon().await;
    }
}

async fn reset(session: &Session, engine: &Engine, current: &mut Current, data: &Value) -> Value {
    if let Current::Running(episode, _) = std::mem::replace(current, Current::None) {
        engine.release(episode.sandbox_id());
        episode.abandon().await;
    }
    let task = match session.task(data["task_id"].as_str()) {
        Ok(task) => task,
        Err(e) => return error(e, "VALIDATION_ERROR"),
    };
    // The tenant's quota holds the episode's sandbox, as it holds any the tenant makes.
    let mut reservation = match &engine.admission {
        Some(admission) => {
            let image = task.image.clone().unwrap_or_else(|| session.job.default_image.clone());
            let mut probe = orchard_sandbox::SandboxSpec::new(session.tenant.clone(), image);
            (probe.memory_bytes, probe.cpu) = (task.memory_bytes, task.cpus);
            match admission.quotas.reserve(&probe, 1) {
                Ok(r) => Some(r),
                Err(e) => return error(format!("reset: {e}"), "CAPACITY_REACHED"),
            }
        }
        None => None,
    };
    let placement = Placement { tenant: session.tenant.clone(), sandbox_id: None };
    let opened =
        Episode::open(session.job.clone(), task, engine.backend.clone(), engine.runtime.clone(), &placement).await;
    match opened {
        Ok(episode) => {
            if let Some(r) = reservation.as_mut() {
                r.commit(episode.sandbox_id());
            }
            let tools: Vec<Value> = episode.tools().iter().map(|t| json!(t.name)).collect();
            // `tool_names`, not `tools`: OpenEnv's MCP client reads a `tools` key as a tool listing.
            let mut seen = json!({"task_id": task.id, "instruction": episode.instruction(), "tool_names": tools,
                "metadata": {}});
            if let Some(step) = episode.step_name() {
                seen["step"] = json!(step);
                seen["steps"] = json!(task.steps.iter().map(|s| s.name.clone()).collect::<Vec<_>>());
            }
            let answer = observation(seen, None, false);
            *current = Current::Running(Box::new(episode), format!("ep-{}", uuid::Uuid::new_v4().simple()));
            answer
        }
        Err(e) => error(format!("reset: {e}"), "EXECUTION_ERROR"),
    }
}

async fn finish(
    session: &Session,
    engine: &Engine,
    current: &mut Current,
    status: Status,
    answer: Option<String>,
) -> Value {
    let Current::Running(episode, id) = std::mem::replace(current, Current::None) else {
        return error("no episode is running: reset first", "EXECUTION_ERROR");
    };
    let sandbox = episode.sandbox_id().to_string();
    let mut result = episode.finish(status, answer).await;
    engine.release(&sandbox);
    let number = {
        let mut rewards = session.rewards.lock().unwrap_or_else(|p| p.into_inner());
        rewards.push(result.reward);
        rewards.len() as u32
    };
    result.harness = "openenv".into();
    result.rollout_id = RolloutResult::id_for(&result.task_id, "openenv", number);
    let rollout = orchard_store::NewRollout {
        rollout_id: result.rollout_id.clone(),
        task_id: result.task_id.clone(),
        harness: "openenv".into(),
        attempt: number,
    };
    let record = orchard_scheduler::finished_record(&result);
    if let Err(e) = engine.store.record_finished(&session.prepared.eval_id, &rollout, &record).await {
        tracing::error!(rollout = %result.rollout_id, "recording an OpenEnv episode: {e}");
    }
    let explanation = match &result.verdict {
        Some(orchard_runtime::Verdict::Graded { explanation, .. }) => explanation.clone(),
        Some(orchard_runtime::Verdict::Unknown { reason }) => format!("no grade: {reason}"),
        None => result.error.clone().unwrap_or_default(),
    };
    let reply = observation(
        json!({"task_id": result.task_id, "status": result.status, "passed": result.passed, "explanation": explanation,
            "metadata": {}}),
        result.reward,
        true,
    );
    *current = Current::Done(Box::new(result), id);
    reply
}

async fn step(session: &Session, engine: &Engine, current: &mut Current, action: &Value) -> Value {
    let Current::Running(episode, _) = current else {
        return error("no episode is running: reset first", "EXECUTION_ERROR");
    };
    match action["type"].as_str().unwrap_or_default() {
        "list_tools" => observation(json!({"tools": tool_list(episode), "metadata": {}}), None, false),
        "call_tool" => {
            let Some(name) = action["tool_name"].as_str() else {
                return error("call_tool: missing `tool_name`", "VALIDATION_ERROR");
            };
            if !episode.tools().iter().any(|t| t.name == name) {
                let known: Vec<String> = episode.tools().into_iter().map(|t| t.name).collect();
                return observation(
                    json!({"tool_name": name, "result": null, "metadata": {}, "error": {"error_type": "tool_not_found",
                        "message": format!("no tool {name:?} (tools: {})", known.join(", "))}}),
                    None,
                    false,
                );
            }
            let arguments = action.get("arguments").cloned().unwrap_or_else(|| json!({}));
            let answer = episode.call(name, &arguments).await;
            let over = episode.calls() >= session.max_steps;
            // A tool's own failure (a command that failed) is its result, as in MCP (`is_error`);
            // `error` is for the adapter failing.
            let reply = match &answer {
                Ok(a) => {
                    json!({"tool_name": name, "result": a.text, "is_error": a.is_error, "error": null, "metadata": {}})
                }
                Err(e) => json!({"tool_name": name, "result": null,
                    "error": {"error_type": "transport_error", "message": e}, "metadata": {}}),
            };
            if answer.is_err() || over {
                // The adapter failed, or the step limit is reached: the episode ends here, graded.
                let done = finish(session, engine, current, Status::LimitReached, None).await;
                let mut observation = done["data"]["observation"].clone();
                observation["tool_name"] = json!(name);
                observation["result"] = reply["result"].clone();
                observation["error"] = reply["error"].clone();
                return json!({"type": "observation", "data": {"observation": observation,
                    "reward": done["data"]["reward"], "done": true}});
            }
            observation(reply, None, false)
        }
        "submit" => {
            let answer = action["answer"].as_str().map(str::to_string);
            // A multi-step task goes on to its next step unless the task ends here.
            if let Some(next) = episode.next_step(answer.clone()).await {
                return observation(
                    json!({"task_id": episode.task().id, "graded_step": next.graded, "step_reward": next.reward,
                        "step": next.name, "instruction": next.instruction, "metadata": {}}),
                    // The task's reward comes once, when it is done (`mean` or `final` over its
                    // steps); a step's own is `step_reward`, so no trainer counts it twice.
                    None,
                    false,
                );
            }
            finish(session, engine, current, Status::Completed, answer).await
        }
        other => {
            error(format!("step: unknown action type {other:?}: list_tools, call_tool or submit"), "VALIDATION_ERROR")
        }
    }
}

fn state(current: &Current) -> Value {
    let data = match current {
        Current::None => json!({"episode_id": null, "step_count": 0, "done": false}),
        Current::Running(episode, id) => {
            json!({"episode_id": id, "step_count": episode.calls(), "task_id": episode.task().id, "done": false})
        }
        Current::Done(result, id) => {
            json!({"episode_id": id, "step_count": result.outcome.as_ref().map_or(0, |o| o.steps),
            "task_id": result.task_id, "done": true, "reward": result.reward})
        }
    };
    json!({"type": "state", "data": data})
}

/// MCP's JSON-RPC over the connection: `tools/list` and `tools/call` on the running episode.
async fn mcp(session: &Session, engine: &Engine, current: &mut Current, request: &Value) -> Value {
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let rpc = |body: Value| json!({"type": "mcp", "data": body});
    let Current::Running(episode, _) = current else {
        return rpc(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "no episode is running: reset first"}}),
        );
    };
    match request["method"].as_str().unwrap_or_default() {
        "tools/list" => {
            let tools: Vec<Value> = tool_list(episode)
                .into_iter()
                .map(|t| json!({"name": t["name"], "description": t["description"], "inputSchema": t["input_schema"]}))
                .collect();
            rpc(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}}))
        }
        "tools/call" => {
            let name = request["params"]["name"].as_str().unwrap_or_default().to_string();
            let arguments = request["params"].get("arguments").cloned().unwrap_or_else(|| json!({}));
            let answer = episode.call(&name, &arguments).await;
            let over = episode.calls() >= session.max_steps;
            let body = match answer {
                Ok(a) => json!({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": a.text}], "isError": a.is_error}}),
                Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": e}}),
            };
            if over {
                finish(session, engine, current, Status::LimitReached, None).await;
            }
            rpc(body)
        }
        other => rpc(
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": format!("no method {other:?}")}}),
        ),
    }
}
