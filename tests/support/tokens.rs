//! A deterministic tokenizer and chat template for token-faithful tests: one id per byte, role
//! markers and separators above 255. A tool call renders as `name(arguments)`.

use serde_json::{Value, json};

pub fn render_message(m: &Value) -> Vec<u32> {
    let mut text = match &m["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    };
    for c in m["tool_calls"].as_array().into_iter().flatten() {
        text.push_str(&format!(
            "{}({})",
            c["function"]["name"].as_str().unwrap_or_default(),
            c["function"]["arguments"].as_str().unwrap_or_default()
        ));
    }
    text.bytes().map(u32::from).chain([300]).collect()
}

fn role_id(role: &str) -> u32 {
    match role {
        "system" => 256,
        "user" => 257,
        "assistant" => 258,
        _ => 259,
    }
}

/// The endpoint's ids for a request: every message rendered, then the assistant's marker.
pub fn render_prompt(request: &Value) -> Vec<u32> {
    let mut ids = Vec::new();
    for m in request["messages"].as_array().into_iter().flatten() {
        ids.push(role_id(m["role"].as_str().unwrap_or_default()));
        ids.extend(render_message(m));
    }
    ids.push(258);
    ids
}

/// A reply carrying `message` with the prompt's and the completion's ids, as vLLM does with
/// `return_token_ids`, and a logprob per token (`-id / 1000`).
pub fn reply(request: &Value, message: Value) -> (u16, Value) {
    let completion_ids = render_message(&message);
    let finish = if message["tool_calls"].is_array() { "tool_calls" } else { "stop" };
    let (status, mut body) = crate::evals::completion(message, finish, (10, completion_ids.len() as u32));
    let logprobs: Vec<Value> =
        completion_ids.iter().map(|i| json!({"token": "t", "logprob": -(*i as f64) / 1000.0})).collect();
    body["choices"][0]["logprobs"] = json!({"content": logprobs});
    body["choices"][0]["token_ids"] = json!(completion_ids);
    body["prompt_token_ids"] = json!(render_prompt(request));
    (status, body)
}
