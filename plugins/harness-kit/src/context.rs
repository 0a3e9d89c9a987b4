//! The context policy all harnesses share.
//!
//! - Observations are capped: the head and tail of a long tool output are kept.
//! - The conversation has a token budget (estimated at 4 characters a token, or the endpoint's
//!   own count of the last prompt, whichever is larger).
//! - When the budget is exceeded, older turns are compacted: summarised by the model (the
//!   default) or dropped. The system prompt, the task, and the most recent turns stay; a tool
//!   result is never separated from the assistant turn that called it.
//!
//! Config keys: `max_observation_chars` (default 10000), `context_tokens` (default 100000),
//! `compaction` (`summarize`, `truncate` or `off`), `keep_recent_messages` (default 6).

use serde_json::{Value, json};

use crate::orchard::plugin::{log, model};
use crate::{ContentPart, Message, Role, message, text_of};

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Compaction {
    Summarize,
    Truncate,
    Off,
}

#[derive(Debug, Clone)]
pub struct Policy {
    pub max_observation_chars: usize,
    pub context_tokens: usize,
    pub compaction: Compaction,
    pub keep_recent: usize,
    /// Only the last this-many images (screenshots) stay in the context; older ones become a
    /// text note, as WebVoyager keeps its last three.
    pub max_images: usize,
}

impl Policy {
    pub fn from_config(config: &Value) -> Policy {
        let n = |k: &str, d: u64| config.get(k).and_then(Value::as_u64).unwrap_or(d) as usize;
        Policy {
            max_observation_chars: n("max_observation_chars", 10_000).max(200),
            context_tokens: n("context_tokens", 100_000).max(500),
            compaction: match config.get("compaction").and_then(Value::as_str) {
                Some("truncate") => Compaction::Truncate,
                Some("off") => Compaction::Off,
                _ => Compaction::Summarize,
            },
            keep_recent: n("keep_recent_messages", 6).max(1),
            max_images: n("max_images", 3),
        }
    }

    /// Drops all but the last `max_images` images, each replaced by a note; returns how many
    /// were dropped.
    pub fn keep_recent_images(&self, messages: &mut [Message]) -> usize {
        let total: usize =
            messages.iter().map(|m| m.content.iter().filter(|p| matches!(p, ContentPart::Image(_))).count()).sum();
        let mut drop = total.saturating_sub(self.max_images);
        let dropped = drop;
        for m in messages.iter_mut() {
            if drop == 0 {
                break;
            }
            for part in m.content.iter_mut() {
                if drop > 0 && matches!(part, ContentPart::Image(_)) {
                    *part = ContentPart::Text("\n[an earlier screenshot, no longer shown]".into());
                    drop -= 1;
                }
            }
        }
        dropped
    }

    /// Caps an observation: head and tail kept.
    pub fn cap(&self, text: &str) -> String {
        let half = self.max_observation_chars / 2;
        crate::text::head_tail(text, half, half)
    }

    /// Compacts `messages` when they exceed the budget. `last_prompt_tokens` is the endpoint's
    /// count for the previous request, when known. Returns how many messages were folded.
    pub fn fit(&self, messages: &mut Vec<Message>, last_prompt_tokens: u32) -> usize {
        if self.compaction == Compaction::Off {
            return 0;
        }
        let estimate = estimate_tokens(messages).max(last_prompt_tokens as usize);
        if estimate <= self.context_tokens {
            return 0;
        }
        // Kept at the front: system prompts and the first user message (the task).
        let mut front = messages.iter().take_while(|m| m.role == Role::System).count();
        if messages.get(front).is_some_and(|m| m.role == Role::User) {
            front += 1;
        }
        // Kept at the back: the recent messages, not starting on a tool result.
        let mut back = messages.len().saturating_sub(self.keep_recent).max(front);
        while back < messages.len() && messages[back].role == Role::Tool {
            back -= 1;
        }
        if back <= front + 1 {
            return 0;
        }
        let middle: Vec<Message> = messages.drain(front..back).collect();
        let folded = middle.len();
        let note = match self.compaction {
            Compaction::Summarize => match summarize(&middle) {
                Ok(summary) => format!("[Context compacted: {folded} earlier messages, summarised]\n{summary}"),
                Err(e) => format!("[Context compacted: {folded} earlier messages dropped (the summary failed: {e:?})]"),
            },
            _ => format!("[Context compacted: {folded} earlier messages dropped to fit the context budget]"),
        };
        messages.insert(front, message(Role::User, note));
        log::event(
            log::Level::Info,
            "compaction",
            &json!({"folded": folded, "estimated_tokens": estimate, "budget": self.context_tokens, "method": format!("{:?}", self.compaction)}).to_string(),
        );
        folded
    }
}

/// Four characters a token, over text, tool calls and reasoning.
pub fn estimate_tokens(messages: &[Message]) -> usize {
    let chars: usize = messages
        .iter()
        .map(|m| {
            text_of(&m.content).len()
                + m.tool_calls.iter().map(|c| c.name.len() + c.arguments.len()).sum::<usize>()
                + m.reasoning.as_ref().map_or(0, String::len)
        })
        .sum();
    chars / 4 + messages.len() * 4
}

fn render(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool result",
        };
        out += &format!("{who}: {}\n", crate::text::head_tail(&text_of(&m.content), 1500, 500));
        for c in &m.tool_calls {
            out += &format!("assistant called {}({})\n", c.name, crate::text::head_tail(&c.arguments, 500, 100));
        }
    }
    out
}

fn summarize(messages: &[Message]) -> Result<String, crate::Error> {
    let request = [
        message(
            Role::System,
            "You compress an agent's working history. Summarise what was tried, what was learned (files, commands, \
             errors, results) and what remains to do, so that the agent can continue without the full history. \
             Be concrete and brief.",
        ),
        message(Role::User, render(messages)),
    ];
    let sampling = model::Sampling {
        temperature: Some(0.0),
        top_p: None,
        max_tokens: Some(1024),
        stop: vec![],
        seed: None,
        extra: None,
    };
    let completion = model::complete(&request, &[], &sampling)?;
    Ok(text_of(&completion.message.content))
}

#[cfg(test)]
mod image_tests {
    use super::*;
    use crate::orchard::plugin::types::Image;

    #[test]
    fn only_the_last_images_stay() {
        let shot = |n: u8| ContentPart::Image(Image { media_type: "image/png".into(), data: vec![n] });
        let mut messages: Vec<Message> = (0..5)
            .map(|n| {
                let mut m = crate::tool_message(&format!("c{n}"), format!("step {n}"));
                m.content.push(shot(n));
                m
            })
            .collect();
        let policy = Policy::from_config(&json!({"max_images": 2}));
        assert_eq!(policy.keep_recent_images(&mut messages), 3);
        let kept: Vec<u8> = messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|p| if let ContentPart::Image(i) = p { Some(i.data[0]) } else { None })
            .collect();
        assert_eq!(kept, [3, 4]);
        assert!(text_of(&messages[0].content).contains("no longer shown"));
        assert_eq!(policy.keep_recent_images(&mut messages), 0);
    }
}
