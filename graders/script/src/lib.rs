//! The `script` grader, Harbor's contract: run the task's `/tests/test.sh` in the sandbox, then
//! read the reward it wrote: `/logs/verifier/reward.txt` (one number) or
//! `/logs/verifier/reward.json` (name → number; `reward` is the reward, or else their mean).
//!
//! A missing or malformed reward file is `unknown`, with the reason: never a silent zero.
//! Task metadata read: `verifier_timeout_sec` (default 600), `pass_threshold` (default 1.0),
//! `workdir` (where the tests run from); and task.toml's `[verifier] env`, the test's environment.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "grader" });

use exports::orchard::plugin::grading::{Environment, Guest, Score, SubScore, Trajectory, Verdict};
use orchard::plugin::sandbox::{self, Command, ExecRequest};
use orchard::plugin::types::{Error, Outcome, Task};
use serde_json::Value;

struct Script;

pub mod reward;

use reward::tail;

impl Guest for Script {
    fn grade(
        task: Task,
        _trajectory: Trajectory,
        _outcome: Outcome,
        _environment: Environment,
    ) -> Result<Verdict, Error> {
        let meta: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
        let timeout = meta.get("verifier_timeout_sec").and_then(Value::as_f64).unwrap_or(600.0);
        let threshold = meta.get("pass_threshold").and_then(Value::as_f64).unwrap_or(1.0);
        let run = sandbox::exec(&ExecRequest {
            command: Command::Argv(vec!["bash".into(), "/tests/test.sh".into()]),
            cwd: meta.get("workdir").and_then(Value::as_str).map(str::to_string),
            // task.toml's [verifier] env.
            env: meta
                .pointer("/verifier/env")
                .and_then(Value::as_object)
                .map(|env| env.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
                .unwrap_or_default(),
            timeout_ms: Some((timeout * 1000.0) as u64),
            stdin: None,
        })?;
        let context = format!(
            "test.sh exited {}{}; its last output: {}",
            run.exit_code,
            if run.timed_out { " (timed out)" } else { "" },
            tail(&format!("{}{}", run.stdout, run.stderr), 500)
        );
        let read = |path: &str| match sandbox::read_file(path) {
            Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
            Err(Error::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        };
        let txt = read("/logs/verifier/reward.txt")?;
        let json = if txt.is_none() { read("/logs/verifier/reward.json")? } else { None };
        let (reward, sub_scores) = match reward::read(txt.as_deref(), json.as_deref()) {
            Ok((reward, subs)) => {
                (reward, subs.into_iter().map(|(name, value)| SubScore { name, value }).collect::<Vec<_>>())
            }
            Err(reason) => return Ok(Verdict::Unknown(format!("{reason}; {context}"))),
        };
        Ok(Verdict::Graded(Score {
            reward,
            passed: reward >= threshold,
            sub_scores,
            explanation: format!("reward {reward} (pass at ≥ {threshold}); {context}"),
        }))
    }
}

export!(Script);
