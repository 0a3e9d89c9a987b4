//! The `oracle` harness: runs the task's reference solution with no model (Harbor's oracle). If
//! the grader then fails the run, the task or its grader is wrong.
//!
//! Two kinds of solution:
//! - `solution/calls.json`, a list of tool calls (`[{"tool": "click", "arguments": {"id": 5}}]`),
//!   replayed through the run's tools when the run offers every tool they name with the
//!   arguments they give (a browsing task's clicks, in the driver mode they were recorded in);
//!   an `answer` call's `text` is the outcome's answer (called only when the run offers an
//!   `answer` tool: an assistant task's final message needs none);
//! - otherwise `/solution/solve.sh`, run through the `bash` tool.
//!
//! Config keys: `solution` (script path, default `/solution/solve.sh`), `timeout` (seconds,
//! default 600).

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "harness" });

use exports::orchard::plugin::agent::Guest;
use orchard::plugin::log::{self, Level};
use orchard::plugin::tools;
use orchard::plugin::types::{ContentPart, Error, Outcome, RunStatus, Task, ToolCall, ToolSpec};
use serde_json::{Value, json};

struct Oracle;

fn text_of(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn tail(text: &str) -> String {
    text.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect()
}

/// The recorded calls, when every one names an offered tool and only arguments its schema has.
fn replayable(calls: &[Value], specs: &[ToolSpec]) -> bool {
    calls.iter().all(|c| {
        if c["tool"] == "answer" && !specs.iter().any(|s| s.name == "answer") {
            return true;
        }
        let Some(spec) = specs.iter().find(|s| c["tool"].as_str() == Some(s.name.as_str())) else { return false };
        let schema: Value = serde_json::from_str(&spec.parameters).unwrap_or(Value::Null);
        let known = schema["properties"].as_object();
        c["arguments"].as_object().is_none_or(|args| args.keys().all(|k| known.is_some_and(|p| p.contains_key(k))))
    })
}

fn replay(calls: &[Value], specs: &[ToolSpec]) -> Result<Outcome, Error> {
    let mut answer = None;
    for (i, c) in calls.iter().enumerate() {
        let name = c["tool"].as_str().unwrap_or_default().to_string();
        if name == "answer" {
            answer = c["arguments"]["text"].as_str().map(str::to_string);
            if !specs.iter().any(|s| s.name == "answer") {
                continue;
            }
        }
        let call = ToolCall {
            id: format!("oracle-{}", i + 1),
            name: name.clone(),
            arguments: c.get("arguments").cloned().unwrap_or(json!({})).to_string(),
        };
        let output = tools::call(&call)?;
        if output.is_error {
            let said = tail(&text_of(&output.content));
            return Ok(Outcome {
                status: RunStatus::GaveUp,
                answer,
                steps: i as u32 + 1,
                message: Some(format!("solution call {} ({name}) failed: {said}", i + 1)),
            });
        }
    }
    Ok(Outcome { status: RunStatus::Completed, answer, steps: calls.len() as u32, message: None })
}

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &["solution", "timeout"];

impl Guest for Oracle {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config = orchard_harness_config::parse("oracle", &config, &[CONFIG_KEYS]).map_err(Error::InvalidInput)?;
        let metadata: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
        let specs = tools::list();
        if let Some(calls) = metadata["solution_calls"].as_array()
            && replayable(calls, &specs)
        {
            log::event(Level::Info, "oracle-start", &json!({"task": task.id, "solution": "calls.json"}).to_string());
            return replay(calls, &specs);
        }
        let script = config.get("solution").and_then(Value::as_str).unwrap_or("/solution/solve.sh");
        let timeout = config.get("timeout").and_then(Value::as_f64).unwrap_or(600.0);
        if !specs.iter().any(|t| t.name == "bash") {
            return Err(Error::Unavailable(
                "the oracle needs a `bash` tool (run it with the shell adapter), or a solution/calls.json the run's tools can replay".into(),
            ));
        }
        log::event(Level::Info, "oracle-start", &json!({"task": task.id, "solution": script}).to_string());
        let call = ToolCall {
            id: "oracle-1".into(),
            name: "bash".into(),
            arguments: json!({"command": format!("{}bash {script}", solution_env(&metadata)), "timeout": timeout})
                .to_string(),
        };
        let output = tools::call(&call)?;
        let status = if output.is_error { RunStatus::GaveUp } else { RunStatus::Completed };
        Ok(Outcome { status, answer: None, steps: 0, message: Some(tail(&text_of(&output.content))) })
    }
}

/// task.toml's `[solution] env`, as `env K='v' … ` before the script (values single-quoted).
fn solution_env(metadata: &Value) -> String {
    let Some(env) = metadata.pointer("/solution/env").and_then(Value::as_object).filter(|e| !e.is_empty()) else {
        return String::new();
    };
    let pairs: Vec<String> = env
        .iter()
        .filter(|(k, _)| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(|(k, v)| format!("{k}='{}'", v.as_str().unwrap_or_default().replace('\'', "'\\''")))
        .collect();
    format!("env {} ", pairs.join(" "))
}

export!(Oracle);
