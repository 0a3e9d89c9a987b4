//! The `react` harness: the generic function-calling loop. The model sees the task and the run's
//! tools; each turn it may call tools (several at once) and sees what they returned; a turn with
//! no tool call ends the run and its text is the answer.
//!
//! Config keys: `max_steps` (default 30), `system_prompt`, `temperature`, `top_p`, `max_tokens`,
//! `seed`, `extra_body`, and the context policy's (see `orchard_harness_kit::context`; e.g.
//! `max_images`, the screenshots kept in context, default 3).
//!
//! `resume`: `[{"content": "...", "tool_calls": [{"id", "name", "arguments"}]}, ...]`, the
//! assistant turns of a recorded rollout to start from. Their tool calls are run again, in order
//! (the sandbox reaches the state the recorded rollout had after them; the observations are the
//! fresh ones), without asking the model; then the loop goes on with the model (Monte Carlo
//! continuations from a mid-trajectory state: `orchard export --credit mc`). Replayed turns count
//! toward `max_steps`.

use orchard_harness_kit::config;
use orchard_harness_kit::context::Policy;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::orchard::plugin::{log, model, tools};
use orchard_harness_kit::{Error, Outcome, Role, RunStatus, Task, message, text_of, tool_message_with_images};
use serde_json::{Value, json};

struct React;

const DEFAULT_SYSTEM: &str = "You are an autonomous agent working in a Linux sandbox. Use the tools to \
complete the task. When you are done, reply with a final message and no tool calls; that message is \
your answer.";

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &["max_steps", "system_prompt", "resume"];

impl Guest for React {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config =
            orchard_harness_kit::config::parse("react", &config, &[CONFIG_KEYS, config::SAMPLING, config::CONTEXT])?;
        let max_steps = config.get("max_steps").and_then(Value::as_u64).unwrap_or(30) as u32;
        let system = config.get("system_prompt").and_then(Value::as_str).unwrap_or(DEFAULT_SYSTEM).to_string();
        let sampling = orchard_harness_kit::sampling(&config);
        let policy = Policy::from_config(&config);
        let specs = tools::list();
        let mut messages = vec![message(Role::System, system), message(Role::User, task.instruction.clone())];
        let replayed = replay(&config, &mut messages, &policy)?;
        let mut last_prompt = 0;
        for step in replayed + 1..=max_steps {
            policy.fit(&mut messages, last_prompt);
            policy.keep_recent_images(&mut messages);
            let completion = model::complete(&messages, &specs, &sampling)?;
            last_prompt = completion.usage.prompt_tokens;
            let reply = completion.message;
            let calls = reply.tool_calls.clone();
            messages.push(reply.clone());
            if calls.is_empty() {
                return Ok(Outcome {
                    status: RunStatus::Completed,
                    answer: Some(text_of(&reply.content)),
                    steps: step,
                    message: None,
                });
            }
            for call in calls {
                let mut images = Vec::new();
                let observation = match tools::call(&call) {
                    Ok(out) => {
                        images = out.content.clone();
                        policy.cap(&text_of(&out.content))
                    }
                    // The model asked for something impossible: tell it, and let it try again.
                    Err(e) => {
                        log::event(
                            log::Level::Debug,
                            "tool-error",
                            &json!({"tool": call.name, "step": step}).to_string(),
                        );
                        format!("error: {e:?}")
                    }
                };
                messages.push(tool_message_with_images(&call.id, observation, &images));
            }
        }
        Ok(Outcome {
            status: RunStatus::LimitReached,
            answer: None,
            steps: max_steps,
            message: Some(format!("stopped after {max_steps} steps")),
        })
    }
}

/// Runs the recorded turns of `config.resume` again; returns how many.
fn replay(config: &Value, messages: &mut Vec<orchard_harness_kit::Message>, policy: &Policy) -> Result<u32, Error> {
    let Some(turns) = config.get("resume").and_then(Value::as_array) else { return Ok(0) };
    for (i, turn) in turns.iter().enumerate() {
        let mut reply = message(Role::Assistant, turn.get("content").and_then(Value::as_str).unwrap_or_default());
        for (j, call) in turn.get("tool_calls").and_then(Value::as_array).into_iter().flatten().enumerate() {
            let arguments = match call.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => "{}".into(),
            };
            reply.tool_calls.push(orchard_harness_kit::ToolCall {
                id: call
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("replay-{i}-{j}")),
                name: call
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| Error::InvalidInput(format!("resume[{i}]: a tool call without a name")))?
                    .to_string(),
                arguments,
            });
        }
        let calls = reply.tool_calls.clone();
        messages.push(reply);
        for call in calls {
            let observation = match tools::call(&call) {
                Ok(out) => policy.cap(&text_of(&out.content)),
                Err(e) => format!("error: {e:?}"),
            };
            messages.push(orchard_harness_kit::tool_message(&call.id, observation));
        }
    }
    log::event(log::Level::Info, "resumed", &json!({"turns": turns.len()}).to_string());
    Ok(turns.len() as u32)
}

orchard_harness_kit::export_harness!(React);
