//! The JSON of OpenAI-compatible chat completions.

use serde_json::{Map, Value, json};

use crate::{
    Completion, FinishReason, Message, ModelConfig, ModelError, Part, Role, Sampling, ToolCall, ToolSpec, Usage,
};

fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn message_json(m: &Message) -> Value {
    let has_images = m.content.iter().any(|p| matches!(p, Part::Image { .. }));
    // Plain strings where possible: some endpoints accept nothing else for tool messages.
    let content = if has_images {
        Value::Array(
            m.content
                .iter()
                .map(|p| match p {
                    Part::Text { text } => json!({"type": "text", "text": text}),
                    Part::Image { media_type, data_base64 } => {
                        json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data_base64}")}})
                    }
                })
                .collect(),
        )
    } else {
        Value::String(m.text_content())
    };
    let mut obj = Map::new();
    obj.insert("role".into(), role_name(m.role).into());
    obj.insert("content".into(), content);
    if !m.tool_calls.is_empty() {
        obj.insert(
            "tool_calls".into(),
            m.tool_calls
                .iter()
                .map(
                    |c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}),
                )
                .collect(),
        );
    }
    if let Some(id) = &m.tool_call_id {
        obj.insert("tool_call_id".into(), id.clone().into());
    }
    if let Some(r) = &m.reasoning {
        obj.insert("reasoning_content".into(), r.clone().into());
    }
    Value::Object(obj)
}

/// What this endpoint's configuration fixes in any request body (ours, or a proxied client's):
/// the model name, the token ids and logprobs a trainer needs, the trainer's sampling.
pub fn apply_config(config: &ModelConfig, body: &mut Map<String, Value>) {
    body.insert("model".into(), config.model.clone().into());
    if config.logprobs {
        body.insert("logprobs".into(), true.into());
        // llama.cpp answers `logprobs: null` unless `top_logprobs` is set; vLLM and SGLang send
        // the prompt's and the completion's token ids back with `return_token_ids`.
        body.insert("top_logprobs".into(), 1.into());
        body.insert("return_token_ids".into(), true.into());
    }
    // The trainer's sampling wins over the harness's: the policy being trained is sampled the
    // way the trainer's algorithm assumes.
    if let Some(Value::Object(fixed)) = &config.sampling {
        for (k, v) in fixed {
            body.insert(k.clone(), v.clone());
        }
    }
}

pub fn request_body(config: &ModelConfig, messages: &[Message], tools: &[ToolSpec], s: &Sampling) -> Value {
    let mut body = Map::new();
    body.insert("messages".into(), messages.iter().map(message_json).collect());
    if !tools.is_empty() {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| {
                let params: Value = serde_json::from_str(&t.parameters).unwrap_or_else(|_| json!({"type": "object"}));
                json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": params}})
            })
            .collect();
        body.insert("tools".into(), tools.into());
    }
    if let Some(t) = s.temperature {
        body.insert("temperature".into(), t.into());
    }
    if let Some(p) = s.top_p {
        body.insert("top_p".into(), p.into());
    }
    if let Some(m) = s.max_tokens {
        body.insert("max_tokens".into(), m.into());
    }
    if !s.stop.is_empty() {
        body.insert("stop".into(), s.stop.clone().into());
    }
    if let Some(seed) = s.seed {
        body.insert("seed".into(), seed.into());
    }
    if let Some(Value::Object(extra)) = &s.extra {
        for (k, v) in extra {
            body.insert(k.clone(), v.clone());
        }
    }
    apply_config(config, &mut body);
    Value::Object(body)
}

pub fn parse_response(text: &str) -> Result<Completion, ModelError> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ModelError::Protocol(format!("not JSON ({e}): {}", text.chars().take(200).collect::<String>())))?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ModelError::Protocol(format!("no choices in {}", text.chars().take(200).collect::<String>())))?;
    let m = choice.get("message").ok_or_else(|| ModelError::Protocol("choices[0] has no message".into()))?;
    let content = match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => vec![Part::Text { text: s.clone() }],
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str).map(|t| Part::Text { text: t.to_string() }))
            .collect(),
        _ => vec![],
    };
    let tool_calls = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let f = c.get("function").cloned().unwrap_or(Value::Null);
                    let arguments = match f.get("arguments") {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => other.to_string(),
                        None => "{}".into(),
                    };
                    ToolCall {
                        id: c
                            .get("id")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("call_{i}")),
                        name: f.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                        arguments,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let reasoning = m
        .get("reasoning_content")
        .or_else(|| m.get("reasoning"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let finish_reason = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") => FinishReason::Stop,
        Some("length") => FinishReason::Length,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("content_filter") => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    };
    let u = v.get("usage").cloned().unwrap_or(Value::Null);
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0) as u32;
    let usage = Usage {
        prompt_tokens: n("prompt_tokens"),
        completion_tokens: n("completion_tokens"),
        total_tokens: n("total_tokens"),
    };
    let token_ids = choice
        .get("token_ids")
        .or_else(|| v.get("token_ids"))
        .and_then(Value::as_array)
        .map(|ids| ids.iter().filter_map(|i| i.as_u64().map(|i| i as u32)).collect());
    let prompt_token_ids = v
        .get("prompt_token_ids")
        .or_else(|| choice.get("prompt_token_ids"))
        .and_then(Value::as_array)
        .map(|ids| ids.iter().filter_map(|i| i.as_u64().map(|i| i as u32)).collect());
    Ok(Completion {
        message: Message { role: Role::Assistant, content, tool_calls, tool_call_id: None, reasoning },
        finish_reason,
        usage,
        model: v.get("model").and_then(Value::as_str).unwrap_or_default().to_string(),
        logprobs: choice.get("logprobs").filter(|l| !l.is_null()).cloned(),
        token_ids,
        prompt_token_ids,
        attempts: 1,
        policy_version: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_reasoning_and_usage_are_parsed() {
        let text = r#"{"model":"m1","choices":[{"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
            "reasoning_content":"think","tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}},
            {"id":"c2","type":"function","function":{"name":"read_file","arguments":{"path":"/x"}}}]},
            "logprobs":{"content":[{"token":"a","logprob":-0.1}]}}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}"#;
        let c = parse_response(text).unwrap();
        assert_eq!(c.finish_reason, FinishReason::ToolCalls);
        assert_eq!(c.message.tool_calls.len(), 2);
        assert_eq!(c.message.tool_calls[1].arguments, r#"{"path":"/x"}"#);
        assert_eq!(c.message.reasoning.as_deref(), Some("think"));
        assert_eq!(c.usage.total_tokens, 15);
        assert!(c.logprobs.is_some());
    }

    #[test]
    fn requests_carry_tools_sampling_and_passed_back_reasoning() {
        let config = ModelConfig::new("http://x/v1", "m");
        let mut assistant = Message::text(Role::Assistant, "");
        assistant.reasoning = Some("r".into());
        assistant.tool_calls = vec![ToolCall { id: "c1".into(), name: "bash".into(), arguments: "{}".into() }];
        let mut tool = Message::text(Role::Tool, "out");
        tool.tool_call_id = Some("c1".into());
        let tools =
            [ToolSpec { name: "bash".into(), description: "d".into(), parameters: r#"{"type":"object"}"#.into() }];
        let sampling = Sampling { temperature: Some(0.5), extra: Some(json!({"top_k": 5})), ..Default::default() };
        let body = request_body(&config, &[assistant, tool], &tools, &sampling);
        assert_eq!(body["messages"][0]["reasoning_content"], "r");
        assert_eq!(body["messages"][0]["tool_calls"][0]["function"]["name"], "bash");
        assert_eq!(body["messages"][1]["tool_call_id"], "c1");
        assert_eq!(body["tools"][0]["function"]["parameters"]["type"], "object");
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["top_k"], 5);
    }

    #[test]
    fn garbage_is_a_protocol_error() {
        assert!(matches!(parse_response("<html>"), Err(ModelError::Protocol(_))));
        assert!(matches!(parse_response("{}"), Err(ModelError::Protocol(_))));
    }
}
