//! Trajectory exports for training: OpenAI chat fine-tuning JSONL, Harbor's ATIF, ShareGPT.
//!
//! Input: a run directory's `trajectories.jsonl` (one rollout per line). Each format is built
//! from the conversation the model last saw (`trajectory.conversation`), with per-turn metrics
//! from the recorded model calls.

use serde_json::{Map, Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// A training format rollouts are exported in.
pub enum Format {
    /// OpenAI chat messages with tool calls, one rollout a line.
    OpenAi,
    /// Harbor's Agent Trajectory Interchange Format.
    Atif,
    /// ShareGPT conversations.
    ShareGpt,
}

impl Format {
    /// Reads a format's name (`openai`, `atif`, `sharegpt`).
    pub fn parse(s: &str) -> Result<Format, String> {
        match s {
            "openai" => Ok(Format::OpenAi),
            "atif" => Ok(Format::Atif),
            "sharegpt" => Ok(Format::ShareGpt),
            other => Err(format!("unknown format {other:?} (openai, atif, sharegpt)")),
        }
    }
}

#[derive(Debug, Clone, Default)]
/// Which rollouts an export keeps.
pub struct Filter {
    /// Only passed ones.
    pub only_passed: bool,
    /// Only ones rewarded at least this.
    pub min_reward: Option<f64>,
    /// Only rollouts of these harnesses (`react`, or `react@0.1.0`): train on one harness's
    /// trajectories of a cross-harness matrix, evaluate on the others.
    pub harnesses: Vec<String>,
    /// Only rollouts of tasks of these domains.
    pub domains: Vec<String>,
}

impl Filter {
    /// Whether a result line is kept.
    pub fn keeps(&self, line: &Value) -> bool {
        if self.only_passed && line["passed"] != true {
            return false;
        }
        let harness = line["harness"].as_str().unwrap_or_default();
        let name = harness.split('@').next().unwrap_or_default();
        if !self.harnesses.is_empty() && !self.harnesses.iter().any(|h| h == harness || h == name) {
            return false;
        }
        if !self.domains.is_empty() && !self.domains.iter().any(|d| line["domain"] == d.as_str()) {
            return false;
        }
        match (self.min_reward, line["reward"].as_f64()) {
            (Some(min), Some(r)) => r >= min,
            (Some(_), None) => false,
            (None, _) => true,
        }
    }
}

/// Converts every kept rollout; returns the JSONL lines.
pub fn export(trajectories_jsonl: &str, format: Format, filter: &Filter) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for (i, line) in trajectories_jsonl.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let rollout: Value =
            serde_json::from_str(line).map_err(|e| format!("trajectories.jsonl line {}: {e}", i + 1))?;
        if !filter.keeps(&rollout) {
            continue;
        }
        let converted = match format {
            Format::OpenAi => openai_records(&rollout),
            Format::Atif => vec![atif(&rollout)],
            Format::ShareGpt => vec![sharegpt(&rollout)],
        };
        out.extend(converted.iter().map(|c| serde_json::to_string(c).expect("JSON values serialise")));
    }
    Ok(out)
}

fn text(message: &Value) -> String {
    message["content"]
        .as_array()
        .map(|parts| parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join(""))
        .unwrap_or_default()
}

fn tools_openai(rollout: &Value) -> Vec<Value> {
    rollout["trajectory"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    let params: Value = t["parameters"].as_str().and_then(|p| serde_json::from_str(p).ok()).unwrap_or(json!({"type": "object"}));
                    json!({"type": "function", "function": {"name": t["name"], "description": t["description"], "parameters": params}})
                })
                .collect()
        })
        .unwrap_or_default()
}

/// OpenAI chat fine-tuning: `{"messages": [...], "tools": [...]}`; assistant turns carry
/// `tool_calls`, tool turns `tool_call_id`, and `reasoning_content` is kept where there was some.
pub fn openai(rollout: &Value) -> Value {
    let messages: Vec<Value> = rollout["trajectory"]["conversation"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let mut o = Map::new();
            o.insert("role".into(), m["role"].clone());
            o.insert("content".into(), text(m).into());
            if let Some(calls) = m["tool_calls"].as_array().filter(|c| !c.is_empty()) {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|c| json!({"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}))
                    .collect();
                o.insert("tool_calls".into(), calls.into());
            }
            if let Some(id) = m["tool_call_id"].as_str() {
                o.insert("tool_call_id".into(), id.into());
            }
            if let Some(r) = m["reasoning"].as_str() {
                o.insert("reasoning_content".into(), r.into());
            }
            Value::Object(o)
        })
        .collect();
    let mut out = json!({"messages": messages});
    let tools = tools_openai(rollout);
    if !tools.is_empty() {
        out["tools"] = tools.into();
    }
    out
}

/// The subagents a harness logged (`subagent-end` events, see the harness kit's `nested`): each
/// with its id, parent, name, depth, status, final answer, and its conversation and tools in
/// OpenAI's shape.
pub fn subagents(rollout: &Value) -> Vec<Value> {
    rollout["trajectory"]["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["type"] == "event" && s["name"] == "subagent-end")
        .map(|s| s["data"].clone())
        .collect()
}

/// The OpenAI records of a rollout: its main conversation, then each subagent's as a record of
/// its own, linked by `metadata` (`rollout_id`, `agent`, `subagent_id`, `parent`, `depth`), so that
/// nested conversations train as what they were and never as turns of the parent's.
pub fn openai_records(rollout: &Value) -> Vec<Value> {
    let mut main = openai(rollout);
    let subs = subagents(rollout);
    if subs.is_empty() {
        return vec![main];
    }
    main["metadata"] = json!({
        "rollout_id": rollout["rollout_id"], "agent": "main",
        "subagents": subs.iter().map(|s| s["id"].clone()).collect::<Vec<_>>(),
    });
    let mut out = vec![main];
    for sub in subs {
        let mut record = json!({
            "messages": sub["messages"],
            "metadata": {"rollout_id": rollout["rollout_id"], "agent": sub["name"], "subagent_id": sub["id"],
                         "parent": sub["parent"], "depth": sub["depth"], "status": sub["status"]},
        });
        if sub["tools"].as_array().is_some_and(|t| !t.is_empty()) {
            record["tools"] = sub["tools"].clone();
        }
        out.push(record);
    }
    out
}

/// A subagent's OpenAI-shaped messages in the trajectory's own message shape (content parts,
/// flat tool calls), for the ATIF step builder.
fn from_openai(m: &Value) -> Value {
    let mut out =
        json!({"role": m["role"], "content": [{"type": "text", "text": m["content"].as_str().unwrap_or("")}]});
    if let Some(calls) = m["tool_calls"].as_array() {
        out["tool_calls"] = calls
            .iter()
            .map(|c| json!({"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}))
            .collect();
    }
    for key in ["tool_call_id", "reasoning_content"] {
        if !m[key].is_null() {
            out[if key == "tool_call_id" { key } else { "reasoning" }] = m[key].clone();
        }
    }
    out
}

/// Harbor's Agent Trajectory Interchange Format, v1.7: the main conversation's steps, and each
/// subagent's trajectory embedded under `subagent_trajectories`, referred to from the
/// observation of the tool call that started it (`subagent_trajectory_ref`).
pub fn atif(rollout: &Value) -> Value {
    let trajectory = &rollout["trajectory"];
    let rollout_id = rollout["rollout_id"].as_str().unwrap_or_default();
    let sub_id = |id: &Value| format!("{rollout_id}/{}", id.as_str().unwrap_or_default());
    let subs = subagents(rollout);
    let refs: std::collections::HashMap<String, String> =
        subs.iter().map(|s| (s["id"].as_str().unwrap_or_default().to_string(), sub_id(&s["id"]))).collect();
    let model_calls: Vec<&Value> =
        trajectory["steps"].as_array().into_iter().flatten().filter(|s| s["type"] == "model_call").collect();
    let conversation: Vec<&Value> = trajectory["conversation"].as_array().into_iter().flatten().collect();
    let steps = atif_steps(&conversation, &model_calls, rollout["model"].as_str(), &refs);
    let harness = rollout["harness"].as_str().unwrap_or_default();
    let (name, version) = harness.split_once('@').unwrap_or((harness, "0"));
    let embedded: Vec<Value> = subs
        .iter()
        .map(|s| {
            let messages: Vec<Value> = s["messages"].as_array().into_iter().flatten().map(from_openai).collect();
            let steps = atif_steps(&messages.iter().collect::<Vec<_>>(), &[], rollout["model"].as_str(), &refs);
            let mut t = json!({
                "schema_version": "ATIF-v1.7",
                "trajectory_id": sub_id(&s["id"]),
                "agent": {"name": s["name"], "version": version, "model_name": rollout["model"]},
                "steps": steps,
                "final_metrics": {"total_steps": steps.len()},
            });
            drop_nulls(&mut t);
            t["extra"] =
                json!({"parent": s["parent"], "depth": s["depth"], "status": s["status"], "answer": s["answer"]});
            t
        })
        .collect();
    let mut core = json!({
        "agent": {"name": name, "version": version, "model_name": rollout["model"], "extra": {"tools": rollout["tools"]}},
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": trajectory["usage"]["prompt_tokens"],
            "total_completion_tokens": trajectory["usage"]["completion_tokens"],
            "total_steps": steps.len(),
        },
    });
    // ATIF's optional fields are absent, never null (a rollout without a model has no model
    // name; a tool message whose call was compacted away has no call id).
    drop_nulls(&mut core);
    core["schema_version"] = "ATIF-v1.7".into();
    core["session_id"] = rollout["rollout_id"].clone();
    core["trajectory_id"] = rollout["rollout_id"].clone();
    if !embedded.is_empty() {
        core["subagent_trajectories"] = embedded.into();
    }
    // `extra` keeps nulls: a null reward is a grade of `unknown`, which is information.
    core["extra"] = json!({"task_id": rollout["task_id"], "reward": rollout["reward"], "passed": rollout["passed"], "outcome": rollout["outcome"]});
    core
}

/// ATIF steps from a conversation: system and user messages as they are, each assistant turn
/// with its tool calls, the results answering it as its observation (a subagent's result refers
/// to its trajectory), and the metrics of the model call that produced it.
fn atif_steps(
    conversation: &[&Value],
    model_calls: &[&Value],
    model: Option<&str>,
    refs: &std::collections::HashMap<String, String>,
) -> Vec<Value> {
    let mut used_calls = 0;
    let mut steps: Vec<Value> = Vec::new();
    let mut i = 0;
    while i < conversation.len() {
        let m = conversation[i];
        let role = m["role"].as_str().unwrap_or_default();
        let mut step = Map::new();
        step.insert("step_id".into(), (steps.len() + 1).into());
        match role {
            "system" | "user" | "tool" => {
                // A stray tool message (its call compacted away) is shown as the user's.
                step.insert("source".into(), if role == "system" { "system" } else { "user" }.into());
                step.insert("message".into(), text(m).into());
                i += 1;
            }
            _ => {
                step.insert("source".into(), "agent".into());
                step.insert("message".into(), text(m).into());
                if let Some(r) = m["reasoning"].as_str() {
                    step.insert("reasoning_content".into(), r.into());
                }
                if let Some(model) = model {
                    step.insert("model_name".into(), model.into());
                }
                let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
                if !calls.is_empty() {
                    let atif_calls: Vec<Value> = calls
                        .iter()
                        .map(|c| {
                            let args: Value = c["arguments"]
                                .as_str()
                                .and_then(|a| serde_json::from_str(a).ok())
                                .filter(Value::is_object)
                                .unwrap_or(json!({}));
                            json!({"tool_call_id": c["id"], "function_name": c["name"], "arguments": args})
                        })
                        .collect();
                    step.insert("tool_calls".into(), atif_calls.into());
                }
                // The tool results that answer this turn are its observation.
                let mut results = Vec::new();
                let mut j = i + 1;
                while j < conversation.len() && conversation[j]["role"] == "tool" {
                    let mut result =
                        json!({"source_call_id": conversation[j]["tool_call_id"], "content": text(conversation[j])});
                    if let Some(sub) = conversation[j]["tool_call_id"].as_str().and_then(|id| refs.get(id)) {
                        result["subagent_trajectory_ref"] = json!([{"trajectory_id": sub}]);
                    }
                    results.push(result);
                    j += 1;
                }
                if !results.is_empty() {
                    step.insert("observation".into(), json!({"results": results}));
                }
                // Metrics from the model call that produced this message.
                if let Some(k) = model_calls[used_calls..].iter().position(|c| c["response"] == *m) {
                    let call = model_calls[used_calls + k];
                    used_calls += k + 1;
                    let mut metrics = json!({
                        "prompt_tokens": call["usage"]["prompt_tokens"],
                        "completion_tokens": call["usage"]["completion_tokens"],
                    });
                    if let Some(ids) = call.get("token_ids").filter(|v| !v.is_null()) {
                        metrics["completion_token_ids"] = ids.clone();
                    }
                    if let Some(lp) = call["logprobs"]["content"].as_array() {
                        metrics["logprobs"] = lp.iter().map(|t| t["logprob"].clone()).collect::<Vec<_>>().into();
                    }
                    step.insert("metrics".into(), metrics);
                }
                i = j;
            }
        }
        steps.push(Value::Object(step));
    }
    steps
}

fn drop_nulls(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|_, x| !x.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

/// ShareGPT as LLaMA-Factory reads it: `system` and `tools` apart; turns `human`, `gpt`,
/// `function_call` (the calls as JSON: an object, or an array for parallel calls) and
/// `observation`. LLaMA-Factory drops any record whose turns do not alternate user side
/// (`human`, `observation`) and model side (`gpt`, `function_call`), starting with the user and
/// ending with the model, so runs of one side are merged (see `alternate`) and trailing
/// user-side turns, which teach nothing, are dropped.
pub fn sharegpt(rollout: &Value) -> Value {
    let mut system = String::new();
    let mut turns: Vec<Value> = Vec::new();
    for m in rollout["trajectory"]["conversation"].as_array().into_iter().flatten() {
        match m["role"].as_str().unwrap_or_default() {
            "system" => system = text(m),
            "user" => turns.push(json!({"from": "human", "value": text(m)})),
            "tool" => turns.push(json!({"from": "observation", "value": text(m)})),
            _ => {
                let calls: Vec<Value> = m["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| json!({"name": c["name"], "arguments": c["arguments"].as_str().and_then(|a| serde_json::from_str::<Value>(a).ok()).unwrap_or(json!({}))}))
                    .collect();
                match calls.len() {
                    0 => turns.push(json!({"from": "gpt", "value": text(m)})),
                    1 => turns.push(json!({"from": "function_call", "value": calls[0].to_string()})),
                    _ => turns.push(json!({"from": "function_call", "value": Value::Array(calls).to_string()})),
                }
            }
        }
    }
    let tools: Vec<Value> = tools_openai(rollout).into_iter().map(|t| t["function"].clone()).collect();
    json!({"system": system, "tools": Value::Array(tools).to_string(), "conversations": alternate(turns)})
}

fn model_side(turn: &Value) -> bool {
    matches!(turn["from"].as_str(), Some("gpt" | "function_call"))
}

/// Merges each run of same-side turns into one: the results of parallel calls become one
/// `observation` holding a JSON array of their texts; a user message after tool results (a
/// format error, a nudge) joins them as text; two model turns in a row are joined as text.
fn alternate(turns: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut run: Vec<Value> = Vec::new();
    let flush = |run: &mut Vec<Value>, out: &mut Vec<Value>| {
        let merged = match run.len() {
            0 => return,
            1 => run[0].clone(),
            _ if run.iter().all(|t| t["from"] == "observation") => {
                let texts: Vec<Value> = run.iter().map(|t| t["value"].clone()).collect();
                json!({"from": "observation", "value": Value::Array(texts).to_string()})
            }
            _ => {
                let from = if model_side(&run[0]) {
                    if run.iter().any(|t| t["from"] == "function_call") { "function_call" } else { "gpt" }
                } else if run.iter().any(|t| t["from"] == "observation") {
                    "observation"
                } else {
                    "human"
                };
                let texts: Vec<&str> = run.iter().filter_map(|t| t["value"].as_str()).collect();
                json!({"from": from, "value": texts.join("\n\n")})
            }
        };
        out.push(merged);
        run.clear();
    };
    for turn in turns {
        if run.last().is_some_and(|last| model_side(last) != model_side(&turn)) {
            flush(&mut run, &mut out);
        }
        run.push(turn);
    }
    flush(&mut run, &mut out);
    // A record starts with the user and ends with the model.
    while out.first().is_some_and(model_side) {
        out.remove(0);
    }
    while out.last().is_some_and(|t| !model_side(t)) {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rollout(passed: bool, reward: f64) -> Value {
        let assistant1 = json!({"role": "assistant", "content": [], "reasoning": "look first",
            "tool_calls": [{"id": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}]});
        let assistant2 = json!({"role": "assistant", "content": [{"type": "text", "text": "two at once"}],
            "tool_calls": [{"id": "c2", "name": "read_file", "arguments": "{\"path\":\"/a\"}"},
                           {"id": "c3", "name": "bash", "arguments": "{\"command\":\"pwd\"}"}]});
        let last = json!({"role": "assistant", "content": [{"type": "text", "text": "done"}]});
        json!({
            "rollout_id": "t__react__1", "task_id": "t", "harness": "react@0.1.0", "tools": ["shell@0.1.0"],
            "model": "m1", "passed": passed, "reward": reward, "outcome": {"status": "completed"},
            "trajectory": {
                "conversation": [
                    {"role": "system", "content": [{"type": "text", "text": "be useful"}]},
                    {"role": "user", "content": [{"type": "text", "text": "do the task"}]},
                    assistant1.clone(),
                    {"role": "tool", "content": [{"type": "text", "text": "a.txt"}], "tool_call_id": "c1"},
                    assistant2.clone(),
                    {"role": "tool", "content": [{"type": "text", "text": "A"}], "tool_call_id": "c2"},
                    {"role": "tool", "content": [{"type": "text", "text": "/w"}], "tool_call_id": "c3"},
                    last.clone(),
                ],
                "tools": [{"name": "bash", "description": "run", "parameters": "{\"type\":\"object\"}"}],
                "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
                "steps": [
                    {"type": "model_call", "response": assistant1, "usage": {"prompt_tokens": 10, "completion_tokens": 3},
                     "token_ids": [1, 2, 3], "logprobs": {"content": [{"token": "a", "logprob": -0.5}]}},
                    {"type": "tool_call", "call": {"id": "c1"}},
                    {"type": "model_call", "response": assistant2, "usage": {"prompt_tokens": 10, "completion_tokens": 3}},
                    {"type": "model_call", "response": last, "usage": {"prompt_tokens": 10, "completion_tokens": 3}}
                ]
            }
        })
    }

    #[test]
    fn openai_export_round_trips_the_conversation() {
        let r = rollout(true, 1.0);
        let o = openai(&r);
        let msgs = o["messages"].as_array().unwrap();
        assert_eq!(msgs.len(), 8);
        assert_eq!(msgs[2]["tool_calls"][0]["function"]["name"], "bash");
        assert_eq!(msgs[2]["reasoning_content"], "look first");
        assert_eq!(msgs[3], json!({"role": "tool", "content": "a.txt", "tool_call_id": "c1"}));
        assert_eq!(o["tools"][0]["function"]["parameters"]["type"], "object");
        // Back to the conversation: the same roles, texts, calls and ids.
        for (exported, original) in msgs.iter().zip(r["trajectory"]["conversation"].as_array().unwrap()) {
            assert_eq!(exported["role"], original["role"]);
            assert_eq!(exported["content"].as_str().unwrap(), text(original));
            let ids: Vec<&Value> = exported["tool_calls"].as_array().into_iter().flatten().map(|c| &c["id"]).collect();
            let orig: Vec<&Value> = original["tool_calls"].as_array().into_iter().flatten().map(|c| &c["id"]).collect();
            assert_eq!(ids, orig);
        }
    }

    #[test]
    fn atif_export_follows_the_schema() {
        let a = atif(&rollout(true, 1.0));
        assert_eq!(a["schema_version"], "ATIF-v1.7");
        assert_eq!(a["agent"]["name"], "react");
        assert_eq!(a["agent"]["version"], "0.1.0");
        let steps = a["steps"].as_array().unwrap();
        // system, user, three agent turns (their tool results folded into observations).
        let sources: Vec<&str> = steps.iter().map(|s| s["source"].as_str().unwrap()).collect();
        assert_eq!(sources, ["system", "user", "agent", "agent", "agent"]);
        for (i, s) in steps.iter().enumerate() {
            assert_eq!(s["step_id"], i + 1, "step ids run from 1");
            assert!(s["message"].is_string(), "message is required");
            let call_ids: Vec<&str> =
                s["tool_calls"].as_array().into_iter().flatten().map(|c| c["tool_call_id"].as_str().unwrap()).collect();
            for res in s["observation"]["results"].as_array().into_iter().flatten() {
                assert!(
                    call_ids.contains(&res["source_call_id"].as_str().unwrap()),
                    "observation refers to a call of its step"
                );
            }
            for c in s["tool_calls"].as_array().into_iter().flatten() {
                assert!(c["arguments"].is_object());
            }
        }
        assert_eq!(steps[2]["reasoning_content"], "look first");
        assert_eq!(steps[2]["metrics"]["completion_token_ids"], json!([1, 2, 3]));
        assert_eq!(steps[2]["metrics"]["logprobs"], json!([-0.5]));
        assert_eq!(steps[3]["observation"]["results"].as_array().unwrap().len(), 2);
        assert_eq!(a["final_metrics"]["total_prompt_tokens"], 30);
    }

    #[test]
    fn sharegpt_export_uses_llama_factory_roles() {
        let s = sharegpt(&rollout(true, 1.0));
        assert_eq!(s["system"], "be useful");
        let froms: Vec<&str> =
            s["conversations"].as_array().unwrap().iter().map(|t| t["from"].as_str().unwrap()).collect();
        assert_eq!(froms, ["human", "function_call", "observation", "function_call", "observation", "gpt"]);
        let parallel: Value = serde_json::from_str(s["conversations"][3]["value"].as_str().unwrap()).unwrap();
        assert_eq!(parallel.as_array().unwrap().len(), 2);
        let results: Value = serde_json::from_str(s["conversations"][4]["value"].as_str().unwrap()).unwrap();
        assert_eq!(results, json!(["A", "/w"]), "parallel results become one observation");
        let tools: Value = serde_json::from_str(s["tools"].as_str().unwrap()).unwrap();
        assert_eq!(tools[0]["name"], "bash");
    }

    #[test]
    fn sharegpt_turns_alternate_even_when_the_conversation_does_not() {
        let turn = |from: &str, value: &str| json!({"from": from, "value": value});
        let turns = vec![
            turn("human", "task"),
            turn("human", "[summary of earlier turns]"),
            turn("function_call", "{}"),
            turn("observation", "out"),
            turn("human", "format error"),
            turn("gpt", "thinking"),
            turn("gpt", "done"),
            turn("observation", "dangling"),
        ];
        assert_eq!(
            alternate(turns),
            vec![
                turn("human", "task\n\n[summary of earlier turns]"),
                turn("function_call", "{}"),
                turn("observation", "out\n\nformat error"),
                turn("gpt", "thinking\n\ndone"),
            ]
        );
    }

    #[test]
    fn filters_keep_what_was_asked() {
        let lines = [rollout(true, 1.0), rollout(false, 0.4), rollout(false, 0.0)].map(|r| r.to_string()).join("\n");
        let all = export(&lines, Format::OpenAi, &Filter::default()).unwrap();
        assert_eq!(all.len(), 3);
        let passed = export(&lines, Format::OpenAi, &Filter { only_passed: true, ..Default::default() }).unwrap();
        assert_eq!(passed.len(), 1);
        let half = export(&lines, Format::Atif, &Filter { min_reward: Some(0.3), ..Default::default() }).unwrap();
        assert_eq!(half.len(), 2);
        assert!(export("{not json", Format::OpenAi, &Filter::default()).unwrap_err().contains("line 1"));
    }
}
