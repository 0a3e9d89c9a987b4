//! Between the contract's types and the model client's (which are also the trajectory's).

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use orchard_model as m;

use crate::bindings::harness::orchard::plugin::model::{FinishReason, Sampling};
use crate::bindings::{ContentPart, Image, Message, Role, ToolCall, ToolSpec, Usage};

pub fn message_to_model(msg: &Message) -> m::Message {
    m::Message {
        role: match msg.role {
            Role::System => m::Role::System,
            Role::User => m::Role::User,
            Role::Assistant => m::Role::Assistant,
            Role::Tool => m::Role::Tool,
        },
        content: parts_to_model(&msg.content),
        tool_calls: msg.tool_calls.iter().map(call_to_model).collect(),
        tool_call_id: msg.tool_call_id.clone(),
        reasoning: msg.reasoning.clone(),
    }
}

pub fn parts_to_model(parts: &[ContentPart]) -> Vec<m::Part> {
    parts
        .iter()
        .map(|p| match p {
            ContentPart::Text(t) => m::Part::Text { text: t.clone() },
            ContentPart::Image(i) => {
                m::Part::Image { media_type: i.media_type.clone(), data_base64: B64.encode(&i.data) }
            }
        })
        .collect()
}

pub fn call_to_model(c: &ToolCall) -> m::ToolCall {
    m::ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() }
}

pub fn message_from_model(msg: &m::Message) -> Message {
    Message {
        role: match msg.role {
            m::Role::System => Role::System,
            m::Role::User => Role::User,
            m::Role::Assistant => Role::Assistant,
            m::Role::Tool => Role::Tool,
        },
        content: msg
            .content
            .iter()
            .map(|p| match p {
                m::Part::Text { text } => ContentPart::Text(text.clone()),
                m::Part::Image { media_type, data_base64 } => ContentPart::Image(Image {
                    media_type: media_type.clone(),
                    data: B64.decode(data_base64).unwrap_or_default(),
                }),
            })
            .collect(),
        tool_calls: msg
            .tool_calls
            .iter()
            .map(|c| ToolCall { id: c.id.clone(), name: c.name.clone(), arguments: c.arguments.clone() })
            .collect(),
        tool_call_id: msg.tool_call_id.clone(),
        reasoning: msg.reasoning.clone(),
    }
}

pub fn spec_to_model(s: &ToolSpec) -> m::ToolSpec {
    m::ToolSpec { name: s.name.clone(), description: s.description.clone(), parameters: s.parameters.clone() }
}

pub fn sampling_to_model(s: &Sampling) -> Result<m::Sampling, String> {
    let extra = match &s.extra {
        Some(text) => {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("sampling.extra is not JSON: {e}"))?;
            if !v.is_object() {
                return Err("sampling.extra must be a JSON object".into());
            }
            Some(v)
        }
        None => None,
    };
    Ok(m::Sampling {
        temperature: s.temperature,
        top_p: s.top_p,
        max_tokens: s.max_tokens,
        stop: s.stop.clone(),
        seed: s.seed,
        extra,
    })
}

pub fn finish_from_model(f: m::FinishReason) -> FinishReason {
    match f {
        m::FinishReason::Stop => FinishReason::Stop,
        m::FinishReason::Length => FinishReason::Length,
        m::FinishReason::ToolCalls => FinishReason::ToolCalls,
        m::FinishReason::ContentFilter => FinishReason::ContentFilter,
        m::FinishReason::Other => FinishReason::Other,
    }
}

pub fn usage_from_model(u: m::Usage) -> Usage {
    Usage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens, total_tokens: u.total_tokens }
}
