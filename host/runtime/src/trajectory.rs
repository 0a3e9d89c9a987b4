//! The trajectory: every crossing of the plugin boundary in one rollout, in order, the same way
//! whichever harness ran.

use orchard_model::{Message, ToolCall, ToolSpec, Usage};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Step {
    /// A model call: what was sent (the messages are in `Trajectory::conversation`), what came
    /// back, and what it cost.
    ModelCall {
        plugin: String,
        at_ms: u64,
        duration_ms: u64,
        /// How many messages the request carried.
        request_messages: usize,
        tools: Vec<String>,
        response: Message,
        finish_reason: orchard_model::FinishReason,
        usage: Usage,
        model: String,
        attempts: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        logprobs: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token_ids: Option<Vec<u32>>,
    },
    ModelError {
        plugin: String,
        error: String,
        at_ms: u64,
        duration_ms: u64,
    },
    /// A tool call routed by the host, with what the tool returned.
    ToolCall {
        plugin: String,
        adapter: String,
        call: ToolCall,
        /// The observation (text parts; images are noted).
        output: String,
        is_error: bool,
        at_ms: u64,
        duration_ms: u64,
    },
    /// A direct sandbox operation (tool adapters and graders).
    Sandbox {
        plugin: String,
        op: String,
        detail: serde_json::Value,
        at_ms: u64,
        duration_ms: u64,
    },
    /// A `log.event`.
    Event {
        plugin: String,
        level: String,
        name: String,
        data: serde_json::Value,
        at_ms: u64,
    },
    /// The verifier's environment: where the grader worked and what was carried into it from
    /// the agent's sandbox (see `orchard-verifier`).
    Verifier {
        mode: String,
        detail: serde_json::Value,
        at_ms: u64,
        duration_ms: u64,
    },
    /// What a plugin printed to stdout or stderr.
    Output {
        plugin: String,
        stream: String,
        text: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Trajectory {
    pub steps: Vec<Step>,
    /// The conversation as the model last saw it, followed by the tool results since.
    pub conversation: Vec<Message>,
    /// The tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The sampling parameters of the last model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<orchard_model::Sampling>,
    pub usage: Usage,
    pub model_calls: u32,
    pub tool_calls: u32,
}
