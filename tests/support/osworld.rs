//! OSWorld's own `DesktopEnv` driven by the fixture script (`fixtures/desktop/osworld_env.py`)
//! against a server: the domain tests run it on local sandboxes, the Kubernetes tests on pods.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::Server;

/// Runs the fixture's OSWorld tasks in `mode` (`act` or `idle`) with `python` (the Python 3.12
/// venv's) against `server`, `env` added; its JSON line, and all it printed (for messages).
pub async fn run_fixture_tasks(python: &Path, server: &Server, mode: &str, env: &[(&str, &str)]) -> (Value, String) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/desktop");
    let cache = tempfile::tempdir().unwrap();
    let run = tokio::process::Command::new(python)
        .arg(fixtures.join("osworld_env.py"))
        .arg(fixtures.join("osworld"))
        .arg(cache.path())
        .arg(mode)
        .env("ORCHARD_URL", &server.url)
        .envs(env.iter().copied())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(400), run).await.expect("the tasks took over 400 s").unwrap();
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}\n{}", server.log());
    let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_string();
    let got = serde_json::from_str(&last).unwrap_or_else(|e| panic!("{e}: {said}"));
    (got, said)
}
