//! The `zeroclaw` port against the real ZeroClaw 0.8.2, request by request. ZeroClaw cannot be
//! built here in CI (a git dependency), so its requests on one scripted episode are recorded in
//! `tests/fixtures/zeroclaw-0.8.2/episode.json` by `record.py` from a source build; the same
//! script is played to the port through a real sandbox and every request compared. The episode:
//! a shell command writing stdout and stderr, a failing one, a write, a silent command, reads
//! (whole, a duplicate, a range, a missing file), an edit, a glob, memory stored and a missing
//! key forgotten, content searches (context, counts, files, nothing found), a missing parameter,
//! an unknown tool, then the answer.

use std::path::Path;

use orchard_tests::evals::{args, completion, eval_async, mock_model, rollouts};
use orchard_tests::faithful::{differences, normalized};
use serde_json::{Value, json};

const WORKSPACE: &str = "/tmp/zeroclaw-workspace";
const DATE: &str = "2026-12-04";
const NOW: &str = "2026-12-04 09:30:00";

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/zeroclaw-0.8.2/episode.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The recorded requests with the port's workspace, clock and host in the placeholders' places.
fn real_requests(fixture: &Value, host: &str) -> Vec<Value> {
    let text = fixture["requests"]
        .to_string()
        .replace("{workspace}", WORKSPACE)
        .replace("{now}", NOW)
        .replace("{date}", DATE)
        .replace("{host}", host);
    serde_json::from_str::<Vec<Value>>(&text).unwrap().iter().map(normalized).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_port_sends_what_the_real_zeroclaw_sends() {
    let fixture = fixture();
    let script: Vec<(u16, Value)> = fixture["script"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let finish = if m["tool_calls"].is_array() { "tool_calls" } else { "stop" };
            completion(m.clone(), finish, (100, 10))
        })
        .collect();
    let (url, seen) = mock_model(script).await;
    let tools: Vec<&str> = fixture["requests"][0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    let config = json!({"allowed_tools": tools, "workspace": WORKSPACE, "date": DATE, "now": NOW,
                        "model_name": "mock-1"});
    let task_dir = tempfile::tempdir().unwrap();
    let task = task_dir.path().join("zeroclaw-episode");
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::write(task.join("instruction.md"), fixture["task"].as_str().unwrap()).unwrap();
    std::fs::write(task.join("task.toml"), "[agent]\ntimeout_sec = 120\n[verifier]\ntimeout_sec = 30\n").unwrap();
    std::fs::write(
        task.join("tests/test.sh"),
        format!("#!/bin/sh\nprintf 'one\\ndeux\\nthrée\\n' | cmp -s - {WORKSPACE}/notes/a.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"),
    )
    .unwrap();
    let (_, out, _) = eval_async(args(&[
        &task.display().to_string(),
        "--harness",
        "zeroclaw",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--model",
        &url,
        "--model-name",
        "mock-1",
        "--config",
        &config.to_string(),
    ]))
    .await;
    let rollout = rollouts(out.path()).remove(0);
    assert_eq!(rollout["outcome"]["answer"], fixture["answer"], "{rollout:#}");
    assert_eq!(rollout["reward"], 1.0, "the edit reached the sandbox: {rollout:#}");
    let port: Vec<Value> = seen.lock().unwrap().iter().map(normalized).collect();
    let system = port[0]["messages"][0]["content"].as_str().unwrap().to_string();
    let host = system.split("Host: ").nth(1).and_then(|r| r.split(" |").next()).unwrap_or_default();
    let found = differences(&real_requests(&fixture, host), &port);
    assert!(found.is_empty(), "{} differences:\n{}", found.len(), found.join("\n"));
    assert_eq!(port.len(), 6);
}
