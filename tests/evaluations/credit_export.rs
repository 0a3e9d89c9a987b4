//! Credit-assigned SFT: a scripted policy fails one rollout and resolves another; a scripted
//! hindsight judge scores the failure's turns; the export credits exactly the turns where the
//! value rose up to its peak, weights the others 0, cuts after the last, and does the same on the
//! recorded token ids.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use orchard_tests::evals::{eval, mock_model_with, write_task};
use serde_json::{Value, json};

fn bash(command: &str) -> Value {
    json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
        "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}}]})
}

/// Episode 0 wanders for four tool turns and fails; episode 1 answers at once and passes.
fn policy(episodes: &AtomicUsize, request: &Value) -> (u16, Value) {
    let messages = request["messages"].as_array().unwrap();
    let assistant: Vec<&Value> = messages.iter().filter(|m| m["role"] == "assistant").collect();
    let wandering = match assistant.first() {
        None => episodes.fetch_add(1, Ordering::SeqCst) == 0,
        Some(first) => first["tool_calls"][0]["function"]["arguments"].as_str().unwrap_or("").contains("a1"),
    };
    let script = if wandering {
        vec![
            bash("echo a1"),
            bash("ls /workspace"),
            bash("echo a3 > /workspace/notes"),
            bash("echo no > /workspace/answer.txt"),
        ]
    } else {
        vec![bash("echo yes > /workspace/answer.txt")]
    };
    let message = script.get(assistant.len()).cloned().unwrap_or(json!({"role": "assistant", "content": "done"}));
    orchard_tests::tokens::reply(request, message)
}

/// `orchard eval` of the tasks in `dir` with react, the shell and the script grader, the model at
/// `url` (on a blocking thread: the mock lives on the test's runtime); answers the run directory.
async fn react_run(dir: &std::path::Path, url: &str, extra: &[&str]) -> tempfile::TempDir {
    let args: Vec<String> =
        [dir.to_str().unwrap(), "--harness", "react", "--tools", "shell", "--grader", "script", "--model", url]
            .iter()
            .chain(extra)
            .map(|s| s.to_string())
            .collect();
    tokio::task::spawn_blocking(move || eval(&args.iter().map(String::as_str).collect::<Vec<_>>()).1).await.unwrap()
}

fn export(run: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["export", run.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = orchard_tests::orchard(&args);
    assert_eq!(code, 0, "{stderr}");
    stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_trajectory_is_credited_on_its_rising_turns_up_to_the_peak() {
    let tasks = tempfile::tempdir().unwrap();
    write_task(
        tasks.path(),
        "coin",
        "",
        "#!/bin/bash\n[ \"$(cat /workspace/answer.txt)\" = yes ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    );
    std::fs::create_dir_all(tasks.path().join("coin/solution")).unwrap();
    std::fs::write(tasks.path().join("coin/solution/solve.sh"), "echo yes > /workspace/answer.txt # GOLD\n").unwrap();
    let episodes = Arc::new(AtomicUsize::new(0));
    let (url, _) = mock_model_with(move |r| policy(&episodes, r)).await;
    let run = react_run(tasks.path(), &url, &["--logprobs", "--attempts", "2"]).await;

    // The judge: progress after each of the five turns (four tool turns and the answer).
    let (judge, asked) = mock_model_with(|_| {
        orchard_tests::evals::completion(
            json!({"role": "assistant", "content": "{\"progress\": [0.2, 0.2, 0.5, 0.1, 0.1]}"}),
            "stop",
            (10, 10),
        )
    })
    .await;
    let run_dir = run.path().to_path_buf();
    let tasks_dir = tasks.path().to_path_buf();
    let (openai, tokens) = tokio::task::spawn_blocking(move || {
        let common = ["--credit", "judge", "--judge-model", &judge, "--tasks", tasks_dir.to_str().unwrap()];
        let openai = export(&run_dir, &[&["--format", "openai"], &common[..]].concat());
        let tokens = export(&run_dir, &[&["--format", "tokens"], &common[..]].concat());
        (openai, tokens)
    })
    .await
    .unwrap();

    let asked = asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "the judge is asked once per unresolved trajectory and export");
    let prompt = asked[0]["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("The trajectory has 5 turns"), "{prompt}");
    assert!(prompt.contains("GOLD"), "the judge reads the reference solution: {prompt}");

    assert_eq!(openai.len(), 2);
    let failed = openai.iter().find(|r| r["metadata"]["passed"] == false).unwrap();
    let assistant: Vec<&Value> =
        failed["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").collect();
    let weights: Vec<u64> = assistant.iter().map(|m| m["weight"].as_u64().unwrap()).collect();
    assert_eq!(weights, vec![1, 0, 1], "turn 1 rose, turn 2 was flat, turn 3 was the peak; cut after it");
    assert!(assistant[2]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().contains("a3"));
    assert_eq!(failed["messages"].as_array().unwrap().last().unwrap()["role"], "assistant");
    assert_eq!(failed["step_loss_mask"], json!([1, 0, 1]));
    assert_eq!(failed["metadata"]["credit"]["method"], "judge");
    assert_eq!(failed["metadata"]["credit"]["curve"], json!([0.0, 0.2, 0.2, 0.5, 0.1, 0.1]));
    let resolved = openai.iter().find(|r| r["metadata"]["passed"] == true).unwrap();
    assert_eq!(resolved["metadata"]["credit"]["method"], "resolved");
    assert!(
        resolved["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").all(|m| m["weight"] == 1)
    );

    // Tokens: the failed rollout's one segment, cut after turn 3, turn 2's sampled ids unmasked.
    let row = tokens.iter().find(|r| r["credit"]["method"] == "judge").unwrap();
    let spans = row["turn_spans"].as_array().unwrap();
    assert_eq!(spans.len(), 3);
    let mask: Vec<u64> = row["loss_mask"].as_array().unwrap().iter().map(|m| m.as_u64().unwrap()).collect();
    assert_eq!(mask.len(), row["input_ids"].as_array().unwrap().len());
    assert_eq!(mask.len() as u64, spans[2]["end"].as_u64().unwrap(), "cut right after the last credited turn");
    let turn_mask = |i: usize| {
        let (a, b) = (spans[i]["start"].as_u64().unwrap() as usize, spans[i]["end"].as_u64().unwrap() as usize);
        mask[a..b].to_vec()
    };
    assert!(turn_mask(0).iter().all(|m| *m == 1));
    assert!(turn_mask(1).iter().all(|m| *m == 0), "the flat turn is not learned");
    assert!(turn_mask(2).iter().all(|m| *m == 1));
    assert_eq!(
        mask.iter().filter(|m| **m == 1).count(),
        turn_mask(0).len() + turn_mask(2).len(),
        "observations are never learned"
    );

    let (code, _, stderr) =
        orchard_tests::orchard(&["export", run.path().to_str().unwrap(), "--format", "openai", "--credit", "mc"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("--credit mc needs --tasks"), "{stderr}");
}

/// The recorded episode writes a draft (turn 1), wanders (2), deletes the draft (3), answers
/// wrong (4) and stops (5). A continuation — the policy under another name — copies the draft
/// into the answer when there is one. So continuations succeed from the states after turns 1 and
/// 2 only: the value rises at turn 1 and falls at turn 3.
fn drafting_policy(request: &Value) -> (u16, Value) {
    let messages = request["messages"].as_array().unwrap();
    let assistant = messages.iter().filter(|m| m["role"] == "assistant").count();
    let message = if request["model"] == "continuation" {
        let copied =
            messages.iter().any(|m| m["tool_calls"][0]["function"]["arguments"].as_str().unwrap_or("").contains("cp "));
        if copied {
            json!({"role": "assistant", "content": "done"})
        } else {
            bash("cp /workspace/draft /workspace/answer.txt; true")
        }
    } else {
        let script = [
            bash("echo yes > /workspace/draft"),
            bash("echo x > /tmp/x"),
            bash("rm /workspace/draft"),
            bash("echo no > /workspace/answer.txt"),
        ];
        script.get(assistant).cloned().unwrap_or(json!({"role": "assistant", "content": "done"}))
    };
    let finish = if message["tool_calls"].is_array() { "tool_calls" } else { "stop" };
    orchard_tests::evals::completion(message, finish, (10, 10))
}

#[tokio::test(flavor = "multi_thread")]
async fn monte_carlo_continuations_find_where_the_value_rose_and_fell() {
    let tasks = tempfile::tempdir().unwrap();
    write_task(
        tasks.path(),
        "draft",
        "",
        "#!/bin/bash\n[ \"$(cat /workspace/answer.txt 2>/dev/null)\" = yes ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
    );
    let (url, seen) = mock_model_with(drafting_policy).await;
    let run = react_run(tasks.path(), &url, &["--model-name", "policy"]).await;
    let run_dir = run.path().to_path_buf();
    let tasks_dir = tasks.path().to_path_buf();
    let records = tokio::task::spawn_blocking(move || {
        export(
            &run_dir,
            &[
                "--format",
                "openai",
                "--credit",
                "mc",
                "--tasks",
                tasks_dir.to_str().unwrap(),
                "--model",
                &url,
                "--model-name",
                "continuation",
                "--mc-k",
                "2",
            ],
        )
    })
    .await
    .unwrap();
    assert_eq!(records.len(), 1);
    let r = &records[0];
    assert_eq!(r["metadata"]["credit"]["method"], "mc");
    let curve = r["metadata"]["credit"]["curve"].as_array().unwrap();
    assert_eq!(curve.len(), 6, "{curve:?}");
    assert_eq!((&curve[0], &curve[1], &curve[3]), (&json!(0.0), &json!(1.0), &json!(0.0)), "{curve:?}");
    assert_eq!(r["step_loss_mask"], json!([1]), "only the draft was progress; cut after it: {r:#}");
    let assistant: Vec<&Value> =
        r["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").collect();
    assert!(assistant[0]["tool_calls"][0]["function"]["arguments"].as_str().unwrap().contains("draft"));
    // The continuations really replayed the recorded turns before asking the policy: from turn 3
    // on, the draft was written and then deleted before the policy's first continuation call.
    let continued = seen.lock().unwrap().iter().filter(|q| q["model"] == "continuation").count();
    let evaluated = curve.iter().filter(|v| !v.is_null()).count();
    assert!(continued >= 2 * evaluated, "{continued} continuation calls for {evaluated} evaluated turns");
}
