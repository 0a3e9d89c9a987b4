//! Credit-assigned SFT: failed trajectories turned into supervision.
//!
//! A trajectory that did not resolve its task still holds productive work: the turns where it
//! made progress. Given a per-turn value curve — `V(t)`, the estimated chance of success after
//! turn `t`, `V(0)` before the first — the credited turns are those where the value rose, up to
//! its peak; everything after the peak is cut (the agent went wrong there and never recovered).
//! Resolved trajectories are credited throughout. The exports mark each assistant message with
//! `weight` 0/1 (OpenAI's fine-tuning field) and the record with `step_loss_mask` (slime's), and
//! keep the curve and how it was made in `metadata.credit`; the token export zeroes the loss mask
//! of uncredited turns in the recorded token-faithful segments.

#![warn(missing_docs)]

mod judge;
mod mc;
mod tokens;

use serde::Serialize;
use serde_json::{Value, json};

pub use judge::{JudgeError, judge_curve, judge_prompt, parse_progress};
pub use mc::{mc_curve, resume_turns};
pub use tokens::token_records;

/// How a trajectory's turns were credited.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Credit {
    /// `resolved` (everything), `judge`, `none` (no credit assignment: everything).
    pub method: String,
    /// `V(0), V(1), …, V(T)` (empty when no curve was made; `null` where a search did not
    /// evaluate the turn).
    pub curve: Vec<Option<f64>>,
    /// One per assistant turn.
    pub credited: Vec<bool>,
}

impl Credit {
    /// Every turn credited.
    pub fn all(method: &str, turns: usize) -> Credit {
        Credit { method: method.into(), curve: Vec::new(), credited: vec![true; turns] }
    }

    /// Credits from a value curve `V(0..=T)`: the turns whose value rose, up to the (first) peak.
    pub fn from_curve(method: &str, curve: Vec<f64>) -> Credit {
        Credit::from_sparse_curve(method, curve.into_iter().map(Some).collect())
    }

    /// The same from a curve known only at some turns (always at 0): between two evaluated
    /// turns `a < b` with `V(b) > V(a)`, up to the peak, the turns `a+1..=b` are credited.
    pub fn from_sparse_curve(method: &str, curve: Vec<Option<f64>>) -> Credit {
        let turns = curve.len().saturating_sub(1);
        let known: Vec<(usize, f64)> = curve.iter().enumerate().filter_map(|(t, v)| v.map(|v| (t, v))).collect();
        let peak = known.iter().fold(None::<(usize, f64)>, |best, &(t, v)| match best {
            Some((_, b)) if b >= v => best,
            _ => Some((t, v)),
        });
        let mut credited = vec![false; turns];
        if let Some((peak, _)) = peak {
            for pair in known.windows(2) {
                let ((a, va), (b, vb)) = (pair[0], pair[1]);
                if b <= peak && vb > va {
                    for c in &mut credited[a..b] {
                        *c = true;
                    }
                }
            }
        }
        Credit { method: method.into(), curve, credited }
    }

    /// The last credited turn (1-based), if any.
    pub fn last_credited(&self) -> Option<usize> {
        self.credited.iter().rposition(|c| *c).map(|i| i + 1)
    }
}

/// How many assistant turns a trajectory line's conversation holds.
pub fn assistant_turns(rollout: &Value) -> usize {
    rollout["trajectory"]["conversation"]
        .as_array()
        .map(|c| c.iter().filter(|m| m["role"] == "assistant").count())
        .unwrap_or(0)
}

/// The OpenAI fine-tuning record of a rollout with credit: `weight` on each assistant message,
/// the conversation cut after the last credited turn, `step_loss_mask` (one 0/1 per assistant
/// message kept) and `metadata.credit`. `None` when no turn is credited (nothing to learn from).
pub fn weighted_openai(rollout: &Value, credit: &Credit) -> Option<Value> {
    let mut record = orchard_eval::export::openai(rollout);
    let last = credit.last_credited()?;
    let messages = record["messages"].as_array().cloned().unwrap_or_default();
    let mut kept = Vec::new();
    let mut mask = Vec::new();
    let mut turn = 0;
    for mut m in messages {
        if m["role"] == "assistant" {
            turn += 1;
            if turn > last {
                break;
            }
            let w = u8::from(credit.credited.get(turn - 1).copied().unwrap_or(false));
            m["weight"] = json!(w);
            mask.push(w);
        } else if turn >= last {
            // Observations after the last credited turn are not part of the lesson.
            break;
        }
        kept.push(m);
    }
    record["messages"] = Value::Array(kept);
    record["step_loss_mask"] = json!(mask);
    record["metadata"] = json!({
        "rollout_id": rollout["rollout_id"],
        "task_id": rollout["task_id"],
        "reward": rollout["reward"],
        "passed": rollout["passed"],
        "credit": credit,
    });
    Some(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rising_turns_up_to_the_peak_are_credited() {
        // Turn 1 helps, 2 is flat, 3 helps (the peak), 4 falls, 5 rises again but below the peak.
        let c = Credit::from_curve("judge", vec![0.0, 0.2, 0.2, 0.6, 0.1, 0.3]);
        assert_eq!(c.credited, vec![true, false, true, false, false]);
        assert_eq!(c.last_credited(), Some(3));
        // Nothing ever rose: nothing to learn.
        let flat = Credit::from_curve("judge", vec![0.3, 0.3, 0.1]);
        assert_eq!(flat.last_credited(), None);
    }

    fn rollout() -> Value {
        let turn = |n: u32| {
            vec![
                json!({"role": "assistant", "content": [{"type": "text", "text": format!("step {n}")}],
                       "tool_calls": [{"id": format!("c{n}"), "name": "bash", "arguments": "{}"}]}),
                json!({"role": "tool", "tool_call_id": format!("c{n}"), "content": [{"type": "text", "text": "ok"}]}),
            ]
        };
        let mut conversation = vec![
            json!({"role": "system", "content": [{"type": "text", "text": "sys"}]}),
            json!({"role": "user", "content": [{"type": "text", "text": "task"}]}),
        ];
        for n in 1..=4 {
            conversation.extend(turn(n));
        }
        json!({"rollout_id": "t__react__1", "task_id": "t", "reward": 0.0, "passed": false,
               "trajectory": {"conversation": conversation, "tools": []}})
    }

    #[test]
    fn the_export_weights_credited_turns_and_cuts_after_the_last() {
        let r = rollout();
        assert_eq!(assistant_turns(&r), 4);
        let credit = Credit::from_curve("judge", vec![0.0, 0.4, 0.3, 0.7, 0.2]);
        let out = weighted_openai(&r, &credit).unwrap();
        let messages = out["messages"].as_array().unwrap();
        let weights: Vec<&Value> = messages.iter().filter(|m| m["role"] == "assistant").map(|m| &m["weight"]).collect();
        assert_eq!(weights, vec![&json!(1), &json!(0), &json!(1)]);
        assert_eq!(messages.last().unwrap()["content"], "step 3", "cut right after the last credited turn");
        assert_eq!(out["step_loss_mask"], json!([1, 0, 1]));
        assert_eq!(out["metadata"]["credit"]["curve"], json!([0.0, 0.4, 0.3, 0.7, 0.2]));
        assert!(weighted_openai(&r, &Credit::from_curve("judge", vec![0.5, 0.1, 0.0, 0.0, 0.0])).is_none());
    }
}
