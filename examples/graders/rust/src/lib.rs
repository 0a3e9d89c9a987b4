//! A grader template: passes when the run's answer contains the task's `expected` text.

wit_bindgen::generate!({ path: "wit", world: "grader" });

use exports::orchard::plugin::grading::{Environment, Guest, Score, Trajectory, Verdict};
use orchard::plugin::types::{Error, Outcome, Task};

struct Contains;

/// `expected = "..."` from task.toml's `[metadata]` (the metadata is the task.toml as JSON).
fn expected(metadata: &str) -> Option<String> {
    let meta: serde_json::Value = serde_json::from_str(metadata).ok()?;
    meta["metadata"]["expected"].as_str().map(str::to_string)
}

impl Guest for Contains {
    fn grade(task: Task, _trajectory: Trajectory, outcome: Outcome, _environment: Environment) -> Result<Verdict, Error> {
        let Some(want) = expected(&task.metadata) else {
            return Ok(Verdict::Unknown("task metadata has no `expected`".into()));
        };
        let found = outcome.answer.as_deref().is_some_and(|a| a.contains(&want));
        Ok(Verdict::Graded(Score {
            reward: if found { 1.0 } else { 0.0 },
            passed: found,
            sub_scores: vec![],
            explanation: format!("answer {} {want:?}", if found { "contains" } else { "lacks" }),
        }))
    }
}

export!(Contains);
