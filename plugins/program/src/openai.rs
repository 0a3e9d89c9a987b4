//! OpenAI chat completions, as the program sends them, to the contract's model call and back.
//!
//! What the contract has a place for (messages, tools, the sampling fields) goes there; every
//! other request field the endpoint would understand (`tool_choice`, `parallel_tool_calls`,
//! `response_format`, `reasoning_effort`…) rides in `sampling.extra`, merged into the host's
//! request as it is. The host asks for token ids and log-probabilities itself, so the program's
//! own `logprobs` fields are dropped; `n` above 1 is refused (one completion per call is what a
//! trajectory records).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value, json};

use crate::orchard::plugin::model::{Completion, FinishReason, Sampling};
use crate::orchard::plugin::types::{ContentPart, Image, Message, Role, ToolCall, ToolSpec};

/// A model call, ready for `model.complete`.
pub struct Call {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub sampling: Sampling,
}

/// Fields that are the client's business, not the endpoint's, or that the host sets itself.
const DROPPED: [&str; 8] =
    ["model", "stream", "stream_options", "logprobs", "top_logprobs", "user", "store", "metadata"];

/// Reads a chat-completion request; `Err` says what is wrong with it (answered as a 400).
pub fn request(body: &Value) -> Result<Call, String> {
    let object = body.as_object().ok_or("the request is not a JSON object")?;
    let messages = object
        .get("messages")
        .and_then(Value::as_array)
        .ok_or("`messages` is missing or not a list")?
        .iter()
        .enumerate()
        .map(|(i, m)| message(m).map_err(|e| format!("messages[{i}]: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = match object.get("tools") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(list)) => list
            .iter()
            .enumerate()
            .map(|(i, t)| tool(t).map_err(|e| format!("tools[{i}]: {e}")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`tools` is not a list".into()),
    };
    if object.get("n").and_then(Value::as_u64).is_some_and(|n| n > 1) {
        return Err("`n` above 1: the relay asks for one completion per call".into());
    }
    let float = |k: &str| object.get(k).and_then(Value::as_f64).map(|v| v as f32);
    let stop = match object.get("stop") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => vec![],
    };
    let known =
        ["messages", "tools", "n", "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed"];
    let extra: Map<String, Value> = object
        .iter()
        .filter(|(k, _)| !known.contains(&k.as_str()) && !DROPPED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let sampling = Sampling {
        temperature: float("temperature"),
        top_p: float("top_p"),
        max_tokens: object
            .get("max_completion_tokens")
            .or_else(|| object.get("max_tokens"))
            .and_then(Value::as_u64)
            .map(|t| t.min(u32::MAX as u64) as u32),
        stop,
        seed: object.get("seed").and_then(Value::as_u64),
        extra: (!extra.is_empty()).then(|| Value::Object(extra).to_string()),
    };
    Ok(Call { messages, tools, sampling })
}

fn message(m: &Value) -> Result<Message, String> {
    let role = match m.get("role").and_then(Value::as_str) {
        Some("system" | "developer") => Role::System,
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("tool") => Role::Tool,
        Some(other) => return Err(format!("unknown role {other:?}")),
        None => return Err("no `role`".into()),
    };
    let content = match m.get("content") {
        None | Some(Value::Null) => vec![],
        Some(Value::String(s)) => vec![ContentPart::Text(s.clone())],
        Some(Value::Array(parts)) => parts.iter().map(part).collect::<Result<_, _>>()?,
        Some(_) => return Err("`content` is neither text nor a list of parts".into()),
    };
    let tool_calls = match m.get("tool_calls") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(calls)) => calls
            .iter()
            .map(|c| {
                let f = c.get("function").ok_or("a tool call has no `function`")?;
                Ok(ToolCall {
                    id: c.get("id").and_then(Value::as_str).unwrap_or_default().to_string(),
                    name: f.get("name").and_then(Value::as_str).ok_or("a tool call has no name")?.to_string(),
                    arguments: match f.get("arguments") {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => "{}".into(),
                    },
                })
            })
            .collect::<Result<_, String>>()?,
        Some(_) => return Err("`tool_calls` is not a list".into()),
    };
    let reasoning = m.get("reasoning_content").or_else(|| m.get("reasoning")).and_then(Value::as_str);
    Ok(Message {
        role,
        content,
        tool_calls,
        tool_call_id: m.get("tool_call_id").and_then(Value::as_str).map(str::to_string),
        reasoning: reasoning.map(str::to_string),
    })
}

fn part(p: &Value) -> Result<ContentPart, String> {
    match p.get("type").and_then(Value::as_str) {
        Some("text") => Ok(ContentPart::Text(p.get("text").and_then(Value::as_str).unwrap_or_default().to_string())),
        Some("image_url") => {
            let url = p.pointer("/image_url/url").and_then(Value::as_str).ok_or("an image part has no url")?;
            let (head, data) = url
                .strip_prefix("data:")
                .and_then(|rest| rest.split_once(','))
                .ok_or("an image part must be a data: URL (the sandbox's model reaches no other address)")?;
            let media_type = head.trim_end_matches(";base64").to_string();
            let data = B64.decode(data.trim()).map_err(|e| format!("an image part's base64: {e}"))?;
            Ok(ContentPart::Image(Image { media_type, data }))
        }
        other => Err(format!("content part type {other:?} is not relayed (text and image_url are)")),
    }
}

fn tool(t: &Value) -> Result<ToolSpec, String> {
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err("only function tools are relayed".into());
    }
    let f = t.get("function").ok_or("no `function`")?;
    Ok(ToolSpec {
        name: f.get("name").and_then(Value::as_str).ok_or("no function name")?.to_string(),
        description: f.get("description").and_then(Value::as_str).unwrap_or_default().to_string(),
        parameters: f.get("parameters").cloned().unwrap_or(json!({"type": "object", "properties": {}})).to_string(),
    })
}

/// The completion as OpenAI's API answers it (`n` is the call's number, for its id).
pub fn response(c: &Completion, n: u32) -> Value {
    let text: String = c
        .message
        .content
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.as_str()),
            ContentPart::Image(_) => None,
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": if text.is_empty() && !c.message.tool_calls.is_empty() { Value::Null } else { Value::String(text) }});
    if !c.message.tool_calls.is_empty() {
        message["tool_calls"] = c
            .message
            .tool_calls
            .iter()
            .map(|t| json!({"id": t.id, "type": "function", "function": {"name": t.name, "arguments": t.arguments}}))
            .collect();
    }
    if let Some(r) = &c.message.reasoning {
        message["reasoning_content"] = json!(r);
    }
    let finish = match c.finish_reason {
        FinishReason::Stop => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other => "stop",
    };
    json!({
        "id": format!("chatcmpl-orchard-{n}"),
        "object": "chat.completion",
        "created": 0,
        "model": c.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": c.usage.prompt_tokens,
            "completion_tokens": c.usage.completion_tokens,
            "total_tokens": c.usage.total_tokens,
        },
    })
}

/// An error answer in OpenAI's shape.
pub fn error(message: &str) -> Value {
    json!({"error": {"message": message, "type": "invalid_request_error"}})
}
