//! Rollout groups for trainers over the real server: `POST /v1/groups` streams each rollout as it
//! finishes with its token-faithful segments, BAR tops a uniform group up until it is mixed, an
//! environment's failure is retried and never counted, and the trainer's sampling and policy
//! version reach every model call.

use std::sync::Arc;

use futures::StreamExt;
use orchard_tests::Server;
use reqwest::Method;
use serde_json::{Value, json};

/// A task whose reward is the model's choice: `yes` passes, `no` fails, and `crash` leaves no
/// reward at all (the grader cannot decide: an environment error, not a negative).
/// `coin2` is the same task under another instruction (the policy keeps a script per instruction).
fn coin_tasks() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in ["coin", "coin2"] {
        orchard_tests::evals::write_task(
            dir.path(),
            name,
            "",
            "#!/bin/bash\ncase \"$(cat /workspace/answer.txt 2>/dev/null)\" in\n  yes) echo 1 > /logs/verifier/reward.txt ;;\n  crash) ;;\n  *) echo 0 > /logs/verifier/reward.txt ;;\nesac\n",
        );
        std::fs::write(dir.path().join(name).join("instruction.md"), format!("Flip the {name}.")).unwrap();
    }
    dir
}

fn archive(dir: &std::path::Path) -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    tar.append_dir_all(".", dir).unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

async fn upload(server: &Server, dir: &std::path::Path) -> String {
    let resp = server.request(Method::POST, "/v1/datasets").body(archive(dir)).send().await.unwrap();
    assert_eq!(resp.status(), 201);
    resp.json::<Value>().await.unwrap()["id"].as_str().unwrap().to_string()
}

/// A policy that answers the n-th episode of each instruction with `choices[n]` (then `no`) on
/// its first turn, and ends the episode on the next; every reply carries token ids and logprobs.
async fn scripted_policy(choices: Vec<&'static str>) -> (String, Arc<std::sync::Mutex<Vec<Value>>>) {
    let episodes = std::sync::Mutex::new(std::collections::HashMap::<String, usize>::new());
    orchard_tests::evals::mock_model_with(move |request| {
        let messages = request["messages"].as_array().unwrap();
        let turns = messages.iter().filter(|m| m["role"] == "assistant").count();
        let message = if turns == 0 {
            let instruction = messages.iter().find(|m| m["role"] == "user").map(|m| m["content"].to_string());
            let mut episodes = episodes.lock().unwrap();
            let count = episodes.entry(instruction.unwrap_or_default()).or_default();
            let n = *count;
            *count += 1;
            let choice = choices.get(n).copied().unwrap_or("no");
            let command = format!("echo {choice} > /workspace/answer.txt");
            json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]})
        } else {
            json!({"role": "assistant", "content": "done"})
        };
        orchard_tests::tokens::reply(request, message)
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_client_turns_live_groups_into_slime_verl_and_skyrl_batches() {
    let server = Server::start_with(orchard_tests::ServerOptions {
        api_keys: Some("alice:alice-key-1234".into()),
        ..Default::default()
    })
    .await;
    let tasks = coin_tasks();
    let (url, _) = scripted_policy(vec!["yes", "no", "no", "no"]).await;
    let sdk = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("host/sdk-python");
    let out = tokio::process::Command::new("python3")
        .args(["-m", "unittest", "-v", "tests/test_live.py"])
        .current_dir(&sdk)
        .env("PYTHONPATH", sdk.join("src"))
        .env("ORCHARD_URL", &server.url)
        .env("ORCHARD_API_KEY", "alice-key-1234")
        .env("TASKS_DIR", tasks.path())
        .env("MODEL_URL", &url)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", String::from_utf8_lossy(&out.stdout));
    assert!(stderr.contains("Ran 2 tests"), "{stderr}");
    let summary: Value = serde_json::from_slice(out.stdout.trim_ascii()).unwrap();
    assert_eq!(summary["sequences"], 8);
}

/// Reads an NDJSON stream to its end.
async fn records(resp: reqwest::Response) -> Vec<Value> {
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk.unwrap());
        while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=nl).collect();
            out.push(serde_json::from_slice::<Value>(&line).unwrap());
        }
    }
    out
}

fn request(dataset: &str, url: &str, size: u32, bar: Value) -> Value {
    json!({
        "tasks": {"archive": dataset}, "task_ids": ["coin"], "harness": "react", "tools": ["shell"],
        "grader": "script", "size": size, "bar": bar, "policy_version": "step-7",
        "model": {"url": url, "name": "policy", "sampling": {"temperature": 0.9, "max_tokens": 64}},
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bar_group_is_topped_up_until_mixed_and_environment_errors_never_count() {
    let server = Server::start().await;
    let tasks = coin_tasks();
    let dataset = upload(&server, tasks.path()).await;
    // Four episodes: three failures and one the grader cannot decide; its retry fails too; the
    // first top-up passes.
    let (url, seen) = scripted_policy(vec!["no", "no", "crash", "no", "no", "yes"]).await;
    // The whole group of 4 first, and no opportunity cost: this is about topping up.
    let body =
        request(&dataset, &url, 4, json!({"abandon_below": 0.0, "admit": false, "probe": 4, "opportunity": 0.0}));
    let resp = server.request(Method::POST, "/v1/groups").json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let records = records(resp).await;
    let rollouts: Vec<&Value> = records.iter().filter(|r| r["type"] == "rollout").collect();
    let group = records.iter().find(|r| r["type"] == "group").unwrap_or_else(|| panic!("{records:#?}"));
    assert_eq!(records.last().unwrap()["type"], "end", "{records:#?}");
    assert_eq!(rollouts.len(), 6, "{rollouts:#?}");

    // The undecided rollout: reported, not a reward, its slot run again.
    let errors: Vec<&&Value> = rollouts.iter().filter(|r| r["status"] == "env_error").collect();
    assert_eq!(errors.len(), 1);
    assert_eq!((errors[0]["counted"].clone(), errors[0]["reward"].clone()), (json!(false), Value::Null));
    let retried = rollouts.iter().filter(|r| r["index"] == errors[0]["index"]).count();
    assert_eq!(retried, 2, "the slot ran twice");

    assert_eq!(group["outcome"], "emitted", "{group:#}");
    assert_eq!((group["positives"].as_u64(), group["negatives"].as_u64()), (Some(1), Some(3)), "{group:#}");
    assert_eq!(group["env_errors"], 1);
    assert_eq!(group["generated"], 6);
    let selected: Vec<&str> = group["selected"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    assert_eq!(selected.len(), 4);
    let passing = rollouts.iter().find(|r| r["reward"] == 1.0).unwrap();
    assert!(selected.contains(&passing["rollout_id"].as_str().unwrap()), "the minority is kept");
    assert!(!selected.contains(&errors[0]["rollout_id"].as_str().unwrap()));
    // Advantages against the task's posterior mean, not the selected group's mean (0.25).
    let baseline = group["baseline"].as_f64().unwrap();
    assert_eq!(group["baseline_kind"], "posterior_mean");
    assert!((baseline - 0.25).abs() > 1e-3, "{baseline}");
    for (r, a) in group["rewards"].as_array().unwrap().iter().zip(group["advantages"].as_array().unwrap()) {
        assert!((r.as_f64().unwrap() - baseline - a.as_f64().unwrap()).abs() < 1e-9);
    }
    // Every decision is on record: the first launch, the retry's wait, the top-up, the emit.
    let steps: Vec<String> = group["decisions"].as_array().unwrap().iter().map(|d| d["step"].to_string()).collect();
    assert!(steps.first().unwrap().contains("Launch"), "{steps:?}");
    assert!(steps.last().unwrap().contains("Emit"), "{steps:?}");
    assert!(steps.len() >= 3, "a top-up happened: {steps:?}");

    // Token-faithful: each counted rollout's segment is exactly what the endpoint saw and sampled.
    let requests = seen.lock().unwrap().clone();
    for r in rollouts.iter().filter(|r| r["counted"] == true) {
        let segments = r["segments"].as_array().unwrap();
        assert_eq!(segments.len(), 1, "{r:#}");
        let s = &segments[0];
        let ids =
            |v: &Value| -> Vec<u32> { v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect() };
        let prompt = ids(&s["prompt_ids"]);
        assert!(requests.iter().any(|q| orchard_tests::tokens::render_prompt(q) == prompt));
        let mut whole = prompt.clone();
        whole.extend(ids(&s["response_ids"]));
        let last_seen = requests
            .iter()
            .map(orchard_tests::tokens::render_prompt)
            .filter(|p| whole.starts_with(p))
            .max_by_key(Vec::len)
            .unwrap();
        let tail = orchard_tests::tokens::render_message(&json!({"content": "done"}));
        assert_eq!(whole, [last_seen, tail].concat());
        assert_eq!(s["policy_versions"], json!(["step-7"]));
        assert_eq!(r["policy_version"], "step-7");
        assert_eq!(r["messages"][0]["role"], "system");
    }
    // The trainer's sampling reached every call, whatever the harness asked.
    assert!(requests.iter().all(|q| q["temperature"] == 0.9 && q["max_tokens"] == 64), "{:#}", requests[0]);
    // The group is a job of the engine: its rollouts are readable there too.
    let (status, job) =
        server.call(Method::GET, &format!("/v1/evals/{}", group["group_id"].as_str().unwrap()), None).await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["counts"]["done"], 6, "{job:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn fixed_groups_stream_as_server_sent_events_and_bad_requests_name_the_field() {
    let server = Server::start().await;
    let tasks = coin_tasks();
    let dataset = upload(&server, tasks.path()).await;
    let (url, _) = scripted_policy(vec!["yes", "yes", "yes", "no"]).await;
    let mut body = request(&dataset, &url, 2, Value::Null);
    body["task_ids"] = json!(["coin", "coin"]);
    let resp = server
        .request(Method::POST, "/v1/groups")
        .header("accept", "text/event-stream")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let text = resp.text().await.unwrap();
    let events: Vec<(&str, Value)> = text
        .split("\n\n")
        .filter_map(|block| {
            let event = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((event, serde_json::from_str(data).unwrap()))
        })
        .collect();
    let groups: Vec<&Value> = events.iter().filter(|(e, _)| *e == "group").map(|(_, v)| v).collect();
    assert_eq!(groups.len(), 2, "{text}");
    assert_eq!(events.iter().filter(|(e, _)| *e == "rollout").count(), 4);
    // Without BAR a group is exactly G, emitted whole even when uniform, against its own mean.
    let all_pass = groups.iter().filter(|g| g["positives"] == 2).count();
    assert_eq!(all_pass, 1, "{groups:#?}");
    assert!(groups.iter().all(|g| g["outcome"] == "emitted" && g["baseline_kind"] == "group_mean"));
    let end = &events.last().unwrap().1;
    assert_eq!((end["groups"].as_u64(), end["emitted"].as_u64()), (Some(2), Some(2)), "{end}");

    for (change, field) in [
        (json!({"task_ids": ["nope"]}), "task_ids: \"nope\" is not in the tasks"),
        (json!({"size": 1}), "size: between 2"),
        (json!({"tasks": {"dir": "/etc"}}), "tasks.dir"),
        (json!({"bar": {"cap": 100}}), "bar.cap"),
        (json!({"harness": "shell"}), "harness"),
    ] {
        let mut bad = request(&dataset, &url, 2, Value::Null);
        for (k, v) in change.as_object().unwrap() {
            bad[k] = v.clone();
        }
        let (status, v) = server.call(Method::POST, "/v1/groups", Some(bad)).await;
        assert_eq!(status, 422, "{change}: {v}");
        assert!(v["detail"].as_str().unwrap().contains(field), "{change}: {v}");
    }
}

/// What a harness outside Orchard runs: the real OpenAI Python SDK, a tool turn, then a streamed
/// answer, against the base URL it was given.
const OUTSIDE_HARNESS: &str = r#"
import json, os, openai
client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key=os.environ["API_KEY"])
tools = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Make a.txt"}]
first = client.chat.completions.create(model="whatever-the-harness-says", messages=messages, tools=tools, temperature=0.1)
call = first.choices[0].message.tool_calls[0]
messages.append(first.choices[0].message.model_dump(exclude_none=True))
messages.append({"role": "tool", "tool_call_id": call.id, "content": "ok"})
stream = client.chat.completions.create(model="whatever-the-harness-says", messages=messages, tools=tools, stream=True)
text = "".join(chunk.choices[0].delta.content or "" for chunk in stream)
print(json.dumps({"tool": call.function.name, "text": text}))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_harness_outside_orchard_is_recorded_token_faithfully_through_the_proxy() {
    let server = Server::start_with(orchard_tests::ServerOptions {
        api_keys: Some("alice:alice-key-1234,bob:bob-key-5678".into()),
        ..Default::default()
    })
    .await
    .with_key("alice-key-1234");
    let (url, seen) = scripted_policy(vec!["yes"]).await;
    let (status, session) = server
        .call(
            Method::POST,
            "/v1/proxy",
            Some(json!({"model": {"url": url, "name": "policy", "policy_version": "step-3",
                "sampling": {"temperature": 1.0}}})),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let base_url = format!("{}{}", server.url, session["base_url"].as_str().unwrap());
    let out = tokio::process::Command::new("python3")
        .args(["-c", OUTSIDE_HARNESS])
        .env("BASE_URL", &base_url)
        .env("API_KEY", "alice-key-1234")
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer, json!({"tool": "bash", "text": "done"}), "the streamed answer reached the client");

    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    for q in &requests {
        assert_eq!(q["model"], "policy", "the session's model, whatever the harness named");
        assert_eq!(q["temperature"], 1.0, "the trainer's sampling wins");
        assert_eq!(q["return_token_ids"], true);
        assert!(q.get("stream").is_none(), "the endpoint is asked for whole answers");
    }
    let id = session["id"].as_str().unwrap();
    // Another tenant cannot read it.
    let bob = Server::attach(&server.url, &server.state_dir).with_key("bob-key-5678");
    let (status, _) = bob.call(Method::GET, &format!("/v1/proxy/{id}"), None).await;
    assert_eq!(status, 404);
    let (status, record) = server.call(Method::DELETE, &format!("/v1/proxy/{id}"), None).await;
    assert_eq!(status, 200, "{record}");
    assert_eq!(record["calls"].as_array().unwrap().len(), 2);
    let segments = record["segments"].as_array().unwrap();
    assert_eq!(segments.len(), 1, "{record:#}");
    let ids = |v: &Value| -> Vec<u32> { v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect() };
    let mut whole = ids(&segments[0]["prompt_ids"]);
    whole.extend(ids(&segments[0]["response_ids"]));
    let expected = [
        orchard_tests::tokens::render_prompt(&requests[1]),
        orchard_tests::tokens::render_message(&json!({"content": "done"})),
    ]
    .concat();
    assert_eq!(whole, expected, "exactly what the endpoint saw and sampled");
    assert_eq!(segments[0]["policy_versions"], json!(["step-3"]));
    let (status, _) = server.call(Method::GET, &format!("/v1/proxy/{id}"), None).await;
    assert_eq!(status, 404, "closed");
}

/// `examples/training/run.py` end to end, as CI runs it: its own server and mock policy, a
/// warm-up evaluation fitting BAR's prior, two rounds of groups, a trainer-ready batch.
#[tokio::test(flavor = "multi_thread")]
async fn the_training_example_writes_a_trainer_ready_batch() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let out = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new("python3")
        .arg(root.join("examples/training/run.py"))
        .arg("--orchard")
        .arg(orchard_tests::orchard_bin())
        .arg("--out")
        .arg(out.path())
        .env("ORCHARD_AGENT_BIN", orchard_tests::agent_bin())
        .env("ORCHARD_PLUGIN_DIR", orchard_tests::plugin_dir())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&run.stderr));
    let records: Vec<Value> = std::fs::read_to_string(out.path().join("groups.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ends: Vec<&Value> = records.iter().filter(|r| r["type"] == "end").collect();
    assert_eq!(ends.len(), 2, "one stream per round");
    let decided: u64 = ends.iter().map(|e| e["groups"].as_u64().unwrap() + e["skipped"].as_u64().unwrap()).sum();
    assert_eq!(decided, 12, "every task of both rounds was admitted or skipped");
    assert!(records.iter().any(|r| r["type"] == "skipped"), "BAR skipped tasks unlikely to give a mixed group");
    let emitted = records.iter().filter(|r| r["type"] == "group" && r["outcome"] == "emitted").count();
    assert!(emitted >= 1, "{stdout}");
    let samples: Vec<Value> = std::fs::read_to_string(out.path().join("batch.slime.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(samples.len(), emitted * 8);
    for s in &samples {
        let n = s["response_length"].as_u64().unwrap() as usize;
        assert_eq!(s["loss_mask"].as_array().unwrap().len(), n);
        assert!(s["tokens"].as_array().unwrap().len() > n, "prompt and response ids");
        assert!(s["metadata"]["policy_version"].as_str().unwrap().starts_with("step-"));
    }
    let skyrl: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("batch.skyrl.json")).unwrap()).unwrap();
    assert_eq!(skyrl["response_ids"].as_array().unwrap().len(), samples.len());
    assert!(stdout.contains("est. pass"), "the table: {stdout}");
}

/// Tasks the oracle always passes, its solution taking a varying moment (so rollouts of a group
/// finish apart).
fn oracle_tasks(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        orchard_tests::evals::write_task(
            dir.path(),
            name,
            "",
            "#!/bin/bash\n[ \"$(cat /workspace/answer.txt)\" = yes ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
        );
        let solution = dir.path().join(name).join("solution");
        std::fs::create_dir_all(&solution).unwrap();
        std::fs::write(
            solution.join("solve.sh"),
            "#!/bin/bash\nsleep 0.$((RANDOM % 6))\necho yes > /workspace/answer.txt\n",
        )
        .unwrap();
    }
    dir
}

fn oracle_request(dataset: &str, task_ids: &[&str], size: u32) -> Value {
    // No `model`: the oracle calls none.
    json!({"tasks": {"archive": dataset}, "task_ids": task_ids, "harness": "oracle", "tools": ["shell"],
           "grader": "script", "size": size, "grants": ["solution"]})
}

/// Every rollout the server finished for the request's groups, by id.
async fn stored_rollouts(server: &Server, records: &[Value]) -> std::collections::BTreeSet<String> {
    let mut ids = std::collections::BTreeSet::new();
    for group in records.iter().filter(|r| r["type"] == "group") {
        let id = group["group_id"].as_str().unwrap();
        let (status, rows) =
            server.call(Method::GET, &format!("/v1/evals/{id}/rollouts?state=done&limit=500"), None).await;
        if group["generated"] == 0 {
            assert_eq!(status, 404, "a group that launched nothing has no job: {rows}");
            continue;
        }
        ids.extend(rows["rollouts"].as_array().unwrap().iter().map(|r| r["rollout_id"].as_str().unwrap().to_string()));
    }
    ids
}

fn streamed_rollouts(records: &[Value]) -> Vec<String> {
    records.iter().filter(|r| r["type"] == "rollout").map(|r| r["rollout_id"].as_str().unwrap().to_string()).collect()
}

/// A request says how much to spend — a rollout budget, a number of groups — and gets exactly
/// that; every rollout the server finished reaches the stream once (in its group or as surplus),
/// and group jobs are not listed among evaluations.
#[tokio::test(flavor = "multi_thread")]
async fn budgets_and_groups_wanted_are_honoured_and_every_finished_rollout_is_streamed_once() {
    let server = Server::start().await;
    let names = ["t1", "t2", "t3", "t4"];
    let tasks = oracle_tasks(&names);
    let dataset = upload(&server, tasks.path()).await;

    // A budget of 10 rollouts for four groups of 4: two run, two are abandoned for the budget.
    let mut body = oracle_request(&dataset, &names, 4);
    body["budget"] = json!(10);
    let resp = server.request(Method::POST, "/v1/groups").json(&body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let first = records(resp).await;
    let records = &first;
    let end = records.last().unwrap();
    assert_eq!(end["type"], "end", "{records:#?}");
    assert_eq!((end["spent"].as_u64(), end["budget"].as_u64()), (Some(8), Some(10)), "{end}");
    assert_eq!((end["emitted"].as_u64(), end["abandoned"].as_u64()), (Some(2), Some(2)), "{end}");
    let abandoned: Vec<&Value> = records.iter().filter(|r| r["outcome"] == "abandoned").collect();
    assert!(abandoned.iter().all(|g| g["reason"].as_str().unwrap().contains("budget")), "{abandoned:#?}");
    let streamed = streamed_rollouts(records);
    assert_eq!(streamed.len(), 8);
    assert_eq!(
        streamed.iter().cloned().collect::<std::collections::BTreeSet<_>>(),
        stored_rollouts(&server, records).await
    );

    // One group wanted of four: exactly one emitted, the rest stopped; whatever they finished
    // meanwhile is streamed once, as surplus.
    let mut body = oracle_request(&dataset, &names, 4);
    body["groups"] = json!(1);
    let resp = server.request(Method::POST, "/v1/groups").json(&body).send().await.unwrap();
    let second = self::records(resp).await;
    let records = &second;
    let end = records.last().unwrap();
    assert_eq!(
        (end["emitted"].as_u64(), end["stopped"].as_u64(), end["groups_wanted"].as_u64()),
        (Some(1), Some(3), Some(1)),
        "{end}"
    );
    let streamed = streamed_rollouts(records);
    let unique: std::collections::BTreeSet<String> = streamed.iter().cloned().collect();
    assert_eq!(unique.len(), streamed.len(), "a rollout streamed twice");
    assert_eq!(unique, stored_rollouts(&server, records).await, "finished but never streamed (or the reverse)");
    assert_eq!(end["rollouts"].as_u64(), Some(streamed.len() as u64));
    let emitted = records.iter().find(|r| r["outcome"] == "emitted").unwrap();
    let in_group: Vec<&str> = emitted["selected"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()).collect();
    for r in records.iter().filter(|r| r["type"] == "rollout") {
        if in_group.contains(&r["rollout_id"].as_str().unwrap()) {
            assert_eq!(r["surplus"], false, "{r}");
        }
    }

    // Group jobs are reachable by id but not listed among evaluations.
    let (_, listed) = server.call(Method::GET, "/v1/evals", None).await;
    assert_eq!(listed["evals"].as_array().unwrap().len(), 0, "{listed}");
}

/// A BAR group that can never be mixed (every rollout passes) is abandoned at its cap and says
/// what it saw: its positives, not zeros.
#[tokio::test(flavor = "multi_thread")]
async fn an_abandoned_group_reports_what_it_graded() {
    let server = Server::start().await;
    let tasks = oracle_tasks(&["always"]);
    let dataset = upload(&server, tasks.path()).await;
    let mut body = oracle_request(&dataset, &["always"], 2);
    body["bar"] = json!({"cap": 4, "abandon_below": 0.0, "admit": false, "opportunity": 0.0});
    let resp = server.request(Method::POST, "/v1/groups").json(&body).send().await.unwrap();
    let records = records(resp).await;
    let group = records.iter().find(|r| r["type"] == "group").unwrap_or_else(|| panic!("{records:#?}"));
    assert_eq!(group["outcome"], "abandoned", "{group:#}");
    assert_eq!((group["positives"].as_u64(), group["negatives"].as_u64()), (Some(4), Some(0)), "{group:#}");
}
