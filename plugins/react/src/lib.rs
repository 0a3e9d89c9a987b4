//! The `react` harness: the generic function-calling loop. The model sees the task and the run's
//! tools; each turn it may call tools (several at once) and sees what they returned; a turn with
//! no tool call ends the run and its text is the answer.
//!
//! Config keys: `max_steps` (default 30), `system_prompt`, `temperature`, `max_tokens`.

wit_bindgen::generate!({ path: "../../wit/0.1.0", world: "harness" });

use exports::orchard::plugin::agent::Guest;
use orchard::plugin::log::{self, Level};
use orchard::plugin::model::{self, Sampling};
use orchard::plugin::tools;
use orchard::plugin::types::{ContentPart, Error, Message, Outcome, Role, RunStatus, Task};
use serde_json::{Value, json};

struct React;

const DEFAULT_SYSTEM: &str = "You are an autonomous agent working in a Linux sandbox. Use the tools to \
complete the task. When you are done, reply with a final message and no tool calls; that message is \
your answer.";

fn text(role: Role, body: String) -> Message {
    Message { role, content: vec![ContentPart::Text(body)], tool_calls: vec![], tool_call_id: None, reasoning: None }
}

impl Guest for React {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config: Value = serde_json::from_str(&config).unwrap_or(Value::Null);
        let max_steps = config.get("max_steps").and_then(Value::as_u64).unwrap_or(30) as u32;
        let system = config.get("system_prompt").and_then(Value::as_str).unwrap_or(DEFAULT_SYSTEM).to_string();
        let sampling = Sampling {
            temperature: config.get("temperature").and_then(Value::as_f64).map(|t| t as f32),
            top_p: None,
            max_tokens: config.get("max_tokens").and_then(Value::as_u64).map(|t| t as u32),
            stop: vec![],
            seed: None,
            extra: None,
        };
        let specs = tools::list();
        let mut messages = vec![text(Role::System, system), text(Role::User, task.instruction.clone())];
        for step in 1..=max_steps {
            let completion = model::complete(&messages, &specs, &sampling)?;
            let reply = completion.message;
            let calls = reply.tool_calls.clone();
            messages.push(reply.clone());
            if calls.is_empty() {
                let answer: String = reply
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::Text(t) => Some(t.as_str()),
                        _ => None,
                    })
                    .collect();
                return Ok(Outcome { status: RunStatus::Completed, answer: Some(answer), steps: step, message: None });
            }
            for call in calls {
                let (content, failed) = match tools::call(&call) {
                    Ok(out) => (out.content, out.is_error),
                    // The model asked for something impossible: tell it, and let it try again.
                    Err(e) => (vec![ContentPart::Text(format!("error: {e:?}"))], true),
                };
                if failed {
                    log::event(Level::Debug, "tool-error", &json!({"tool": call.name, "step": step}).to_string());
                }
                messages.push(Message {
                    role: Role::Tool,
                    content,
                    tool_calls: vec![],
                    tool_call_id: Some(call.id.clone()),
                    reasoning: None,
                });
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

export!(React);
