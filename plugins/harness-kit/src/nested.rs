//! What harnesses with subagents and compaction tell the host, so that exports can tell nested
//! conversations apart: `subagent-start` / `subagent-end` events (the subagent's whole
//! conversation rides on its end event, in OpenAI's message shape) and `compaction` events
//! (which messages were folded and what replaced them).
//!
//! Every model call a subagent makes happens between its start and end events; the OpenAI
//! export writes each subagent's conversation as its own record linked to the parent's, and
//! the ATIF export embeds it under `subagent_trajectories`.

use serde_json::{Value, json};

use crate::orchard::plugin::log;
use crate::{ContentPart, Message, Role, ToolSpec, text_of};

/// A message as OpenAI's chat API spells it (images as a note: logs carry no pixels).
pub fn openai_message(m: &Message) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let images = m.content.iter().filter(|p| matches!(p, ContentPart::Image(_))).count();
    let mut content = text_of(&m.content);
    if images > 0 {
        content += &format!("\n[{images} image(s)]");
    }
    let mut v = json!({"role": role, "content": content});
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    if let Some(r) = &m.reasoning {
        v["reasoning_content"] = json!(r);
    }
    v
}

/// A subagent's identity in the logs.
#[derive(Debug, Clone)]
pub struct Subagent {
    /// Unique within the run: the parent's tool call id that started it.
    pub id: String,
    /// The parent's id (`None` for the main agent).
    pub parent: Option<String>,
    /// What kind of subagent (a configured agent's name, `coder`, `subagent`...).
    pub name: String,
    pub depth: u32,
}

impl Subagent {
    pub fn start(&self, task: &str, tools: &[ToolSpec]) {
        log::event(
            log::Level::Info,
            "subagent-start",
            &json!({
                "id": self.id, "parent": self.parent, "name": self.name, "depth": self.depth, "task": task,
                "tools": tools.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            })
            .to_string(),
        );
    }

    /// `status`: `completed`, `limit-reached`, `error`...; `answer`: what the parent gets back.
    pub fn end(&self, status: &str, messages: &[Message], tools: &[ToolSpec], answer: &str) {
        log::event(
            log::Level::Info,
            "subagent-end",
            &json!({
                "id": self.id, "parent": self.parent, "name": self.name, "depth": self.depth, "status": status,
                "answer": answer,
                "messages": messages.iter().map(openai_message).collect::<Vec<_>>(),
                "tools": tools.iter().map(|t| json!({"type": "function", "function": {
                    "name": t.name, "description": t.description,
                    "parameters": serde_json::from_str::<Value>(&t.parameters).unwrap_or(json!({}))}})).collect::<Vec<_>>(),
            })
            .to_string(),
        );
    }
}

/// Records a compaction of the conversation of `agent` (`None`: the main agent).
pub fn compaction(agent: Option<&str>, reason: &str, folded: usize, kept: usize, summary: &str) {
    log::event(
        log::Level::Info,
        "compaction",
        &json!({"agent": agent, "reason": reason, "folded": folded, "kept": kept, "summary_chars": summary.len()})
            .to_string(),
    );
}

/// Whether a model error says the prompt did not fit the context window.
pub fn is_context_overflow(e: &crate::Error) -> bool {
    let text = format!("{e:?}").to_lowercase();
    text.contains("context length")
        || text.contains("context_length")
        || text.contains("maximum context")
        || text.contains("context window")
        || text.contains("too many tokens")
        || text.contains("prompt is too long")
}
