//! Diffing a port against the real program it follows: one scripted episode played to each,
//! the real one run by the `program` harness from the test program cache, and every request
//! they sent compared (roles, texts, tool calls, tools).

use std::path::Path;

use serde_json::{Value, json};

use crate::evals::{args, eval_async, examples, mock_model, rollouts};

/// A function call `name(arguments)` with id `id`, as a model's reply carries it.
pub fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
}

/// A scripted turn: the assistant makes `calls`.
pub fn calls_turn(calls: Vec<Value>) -> (u16, Value) {
    let message = json!({"role": "assistant", "content": "", "tool_calls": calls});
    crate::evals::completion(message, "tool_calls", (100, 10))
}

fn hello_task() -> String {
    Path::new(&examples()).join("hello-file").display().to_string()
}

/// What a request says, with what only one side's client adds left out.
pub fn normalized(request: &Value) -> Value {
    let messages: Vec<Value> = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = match &m["content"] {
                Value::String(s) => s.clone(),
                Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
                _ => String::new(),
            };
            let calls: Vec<Value> = m["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| json!([c["id"], c["function"]["name"], c["function"]["arguments"]]))
                .collect();
            json!({"role": m["role"], "content": text, "tool_calls": calls, "tool_call_id": m["tool_call_id"]})
        })
        .collect();
    json!({"messages": messages, "tools": request.get("tools").cloned().unwrap_or(json!([]))})
}

/// Runs the episode on the example task `hello-file` under `harness` with `tools` and `config`,
/// the program cache at `cache`; the rollout and every request the model saw.
pub async fn play(
    episode: Vec<(u16, Value)>,
    harness: &str,
    tools: &[&str],
    config: Value,
    cache: &Path,
) -> (Value, Vec<Value>) {
    let (url, seen) = mock_model(episode).await;
    let cache = cache.display().to_string();
    let config = config.to_string();
    let mut list = vec![hello_task(), "--harness".into(), harness.into(), "--grader".into(), "script".into()];
    for t in tools {
        list.extend(["--tools".into(), t.to_string()]);
    }
    list.extend(args(&["--model", &url, "--model-name", "mock-1", "--program-cache", &cache, "--config", &config]));
    let (_, out, _) = eval_async(list).await;
    let rollout = rollouts(out.path()).remove(0);
    let requests = seen.lock().unwrap().iter().map(normalized).collect();
    (rollout, requests)
}

/// Both sides' requests, compared one by one; the differences, each named.
pub fn differences(real: &[Value], port: &[Value]) -> Vec<String> {
    let mut found = Vec::new();
    if real.len() != port.len() {
        found.push(format!("{} requests from the real program, {} from the port", real.len(), port.len()));
    }
    for (i, (r, p)) in real.iter().zip(port).enumerate() {
        if r["tools"] != p["tools"] {
            found.push(format!("request {i}: tools\n  real: {}\n  port: {}", r["tools"], p["tools"]));
        }
        let (rm, pm) = (r["messages"].as_array().unwrap(), p["messages"].as_array().unwrap());
        if rm.len() != pm.len() {
            found.push(format!("request {i}: {} messages from the real program, {} from the port", rm.len(), pm.len()));
        }
        for (j, (a, b)) in rm.iter().zip(pm).enumerate() {
            if a != b {
                found.push(format!("request {i}, message {j}:\n  real: {a}\n  port: {b}"));
            }
        }
    }
    found
}
