//! Orchard's tasks as OpenEnv environments, driven by OpenEnv's own clients (`openenv-core`'s
//! `GenericEnvClient` and `MCPToolClient`, in the Python 3.12 venv): a session over a dataset,
//! episodes reset onto fresh sandboxes, the task's tools called, the grader's reward at submit or
//! at the step limit, and a wrong answer rewarded 0.

use std::path::Path;

use orchard_tests::{Server, ServerOptions};
use serde_json::Value;

const KEY: &str = "openenv-key-1234";
const OTHER_KEY: &str = "other-tenant-key-5678";

#[tokio::test(flavor = "multi_thread")]
async fn openenvs_clients_run_episodes_of_orchard_tasks() {
    let Some(python) = orchard_tests::py312_tool("python") else { return };
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("examples/tasks");
    let server = Server::start_with(ServerOptions {
        api_keys: Some(format!("trainer:{KEY},other:{OTHER_KEY}")),
        extra_args: vec![
            "--dataset".into(),
            format!("examples={}", examples.display()),
            "--tenant-quota".into(),
            "trainer:sandboxes=1".into(),
        ],
        ..Default::default()
    })
    .await
    .with_key(KEY);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/openenv/episodes.py");
    let out = tokio::process::Command::new(python).arg(&script).arg(&server.url).arg(KEY).output().await.unwrap();
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    let got: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert!(got["instruction"].as_str().unwrap().contains("/workspace/hello.txt"), "{got:#}");
    assert!(got["tools"].as_array().unwrap().iter().any(|t| t == "bash"), "{got:#}");
    assert_eq!(got["call_done"], false);
    assert_eq!(got["missing"], "tool_not_found");
    assert_eq!(got["right"], serde_json::json!([1.0, true]), "{got:#}");
    // Tool calls made (the unknown tool was not one).
    assert_eq!(got["state"]["step_count"], 1, "{got:#}");
    assert_eq!(got["wrong"], serde_json::json!([0.0, true]), "{got:#}");
    // Three calls reach max_steps = 3: ended and graded (the file was never written: 0).
    assert_eq!(got["limit"], serde_json::json!([0.0, true]), "{got:#}");
    assert_eq!(got["mcp_call"].as_str().unwrap().trim_end(), "exit code: 0\nstdout:\nfrom-mcp", "{got:#}");
    assert_eq!(got["unknown_token"], 404);
    let refused = got["second_at_once"].as_str().unwrap();
    assert!(refused.contains("CAPACITY_REACHED") && refused.contains("quota"), "{refused}");
    assert_eq!(got["after_submit"], "hello-file", "a finished episode gives its quota back");
    // The first session's three episodes are the rollouts of its job, with their rewards and
    // trajectories, as any evaluation's: its page and export show them.
    let eval_id = got["eval_ids"][0].as_str().unwrap();
    let job: Value = server.call(reqwest::Method::GET, &format!("/v1/evals/{eval_id}"), None).await.1;
    let counts = &job["counts"];
    assert_eq!((counts["done"].as_u64(), counts["passed"].as_u64()), (Some(3), Some(1)), "{job:#}");
    assert_eq!(job["status"], "done", "{job:#}");
    let rollouts: Value = server.call(reqwest::Method::GET, &format!("/v1/evals/{eval_id}/rollouts"), None).await.1;
    let list = rollouts["rollouts"].as_array().unwrap_or_else(|| panic!("{rollouts:#}"));
    let rewards: Vec<Option<f64>> = list.iter().map(|r| r["reward"].as_f64()).collect();
    assert_eq!(rewards, [Some(1.0), Some(0.0), Some(0.0)], "{rollouts:#}");
    assert!(list.iter().all(|r| r["harness"] == "openenv"), "{rollouts:#}");
    let first = list[0]["rollout_id"].as_str().unwrap();
    let one: Value = server.call(reqwest::Method::GET, &format!("/v1/evals/{eval_id}/rollouts/{first}"), None).await.1;
    assert!(one.to_string().contains("echo 'Hello, Orchard!' > /workspace/hello.txt"), "the client's call: {one:#}");
    let export =
        server.request(reqwest::Method::GET, &format!("/v1/evals/{eval_id}/export?format=atif")).send().await.unwrap();
    assert_eq!(export.status(), 200);
    assert_eq!(export.text().await.unwrap().lines().count(), 3, "one ATIF record per episode");
    // Another tenant's key learns nothing of it.
    let other = server
        .http
        .get(format!("{}/v1/evals/{eval_id}", server.url))
        .header("X-API-Key", OTHER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    // What a tenant sends is bounded and checked, and a refusal names the field, never a path of
    // the server's (the registered dataset's folder, here).
    let examples_dir = examples.display().to_string();
    for (body, status, says) in [
        (serde_json::json!({"tasks": {"dataset": "examples"}, "grader": "script", "max_steps": 0}), 422, "max_steps"),
        (serde_json::json!({"tasks": {"dataset": "examples"}, "grader": "script", "max_stpes": 3}), 400, "max_stpes"),
        (
            serde_json::json!({"tasks": {"dataset": "examples"}, "grader": "script", "task_ids": ["../etc"]}),
            422,
            "task_ids",
        ),
        (serde_json::json!({"tasks": {"dataset": "someone-elses"}, "grader": "script"}), 422, "someone-elses"),
        (serde_json::json!({"tasks": {"dir": "/etc"}, "grader": "script"}), 422, "tasks"),
    ] {
        let resp = server.request(reqwest::Method::POST, "/v1/openenv/sessions").json(&body).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{body}");
        let text = resp.text().await.unwrap();
        assert!(text.contains(says), "{body}: {text}");
        assert!(!text.contains(&examples_dir) && !text.contains("/work/"), "{body}: {text}");
    }
    // Without a key, no session is opened.
    let anonymous = server
        .http
        .post(format!("{}/v1/openenv/sessions", server.url))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);

    // Every episode's sandbox is gone (the last MCP one when its connection closed).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let list: Value = server.request(reqwest::Method::GET, "/v1/sandboxes").send().await.unwrap().json().await.unwrap();
    assert_eq!(list["sandboxes"].as_array().unwrap().len(), 0, "{list}");
}

/// A multi-step task played step by step (each submission grades its step by its own tests and
/// opens the next; a `min_reward` gate ends the task; the task's reward at the end), and a task
/// graded in a separate verifier (the answer carried, a reward the agent forged not), through
/// OpenEnv's own client; the job's rollouts say how each was graded.
#[tokio::test(flavor = "multi_thread")]
async fn openenv_plays_multi_step_tasks_step_by_step_and_grades_apart_where_tasks_say() {
    let Some(python) = orchard_tests::py312_tool("python") else { return };
    let data = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(fixtures.join("multi-step/counter"))
        .arg(data.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let apart = data.path().join("apart");
    std::fs::create_dir_all(apart.join("tests")).unwrap();
    std::fs::write(apart.join("instruction.md"), "Write the answer to /workspace/answer.txt.").unwrap();
    std::fs::write(
        apart.join("task.toml"),
        "[environment]\nworkdir = \"/workspace\"\n[verifier]\ntimeout_sec = 30\nenvironment_mode = \"separate\"\n\
         artifacts = [\"/workspace/answer.txt\"]\n",
    )
    .unwrap();
    std::fs::write(
        apart.join("tests/test.sh"),
        "#!/bin/bash\nmkdir -p /logs/verifier\n[ \"$(cat /workspace/answer.txt 2>/dev/null)\" = 42 ] && r=1 || r=0\n\
         [ -e /logs/verifier/reward.txt ] || echo $r > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let server = Server::start_with(ServerOptions {
        api_keys: Some(format!("trainer:{KEY}")),
        extra_args: vec!["--dataset".into(), format!("steps={}", data.path().display())],
        ..Default::default()
    })
    .await
    .with_key(KEY);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/openenv/steps.py");
    let out = tokio::process::Command::new(python).arg(&script).arg(&server.url).arg(KEY).output().await.unwrap();
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    let got: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(
        got["first"],
        serde_json::json!({"instruction": "Write 1 to /workspace/count.\n", "step": "one", "steps": ["one", "two"]}),
        "{got:#}"
    );
    let between = &got["between"];
    assert_eq!(
        (between["done"].as_bool(), between["reward"].as_f64(), between["graded_step"].as_str()),
        (Some(false), None, Some("one")),
        "the task's reward comes once, at the end: {got:#}"
    );
    assert_eq!((between["step_reward"].as_f64(), between["step"].as_str()), (Some(1.0), Some("two")), "{got:#}");
    assert!(between["instruction"].as_str().unwrap().starts_with("Append 2"), "{got:#}");
    assert_eq!(got["counter"], serde_json::json!([1.0, true]), "{got:#}");
    assert_eq!(got["gated"], serde_json::json!([0.0, true]), "{got:#}");
    assert_eq!(got["apart"], serde_json::json!([1.0, true]), "{got:#}");
    assert_eq!(got["forged"], serde_json::json!([0.0, true]), "{got:#}");

    // The rollouts: the counter's steps on record, the gate's reason, the separate verifier.
    let eval_id = got["eval_id"].as_str().unwrap();
    let rollouts: Value = server.call(reqwest::Method::GET, &format!("/v1/evals/{eval_id}/rollouts"), None).await.1;
    let list = rollouts["rollouts"].as_array().unwrap_or_else(|| panic!("{rollouts:#}"));
    assert_eq!(list.len(), 4, "{rollouts:#}");
    let full = |i: usize| {
        let id = list[i]["rollout_id"].as_str().unwrap().to_string();
        let server = &server;
        async move { server.call(reqwest::Method::GET, &format!("/v1/evals/{eval_id}/rollouts/{id}"), None).await.1 }
    };
    let counter = full(0).await;
    let steps: Vec<(String, f64)> = counter["result"]["steps"]
        .as_array()
        .or(counter["steps"].as_array())
        .unwrap_or_else(|| panic!("{counter:#}"))
        .iter()
        .map(|s| (s["name"].as_str().unwrap().to_string(), s["reward"].as_f64().unwrap_or(-1.0)))
        .collect();
    assert_eq!(steps, [("one".to_string(), 1.0), ("two".to_string(), 1.0)], "{counter:#}");
    let gated = full(1).await.to_string();
    assert!(gated.contains("is below its min_reward"), "{gated}");
    let apart = full(2).await.to_string();
    assert!(apart.contains("\"environment\":\"separate\""), "{apart}");
    // Every sandbox is gone, the verifiers' too.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let list: Value = server.request(reqwest::Method::GET, "/v1/sandboxes").send().await.unwrap().json().await.unwrap();
    assert_eq!(list["sandboxes"].as_array().unwrap().len(), 0, "{list}");
}
