//! Token-faithful segments for trainers.
//!
//! A trainer must learn from the token sequences the policy actually produced. Re-rendering a
//! conversation as text and tokenizing it again drifts (a chat template, a tokenizer merge across
//! a turn boundary), so segments are built only from the ids each model call carried: the prompt
//! ids the endpoint saw and the completion ids it sampled. A call whose prompt extends exactly
//! what an open segment already holds (its prompt, then every completion and observation since)
//! continues that segment: the new ids between are the observation (loss mask 0), the completion
//! follows (loss mask 1, with its logprobs). A call that extends no open segment — the harness
//! rewrote its history (compaction), or the endpoint rendered the history differently — starts
//! a new segment, and the record says where the prompt stopped matching. Calls of parallel
//! threads (subagents) each continue their own segment.

#![warn(missing_docs)]

use serde::{Deserialize, Serialize};

/// One model call as the endpoint answered it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenCall {
    /// The prompt's token ids.
    pub prompt_ids: Vec<u32>,
    /// The sampled completion's token ids.
    pub completion_ids: Vec<u32>,
    /// One per completion id (empty when the endpoint gave none).
    #[serde(default)]
    pub logprobs: Vec<f32>,
    /// Why the completion ended (`stop`, `length`, `tool_calls`, …).
    #[serde(default)]
    pub finish_reason: String,
    /// The policy version the trainer named for this call.
    #[serde(default)]
    pub policy_version: Option<String>,
}

/// Why a segment starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SegmentStart {
    /// The rollout's first call.
    First,
    /// A call whose prompt extends no open segment. `diverged_at`: where its prompt stopped
    /// matching the closest one (`None` when it shares no prefix at all).
    HistoryRewritten {
        /// The open segment whose prompt this one shares the longest prefix with.
        closest_segment: Option<usize>,
        /// Where the two stopped matching.
        diverged_at: Option<usize>,
    },
}

/// One model turn inside a segment's response: its ids are `response_ids[start..end]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSpan {
    /// The call, by index in the rollout.
    pub call: usize,
    /// Where its completion starts in `response_ids`.
    pub start: usize,
    /// Where it ends (exclusive).
    pub end: usize,
}

/// A training sequence: `prompt_ids` then `response_ids`, exactly as the endpoint saw and
/// sampled them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Segment {
    /// The first call's prompt.
    pub prompt_ids: Vec<u32>,
    /// Completions and the observations between them, in order.
    pub response_ids: Vec<u32>,
    /// 1 on sampled tokens, 0 on observation tokens; as long as `response_ids`.
    pub loss_mask: Vec<u8>,
    /// The sampled tokens' logprobs, 0 on observation tokens; as long as `response_ids`.
    pub logprobs: Vec<f32>,
    /// Where each model turn's completion lies in `response_ids`.
    pub turns: Vec<TurnSpan>,
    /// Why the segment starts.
    pub start: SegmentStart,
    /// The calls it holds, by index in the rollout.
    pub calls: Vec<usize>,
    /// The policy versions of those calls, in order, deduplicated.
    pub policy_versions: Vec<String>,
}

impl Segment {
    /// Everything the segment holds: prompt then response.
    pub fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        self.prompt_ids.iter().chain(&self.response_ids).copied()
    }

    fn len(&self) -> usize {
        self.prompt_ids.len() + self.response_ids.len()
    }

    /// Whether `prompt` begins with everything this segment holds.
    fn extended_by(&self, prompt: &[u32]) -> bool {
        prompt.len() >= self.len() && self.ids().zip(prompt).all(|(a, b)| a == *b)
    }

    /// How many leading ids `prompt` shares with this segment.
    fn shared_prefix(&self, prompt: &[u32]) -> usize {
        self.ids().zip(prompt).take_while(|(a, b)| a == *b).count()
    }

    fn push_call(&mut self, index: usize, call: &TokenCall) {
        let observation = &call.prompt_ids[self.len()..];
        self.response_ids.extend_from_slice(observation);
        self.loss_mask.extend(std::iter::repeat_n(0, observation.len()));
        self.logprobs.extend(std::iter::repeat_n(0.0, observation.len()));
        self.push_completion(index, call);
    }

    fn push_completion(&mut self, index: usize, call: &TokenCall) {
        let start = self.response_ids.len();
        self.response_ids.extend_from_slice(&call.completion_ids);
        self.loss_mask.extend(std::iter::repeat_n(1, call.completion_ids.len()));
        let mut lp = call.logprobs.clone();
        lp.resize(call.completion_ids.len(), 0.0);
        self.logprobs.extend(lp);
        self.turns.push(TurnSpan { call: index, start, end: self.response_ids.len() });
        self.calls.push(index);
        if let Some(v) = &call.policy_version
            && self.policy_versions.last() != Some(v)
        {
            self.policy_versions.push(v.clone());
        }
    }
}

/// The segments of a rollout's calls, in the order the calls were made.
pub fn segments(calls: &[TokenCall]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        // The longest open segment this prompt extends (a thread's own, with parallel threads).
        let extends = out
            .iter()
            .enumerate()
            .filter(|(_, s)| s.extended_by(&call.prompt_ids))
            .max_by_key(|(_, s)| s.len())
            .map(|(n, _)| n);
        if let Some(n) = extends {
            out[n].push_call(i, call);
            continue;
        }
        let start = if out.is_empty() {
            SegmentStart::First
        } else {
            let closest = out
                .iter()
                .enumerate()
                .map(|(n, s)| (n, s.shared_prefix(&call.prompt_ids)))
                .max_by_key(|(_, shared)| *shared)
                .filter(|(_, shared)| *shared > 0);
            SegmentStart::HistoryRewritten {
                closest_segment: closest.map(|(n, _)| n),
                diverged_at: closest.map(|(_, shared)| shared),
            }
        };
        let mut segment = Segment {
            prompt_ids: call.prompt_ids.clone(),
            response_ids: Vec::new(),
            loss_mask: Vec::new(),
            logprobs: Vec::new(),
            turns: Vec::new(),
            start,
            calls: Vec::new(),
            policy_versions: Vec::new(),
        };
        segment.push_completion(i, call);
        out.push(segment);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic tokenizer and chat template: one id per byte, role markers as ids ≥ 256.
    fn render(messages: &[(&str, &str)], generation_prompt: bool) -> Vec<u32> {
        let role = |r: &str| match r {
            "system" => 256,
            "user" => 257,
            "assistant" => 258,
            _ => 259,
        };
        let mut ids = Vec::new();
        for (r, text) in messages {
            ids.push(role(r));
            ids.extend(text.bytes().map(u32::from));
            ids.push(300);
        }
        if generation_prompt {
            ids.push(258);
        }
        ids
    }

    fn tokens(text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).chain([300]).collect()
    }

    /// A rollout's calls as a mock endpoint records them: each prompt rendered from the
    /// conversation so far, each completion the ids it sampled.
    fn call(history: &[(&str, &str)], reply: &str, version: &str) -> TokenCall {
        let completion = tokens(reply);
        TokenCall {
            prompt_ids: render(history, true),
            logprobs: completion.iter().map(|i| -(*i as f32) / 1000.0).collect(),
            completion_ids: completion,
            finish_reason: "stop".into(),
            policy_version: Some(version.into()),
        }
    }

    #[test]
    fn tool_turns_extend_one_segment_and_it_concatenates_to_what_was_seen_and_sampled() {
        let mut history = vec![("system", "be brief"), ("user", "sum 2 3")];
        let c0 = call(&history, "call add(2,3)", "v1");
        history.extend([("assistant", "call add(2,3)"), ("tool", "5")]);
        let c1 = call(&history, "call check(5)", "v1");
        history.extend([("assistant", "call check(5)"), ("tool", "ok"), ("tool", "also ok")]);
        let c2 = call(&history, "it is 5", "v2");
        let calls = vec![c0.clone(), c1.clone(), c2.clone()];
        let segs = segments(&calls);
        assert_eq!(segs.len(), 1);
        let s = &segs[0];
        assert_eq!(s.start, SegmentStart::First);
        // Exactly the last prompt the endpoint saw, then what it sampled last.
        let whole: Vec<u32> = s.ids().collect();
        let expected: Vec<u32> = c2.prompt_ids.iter().chain(&c2.completion_ids).copied().collect();
        assert_eq!(whole, expected);
        // The mask marks the sampled tokens and only them, with their logprobs.
        let sampled: usize = calls.iter().map(|c| c.completion_ids.len()).sum();
        assert_eq!(s.loss_mask.iter().filter(|m| **m == 1).count(), sampled);
        assert_eq!((s.loss_mask.len(), s.logprobs.len()), (s.response_ids.len(), s.response_ids.len()));
        for (t, c) in s.turns.iter().zip(&calls) {
            assert_eq!(&s.response_ids[t.start..t.end], &c.completion_ids[..]);
            assert!(s.loss_mask[t.start..t.end].iter().all(|m| *m == 1));
            assert_eq!(&s.logprobs[t.start..t.end], &c.logprobs[..]);
        }
        assert!(s.loss_mask[s.turns[0].end..s.turns[1].start].iter().all(|m| *m == 0), "the observation is masked");
        assert_eq!(s.policy_versions, ["v1", "v2"]);
    }

    #[test]
    fn a_compaction_starts_a_new_segment_that_says_where_the_history_changed() {
        let mut history = vec![("system", "s"), ("user", "task")];
        let c0 = call(&history, "step one", "v1");
        history.extend([("assistant", "step one"), ("tool", "a long observation")]);
        let c1 = call(&history, "step two", "v1");
        // The harness folds the middle into a summary.
        let compacted = vec![("system", "s"), ("user", "task"), ("user", "[summary] did step one")];
        let c2 = call(&compacted, "step three", "v1");
        let segs = segments(&[c0, c1, c2.clone()]);
        assert_eq!(segs.len(), 2);
        let SegmentStart::HistoryRewritten { closest_segment, diverged_at } = &segs[1].start else { panic!() };
        assert_eq!(*closest_segment, Some(0));
        let shared = render(&[("system", "s"), ("user", "task")], false).len();
        assert_eq!(*diverged_at, Some(shared));
        assert_eq!(segs[1].prompt_ids, c2.prompt_ids);
        assert_eq!(segs[1].calls, [2]);
    }

    #[test]
    fn parallel_threads_each_continue_their_own_segment() {
        let main = vec![("system", "s"), ("user", "plan")];
        let sub = vec![("system", "sub"), ("user", "look it up")];
        let m0 = call(&main, "delegate", "v1");
        let s0 = call(&sub, "searching", "v1");
        let mut sub2 = sub.clone();
        sub2.extend([("assistant", "searching"), ("tool", "found")]);
        let s1 = call(&sub2, "done: found", "v1");
        let mut main2 = main.clone();
        main2.extend([("assistant", "delegate"), ("tool", "done: found")]);
        let m1 = call(&main2, "answer", "v1");
        let segs = segments(&[m0, s0, s1, m1]);
        assert_eq!(segs.len(), 2);
        assert_eq!(segs[0].calls, [0, 3]);
        assert_eq!(segs[1].calls, [1, 2]);
        // The subagent's first call shares only the system role and an "s" with the main thread.
        assert_eq!(segs[1].start, SegmentStart::HistoryRewritten { closest_segment: Some(0), diverged_at: Some(2) });
    }

    #[test]
    fn a_retokenized_history_is_caught_not_trusted() {
        let history = vec![("user", "hi")];
        let c0 = call(&history, "hello there", "v1");
        // The endpoint rendered the assistant's reply with other ids than it sampled.
        let mut prompt = render(&history, false);
        prompt.push(258);
        prompt.extend([9999, 300, 259]);
        let c1 = TokenCall { prompt_ids: prompt, ..call(&history, "next", "v1") };
        let segs = segments(&[c0.clone(), c1]);
        assert_eq!(segs.len(), 2, "a drifted prompt is a new segment, never spliced in");
        assert_eq!(segs[0].response_ids, c0.completion_ids);
        let json = serde_json::to_value(&segs[1].start).unwrap();
        assert_eq!(json["kind"], "history_rewritten");
    }
}
