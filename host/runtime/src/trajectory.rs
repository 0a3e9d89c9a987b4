//! The trajectory: every crossing of the plugin boundary in one rollout, in order, the same way
//! whichever harness ran.

use orchard_model::{Message, ToolCall, ToolSpec, Usage};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
/// One step of a rollout.
pub enum Step {
    /// A model call: what was sent (the messages are in `Trajectory::conversation`), what came
    /// back, and what it cost.
    ModelCall {
        /// The plugin that made it.
        plugin: String,
        /// When, in milliseconds since the rollout started.
        at_ms: u64,
        /// How long it took.
        duration_ms: u64,
        /// How many messages the request carried.
        request_messages: usize,
        /// The tools offered.
        tools: Vec<String>,
        /// The model's message.
        response: Message,
        /// Why it stopped.
        finish_reason: orchard_model::FinishReason,
        /// Tokens used.
        usage: Usage,
        /// The model that answered.
        model: String,
        /// Tries it took (retries after transient errors).
        attempts: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// Log-probabilities of the sampled tokens.
        logprobs: Option<serde_json::Value>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        /// The sampled token ids.
        token_ids: Option<Vec<u32>>,
        /// The prompt's token ids as the endpoint rendered them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_token_ids: Option<Vec<u32>>,
        /// The policy version the trainer named for the endpoint.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy_version: Option<String>,
    },
    /// A model call that failed.
    ModelError {
        /// The plugin that made it.
        plugin: String,
        /// What failed.
        error: String,
        /// When, in milliseconds since the rollout started.
        at_ms: u64,
        /// How long it took.
        duration_ms: u64,
    },
    /// A tool call routed by the host, with what the tool returned.
    ToolCall {
        /// The plugin that called.
        plugin: String,
        /// The adapter that answered.
        adapter: String,
        /// The call.
        call: ToolCall,
        /// The observation (text parts; images are noted).
        output: String,
        /// Whether the tool said it failed.
        is_error: bool,
        /// When, in milliseconds since the rollout started.
        at_ms: u64,
        /// How long it took.
        duration_ms: u64,
    },
    /// A direct sandbox operation (tool adapters and graders).
    Sandbox {
        /// The plugin.
        plugin: String,
        /// The operation (`exec`, `write-file`, ...).
        op: String,
        /// Its arguments and outcome.
        detail: serde_json::Value,
        /// When, in milliseconds since the rollout started.
        at_ms: u64,
        /// How long it took.
        duration_ms: u64,
    },
    /// A `log.event`.
    Event {
        /// The plugin.
        plugin: String,
        /// `debug`, `info`, `warn` or `error`.
        level: String,
        /// The event's name.
        name: String,
        /// Its data.
        data: serde_json::Value,
        /// When, in milliseconds since the rollout started.
        at_ms: u64,
    },
    /// The verifier's environment: where the grader worked and what was carried into it from
    /// the agent's sandbox (see `orchard-verifier`).
    Verifier {
        /// `separate` or `in-place`.
        mode: String,
        /// What was carried and dropped.
        detail: serde_json::Value,
        /// When, in milliseconds since the rollout started.
        at_ms: u64,
        /// How long it took.
        duration_ms: u64,
    },
    /// What a plugin printed to stdout or stderr.
    Output {
        /// The plugin.
        plugin: String,
        /// `stdout` or `stderr`.
        stream: String,
        /// What it printed.
        text: String,
    },
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
/// Everything a rollout did, in order.
pub struct Trajectory {
    /// The steps.
    pub steps: Vec<Step>,
    /// The conversation as the model last saw it, followed by the tool results since.
    pub conversation: Vec<Message>,
    /// The system and user messages that opened the harness's first model request (the task
    /// as the model first saw it): the start of [`Trajectory::history`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opening: Vec<Message>,
    /// The tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// The sampling parameters of the last model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<orchard_model::Sampling>,
    /// Tokens used over all model calls.
    pub usage: Usage,
    /// Model calls made.
    pub model_calls: u32,
    /// Tool calls made.
    pub tool_calls: u32,
}

impl Trajectory {
    /// What graders read as the run's messages. The last conversation when it holds every tool
    /// call the run made (a plain loop); otherwise — the harness compacted its context, the last
    /// call was a subagent's, or no model was called (the oracle) — the whole history in order:
    /// the opening, every harness model response, every tool call (in an assistant message of
    /// its own when no response carried it) and its result.
    pub fn history(&self) -> Vec<Message> {
        let in_conversation: std::collections::HashSet<&str> =
            self.conversation.iter().flat_map(|m| &m.tool_calls).map(|c| c.id.as_str()).collect();
        let all_there = self
            .steps
            .iter()
            .all(|s| !matches!(s, Step::ToolCall { call, .. } if !in_conversation.contains(call.id.as_str())));
        if all_there {
            return self.conversation.clone();
        }
        let mut out = self.opening.clone();
        let mut harness = None;
        for step in &self.steps {
            match step {
                Step::ModelCall { plugin, response, .. } if *harness.get_or_insert(plugin) == plugin => {
                    out.push(response.clone())
                }
                Step::ToolCall { call, output, .. } => {
                    let announced = out
                        .iter()
                        .rev()
                        .take_while(|m| m.role != orchard_model::Role::User)
                        .any(|m| m.tool_calls.iter().any(|c| c.id == call.id));
                    if !announced {
                        let mut m = Message::text(orchard_model::Role::Assistant, String::new());
                        m.tool_calls.push(call.clone());
                        out.push(m);
                    }
                    // The conversation's copy keeps the tool's images (judges read screenshots).
                    let kept = self.conversation.iter().find(|m| {
                        m.role == orchard_model::Role::Tool && m.tool_call_id.as_deref() == Some(call.id.as_str())
                    });
                    let result = kept.cloned().unwrap_or_else(|| {
                        let mut m = Message::text(orchard_model::Role::Tool, output.clone());
                        m.tool_call_id = Some(call.id.clone());
                        m
                    });
                    out.push(result);
                }
                _ => {}
            }
        }
        out
    }

    /// Token-faithful training segments (`orchard-segments`) of the harness's model calls that
    /// carried both their prompt's and their completion's token ids; empty when none did. The
    /// harness's calls are those of the plugin that made the first one (a judge's come later).
    pub fn segments(&self) -> Vec<orchard_segments::Segment> {
        let mut harness = None;
        let mut calls = Vec::new();
        for step in &self.steps {
            let Step::ModelCall {
                plugin, token_ids, prompt_token_ids, logprobs, finish_reason, policy_version, ..
            } = step
            else {
                continue;
            };
            if *harness.get_or_insert(plugin) != plugin {
                continue;
            }
            let (Some(completion), Some(prompt)) = (token_ids, prompt_token_ids) else { continue };
            let logprobs = logprobs
                .as_ref()
                .and_then(|l| l["content"].as_array())
                .map(|c| c.iter().map(|t| t["logprob"].as_f64().unwrap_or(0.0) as f32).collect())
                .unwrap_or_default();
            calls.push(orchard_segments::TokenCall {
                prompt_ids: prompt.clone(),
                completion_ids: completion.clone(),
                logprobs,
                finish_reason: format!("{finish_reason:?}").to_lowercase(),
                policy_version: policy_version.clone(),
            });
        }
        orchard_segments::segments(&calls)
    }
}

#[cfg(test)]
mod history_tests {
    use super::*;
    use orchard_model::Role;

    fn call(id: &str) -> Step {
        Step::ToolCall {
            plugin: "h".into(),
            adapter: "a".into(),
            call: ToolCall { id: id.into(), name: "mail_send".into(), arguments: "{}".into() },
            output: format!("out {id}"),
            is_error: false,
            at_ms: 0,
            duration_ms: 0,
        }
    }

    #[test]
    fn a_run_without_a_model_still_shows_its_tool_calls() {
        let t = Trajectory {
            steps: vec![call("oracle-1"), call("oracle-2")],
            conversation: vec![Message::text(Role::Tool, "out oracle-2")],
            ..Default::default()
        };
        let h = t.history();
        assert_eq!(h.len(), 4);
        assert_eq!(h[0].role, Role::Assistant);
        assert_eq!(h[0].tool_calls[0].id, "oracle-1");
        assert_eq!(h[1].tool_call_id.as_deref(), Some("oracle-1"));
        assert_eq!(h[3].content.len(), 1);
    }

    #[test]
    fn the_history_keeps_the_images_the_conversation_has() {
        let mut shot = Message::text(Role::Tool, "out oracle-1");
        shot.tool_call_id = Some("oracle-1".into());
        shot.content.push(orchard_model::Part::Image { media_type: "image/png".into(), data_base64: "AA==".into() });
        let t = Trajectory { steps: vec![call("oracle-1")], conversation: vec![shot.clone()], ..Default::default() };
        assert_eq!(t.history()[1], shot);
    }

    #[test]
    fn a_plain_loop_is_graded_on_its_conversation() {
        let mut reply = Message::text(Role::Assistant, "");
        reply.tool_calls.push(ToolCall { id: "c1".into(), name: "x".into(), arguments: "{}".into() });
        let conversation = vec![Message::text(Role::User, "task"), reply];
        let t = Trajectory { steps: vec![call("c1")], conversation: conversation.clone(), ..Default::default() };
        assert_eq!(t.history(), conversation);
    }
}
