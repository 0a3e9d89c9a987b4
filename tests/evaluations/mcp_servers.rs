//! The MCP servers a task declares (`[[environment.mcp_servers]]`) are tools for every harness,
//! through the shipped `mcp` adapter: a stdio server started in the sandbox for each call, a
//! streamable-HTTP one (the task's own service) reached from the sandbox with its session id.
//! The oracle replays the solution's calls; the task's test reads what the servers were asked.

use serde_json::Value;

#[test]
fn a_tasks_stdio_and_http_mcp_servers_are_its_harness_tools() {
    let tasks = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/mcp").display().to_string();
    let (summary, results, _) = orchard_tests::evals::eval_oracle(&tasks);
    assert_eq!(summary["mean_reward"], 1.0, "{summary:#}");
    let line = std::fs::read_to_string(results.path().join("trajectories.jsonl")).unwrap();
    let rollout: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    // The adapter joined the run's tools for this task.
    assert!(
        rollout["tools"].as_array().unwrap().iter().any(|t| t.as_str().unwrap().starts_with("mcp@")),
        "{rollout:#}"
    );
    let calls: Vec<(String, String, String)> = rollout["trajectory"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["type"] == "tool_call")
        .map(|s| {
            (
                s["adapter"].as_str().unwrap().split('@').next().unwrap().to_string(),
                s["call"]["name"].as_str().unwrap().to_string(),
                s["output"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            ("mcp".to_string(), "calc__add".to_string(), "5".to_string()),
            ("mcp".to_string(), "notes__add_note".to_string(), "noted: 2 + 3 = 5".to_string()),
        ]
    );
}
