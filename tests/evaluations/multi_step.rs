//! Multi-step tasks (Harbor's `[[steps]]`) under `orchard eval`: one sandbox, the harness run per
//! step with the step's instruction and solution, each step graded by its own tests after its
//! `workdir/setup.sh`; `min_reward` ends the task early; `mean` and `final` rewards. The same
//! folders run under Harbor's own runner in `harbor_environment.rs`, with the same rewards.

use serde_json::Value;

fn fixtures() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/multi-step").display().to_string()
}

fn rollout(results: &std::path::Path, task: &str) -> Value {
    let path = std::fs::read_dir(results.join("rollouts"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with(&format!("{task}__")))
        .unwrap_or_else(|| panic!("no rollout of {task}"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn each_step_runs_and_is_graded_in_turn_and_a_failed_gate_stops_the_task() {
    let (summary, results, _) = orchard_tests::evals::eval_oracle(&fixtures());
    assert_eq!(summary["errors"], 0, "{summary:#}");

    // Both steps ran: the second after its setup.sh, with the first step's tests gone.
    let counter = rollout(results.path(), "counter");
    let steps: Vec<(&str, f64)> = counter["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["reward"].as_f64().unwrap()))
        .collect();
    assert_eq!(steps, [("one", 1.0), ("two", 1.0)], "{counter:#}");
    assert_eq!(counter["reward"], 1.0);
    assert!(counter["verdict"]["explanation"].as_str().unwrap().contains("mean over the graded steps (2 of 2"));

    // The first step misses its min_reward: the second never runs, and `final` is the first's.
    let gated = rollout(results.path(), "gated");
    assert_eq!(gated["steps"].as_array().unwrap().len(), 1, "{gated:#}");
    assert_eq!(gated["reward"], 0.0);
    assert!(gated["stopped"].as_str().unwrap().contains("below its min_reward 1"), "{gated:#}");
    // The trajectory holds the one step's solution, never the second's.
    let trajectory = std::fs::read_to_string(results.path().join("trajectories.jsonl")).unwrap();
    assert!(!trajectory.contains("/workspace/done"), "the second step ran");
}
