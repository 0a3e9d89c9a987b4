//! The `answer` grader: the run's final answer against the task's references.
//!
//! Task metadata (task.toml `[metadata]`): `answer` (one reference) or `answers` (any of
//! several), `match` = `normalized` (the default: case, whitespace and punctuation ignored),
//! `exact`, `regex` (a reference is a pattern that must match the whole answer) or `numeric`
//! (the answer's number — the whole answer, or else the last number in it — within `tolerance`,
//! absolute, default 1e-6, or `relative_tolerance` of a reference), and `answer_file` to read
//! the answer from a file in the sandbox instead of the run's outcome.
//!
//! No answer is a failed grade (the agent did not answer); a task whose references are missing
//! or malformed (a bad pattern, a reference that is not a number) is `unknown`, naming the key.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "grader" });

pub mod matching;

use exports::orchard::plugin::grading::{Environment, Guest, Score, Trajectory, Verdict};
use orchard::plugin::sandbox;
use orchard::plugin::types::{Error, Outcome, Task};
use serde_json::Value;

struct Answer;

impl Guest for Answer {
    fn grade(
        task: Task,
        _trajectory: Trajectory,
        outcome: Outcome,
        _environment: Environment,
    ) -> Result<Verdict, Error> {
        let raw: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
        let meta = raw.get("metadata").filter(|m| m.is_object()).unwrap_or(&raw);
        let rule = match matching::Rule::from_metadata(meta) {
            Ok(rule) => rule,
            Err(reason) => return Ok(Verdict::Unknown(format!("task metadata: {reason}"))),
        };
        let answer = match meta.get("answer_file").and_then(Value::as_str) {
            Some(path) => match sandbox::read_file(path) {
                Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
                Err(Error::NotFound(_)) => None,
                Err(e) => return Err(e),
            },
            None => outcome.answer.clone(),
        };
        let Some(answer) = answer else {
            return Ok(Verdict::Graded(Score {
                reward: 0.0,
                passed: false,
                sub_scores: vec![],
                explanation: "the run gave no answer".into(),
            }));
        };
        let found = rule.check(&answer);
        Ok(Verdict::Graded(Score {
            reward: if found.is_some() { 1.0 } else { 0.0 },
            passed: found.is_some(),
            sub_scores: vec![],
            explanation: match found {
                Some(reference) => format!("{} match with {reference:?}", rule.kind()),
                None => {
                    format!("no {} match: answer {:?}; references {:?}", rule.kind(), clip(&answer), rule.references())
                }
            },
        }))
    }
}

fn clip(s: &str) -> String {
    if s.chars().count() <= 200 { s.to_string() } else { format!("{}…", s.chars().take(200).collect::<String>()) }
}

export!(Answer);
