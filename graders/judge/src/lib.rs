//! The `judge` grader: an LLM decides, through the `model` import.
//!
//! Task metadata (task.toml `[metadata]`): `judge` = `webvoyager` (the default: task, final
//! answer and the last screenshots → SUCCESS / NOT SUCCESS) or `webjudge` (key points of the task
//! first, then each screenshot scored for relevance and kept at `threshold` or above — default
//! 3 of 5 — then the verdict from the task, key points, actions, kept screenshots and answer);
//! `screenshots` (how many of the last ones, default 3); `judge_temperature` (default 0);
//! `key_points` (webjudge: the task's own requirements, e.g. DeepShop's attribute, filter and
//! sort, instead of asking the judge to list them).
//!
//! The agent's text goes to the judge quoted as untrusted data. A judge reply without a verdict,
//! or a model error, is `unknown` with the reason — never a zero. Every grade names the judge's
//! model and the sha256 of its prompts.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "grader" });

pub mod prompts;

use std::hash::{BuildHasher, Hasher};

use exports::orchard::plugin::grading::{Environment, Guest, Score, SubScore, Trajectory, Verdict};
use orchard::plugin::model::{self, Sampling};
use orchard::plugin::types::{ContentPart, Error, Image, Message, Outcome, Role, Task};
use prompts::*;
use serde_json::{Value, json};

struct Judge;

fn text(role: Role, t: String) -> Message {
    Message { role, content: vec![ContentPart::Text(t)], tool_calls: vec![], tool_call_id: None, reasoning: None }
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

fn nonce() -> String {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u8(7);
    format!("{:016x}", h.finish())
}

struct Asker {
    sampling: Sampling,
    model: String,
    calls: u32,
}

impl Asker {
    /// The judge's reply text, or why there is none.
    fn ask(&mut self, messages: Vec<Message>) -> Result<String, String> {
        self.calls += 1;
        match model::complete(&messages, &[], &self.sampling) {
            Ok(c) => {
                self.model = c.model.clone();
                let reply: String = c
                    .message
                    .content
                    .iter()
                    .map(|p| if let ContentPart::Text(t) = p { t.as_str() } else { "" })
                    .collect();
                Ok(reply)
            }
            Err(e) => Err(format!("the judge model failed: {e:?}")),
        }
    }
}

fn screenshots(trajectory: &Trajectory, k: usize) -> Vec<Image> {
    let all: Vec<Image> = trajectory
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|p| if let ContentPart::Image(i) = p { Some(i.clone()) } else { None })
        .collect();
    all[all.len().saturating_sub(k)..].to_vec()
}

fn actions(trajectory: &Trajectory) -> Vec<String> {
    let calls: Vec<String> = trajectory
        .messages
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .map(|c| format!("{}({})", c.name, clip(&c.arguments, 200)))
        .collect();
    calls[calls.len().saturating_sub(30)..].to_vec()
}

fn grade(task: Task, trajectory: Trajectory, outcome: Outcome) -> Result<Verdict, Error> {
    let raw: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
    let meta = raw.get("metadata").filter(|m| m.is_object()).unwrap_or(&raw);
    let style = meta.get("judge").and_then(Value::as_str).unwrap_or("webvoyager").to_string();
    if style != "webvoyager" && style != "webjudge" {
        return Ok(Verdict::Unknown(format!("task metadata: judge {style:?}: one of webvoyager, webjudge")));
    }
    let k = meta.get("screenshots").and_then(Value::as_u64).unwrap_or(3) as usize;
    let threshold = meta.get("threshold").and_then(Value::as_u64).unwrap_or(3) as u8;
    let temperature = meta.get("judge_temperature").and_then(Value::as_f64).unwrap_or(0.0) as f32;
    let sampling = Sampling {
        temperature: Some(temperature),
        top_p: None,
        max_tokens: None,
        stop: vec![],
        seed: None,
        extra: None,
    };
    let mut asker = Asker { sampling, model: String::new(), calls: 0 };
    let hash = prompt_hash(&style);
    let answer = quote_untrusted(outcome.answer.as_deref().unwrap_or("(the agent gave no final answer)"), &nonce());
    let shots = screenshots(&trajectory, k);
    let task_text = format!("Task: {}", task.instruction);

    let result: Result<(bool, String, Vec<SubScore>), String> = (|| {
        if style == "webvoyager" {
            let mut content = vec![ContentPart::Text(format!(
                "{task_text}\n\nThe agent's final answer:\n{answer}\n\nThe last {} screenshot(s) follow.",
                shots.len()
            ))];
            content.extend(shots.iter().cloned().map(ContentPart::Image));
            let user = Message { role: Role::User, content, tool_calls: vec![], tool_call_id: None, reasoning: None };
            let reply = asker.ask(vec![text(Role::System, WEBVOYAGER_SYSTEM.into()), user])?;
            let verdict = parse_webvoyager(&reply)
                .ok_or_else(|| format!("the judge's reply has no verdict: {:?}", clip(&reply, 300)))?;
            return Ok((verdict, reply, vec![]));
        }
        // A dataset's own requirements (DeepShop's attribute, filter and sort) are the key
        // points when the task lists them; otherwise the judge lists them from the task.
        let given: Vec<String> = meta
            .get("key_points")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let points = if given.is_empty() {
            let reply =
                asker.ask(vec![text(Role::System, KEY_POINTS_SYSTEM.into()), text(Role::User, task_text.clone())])?;
            let points = parse_key_points(&reply);
            if points.is_empty() {
                return Err(format!("the judge listed no key points: {:?}", clip(&reply, 300)));
            }
            points
        } else {
            given
        };
        let listed: String = points.iter().enumerate().map(|(i, p)| format!("{}. {p}\n", i + 1)).collect();
        let mut kept = Vec::new();
        for (i, shot) in shots.iter().enumerate() {
            let user = Message {
                role: Role::User,
                content: vec![
                    ContentPart::Text(format!(
                        "{task_text}\nKey points:\n{listed}\nScreenshot {} of {}:",
                        i + 1,
                        shots.len()
                    )),
                    ContentPart::Image(shot.clone()),
                ],
                tool_calls: vec![],
                tool_call_id: None,
                reasoning: None,
            };
            let reply = asker.ask(vec![text(Role::System, STEP_SYSTEM.into()), user])?;
            // A step the judge did not score is left out, as an irrelevant one would be.
            if parse_score(&reply).is_some_and(|s| s >= threshold) {
                kept.push((shot.clone(), clip(&reply, 300)));
            }
        }
        let mut content = vec![ContentPart::Text(format!(
            "{task_text}\nKey points:\n{listed}\nThe agent's actions:\n{}\n\nThe agent's final answer:\n{answer}\n\n\
             {} screenshot(s) judged relevant follow, each after why.",
            actions(&trajectory).join("\n"),
            kept.len()
        ))];
        for (shot, why) in &kept {
            content.push(ContentPart::Text(format!("Why it matters: {why}")));
            content.push(ContentPart::Image(shot.clone()));
        }
        let user = Message { role: Role::User, content, tool_calls: vec![], tool_call_id: None, reasoning: None };
        let reply = asker.ask(vec![text(Role::System, WEBJUDGE_SYSTEM.into()), user])?;
        let verdict = parse_webjudge(&reply)
            .ok_or_else(|| format!("the judge's reply has no status: {:?}", clip(&reply, 300)))?;
        let subs = vec![
            SubScore { name: "key_points".into(), value: points.len() as f64 },
            SubScore { name: "relevant_screenshots".into(), value: kept.len() as f64 },
        ];
        Ok((verdict, reply, subs))
    })();

    let who = format!(
        "judge {} ({style}, prompt sha256:{}, {} call(s))",
        if asker.model.is_empty() { "(no reply)" } else { &asker.model },
        &hash[..16],
        asker.calls
    );
    orchard::plugin::log::event(
        orchard::plugin::log::Level::Info,
        "judge",
        &json!({"model": asker.model, "style": style, "prompt_sha256": hash, "prompt_version": PROMPT_VERSION,
                "screenshots": shots.len(), "ok": result.is_ok()})
        .to_string(),
    );
    Ok(match result {
        Err(reason) => Verdict::Unknown(format!("{reason}; {who}")),
        Ok((verdict, reply, sub_scores)) => Verdict::Graded(Score {
            reward: if verdict { 1.0 } else { 0.0 },
            passed: verdict,
            sub_scores,
            explanation: format!(
                "{who}: {}; {}",
                if verdict { "SUCCESS" } else { "NOT SUCCESS" },
                clip(reply.trim(), 600)
            ),
        }),
    })
}

impl Guest for Judge {
    fn grade(
        task: Task,
        trajectory: Trajectory,
        outcome: Outcome,
        _environment: Environment,
    ) -> Result<Verdict, Error> {
        grade(task, trajectory, outcome)
    }
}

export!(Judge);
