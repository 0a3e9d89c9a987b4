//! Orchard as Inspect AI's sandbox: the real `inspect eval` (PyPI `inspect-ai`, in the Python 3.12
//! venv `cargo xtask setup` makes) runs a task declaring `sandbox="orchard"` — found through the
//! Python client's `inspect_ai` entry point — with Inspect's `mockllm` model; the solver writes the
//! model's word into the sample's sandbox and the scorer reads it back from there.

use std::path::Path;

use orchard_tests::{Server, ServerOptions};
use serde_json::Value;

const KEY: &str = "inspect-key-1234";

#[tokio::test(flavor = "multi_thread")]
async fn inspect_runs_each_sample_in_its_own_orchard_sandbox() {
    let Some(inspect) = orchard_tests::py312_tool("inspect") else { return };
    let server = Server::start_with(ServerOptions { api_keys: Some(format!("inspect:{KEY}")), ..Default::default() })
        .await
        .with_key(KEY);
    // Inspect globs the task's path: it is given relative, from its folder.
    let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/inspect");
    let logs = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(inspect)
        .args(["eval", "orchard_files.py"])
        .current_dir(&folder)
        .args(["--log-format", "json", "--display", "plain", "--max-samples", "1", "--log-dir"])
        .arg(logs.path())
        .env("ORCHARD_URL", &server.url)
        .env("ORCHARD_API_KEY", KEY)
        .output()
        .await
        .unwrap();
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "inspect eval failed:\n{said}");
    let log = std::fs::read_dir(logs.path()).unwrap().next().unwrap().unwrap().path();
    let log: Value = serde_json::from_str(&std::fs::read_to_string(log).unwrap()).unwrap();
    assert_eq!(log["status"], "success", "{said}\n{:#}", log["error"]);
    let scores: Vec<(String, i64, String, String)> = log["samples"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let score = &s["scores"]["the_file_says_the_target"];
            (
                s["id"].as_str().unwrap().to_string(),
                score["value"].as_i64().unwrap(),
                score["answer"].as_str().unwrap().to_string(),
                score["explanation"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    // The file each sample's solver wrote, read back by its scorer, relative to the workdir.
    assert_eq!(
        scores,
        [
            ("right".into(), 1, "orchard".into(), "/workspace".into()),
            ("wrong".into(), 0, "apple".into(), "/workspace".into()),
        ]
    );
    // Each sample's sandbox is gone when it ends.
    let list: Value = server.request(reqwest::Method::GET, "/v1/sandboxes").send().await.unwrap().json().await.unwrap();
    assert_eq!(list["sandboxes"].as_array().unwrap().len(), 0, "{list}");
}
