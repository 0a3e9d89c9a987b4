//! The `oracle` harness: runs the task's reference solution (`/solution/solve.sh`) through the
//! run's `bash` tool, with no model (Harbor's oracle). If the grader then fails the run, the task
//! or its grader is wrong.
//!
//! Config keys: `solution` (script path, default `/solution/solve.sh`), `timeout` (seconds,
//! default 600).

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "harness" });

use exports::orchard::plugin::agent::Guest;
use orchard::plugin::log::{self, Level};
use orchard::plugin::tools;
use orchard::plugin::types::{ContentPart, Error, Outcome, RunStatus, Task, ToolCall};
use serde_json::{Value, json};

struct Oracle;

impl Guest for Oracle {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config: Value = serde_json::from_str(&config).unwrap_or(Value::Null);
        let script = config.get("solution").and_then(Value::as_str).unwrap_or("/solution/solve.sh");
        let timeout = config.get("timeout").and_then(Value::as_f64).unwrap_or(600.0);
        if !tools::list().iter().any(|t| t.name == "bash") {
            return Err(Error::Unavailable("the oracle needs a `bash` tool: run it with the shell adapter".into()));
        }
        log::event(Level::Info, "oracle-start", &json!({"task": task.id, "solution": script}).to_string());
        let call = ToolCall {
            id: "oracle-1".into(),
            name: "bash".into(),
            arguments: json!({"command": format!("bash {script}"), "timeout": timeout}).to_string(),
        };
        let output = tools::call(&call)?;
        let text: String = output
            .content
            .iter()
            .filter_map(|p| match p {
                ContentPart::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        let status = if output.is_error { RunStatus::GaveUp } else { RunStatus::Completed };
        let tail: String = text.chars().rev().take(2000).collect::<Vec<_>>().into_iter().rev().collect();
        Ok(Outcome { status, answer: None, steps: 0, message: Some(tail) })
    }
}

export!(Oracle);
