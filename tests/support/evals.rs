//! Shared pieces of the evaluation tests: `orchard eval` runs, task folders, and an
//! OpenAI-compatible endpoint that plays back a script (the one thing that cannot run here).

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::orchard_with_env;

/// The shipped example tasks.
pub fn examples() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("examples/tasks").display().to_string()
}

/// Reads a JSON file, naming it when it is missing.
pub fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// Every rollout record of a run's output directory, by task id.
pub fn rollouts(out: &Path) -> Vec<Value> {
    let mut all: Vec<Value> =
        std::fs::read_dir(out.join("rollouts")).unwrap().map(|e| read_json(&e.unwrap().path())).collect();
    all.sort_by(|a, b| a["task_id"].as_str().cmp(&b["task_id"].as_str()));
    all
}

/// Runs `orchard eval ARGS` into fresh output and state directories; returns the summary,
/// the output directory and stdout.
pub fn eval(args: &[&str]) -> (Value, tempfile::TempDir, String) {
    eval_with_env(args, &[])
}

/// [`eval`] of a folder of tasks by their own solutions: the oracle harness (granted the
/// solution) with the shell adapter, graded by the script grader.
pub fn eval_oracle(tasks: &str) -> (Value, tempfile::TempDir, String) {
    eval(&[tasks, "--harness", "oracle", "--tools", "shell", "--grader", "script", "--grant", "solution"])
}

/// [`eval`] on a blocking thread (a test's mock model lives on the test's own runtime).
pub async fn eval_async(args: Vec<String>) -> (Value, tempfile::TempDir, String) {
    tokio::task::spawn_blocking(move || eval(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap()
}

/// Owned arguments for [`eval_async`].
pub fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// [`eval`] with extra environment variables.
pub fn eval_with_env(args: &[&str], env: &[(&str, &str)]) -> (Value, tempfile::TempDir, String) {
    let out = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let mut full = vec!["eval"];
    full.extend_from_slice(args);
    let out_s = out.path().display().to_string();
    let state_s = state.path().display().to_string();
    full.extend_from_slice(&["--out", &out_s, "--state-dir", &state_s]);
    let (code, stdout, stderr) = orchard_with_env(&full, env);
    assert_eq!(code, 0, "orchard eval failed:\n{stdout}\n{stderr}");
    (read_json(&out.path().join("summary.json")), out, stdout)
}

/// A task folder with `[metadata]` keys (read by the fixture harness) and a test.sh body.
pub fn write_task(root: &Path, name: &str, metadata: &str, test: &str) {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("tests")).unwrap();
    std::fs::write(dir.join("instruction.md"), "fixture task").unwrap();
    std::fs::write(
        dir.join("task.toml"),
        format!("[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 30\n[metadata]\n{metadata}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("tests/test.sh"), test).unwrap();
}

/// An OpenAI-compatible endpoint that plays back a script, with a 429 and a 500 on the way.
pub async fn mock_model(script: Vec<(u16, Value)>) -> (String, Arc<Mutex<Vec<Value>>>) {
    let script = Mutex::new(script.into_iter());
    mock_model_with(move |_| script.lock().unwrap().next().unwrap_or((500, json!({"error": "script exhausted"})))).await
}

/// An OpenAI-compatible endpoint whose reply is a function of the request: for rollouts that run
/// at once, where no fixed order of turns exists.
pub async fn mock_model_with(
    reply: impl Fn(&Value) -> (u16, Value) + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let reply = Arc::new(reply);
    let seen2 = seen.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let (seen, reply) = (seen2.clone(), reply.clone());
            async move {
                let (status, answer) = reply(&body);
                seen.lock().unwrap().push(body);
                let mut response = axum::response::IntoResponse::into_response((
                    axum::http::StatusCode::from_u16(status).unwrap(),
                    axum::Json(answer),
                ));
                response.headers_mut().insert("retry-after", axum::http::HeaderValue::from_static("0"));
                response
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// One chat-completion reply.
pub fn completion(message: Value, finish: &str, tokens: (u32, u32)) -> (u16, Value) {
    (
        200,
        json!({
            "model": "mock-1",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": tokens.0, "completion_tokens": tokens.1, "total_tokens": tokens.0 + tokens.1},
        }),
    )
}

/// Every line is valid against `tests/schemas/SCHEMA`, and the schema refuses an unknown field.
pub fn check_against_schema(lines: &[Value], schema: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas").join(schema);
    let validator = jsonschema::validator_for(&read_json(&path)).unwrap();
    for line in lines {
        let errors: Vec<String> = validator.iter_errors(line).map(|e| format!("{e} at {}", e.instance_path)).collect();
        assert!(errors.is_empty(), "{schema}: {errors:#?}\n{line:#}");
    }
    // The schema has teeth: the same record with an unknown field is refused.
    let mut broken = lines[0].clone();
    broken["unexpected"] = json!(1);
    assert!(!validator.is_valid(&broken), "{schema} accepts anything");
}

/// `orchard export RUN EXTRA…` into a file of the run; its JSONL lines.
pub fn export(run: &Path, extra: &[&str]) -> Vec<Value> {
    let file = run.join(format!("export-{}.jsonl", extra.join("_").replace(['-', '.'], "")));
    let mut list = vec!["export", run.to_str().unwrap()];
    list.extend(extra);
    list.extend(["--out", file.to_str().unwrap()]);
    let (code, _, stderr) = crate::orchard(&list);
    assert_eq!(code, 0, "{stderr}");
    std::fs::read_to_string(&file).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}
