//! The hindsight judge: a model that reads the whole trajectory — and, when given, the task's
//! reference solution and tests — and scores the progress toward solving the task after each
//! turn. One request per trajectory (the judge sees every turn in context); its answer must be a
//! JSON object `{"progress": [p1, …, pT]}` with one number in [0, 1] per turn.

use orchard_model::{Message, ModelClient, Role, Sampling};
use serde_json::Value;

/// Why the judge gave no per-turn progress.
#[derive(Debug, thiserror::Error)]
pub enum JudgeError {
    /// The judge's endpoint failed.
    #[error("the judge's endpoint: {0}")]
    Model(#[from] orchard_model::ModelError),
    /// The judge did not answer the JSON the prompt asks for.
    #[error("the judge's answer: {0}")]
    Answer(String),
}

const SYSTEM: &str = "You judge an AI agent's trajectory in hindsight. For every numbered turn, estimate how close \
the task is to being solved right after that turn: 0 = no progress at all, 1 = solved. Progress can go down when a \
turn breaks something. Answer with JSON only: {\"progress\": [one number per turn, in order]}.";

/// The judge's messages for a trajectory line (its conversation turn by turn).
pub fn judge_prompt(rollout: &Value, reference: Option<&str>) -> Vec<Message> {
    let record = orchard_eval::export::openai(rollout);
    let mut text = String::new();
    let mut turn = 0;
    for m in record["messages"].as_array().into_iter().flatten() {
        let content = m["content"].as_str().unwrap_or_default();
        match m["role"].as_str().unwrap_or_default() {
            "system" => {}
            "user" if turn == 0 => text.push_str(&format!("## Task\n{content}\n\n")),
            "assistant" => {
                turn += 1;
                text.push_str(&format!("## Turn {turn}\nAgent: {content}\n"));
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    text.push_str(&format!(
                        "Agent calls {}({})\n",
                        call["function"]["name"].as_str().unwrap_or_default(),
                        call["function"]["arguments"].as_str().unwrap_or_default()
                    ));
                }
            }
            _ => text.push_str(&format!("Observation: {}\n", truncate(content, 2000))),
        }
    }
    if let Some(reference) = reference {
        text.push_str(&format!(
            "\n## Reference solution and tests (hidden from the agent)\n{}\n",
            truncate(reference, 8000)
        ));
    }
    text.push_str(&format!("\nThe trajectory has {turn} turns: answer {turn} numbers."));
    vec![Message::text(Role::System, SYSTEM), Message::text(Role::User, text)]
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes left out]", &s[..end], s.len() - end)
}

/// `{"progress": [...]}` out of an answer (which may wrap it in prose or a code fence), with
/// exactly `turns` numbers in [0, 1].
pub fn parse_progress(answer: &str, turns: usize) -> Result<Vec<f64>, JudgeError> {
    let (start, end) = (answer.find('{'), answer.rfind('}'));
    let (Some(start), Some(end)) = (start, end) else {
        return Err(JudgeError::Answer(format!("no JSON object in {:?}", truncate(answer, 200))));
    };
    let v: Value = serde_json::from_str(&answer[start..=end])
        .map_err(|e| JudgeError::Answer(format!("{e} in {:?}", truncate(answer, 200))))?;
    let progress: Vec<f64> = v["progress"]
        .as_array()
        .ok_or_else(|| JudgeError::Answer("no \"progress\" array".into()))?
        .iter()
        .map(|p| p.as_f64().filter(|p| (0.0..=1.0).contains(p)))
        .collect::<Option<_>>()
        .ok_or_else(|| JudgeError::Answer("progress values must be numbers in [0, 1]".into()))?;
    if progress.len() != turns {
        return Err(JudgeError::Answer(format!("{} progress values for {turns} turns", progress.len())));
    }
    Ok(progress)
}

/// The value curve `V(0) = 0, V(1..=T)` of a trajectory, by the judge.
pub async fn judge_curve(
    client: &ModelClient,
    rollout: &Value,
    reference: Option<&str>,
) -> Result<Vec<f64>, JudgeError> {
    let turns = crate::assistant_turns(rollout);
    let sampling = Sampling { temperature: Some(0.0), max_tokens: Some(1024), ..Default::default() };
    let completion = client.complete(&judge_prompt(rollout, reference), &[], &sampling).await?;
    let progress = parse_progress(&completion.message.text_content(), turns)?;
    Ok(std::iter::once(0.0).chain(progress).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_strictly() {
        assert_eq!(parse_progress("sure: ```json\n{\"progress\": [0.1, 0.5]}\n```", 2).unwrap(), vec![0.1, 0.5]);
        assert!(
            parse_progress("{\"progress\": [0.1]}", 2).unwrap_err().to_string().contains("1 progress values for 2")
        );
        assert!(parse_progress("{\"progress\": [0.1, 7]}", 2).is_err());
        assert!(parse_progress("no idea", 2).is_err());
    }
}
