//! The whole evaluation service — API, job engine (scheduler and runner), real plugins (the
//! oracle harness, the shell adapter, the script grader), rollout groups and the web UI — in
//! process on the fake sandbox backend: no root, no namespaces. The environment is scripted at
//! the wire of the sandbox (`orchard-sandbox-fake`'s exec handler plays `solve.sh` and
//! `test.sh`); everything above it is the real thing.

use std::sync::Arc;
use std::time::Duration;

use orchard_sandbox::Backend;
use orchard_sandbox_fake::{ExecCall, FakeBackend, exited};
use serde_json::{Value, json};

/// The two commands the tasks' scripts stand for: the solution writes its word to
/// `/workspace/answer`; the test rewards `yes`.
fn environment(call: &mut ExecCall<'_>) -> orchard_protocol::ExecResult {
    let line = call.line();
    if line.contains("/solution/solve.sh") {
        if call.fs.read("/solution/solve.sh").is_ok_and(|b| b.starts_with(b"# panic")) {
            panic!("the environment's exec handler panics for this task, as a host bug would");
        }
        let script = call.fs.read("/solution/solve.sh").map(|b| String::from_utf8_lossy(&b).into_owned());
        let Some(word) =
            script.ok().and_then(|s| s.split_whitespace().skip_while(|w| *w != "echo").nth(1).map(str::to_string))
        else {
            return exited(127, "", "solve.sh: not the fixture's form");
        };
        call.fs.write("/workspace/answer", word.into_bytes().into(), None, true).unwrap();
        return exited(0, "", "");
    }
    if line.contains("/tests/test.sh") {
        let answer = call.fs.read("/workspace/answer").map(|b| String::from_utf8_lossy(&b).into_owned());
        let reward = if answer.as_deref() == Ok("yes") { "1" } else { "0" };
        call.fs.write("/logs/verifier/reward.txt", reward.as_bytes().to_vec().into(), None, true).unwrap();
        return exited(0, "", "");
    }
    orchard_sandbox_fake::exec::builtin(call)
}

fn tasks() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, word) in [("says-yes", "yes"), ("says-no", "no")] {
        add_task(
            dir.path(),
            name,
            &format!("echo {word} > /workspace/answer\n"),
            "[ \"$(cat /workspace/answer)\" = yes ] && echo 1 > /logs/verifier/reward.txt\n",
        );
    }
    dir
}

/// A task folder `name` under `root` asking for `yes`, with its solution and test scripts.
fn add_task(root: &std::path::Path, name: &str, solve: &str, test: &str) {
    let t = root.join(name);
    std::fs::create_dir_all(t.join("solution")).unwrap();
    std::fs::create_dir_all(t.join("tests")).unwrap();
    std::fs::write(t.join("instruction.md"), "Say yes.").unwrap();
    std::fs::write(t.join("task.toml"), "[environment]\nworkdir = \"/workspace\"\n").unwrap();
    std::fs::write(t.join("solution/solve.sh"), solve).unwrap();
    std::fs::write(t.join("tests/test.sh"), test).unwrap();
}

struct Service {
    url: String,
    http: reqwest::Client,
    backend: Arc<FakeBackend>,
    _state: tempfile::TempDir,
}

impl Service {
    /// GETs `path` and reads its JSON.
    async fn get(&self, path: &str) -> Value {
        self.http.get(format!("{}{path}", self.url)).send().await.unwrap().json().await.unwrap()
    }

    /// Submits the job `spec` and waits for it to be done (at most `limit`): its id and view.
    async fn run_job(&self, spec: &Value, limit: Duration) -> (String, Value) {
        let resp = self.http.post(format!("{}/v1/evals", self.url)).json(spec).send().await.unwrap();
        let status = resp.status();
        let made: Value = resp.json().await.unwrap();
        assert!(status.is_success(), "{made}");
        let id = made["id"].as_str().unwrap().to_string();
        let deadline = std::time::Instant::now() + limit;
        loop {
            let view = self.get(&format!("/v1/evals/{id}")).await;
            if view["status"] == "done" {
                return (id, view);
            }
            assert!(std::time::Instant::now() < deadline, "the job is not done after {limit:?}: {view}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn start(tasks: &std::path::Path) -> Service {
    let state = tempfile::tempdir().unwrap();
    let backend = Arc::new(FakeBackend::new().with_exec(environment));
    let runtime = Arc::new(
        orchard_runtime::Runtime::new(orchard_runtime::RuntimeConfig {
            cache_dir: Some(orchard_tests::plugin_dir().parent().unwrap().join("test-plugin-cache")),
            ..Default::default()
        })
        .unwrap(),
    );
    let registry = Arc::new(orchard_runtime::Registry::new(runtime.clone()));
    registry.defer_dir(&orchard_tests::plugin_dir()).unwrap();
    let store =
        orchard_store::Store::open(&format!("sqlite:{}", state.path().join("orchard.db").display())).await.unwrap();
    let admission = Arc::new(orchard_admission::Admission::default());
    let env = Arc::new(orchard_scheduler::Env {
        store,
        registry: registry.clone(),
        datasets_dir: state.path().join("datasets"),
        datasets: [("fake".to_string(), tasks.to_path_buf())].into(),
        local_secrets: Default::default(),
        admission: Some(admission.clone()),
        upload_limits: Default::default(),
        egress: orchard_egress::Policy::open(),
        sandbox_defaults: Default::default(),
        browser: orchard_eval::BrowserPlacement {
            in_sandbox: true,
            chromium: "chromium".into(),
            call_timeout: Duration::from_secs(30),
        },
    });
    let runner = orchard_scheduler::Runner::new(
        env.clone(),
        backend.clone(),
        runtime,
        orchard_scheduler::RunnerConfig {
            owner: "fake/1".into(),
            predecessors: None,
            sandbox_tenant: "orchard-eval.fake".into(),
            capacity: 4,
            lease: Duration::from_secs(60),
            tenant_quota: None,
        },
    );
    let service = Arc::new(orchard_evals_api::EvalService { env, runner: runner.clone(), quotas: Default::default() });
    let state_ = orchard_server::AppState::new(backend.clone(), Default::default(), admission, Some(registry))
        .with_evals(service);
    tokio::spawn(async move { runner.run(std::future::pending()).await });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = orchard_server::router(state_);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Service { url, http: orchard_tests::http_client(), backend, _state: state }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_eval_a_group_and_their_pages_run_on_the_fake_backend() {
    let tasks = tasks();
    let svc = start(tasks.path()).await;
    let spec = json!({"tasks": {"dataset": "fake"}, "harnesses": ["oracle"], "tools": ["shell"], "grader": "script",
        "grants": ["solution"], "attempts": 1});
    let (id, view) = svc.run_job(&spec, Duration::from_secs(300)).await;
    // The oracle's `yes` passes, its `no` fails: graded by the real script grader.
    assert_eq!(
        (view["counts"]["done"].as_i64(), view["counts"]["passed"].as_i64(), view["counts"]["errored"].as_i64()),
        (Some(2), Some(1), Some(0)),
        "{view}"
    );

    // The web UI's page of the job names both tasks (a server without keys: no sign-in).
    let page = svc.http.get(format!("{}/ui/evals/{id}", svc.url)).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("says-yes") && html.contains("says-no"), "{html}");

    // A rollout group of 2 on the same engine: both rollouts, then the group, then the end.
    let group = json!({"tasks": {"dataset": "fake"}, "task_ids": ["says-yes"], "harness": "oracle", "tools": ["shell"],
        "grader": "script", "grants": ["solution"], "size": 2});
    let text = svc.http.post(format!("{}/v1/groups", svc.url)).json(&group).send().await.unwrap().text().await.unwrap();
    let records: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let kinds: Vec<&str> = records.iter().map(|r| r["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "rollout").count(), 2, "{text}");
    let group = records.iter().find(|r| r["type"] == "group").unwrap_or_else(|| panic!("{text}"));
    assert_eq!(group["rewards"], json!([1.0, 1.0]), "{group}");
    assert_eq!(kinds.last(), Some(&"end"));

    // Every rollout's sandbox was made on the fake backend and is gone.
    assert!(svc.backend.created() >= 4, "{}", svc.backend.created());
    assert!(svc.backend.list().await.is_empty());
}

/// A panic while a rollout runs (a bug in the host, played here by the sandbox's exec handler)
/// ends that rollout as the host's error and frees its slot: the job finishes, the others are
/// graded, and no sandbox is left. Before, the panicked rollout kept its slot and its lease
/// (renewed with its runner's) and the job never finished.
#[tokio::test(flavor = "multi_thread")]
async fn a_rollout_whose_task_panics_ends_as_the_hosts_error_and_the_job_finishes() {
    let tasks = tasks();
    add_task(tasks.path(), "host-bug", "# panic\necho yes > /workspace/answer\n", "exit 0\n");
    let svc = start(tasks.path()).await;
    // Two attempts each with one slot per tenant's share: the panicked rollout's slot must come
    // back for the rest to run.
    let spec = json!({"tasks": {"dataset": "fake"}, "harnesses": ["oracle"], "tools": ["shell"], "grader": "script",
        "grants": ["solution"], "attempts": 2, "concurrency": 1});
    let (id, view) = svc.run_job(&spec, Duration::from_secs(120)).await;
    assert_eq!(
        (view["counts"]["done"].as_i64(), view["counts"]["passed"].as_i64(), view["counts"]["errored"].as_i64()),
        (Some(6), Some(2), Some(2)),
        "{view}"
    );
    let page = svc.get(&format!("/v1/evals/{id}/rollouts?task=host-bug")).await;
    let rows = page["rollouts"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{page}");
    for row in rows {
        assert_eq!(row["status"], "error", "{row}");
        let error = row["error"].as_str().unwrap_or_default();
        assert!(error.contains("a bug in Orchard") && error.contains("panics for this task"), "{row}");
        let rid = row["rollout_id"].as_str().unwrap();
        let one = svc.get(&format!("/v1/evals/{id}/rollouts/{rid}")).await;
        assert_eq!(one["result"]["failed_in"], "host", "{one}");
    }
    // The panicked rollouts' sandboxes were deleted with the rest.
    assert!(svc.backend.list().await.is_empty(), "{:?}", svc.backend.list().await);
}
