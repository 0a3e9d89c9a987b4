//! What Orchard's harness plugins share: the bindings of the `harness` world (one set of types
//! for all of them; each plugin exports itself with [`export_harness!`]) and the context policy
//! (observation caps, a context budget, compaction).

wit_bindgen::generate!({
    path: "../../wit/0.2.0",
    world: "harness",
    pub_export_macro: true,
    export_macro_name: "export_harness",
    default_bindings_module: "orchard_harness_kit",
});

pub mod clock;
pub mod config;
pub mod context;
pub mod nested;
pub mod python_json;
pub mod text;

pub use orchard::plugin::types::{
    ContentPart, Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolOutput, ToolSpec,
};

/// A text message.
pub fn message(role: Role, body: impl Into<String>) -> Message {
    Message {
        role,
        content: vec![ContentPart::Text(body.into())],
        tool_calls: vec![],
        tool_call_id: None,
        reasoning: None,
    }
}

/// A tool message answering `call_id`.
pub fn tool_message(call_id: &str, body: impl Into<String>) -> Message {
    Message {
        role: Role::Tool,
        content: vec![ContentPart::Text(body.into())],
        tool_calls: vec![],
        tool_call_id: Some(call_id.to_string()),
        reasoning: None,
    }
}

/// A tool message with the tool's images after its (capped) text: screenshots reach a vision
/// model, and the trajectory, as the tool gave them.
pub fn tool_message_with_images(call_id: &str, body: impl Into<String>, parts: &[ContentPart]) -> Message {
    let mut m = tool_message(call_id, body);
    m.content.extend(parts.iter().filter(|p| matches!(p, ContentPart::Image(_))).cloned());
    m
}

/// The text parts of a message (or a tool output), joined.
pub fn text_of(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            ContentPart::Text(t) => Some(t.as_str()),
            ContentPart::Image(_) => None,
        })
        .collect()
}

/// Sampling settings from a harness config (`temperature`, `top_p`, `max_tokens`, `seed`).
pub fn sampling(config: &serde_json::Value) -> orchard::plugin::model::Sampling {
    use serde_json::Value;
    orchard::plugin::model::Sampling {
        temperature: config.get("temperature").and_then(Value::as_f64).map(|t| t as f32),
        top_p: config.get("top_p").and_then(Value::as_f64).map(|t| t as f32),
        max_tokens: config.get("max_tokens").and_then(Value::as_u64).map(|t| t as u32),
        stop: vec![],
        seed: config.get("seed").and_then(Value::as_u64),
        extra: config.get("extra_body").filter(|v| v.is_object()).map(|v| v.to_string()),
    }
}
