//! `--format tokens`: the recorded token-faithful segments as training rows
//! `{input_ids, loss_mask, turn_spans}` — never re-tokenized text. With credit, the loss mask of
//! uncredited turns is zeroed and a segment is cut after the last credited turn.

use serde_json::{Value, json};

use crate::Credit;

/// One row per recorded segment of the rollout (none when the endpoint gave no token ids).
/// Turns are counted across segments in call order, as the conversation's assistant turns are.
pub fn token_records(rollout: &Value, credit: &Credit) -> Vec<Value> {
    let last = credit.last_credited().unwrap_or(0);
    let ids = |v: &Value| -> Vec<u64> { v.as_array().into_iter().flatten().filter_map(Value::as_u64).collect() };
    let mut rows = Vec::new();
    for (index, segment) in rollout["segments"].as_array().into_iter().flatten().enumerate() {
        let prompt = ids(&segment["prompt_ids"]);
        let response = ids(&segment["response_ids"]);
        let mut mask: Vec<u64> = std::iter::repeat_n(0, prompt.len()).chain(ids(&segment["loss_mask"])).collect();
        let mut input: Vec<u64> = prompt.iter().chain(&response).copied().collect();
        let mut spans = Vec::new();
        let mut cut = None;
        for span in segment["turns"].as_array().into_iter().flatten() {
            let call = span["call"].as_u64().unwrap_or(0) as usize;
            // The call's turn: calls and assistant turns are one to one, in order.
            let turn = call + 1;
            let (start, end) = (
                prompt.len() + span["start"].as_u64().unwrap_or(0) as usize,
                prompt.len() + span["end"].as_u64().unwrap_or(0) as usize,
            );
            if turn > last {
                cut.get_or_insert(start);
                continue;
            }
            if !credit.credited.get(turn - 1).copied().unwrap_or(false) {
                let end = end.min(mask.len());
                for m in &mut mask[start.min(end)..end] {
                    *m = 0;
                }
            }
            spans.push(json!({"turn": turn, "start": start, "end": end, "credited": credit.credited.get(turn - 1)}));
        }
        // Cut right after the last credited turn (its observation is not part of the lesson).
        if cut.is_some() {
            let end = spans.iter().filter_map(|s| s["end"].as_u64()).max().unwrap_or(0) as usize;
            input.truncate(end);
            mask.truncate(end);
        }
        if spans.is_empty() {
            continue;
        }
        rows.push(json!({
            "rollout_id": rollout["rollout_id"],
            "task_id": rollout["task_id"],
            "segment": index,
            "reward": rollout["reward"],
            "input_ids": input,
            "loss_mask": mask,
            "turn_spans": spans,
            "credit": {"method": credit.method, "curve": credit.curve},
        }));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uncredited_turns_are_masked_and_the_segment_cut_after_the_last_credited() {
        // prompt [1 2]; turn 1 = [10 11], observation [3], turn 2 = [12], observation [4], turn 3 = [13 14].
        let rollout = json!({"rollout_id": "r", "task_id": "t", "reward": 0.0, "segments": [{
            "prompt_ids": [1, 2], "response_ids": [10, 11, 3, 12, 4, 13, 14],
            "loss_mask": [1, 1, 0, 1, 0, 1, 1], "logprobs": [0, 0, 0, 0, 0, 0, 0],
            "turns": [{"call": 0, "start": 0, "end": 2}, {"call": 1, "start": 3, "end": 4}, {"call": 2, "start": 5, "end": 7}],
        }]});
        // Turn 2 lowered the value, turn 3 raised it to the peak: turn 2 is kept but not learned.
        let credit = Credit::from_curve("judge", vec![0.0, 0.5, 0.4, 0.7]);
        let rows = token_records(&rollout, &credit);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0]["input_ids"], json!([1, 2, 10, 11, 3, 12, 4, 13, 14]));
        assert_eq!(rows[0]["loss_mask"], json!([0, 0, 1, 1, 0, 0, 0, 1, 1]));
        // The peak after turn 1: cut right after it.
        let early = token_records(&rollout, &Credit::from_curve("judge", vec![0.0, 0.5, 0.4, 0.1]));
        assert_eq!(early[0]["input_ids"], json!([1, 2, 10, 11]));
        assert_eq!(early[0]["loss_mask"], json!([0, 0, 1, 1]));
        let all = token_records(&rollout, &Credit::all("resolved", 3));
        assert_eq!(all[0]["loss_mask"], json!([0, 0, 1, 1, 0, 1, 0, 1, 1]));
        assert_eq!(all[0]["input_ids"].as_array().unwrap().len(), 9);
    }
}
