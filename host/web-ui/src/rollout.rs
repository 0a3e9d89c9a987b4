//! One rollout, step by step: model calls (reasoning collapsed, tool calls with their
//! arguments, tokens), tool calls with their observations and images, sandbox operations, plugin
//! events and output; then the conversation with its images, and the grade with its explanation
//! and sub-scores. A failure names the plugin and the call. When tools answered with screenshots
//! (a desktop or a browser), the screen's recording: one frame per action, replayed by the page's
//! script (each frame also reads without it).

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;

use crate::format::num;
use crate::{Layout, S, Signed, api_error, error_page, render};

pub struct StepView {
    pub index: usize,
    pub kind: String,
    pub title: String,
    pub plugin: String,
    pub at: String,
    pub duration: String,
    pub text: String,
    pub reasoning: Option<String>,
    pub calls: Vec<String>,
    pub args: Option<String>,
    pub images: Vec<String>,
    pub error: bool,
}

/// One frame of the screen's recording: what a tool (a desktop or browser driver) showed after
/// an action.
pub struct FrameView {
    /// The step it follows (its number in the steps list).
    pub step: usize,
    /// The action, as the step's title says it.
    pub caption: String,
    /// The screenshot, a data URL.
    pub image: String,
}

/// The recording: every screenshot tools answered with, in the order of their steps.
fn frames(steps: &[StepView]) -> Vec<FrameView> {
    steps
        .iter()
        .filter(|s| s.kind == "tool_call")
        .flat_map(|s| {
            let action =
                s.args.as_deref().map(|a| a.split_whitespace().collect::<Vec<_>>().join(" ")).unwrap_or_default();
            let caption: String = format!("{} {action}", s.title).chars().take(200).collect();
            s.images.iter().map(move |image| FrameView {
                step: s.index,
                caption: caption.clone(),
                image: image.clone(),
            })
        })
        .collect()
}

pub struct MessageView {
    pub role: String,
    pub text: String,
    pub reasoning: Option<String>,
    pub calls: Vec<String>,
    pub images: Vec<String>,
}

#[derive(Template)]
#[template(path = "rollout.html")]
struct RolloutPage {
    layout: Layout,
    eval_id: String,
    rollout_id: String,
    task: String,
    harness: String,
    attempt: i64,
    state: String,
    status: String,
    reward: String,
    passed: bool,
    explanation: String,
    sub_scores: Vec<(String, String)>,
    unknown_reason: Option<String>,
    failure: Option<String>,
    error: Option<String>,
    outcome: String,
    timings: String,
    tokens: String,
    plugins: Vec<(String, String)>,
    steps: Vec<StepView>,
    frames: Vec<FrameView>,
    conversation: Vec<MessageView>,
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn ms(v: &Value) -> String {
    v.as_u64()
        .map(|m| if m >= 1000 { format!("{:.1} s", m as f64 / 1000.0) } else { format!("{m} ms") })
        .unwrap_or_default()
}

/// Text and images (as data URLs) of a message's parts.
fn parts(content: &Value) -> (String, Vec<String>) {
    let mut text = Vec::new();
    let mut images = Vec::new();
    for p in content.as_array().into_iter().flatten() {
        match p["type"].as_str() {
            Some("text") => text.push(s(&p["text"])),
            Some("image") => {
                let media = p["media_type"].as_str().unwrap_or("image/png");
                // Only image types as data URLs: nothing a page would run.
                if media.starts_with("image/") && !media.contains("svg") {
                    images.push(format!("data:{media};base64,{}", s(&p["data_base64"])));
                }
            }
            _ => {}
        }
    }
    (text.join("\n"), images)
}

fn calls_of(message: &Value) -> Vec<String> {
    message["tool_calls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| format!("{}({})", s(&c["name"]), s(&c["arguments"])))
        .collect()
}

fn pretty_json(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_else(|_| text.to_string())
}

fn steps(trajectory: &Value) -> Vec<StepView> {
    // Images a tool answered with live in the conversation, by the call's id.
    let mut images_by_call: HashMap<String, Vec<String>> = HashMap::new();
    for m in trajectory["conversation"].as_array().into_iter().flatten() {
        if let Some(id) = m["tool_call_id"].as_str() {
            let (_, images) = parts(&m["content"]);
            if !images.is_empty() {
                images_by_call.entry(id.to_string()).or_default().extend(images);
            }
        }
    }
    let mut out = Vec::new();
    for (i, step) in trajectory["steps"].as_array().into_iter().flatten().enumerate() {
        let kind = s(&step["type"]);
        let mut v = StepView {
            index: i + 1,
            kind: kind.clone(),
            title: kind.replace('_', " "),
            plugin: s(&step["plugin"]),
            at: ms(&step["at_ms"]),
            duration: ms(&step["duration_ms"]),
            text: String::new(),
            reasoning: None,
            calls: Vec::new(),
            args: None,
            images: Vec::new(),
            error: false,
        };
        match kind.as_str() {
            "model_call" => {
                let r = &step["response"];
                let (text, images) = parts(&r["content"]);
                let u = &step["usage"];
                v.title = format!(
                    "model {} · {} in / {} out tokens · {}",
                    s(&step["model"]),
                    s(&u["prompt_tokens"]),
                    s(&u["completion_tokens"]),
                    s(&step["finish_reason"])
                );
                v.text = text;
                v.images = images;
                v.reasoning = r["reasoning"].as_str().filter(|t| !t.is_empty()).map(str::to_string);
                v.calls = calls_of(r);
            }
            "model_error" => {
                v.text = s(&step["error"]);
                v.error = true;
            }
            "tool_call" => {
                let call = &step["call"];
                v.title = format!("tool {} ({})", s(&call["name"]), s(&step["adapter"]));
                v.args = Some(pretty_json(call["arguments"].as_str().unwrap_or("{}")));
                v.text = s(&step["output"]);
                v.error = step["is_error"].as_bool().unwrap_or(false);
                v.images = images_by_call.remove(call["id"].as_str().unwrap_or_default()).unwrap_or_default();
            }
            "sandbox" => {
                v.title = format!("sandbox {}", s(&step["op"]));
                v.text = serde_json::to_string_pretty(&step["detail"]).unwrap_or_default();
            }
            "verifier" => {
                let d = &step["detail"];
                let count = |k: &str| d[k].as_array().map_or(0, Vec::len);
                v.title = format!(
                    "verifier · {} environment · {} carried, {} dropped",
                    s(&step["mode"]),
                    count("carried"),
                    count("dropped")
                );
                v.text = serde_json::to_string_pretty(d).unwrap_or_default();
                v.error = !d["problem"].is_null();
            }
            "event" => {
                v.title = format!("event {} ({})", s(&step["name"]), s(&step["level"]));
                v.text = serde_json::to_string_pretty(&step["data"]).unwrap_or_default();
                v.error = step["level"] == "error";
            }
            "output" => {
                v.title = format!("output ({})", s(&step["stream"]));
                v.text = s(&step["text"]);
            }
            _ => v.text = step.to_string(),
        }
        out.push(v);
    }
    out
}

fn conversation(trajectory: &Value) -> Vec<MessageView> {
    trajectory["conversation"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let (text, images) = parts(&m["content"]);
            MessageView {
                role: s(&m["role"]),
                text,
                reasoning: m["reasoning"].as_str().filter(|t| !t.is_empty()).map(str::to_string),
                calls: calls_of(m),
                images,
            }
        })
        .collect()
}

pub async fn page(State(state): S, signed: Signed, Path((id, rid)): Path<(String, String)>) -> Response {
    if let Err(e) = orchard_evals_api::owned(&state.service, &signed.tenant, &id).await {
        return api_error(e);
    }
    let found = match state.service.env.store.rollout(&id, &rid).await {
        Ok(found) => found,
        Err(e) => return api_error(e.into()),
    };
    let Some((row, doc)) = found else {
        return error_page(StatusCode::NOT_FOUND, &format!("rollout {rid} not found in {id}"));
    };
    let result: Value = row.result.as_deref().and_then(|r| serde_json::from_str(r).ok()).unwrap_or(Value::Null);
    let doc: Value = doc.as_deref().and_then(|d| serde_json::from_str(d).ok()).unwrap_or(Value::Null);
    let trajectory = &doc["trajectory"];
    let verdict = &result["verdict"];
    let failure = result["failure"].as_object().map(|f| {
        let g = |k: &str| f.get(k).map(s).unwrap_or_default();
        format!("{} failed in {} ({}): {}", g("plugin"), g("call"), g("kind"), g("message"))
    });
    let outcome = &result["outcome"];
    let usage = &trajectory["usage"];
    let page = RolloutPage {
        layout: signed.layout(format!("Rollout {rid}")),
        eval_id: id.clone(),
        rollout_id: rid.clone(),
        task: row.task_id.clone(),
        harness: row.harness.clone(),
        attempt: row.attempt,
        state: row.state.clone(),
        status: row.status.clone().unwrap_or_else(|| row.state.clone()),
        reward: num(row.reward),
        passed: row.passed.unwrap_or(false),
        explanation: s(&verdict["explanation"]),
        sub_scores: verdict["sub_scores"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| (s(&p[0]), num(p[1].as_f64())))
            .collect(),
        unknown_reason: verdict["reason"].as_str().map(str::to_string),
        failure,
        error: row.error.clone(),
        outcome: if outcome.is_null() {
            String::new()
        } else {
            format!(
                "{} after {} steps{}",
                s(&outcome["status"]),
                s(&outcome["steps"]),
                outcome["answer"].as_str().map(|a| format!(": {a}")).unwrap_or_default()
            )
        },
        timings: format!(
            "agent {:.1} s · grade {:.1} s · total {:.1} s",
            result["agent_seconds"].as_f64().unwrap_or(0.0),
            result["grade_seconds"].as_f64().unwrap_or(0.0),
            result["total_seconds"].as_f64().unwrap_or(0.0)
        ),
        tokens: format!(
            "{} model calls · {} tool calls · {} prompt / {} completion tokens",
            s(&trajectory["model_calls"]),
            s(&trajectory["tool_calls"]),
            s(&usage["prompt_tokens"]),
            s(&usage["completion_tokens"])
        ),
        plugins: result["plugins"].as_object().into_iter().flatten().map(|(k, v)| (k.clone(), s(v))).collect(),
        frames: Vec::new(),
        steps: steps(trajectory),
        conversation: conversation(trajectory),
    };
    let page = RolloutPage { frames: frames(&page.steps), ..page };
    render(&page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recording_is_each_tool_screenshot_in_step_order() {
        let shot = |n: u8| format!("data:image/png;base64,{n}");
        let trajectory = serde_json::json!({
            "steps": [
                {"type": "model_call", "response": {"content": [{"type": "text", "text": "look"}]}, "usage": {}},
                {"type": "tool_call", "adapter": "desktop", "call": {"id": "a", "name": "computer",
                    "arguments": "{\"action_type\": \"CLICK\"}"}, "output": "clicked"},
                {"type": "sandbox", "op": "desktop-act", "detail": {}},
                {"type": "tool_call", "adapter": "shell", "call": {"id": "b", "name": "bash", "arguments": "{}"}, "output": "ok"},
                {"type": "tool_call", "adapter": "desktop", "call": {"id": "c", "name": "observe", "arguments": "{}"}, "output": ""}
            ],
            "conversation": [
                {"role": "tool", "tool_call_id": "a", "content": [{"type": "image", "media_type": "image/png", "data_base64": "1"}]},
                {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "ok"}]},
                {"role": "tool", "tool_call_id": "c", "content": [{"type": "image", "media_type": "image/svg+xml", "data_base64": "x"},
                                                                {"type": "image", "media_type": "image/jpeg", "data_base64": "3"}]}
            ]
        });
        let recorded = frames(&steps(&trajectory));
        let got: Vec<(usize, &str)> = recorded.iter().map(|f| (f.step, f.image.as_str())).collect();
        assert_eq!(got, [(2, shot(1).as_str()), (5, "data:image/jpeg;base64,3")]);
        assert!(recorded[0].caption.starts_with("tool computer (desktop)"), "{}", recorded[0].caption);
        assert!(recorded[0].caption.contains("CLICK"), "{}", recorded[0].caption);
    }
}
