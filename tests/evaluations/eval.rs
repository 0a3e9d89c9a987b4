//! `orchard eval` end to end: real sandboxes, real plugins, a model played back at the wire.

use std::path::Path;

use orchard_tests::evals::{completion, eval, examples, mock_model, read_json, write_task};
use serde_json::{Value, json};

#[test]
fn the_oracle_passes_every_example_and_a_do_nothing_harness_passes_none() {
    let tasks = std::fs::read_dir(examples()).unwrap().count();
    let (summary, out, stdout) = eval(&[
        &examples(),
        "--harness",
        "oracle",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--grant",
        "solution",
        "--attempts",
        "2",
    ]);
    assert_eq!(summary["rollouts"], tasks * 2);
    assert_eq!(summary["passed"], tasks * 2, "{summary:#}");
    assert_eq!(summary["pass_at_k"], 1.0);
    assert_eq!(summary["pass_hat_k"], 1.0, "every attempt of every task passed");
    assert!(stdout.contains("pass@2") && stdout.contains("pass^2") && stdout.contains("ALL"), "{stdout}");
    assert_eq!(std::fs::read_dir(out.path().join("rollouts")).unwrap().count(), tasks * 2);
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), tasks * 2);
    let first: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let steps = first["trajectory"]["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["type"] == "tool_call" && s["call"]["name"] == "bash"), "{first:#}");
    assert!(steps.iter().any(|s| s["type"] == "sandbox" && s["plugin"] == "script@0.1.0"), "{first:#}");

    // Without the grant, the solution never reaches the sandbox: the oracle has nothing to run.
    let (summary, _, _) = eval(&[&examples(), "--harness", "oracle", "--tools", "shell", "--grader", "script"]);
    assert_eq!(summary["passed"], 0, "{summary:#}");

    // A harness that does nothing is graded, and fails: a 0, not an unknown.
    let fixtures = orchard_tests::test_plugin_dir();
    let harness = fixtures.join("test-harness.wasm").display().to_string();
    let (summary, _, _) = eval(&[
        &examples(),
        "--harness",
        &harness,
        "--tools",
        "shell",
        "--grader",
        "script",
        "--config",
        r#"{"mode":"nothing"}"#,
    ]);
    assert_eq!(
        (summary["passed"].as_u64(), summary["graded"].as_u64(), summary["unknown"].as_u64()),
        (Some(0), Some(tasks as u64), Some(0))
    );
    assert_eq!(summary["mean_reward"], 0.0);
}

#[test]
fn misbehaving_plugins_fail_only_their_own_rollouts_and_unknowns_are_not_zeros() {
    let root = tempfile::tempdir().unwrap();
    let pass = "echo 1 > /logs/verifier/reward.txt";
    for i in 0..50 {
        write_task(root.path(), &format!("ok-{i:02}"), "mode = \"answer\"\nanswer = \"fine\"", pass);
    }
    write_task(root.path(), "runaway-loop", "mode = \"loop\"", pass);
    write_task(root.path(), "runaway-alloc", "mode = \"alloc\"", pass);
    write_task(root.path(), "runaway-trap", "mode = \"trap\"", pass);
    write_task(root.path(), "no-reward", "mode = \"answer\"", "echo the tests forgot to write a reward");
    write_task(root.path(), "bad-reward", "mode = \"answer\"", "echo lots > /logs/verifier/reward.txt");
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let root_s = root.path().display().to_string();
    let (summary, out, _) = eval(&[
        &root_s,
        "--harness",
        &harness,
        "--grader",
        "script",
        "--concurrency",
        "8",
        "--plugin-cpu",
        "2",
        "--plugin-memory",
        "64Mi",
    ]);
    assert_eq!(summary["rollouts"], 55);
    assert_eq!(summary["passed"], 50, "{summary:#}");
    assert_eq!(summary["errors"], 3, "{summary:#}");
    assert_eq!(summary["unknown"], 2, "{summary:#}");
    let rollout = |name: &str| read_json(&out.path().join("rollouts").join(format!("{name}__test-harness__1.json")));
    for (name, kind) in [("runaway-loop", "cpu_budget"), ("runaway-alloc", "memory"), ("runaway-trap", "trap")] {
        let r = rollout(name);
        assert_eq!(r["status"], "error");
        assert_eq!(r["failure"]["kind"], kind, "{r:#}");
        assert_eq!(r["failure"]["call"], "agent.run");
        // Where it failed, typed where it happened: a budget is a limit, a trap the plugin's.
        let class = if kind == "trap" { "plugin" } else { "limit" };
        assert_eq!(r["failed_in"], class, "{r:#}");
        assert!(r["error"].as_str().unwrap().starts_with("plugin test-harness@0.1.0 failed in agent.run"), "{r:#}");
    }
    assert!(rollout("runaway-trap")["error"].as_str().unwrap().contains("the fixture was asked to trap"));
    let unknown = rollout("no-reward");
    assert_eq!(unknown["status"], "unknown");
    assert!(
        unknown["verdict"]["reason"].as_str().unwrap().contains("wrote no /logs/verifier/reward.txt"),
        "{unknown:#}"
    );
    assert!(rollout("bad-reward")["verdict"]["reason"].as_str().unwrap().contains("not a number"));
    // Unknowns are left out of the means, not counted as zeros.
    let task = summary["tasks"].as_array().unwrap().iter().find(|t| t["task_id"] == "no-reward").unwrap().clone();
    assert_eq!(task["mean_reward"], Value::Null);
    assert_eq!(task["pass_at_1"], Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_react_harness_solves_a_task_with_a_model_and_the_trajectory_holds_every_crossing() {
    let write = json!({"role": "assistant", "content": null, "reasoning_content": "I should write the file.",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"echo 'Hello, Orchard!' > /workspace/hello.txt\"}"}}]});
    let check = json!({"role": "assistant", "content": "Checking.",
        "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\": \"/workspace/hello.txt\"}"}},
            {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls /workspace\"}"}}]});
    let done = json!({"role": "assistant", "content": "Done: the file is written."});
    let (url, seen) = mock_model(vec![
        (429, json!({"error": "slow down"})),
        (500, json!({"error": "oops"})),
        completion(write, "tool_calls", (100, 20)),
        completion(check, "tool_calls", (150, 30)),
        completion(done, "stop", (200, 10)),
    ])
    .await;
    let task = Path::new(&examples()).join("hello-file").display().to_string();
    let url2 = url.clone();
    let (summary, out, _) = tokio::task::spawn_blocking(move || {
        eval(&[
            &task,
            "--harness",
            "react",
            "--tools",
            "shell",
            "--grader",
            "script",
            "--model",
            &url2,
            "--model-name",
            "mock-1",
        ])
    })
    .await
    .unwrap();
    assert_eq!(summary["passed"], 1, "{summary:#}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 5, "two failures retried, then three turns");
    let tools: Vec<&str> =
        requests[2]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        ["bash", "bash_session", "background_start", "background_log", "background_signal", "read_file", "write_file"]
    );
    assert_eq!(requests[2]["model"], "mock-1");
    // The reasoning went back to the endpoint with the assistant turn it belongs to.
    let last = requests[4]["messages"].as_array().unwrap();
    assert_eq!(last[2]["reasoning_content"], "I should write the file.");
    assert_eq!(last[3]["tool_call_id"], "c1");
    let answers: Vec<&str> =
        last.iter().filter(|m| m["role"] == "tool").map(|m| m["tool_call_id"].as_str().unwrap()).collect();
    assert_eq!(answers, ["c1", "c2", "c3"], "parallel calls answered in order");
    assert!(last[5]["content"].as_str().unwrap().contains("Hello, Orchard!"));

    let line = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let t: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let t = &t["trajectory"];
    assert_eq!(t["model_calls"], 3);
    assert_eq!(t["tool_calls"], 3);
    assert_eq!(t["usage"]["total_tokens"], 510);
    let steps = t["steps"].as_array().unwrap();
    let model_steps: Vec<&Value> = steps.iter().filter(|s| s["type"] == "model_call").collect();
    assert_eq!(model_steps[0]["attempts"], 3, "the 429 and the 500 were retried");
    assert_eq!(model_steps[0]["response"]["reasoning"], "I should write the file.");
    let tool_steps: Vec<&Value> = steps.iter().filter(|s| s["type"] == "tool_call").collect();
    assert_eq!(tool_steps.len(), 3);
    assert!(tool_steps[1]["output"].as_str().unwrap().contains("Hello, Orchard!"));
    assert_eq!(tool_steps[0]["adapter"], "shell@0.1.0");
    let conversation = t["conversation"].as_array().unwrap();
    assert_eq!(conversation.last().unwrap()["content"][0]["text"], "Done: the file is written.");
    let rollout = read_json(&out.path().join("rollouts/hello-file__react__1.json"));
    assert_eq!(rollout["outcome"]["answer"], "Done: the file is written.");
    assert_eq!(rollout["outcome"]["steps"], 3);
    assert_eq!(rollout["model"], "mock-1");
}

/// `orchard eval` killed with SIGKILL mid-run keeps every finished rollout (durable the moment it
/// finished), and the same command on the same `--out` runs only what had not finished.
#[test]
fn a_killed_eval_resumes_without_redoing_finished_rollouts() {
    let out = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let out_dir = out.path().join("run");
    let args: Vec<String> = [
        "eval",
        &examples(),
        "--harness",
        "oracle",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--grant",
        "solution",
        "--attempts",
        "6",
        "--concurrency",
        "2",
        "--out",
        &out_dir.display().to_string(),
        "--state-dir",
        &state.path().display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let mut child = std::process::Command::new(orchard_tests::orchard_bin())
        .args(&args)
        .env("ORCHARD_AGENT_BIN", orchard_tests::agent_bin())
        .env("ORCHARD_PLUGIN_DIR", orchard_tests::plugin_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let rollouts = out_dir.join("rollouts");
    let done = || std::fs::read_dir(&rollouts).map(|d| d.count()).unwrap_or(0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    // Killed early (at 3 of 30, with room for a slow poll): what is done is whole, the rest not.
    while done() < 3 {
        assert!(std::time::Instant::now() < deadline, "no progress before the kill");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before: std::collections::BTreeMap<String, String> = std::fs::read_dir(&rollouts)
        .unwrap()
        .flatten()
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read_to_string(e.path()).unwrap()))
        .collect();
    assert!(before.len() >= 3 && before.len() < 30, "{} rollouts done at the kill", before.len());

    // Other arguments on the same directory are refused, naming the difference.
    let mut other = args.clone();
    other[11] = "7".into();
    let (code, _, stderr) = orchard_tests::orchard(&other.iter().map(String::as_str).collect::<Vec<_>>());
    assert_ne!(code, 0);
    assert!(stderr.contains("holds a run with other arguments"), "{stderr}");

    let (code, stdout, stderr) = orchard_tests::orchard(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains(&format!("resuming {}", out_dir.display())), "{stderr}");
    assert!(stdout.contains("30 passed of 30 rollouts"), "{stdout}");
    // What had finished was not run again: its result is byte for byte the one written before.
    for (name, content) in &before {
        assert_eq!(&std::fs::read_to_string(rollouts.join(name)).unwrap(), content, "{name} was run again");
    }
    let lines = std::fs::read_to_string(out_dir.join("trajectories.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 30, "one trajectory per rollout, none twice");
}

/// The sandbox's memory limit (cgroup v2 or v1) and its root's size in KiB, as a shell test
/// that rewards 1 when they are `memory` and under `disk_kib`.
fn limits_test(memory: &str, disk_below_kib: u64) -> String {
    format!(
        "mem=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\n\
         disk=$(df -k / | tail -1 | awk '{{print $2}}')\n\
         echo \"memory $mem disk $disk\"\n\
         if [ \"$mem\" = \"{memory}\" ] && [ \"$disk\" -lt {disk_below_kib} ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"
    )
}

#[test]
fn cli_sandboxes_have_the_servers_memory_and_disk_limits_unless_lifted() {
    // `orchard eval`: 2 GiB and a 10 GiB writable layer by default.
    let root = tempfile::tempdir().unwrap();
    write_task(root.path(), "limits", "mode = \"answer\"\nanswer = \"fine\"", &limits_test("2147483648", 11 << 20));
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let root_s = root.path().display().to_string();
    let (summary, _, _) = eval(&[&root_s, "--harness", &harness, "--grader", "script"]);
    assert_eq!(summary["passed"], 1, "default limits: {summary:#}");
    let (summary, _, _) = eval(&[
        &root_s,
        "--harness",
        &harness,
        "--grader",
        "script",
        "--sandbox-memory",
        "1Gi",
        "--sandbox-disk",
        "1Gi",
    ]);
    assert_eq!(summary["passed"], 0, "the flags change them: {summary:#}");

    // `orchard run`: the same defaults, `none` lifts them.
    let state = tempfile::tempdir().unwrap();
    let state_s = state.path().display().to_string();
    let probe = "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes; \
                 df -k / | tail -1 | awk '{print $2}'";
    let (code, out, err) = orchard_tests::orchard(&["run", "--state-dir", &state_s, "--", probe]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "2147483648", "{out}");
    assert!(lines[1].parse::<u64>().unwrap() < 11 << 20, "{out}");
    let (code, out, err) =
        orchard_tests::orchard(&["run", "--state-dir", &state_s, "--memory", "none", "--disk", "none", "--", probe]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(out.lines().next(), Some("2147483648"), "{out}");
    // And it leaves no cgroup group of its state directory's behind (`orchard-` and the first 4
    // bytes of the SHA-256 of the directory's path, somewhere under the hierarchies).
    let instance = {
        use sha2::Digest;
        let canonical = std::fs::canonicalize(state.path()).unwrap();
        format!("orchard-{}", hex::encode(&sha2::Sha256::digest(canonical.as_os_str().as_encoded_bytes())[..4]))
    };
    let found = std::process::Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "5", "-type", "d", "-name", &instance])
        .output()
        .unwrap();
    let found = String::from_utf8_lossy(&found.stdout);
    assert!(found.trim().is_empty(), "orchard run left its instance's cgroup groups: {found}");
}

/// A model endpoint that refuses the harness fails the rollout as the model's failure — typed
/// where it happened, so that trainers and the UI tell it from the environment's.
#[tokio::test(flavor = "multi_thread")]
async fn a_model_endpoints_failure_is_typed_as_the_models() {
    let (url, _) = orchard_tests::evals::mock_model_with(|_| (400, json!({"error": {"message": "bad request"}}))).await;
    let root = tempfile::tempdir().unwrap();
    write_task(root.path(), "any", "", "echo 1 > /logs/verifier/reward.txt");
    let root_s = root.path().display().to_string();
    let (summary, out, _) = orchard_tests::evals::eval_async(orchard_tests::evals::args(&[
        &root_s,
        "--harness",
        "react",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--model",
        &url,
        "--model-name",
        "m",
    ]))
    .await;
    assert_eq!(summary["errors"], 1, "{summary:#}");
    let r = read_json(&out.path().join("rollouts/any__react__1.json"));
    assert_eq!(r["status"], "error", "{r:#}");
    assert_eq!(r["failed_in"], "model", "{r:#}");
}
