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
