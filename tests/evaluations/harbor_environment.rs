//! Orchard as a Harbor environment: the real `harbor run` (PyPI `harbor` 0.26, Python 3.12 venv
//! made by `cargo xtask setup`) runs its own agents and verifier on Orchard sandboxes through
//! `orchard_client.harbor:OrchardEnvironment`, on tasks `harbor tasks init` made; rewards are read
//! from Harbor's own job output. And the other way round: Harbor's own `TaskConfig` reads every
//! task Orchard ships, and Harbor's template task runs under `orchard eval`.

use std::path::{Path, PathBuf};

use orchard_tests::{Server, ServerOptions};
use serde_json::{Value, json};

const KEY: &str = "harbor-key-1234";

/// The venv's `harbor` (`None`: setup made no venv and said why).
fn harbor() -> Option<PathBuf> {
    orchard_tests::py312_tool("harbor")
}

/// A task made by Harbor's own `harbor tasks init`, given our instruction, solution and verifier:
/// the reward is 1 when `/app/answer.txt` holds `orchard`.
fn harbor_task(harbor: &Path, root: &Path, verifier_mode: &str, artifacts: bool) -> PathBuf {
    let out = std::process::Command::new(harbor)
        .args(["tasks", "init", "orchard/hello", "--no-pytest", "--verifier-mode", verifier_mode, "-p"])
        .arg(root)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .unwrap();
    assert!(out.status.success(), "harbor tasks init: {}", String::from_utf8_lossy(&out.stderr));
    let task = root.join("hello");
    std::fs::write(task.join("instruction.md"), "Write the word orchard to /app/answer.txt.\n").unwrap();
    // The word comes from [solution.env], what is checked from [verifier.env]: both honoured.
    std::fs::write(task.join("solution/solve.sh"), "#!/bin/bash\necho \"$WORD\" > /app/answer.txt\n").unwrap();
    std::fs::write(
        task.join("tests/test.sh"),
        "#!/bin/bash\nif [ -n \"$WANT\" ] && [ \"$(cat /app/answer.txt 2>/dev/null)\" = \"$WANT\" ]; then echo 1; \
         else echo 0; fi > /logs/verifier/reward.txt\n",
    )
    .unwrap();
    let mut toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    for (table, line) in [("[solution.env]\n", "WORD = \"orchard\"\n"), ("[verifier.env]\n", "WANT = \"orchard\"\n")] {
        assert!(toml.contains(table), "{toml}");
        toml = toml.replace(table, &format!("{table}{line}"));
    }
    if artifacts {
        assert!(toml.contains("artifacts = []"), "{toml}");
        toml = toml.replace("artifacts = []", "artifacts = [\"/app/answer.txt\"]");
    }
    std::fs::write(task.join("task.toml"), toml).unwrap();
    task
}

/// Runs `harbor run` with the Orchard environment; answers the trial's result (Harbor's own
/// `result.json`) and the job's directory.
async fn harbor_run(harbor: &Path, server: &Server, task: &Path, agent_args: &[&str], jobs: &Path) -> Value {
    let out = tokio::process::Command::new(harbor)
        .arg("run")
        .arg("-p")
        .arg(task)
        .args(agent_args)
        .args(["--env", "orchard_client.harbor:OrchardEnvironment", "--ek"])
        .arg(format!("url={}", server.url))
        .args(["--ek", &format!("api_key={KEY}"), "--yes", "-o"])
        .arg(jobs)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .await
        .unwrap();
    let log = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "harbor run failed:\n{log}");
    let trials: Vec<PathBuf> = std::fs::read_dir(jobs)
        .unwrap()
        .flat_map(|job| std::fs::read_dir(job.unwrap().path()).unwrap())
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("result.json").is_file() && p.join("trial.log").exists())
        .collect();
    assert_eq!(trials.len(), 1, "{trials:?}\n{log}");
    let exception = std::fs::read_to_string(trials[0].join("exception.txt")).unwrap_or_default();
    assert!(exception.is_empty(), "the trial raised:\n{exception}\n{log}");
    serde_json::from_str(&std::fs::read_to_string(trials[0].join("result.json")).unwrap()).unwrap()
}

fn reward(trial: &Value) -> f64 {
    trial["verifier_result"]["rewards"]["reward"].as_f64().unwrap_or_else(|| panic!("no reward in {trial:#}"))
}

async fn sandboxes_left(server: &Server) -> usize {
    let resp = server.request(reqwest::Method::GET, "/v1/sandboxes").send().await.unwrap();
    let list: Value = resp.json().await.unwrap();
    list["sandboxes"].as_array().unwrap_or_else(|| panic!("{list}")).len()
}

#[tokio::test(flavor = "multi_thread")]
async fn harbors_oracle_and_verifier_run_on_orchard_sandboxes() {
    let Some(harbor) = harbor() else { return };
    let server = Server::start_with(ServerOptions { api_keys: Some(format!("harbor:{KEY}")), ..Default::default() })
        .await
        .with_key(KEY);
    let work = tempfile::tempdir().unwrap();

    // Shared verifier: the oracle's answer is graded where it was written.
    let shared = harbor_task(&harbor, &work.path().join("shared"), "shared", false);
    let trial = harbor_run(&harbor, &server, &shared, &["-a", "oracle"], &work.path().join("jobs1")).await;
    assert_eq!(reward(&trial), 1.0, "{trial:#}");

    // A separate verifier gets a fresh sandbox: without artifacts the answer is not there (as
    // with Harbor's Docker environment), with `artifacts` it is carried over.
    let separate = harbor_task(&harbor, &work.path().join("separate"), "separate", false);
    let trial = harbor_run(&harbor, &server, &separate, &["-a", "oracle"], &work.path().join("jobs2")).await;
    assert_eq!(reward(&trial), 0.0, "{trial:#}");
    let carried = harbor_task(&harbor, &work.path().join("carried"), "separate", true);
    let trial = harbor_run(&harbor, &server, &carried, &["-a", "oracle"], &work.path().join("jobs3")).await;
    assert_eq!(reward(&trial), 1.0, "{trial:#}");

    // Every trial's sandboxes are gone when Harbor is done.
    assert_eq!(sandboxes_left(&server).await, 0);
}

/// Terminus-2's replies: the commands it types into tmux, then `task_complete` (asked twice).
fn terminus_reply(keystrokes: &str, done: bool) -> String {
    let commands = if keystrokes.is_empty() { json!([]) } else { json!([{"keystrokes": keystrokes, "duration": 0.5}]) };
    json!({"analysis": "scripted", "plan": "scripted", "commands": commands, "task_complete": done}).to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn harbors_terminus_2_types_into_an_orchard_sandbox_through_tmux() {
    let Some(harbor) = harbor() else { return };
    let server = Server::start_with(ServerOptions { api_keys: Some(format!("harbor:{KEY}")), ..Default::default() })
        .await
        .with_key(KEY);
    let work = tempfile::tempdir().unwrap();
    let task = harbor_task(&harbor, &work.path().join("t"), "shared", false);
    for (word, expected) in [("orchard", 1.0), ("apple", 0.0)] {
        let first = terminus_reply(&format!("echo {word} > /app/answer.txt\n"), false);
        let (url, seen) = orchard_tests::evals::mock_model_with(move |request| {
            let turns = request["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").count();
            let content = if turns == 0 { first.clone() } else { terminus_reply("", true) };
            orchard_tests::evals::completion(json!({"role": "assistant", "content": content}), "stop", (10, 5))
        })
        .await;
        let args = [
            "-a",
            "terminus-2",
            "-m",
            "openai/mock",
            "--ak",
            &format!("api_base={url}"),
            "--ae",
            "OPENAI_API_KEY=sk-test",
        ];
        let jobs = work.path().join(format!("jobs-{word}"));
        let trial = harbor_run(&harbor, &server, &task, &args, &jobs).await;
        assert_eq!(reward(&trial), expected, "{word}: {trial:#}");
        // The model saw the task's instruction and, after its command ran, the terminal.
        let seen = seen.lock().unwrap().clone();
        assert!(seen.len() >= 2, "{seen:#?}");
        assert!(seen[0].to_string().contains("Write the word orchard"), "{:#}", seen[0]);
        assert!(seen[1].to_string().contains(&format!("echo {word}")), "{:#}", seen[1]);
    }
    assert_eq!(sandboxes_left(&server).await, 0);
}

#[test]
fn harbors_task_config_reads_every_task_orchard_ships() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let Some(examples) = orchard_tests::harbor_validates(&root.join("examples")) else { return };
    let fixtures = orchard_tests::harbor_validates(&root.join("tests/fixtures")).unwrap();
    assert!(examples + fixtures >= 29, "{examples} + {fixtures}");
}

#[test]
fn harbors_template_task_runs_under_orchard_eval_with_the_oracle() {
    let Some(harbor) = harbor() else { return };
    let work = tempfile::tempdir().unwrap();
    let oracle = |task: &Path| {
        let tasks = task.parent().unwrap().display().to_string();
        orchard_tests::evals::eval_oracle(&tasks)
    };
    // Shared: graded where the oracle wrote. Separate with the answer declared as an artifact:
    // carried into the clean verifier sandbox.
    let shared = harbor_task(&harbor, &work.path().join("shared"), "shared", false);
    let carried = harbor_task(&harbor, &work.path().join("carried"), "separate", true);
    for task in [&shared, &carried] {
        let (summary, _, _) = oracle(task);
        assert_eq!(summary["mean_reward"].as_f64(), Some(1.0), "{}: {summary:#}", task.display());
    }
    // Separate with nothing declared: Harbor grades it 0 (the answer is not there); Orchard
    // refuses to grade a verifier that could only fail, and says what to declare.
    let bare = harbor_task(&harbor, &work.path().join("bare"), "separate", false);
    let (summary, results, _) = oracle(&bare);
    assert_eq!(summary["errors"], 1, "{summary:#}");
    let rollout = std::fs::read_dir(results.path().join("rollouts")).unwrap().next().unwrap().unwrap().path();
    let result = std::fs::read_to_string(rollout).unwrap();
    assert!(result.contains("declares nothing to carry into it"), "{result}");
}

/// The multi-step fixtures `multi_step.rs` runs under `orchard eval`, under Harbor's own runner
/// on Orchard sandboxes: the same steps run and the same rewards come out.
#[tokio::test(flavor = "multi_thread")]
async fn harbors_multi_step_runner_agrees_with_orchard_eval() {
    let Some(harbor) = harbor() else { return };
    let server = Server::start_with(ServerOptions { api_keys: Some(format!("harbor:{KEY}")), ..Default::default() })
        .await
        .with_key(KEY);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/multi-step");
    let work = tempfile::tempdir().unwrap();
    for (task, steps, expected_reward) in
        [("counter", vec![("one", 1.0), ("two", 1.0)], 1.0), ("gated", vec![("one", 0.0)], 0.0)]
    {
        let trial =
            harbor_run(&harbor, &server, &fixtures.join(task), &["-a", "oracle"], &work.path().join(task)).await;
        let ran: Vec<(String, f64)> = trial["step_results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["step_name"].as_str().unwrap().to_string(),
                    s["verifier_result"]["rewards"]["reward"].as_f64().unwrap(),
                )
            })
            .collect();
        let expected: Vec<(String, f64)> = steps.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        assert_eq!(ran, expected, "{task}: {trial:#}");
        assert_eq!(reward(&trial), expected_reward, "{task}");
    }
    assert_eq!(sandboxes_left(&server).await, 0);
}

/// The same `harbor run` on the Kubernetes backend (the API server double with a kubelet that
/// runs the real agent per pod) with a warm pool sized for Harbor's trials (its image, the
/// network, the default resources): the trial's sandbox is claimed from the pool, takes the
/// task's working directory and environment when claimed, and Harbor's oracle and verifier
/// score it.
#[tokio::test(flavor = "multi_thread")]
async fn harbor_runs_on_kubernetes_from_a_warm_pool() {
    use k8s_openapi::api::core::v1::Pod;
    use orchard_tests::kube::{ApiServer, FakeKubelet};
    let Some(harbor) = harbor() else { return };
    let api = ApiServer::start().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let _kubelet = FakeKubelet::start(api.client(), port);
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("key"), "an installation key").unwrap();
    let image = "registry.test/python:3.12";
    let mut args = api.backend_args(&keys.path().join("key"), "host-a", port);
    args.extend(
        ["--allowed-registry", "registry.test", "--warm-pool", &format!("{image}=2,network")].map(String::from),
    );
    let server = Server::start_with(ServerOptions {
        api_keys: Some(format!("harbor:{KEY}")),
        extra_args: args,
        env: vec![("KUBECONFIG".into(), api.kubeconfig.display().to_string())],
        ..Default::default()
    })
    .await
    .with_key(KEY);
    let pooled = || async {
        let pods = api.pods().list(&Default::default()).await.unwrap().items;
        pods.iter()
            .filter(|p: &&Pod| {
                p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("orchard.dev/pool"))
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .count()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pooled().await < 2 {
        assert!(std::time::Instant::now() < deadline, "the pool did not fill:\n{}", server.log());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let work = tempfile::tempdir().unwrap();
    let task = harbor_task(&harbor, &work.path().join("k8s"), "shared", false);
    // Written where the command runs: right only when the claim gave the sandbox the task's
    // working directory (the pooled pod started in /).
    std::fs::write(task.join("solution/solve.sh"), "#!/bin/bash\necho \"$WORD\" > answer.txt\n").unwrap();
    let ek = format!("image={image}");
    let trial = harbor_run(&harbor, &server, &task, &["-a", "oracle", "--ek", &ek], &work.path().join("jobs")).await;
    assert_eq!(reward(&trial), 1.0, "{trial:#}");
    let log = server.log();
    assert!(log.contains("claimed from the warm pool"), "the trial's sandbox was not the pool's:\n{log}");
    assert_eq!(sandboxes_left(&server).await, 0);
}
