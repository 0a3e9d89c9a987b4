//! OSWorld's own environment on Orchard: `desktop_env`'s `DesktopEnv` (PyPI desktop-env 1.0.2,
//! unchanged) with Orchard's provider (`orchard_client.osworld`) runs two OSWorld-format tasks
//! of ours — a text editor's and LibreOffice Calc's — on sandboxes of a real `orchard serve`:
//! its SetupController downloads and opens their files, pyautogui code acts, its getters and
//! metrics (`compare_text_file`, `compare_table`) score 1 after the actions and 0 without.
//! And the port route it rides on: tenant-scoped, the caller's credentials kept out of the
//! sandbox, cookies kept off the server's origin.

use std::path::Path;
use std::time::Duration;

use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::{Value, json};

const KEYS: &str = "alice:alice-key-1234,bob:bob-key-5678";

async fn server() -> Server {
    Server::start_with(ServerOptions { api_keys: Some(KEYS.into()), ..Default::default() }).await
}

/// Runs the fixture script in `mode` as Alice; its JSON line.
async fn run_tasks(server: &Server, mode: &str) -> Value {
    let python = orchard_tests::py312_tool("python").expect("the Python 3.12 venv (cargo xtask setup)");
    let alice = [("ORCHARD_API_KEY", "alice-key-1234")];
    orchard_tests::osworld::run_fixture_tasks(&python, server, mode, &alice).await.0
}

#[test]
fn osworlds_desktop_env_runs_and_scores_tasks_on_orchard_sandboxes() {
    // One desktop test at a time (see desktop_tasks), the lock held outside the runtime.
    let _one = crate::desktop_tasks::serial();
    if orchard_tests::py312_tool("python").is_none() {
        return;
    }
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(desktop_env_tasks());
}

async fn desktop_env_tasks() {
    let server = server().await.with_key("alice-key-1234");
    let got = run_tasks(&server, "act").await;
    assert_eq!(got["provider"], "orchard");
    assert_eq!(got["scores"]["orchard-edit-notes"], 1.0, "{got:#}\n{}", server.log());
    assert_eq!(got["scores"]["orchard-calc-totals"], 1.0, "{got:#}\n{}", server.log());
    // Each task had a fresh sandbox (DesktopEnv reverts a used machine before the next task).
    let sandboxes = got["sandboxes"].as_array().unwrap();
    assert_eq!(sandboxes.len(), 2);
    assert_ne!(sandboxes[0], sandboxes[1]);
    // OSWorld's controller read the desktop through the relay.
    let c = &got["controller"];
    assert_eq!(c["screenshot_png"], true, "{c}");
    assert_eq!(c["size"], json!({"width": 1280, "height": 800}), "{c}");
    assert_eq!(c["tree_has_editor"], true, "{c}");
    assert_eq!(c["command"], "42\n", "{c}");
    assert_eq!(c["platform"], "Linux", "{c}");
    use base64::Engine;
    let file = base64::engine::general_purpose::STANDARD.decode(c["file"].as_str().unwrap()).unwrap();
    assert_eq!(String::from_utf8_lossy(&file), "Shopping list\n- bread\n- eggs\n- oat milk\n");
    // Closing the environment deleted its sandbox: none is left.
    assert!(got["closed_sandbox"].is_null(), "{got}");
    let (status, list) = server.call(Method::GET, "/v1/sandboxes", None).await;
    assert_eq!(status, 200);
    assert_eq!(list["sandboxes"], json!([]), "{list}");

    // Left alone, the same tasks score 0 by the same metrics.
    let idle = run_tasks(&server, "idle").await;
    assert_eq!(idle["scores"]["orchard-edit-notes"], 0.0, "{idle:#}");
    assert_eq!(idle["scores"]["orchard-calc-totals"], 0.0, "{idle:#}");
}

/// A service in the sandbox that answers with the headers it got, and tries to set a cookie.
const ECHO: &str = r#"
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Set-Cookie", "orchard_session=forged; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_POST = do_GET
http.server.HTTPServer(("127.0.0.1", 7070), H).serve_forever()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_port_route_is_the_tenants_own_and_keeps_credentials_out() {
    let server = server().await.with_key("alice-key-1234");
    let sandbox = server.create_host().await;
    let (status, started) = server
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{sandbox}/processes"),
            Some(json!({"command": ["python3", "-c", ECHO]})),
        )
        .await;
    assert!(status < 300, "{started}");
    let url = format!("{}/v1/sandboxes/{sandbox}/ports/7070/some/where?x=1&api_key=alice-key-1234", server.url);
    let mut answer = None;
    for _ in 0..100 {
        let resp = server
            .http
            .get(&url)
            .header("Authorization", "Bearer alice-key-1234")
            .header("X-API-Key", "alice-key-1234")
            .header("Cookie", "orchard_session=mine")
            .header("X-Trace", "kept")
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            answer = Some(resp);
            break;
        }
        assert_eq!(resp.status(), 502, "{}", resp.text().await.unwrap());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resp = answer.expect("the service in the sandbox never answered");
    assert!(resp.headers().get("set-cookie").is_none(), "a sandbox set a cookie on the server's origin");
    let echoed: Value = resp.json().await.unwrap();
    assert_eq!(echoed["path"], "/some/where?x=1", "{echoed}");
    let headers = echoed["headers"].as_object().unwrap();
    assert_eq!(headers.get("x-trace").and_then(Value::as_str), Some("kept"), "{echoed}");
    for secret in ["authorization", "cookie", "x-api-key"] {
        assert!(!headers.contains_key(secret), "{secret} reached the sandbox: {echoed}");
    }
    assert!(!echoed.to_string().contains("alice-key-1234"), "the key reached the sandbox: {echoed}");

    // Nothing on a port: a 502 naming the port. A bad port: refused by name.
    let (status, body) = server.call(Method::GET, &format!("/v1/sandboxes/{sandbox}/ports/7071/x"), None).await;
    assert_eq!(status, 502, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("7071"), "{body}");
    let (status, body) = server.call(Method::GET, &format!("/v1/sandboxes/{sandbox}/ports/99999/x"), None).await;
    assert_eq!(status, 422, "{body}");

    // Another tenant learns nothing: the sandbox is "not found", as one that does not exist.
    let other = server.http.get(format!("{}/v1/sandboxes/{sandbox}/ports/7070/x", server.url));
    let (status, body) = {
        let resp = other.header("Authorization", "Bearer bob-key-5678").send().await.unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    };
    assert_eq!(status, 404, "{body}");
    let (status, missing) = {
        let resp = server
            .http
            .get(format!("{}/v1/sandboxes/no-such-sandbox/ports/7070/x", server.url))
            .header("Authorization", "Bearer bob-key-5678")
            .send()
            .await
            .unwrap();
        (resp.status().as_u16(), resp.text().await.unwrap())
    };
    assert_eq!(status, 404);
    assert_eq!(
        body.replace(&sandbox, "ID"),
        missing.replace("no-such-sandbox", "ID"),
        "another tenant's sandbox answers unlike a missing one"
    );

    // A desktop start with an unknown field or a bad size is refused by name.
    let (status, body) =
        server.call(Method::POST, &format!("/v1/sandboxes/{sandbox}/desktop"), Some(json!({"colour": 1}))).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("colour"), "{body}");
    let (status, body) =
        server.call(Method::POST, &format!("/v1/sandboxes/{sandbox}/desktop"), Some(json!({"depth": 8}))).await;
    assert_eq!(status, 422, "{body}");
    assert!(body["detail"].as_str().unwrap().contains("depth"), "{body}");
}

/// The fixture tasks with their files' URLs on a host no sandbox can reach, their files in a
/// local mirror, and the actions as pyautogui tool calls: (tasks, mirror, calls by task id).
fn offline_osworld_tasks(root: &Path) -> (std::path::PathBuf, std::path::PathBuf, Value) {
    let python = orchard_tests::py312_tool("python").expect("the Python 3.12 venv");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/desktop");
    let made = std::process::Command::new(python)
        .arg(fixtures.join("osworld_env.py"))
        .arg(fixtures.join("osworld"))
        .arg(root)
        .arg("files")
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    let tasks = root.join("tasks/examples/orchard");
    std::fs::create_dir_all(&tasks).unwrap();
    for name in ["edit-notes.json", "calc-totals.json"] {
        let text = std::fs::read_to_string(fixtures.join("osworld").join(name)).unwrap();
        std::fs::write(tasks.join(name), text.replace("{FILES}", "https://files.orchard.invalid/osworld")).unwrap();
    }
    // And one for an app the desktop image lacks: skipped, saying so.
    std::fs::write(
        tasks.join("chrome-task.json"),
        json!({"id": "chrome-1", "snapshot": "chrome", "instruction": "Open a tab.", "related_apps": ["chrome"],
               "config": [], "evaluator": {"func": "is_expected_tabs", "result": {"type": "open_tabs_info"}}})
        .to_string(),
    )
    .unwrap();
    let calls: Value = serde_json::from_str(&std::fs::read_to_string(root.join("calls.json")).unwrap()).unwrap();
    (root.join("tasks"), root.join("files"), calls)
}

#[test]
fn converted_osworld_tasks_set_themselves_up_and_are_graded_by_osworlds_evaluator() {
    let _one = crate::desktop_tasks::serial();
    if orchard_tests::py312_tool("python").is_none() {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let (tasks, mirror, calls) = offline_osworld_tasks(root.path());
    let out = root.path().join("converted");
    let (code, stdout, stderr) = orchard_tests::orchard(&[
        "convert",
        "osworld",
        tasks.to_str().unwrap(),
        out.to_str().unwrap(),
        "--files",
        mirror.to_str().unwrap(),
        "--screen",
        "1280x800",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("2 task folder(s)"), "{stdout}{stderr}");
    let skipped: Value = serde_json::from_str(&std::fs::read_to_string(out.join("skipped.json")).unwrap()).unwrap();
    assert_eq!(skipped[0]["task"], "chrome-1 (examples/orchard/chrome-task.json)", "{skipped}");
    assert!(skipped[0]["reason"].as_str().unwrap().contains("\"chrome\" is not in the desktop image"), "{skipped}");
    if let Some(n) = orchard_tests::harbor_validates(&out) {
        assert_eq!(n, 2, "Harbor's own TaskConfig reads both");
    }
    // Offline: every file came from the mirror, so no task asks for the network.
    for task in ["osworld.orchard-edit-notes", "osworld.orchard-calc-totals"] {
        let toml = std::fs::read_to_string(out.join(task).join("task.toml")).unwrap();
        assert!(!toml.contains("allowed_hosts"), "{task}: {toml}");
    }

    let solve = |calls_for: &dyn Fn(&str) -> Value| {
        for (id, dir) in [
            ("orchard-edit-notes", "osworld.orchard-edit-notes"),
            ("orchard-calc-totals", "osworld.orchard-calc-totals"),
        ] {
            let solution = out.join(dir).join("solution");
            std::fs::create_dir_all(&solution).unwrap();
            std::fs::write(solution.join("calls.json"), calls_for(id).to_string()).unwrap();
        }
    };
    let args = |out: &Path| -> Vec<String> {
        [
            out.to_str().unwrap(),
            "--harness",
            "oracle",
            "--tools",
            "desktop",
            "--grader",
            "script",
            "--grant",
            "solution",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(["--tool-config".into(), r#"desktop={"action_space": "pyautogui", "settle_ms": 1500}"#.into()])
        .collect()
    };
    // With the actions: OSWorld's compare_text_file and compare_table score 1.
    solve(&|id| calls[id].clone());
    let run = args(&out);
    let (summary, results, _) = orchard_tests::evals::eval(&run.iter().map(String::as_str).collect::<Vec<_>>());
    for r in orchard_tests::evals::rollouts(results.path()) {
        assert_eq!(r["reward"], 1.0, "{}: {:#}\n{summary:#}", r["task_id"], r["verdict"]);
    }
    // Only looking: both score 0 by the same metrics.
    solve(&|_| json!([{"tool": "observe", "arguments": {}}]));
    let (summary, results, _) = orchard_tests::evals::eval(&run.iter().map(String::as_str).collect::<Vec<_>>());
    let rolled = orchard_tests::evals::rollouts(results.path());
    assert_eq!(rolled.len(), 2, "{summary:#}");
    for r in rolled {
        assert_eq!((r["status"].as_str(), r["reward"].as_f64()), (Some("graded"), Some(0.0)), "{r:#}");
    }

    // An agent that kills the desktop service and answers on its port itself, with the expected
    // file: the verifier refuses to read from it (without that check, this scores 1).
    let task = out.join("osworld.orchard-edit-notes");
    std::fs::remove_file(task.join("solution/calls.json")).unwrap();
    let forger = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/desktop/osworld_forger.sh");
    std::fs::copy(forger, task.join("solution/solve.sh")).unwrap();
    let (summary, results, _) = orchard_tests::evals::eval_oracle(task.to_str().unwrap());
    let r = &orchard_tests::evals::rollouts(results.path())[0];
    assert_eq!(r["reward"], 0.0, "{r:#}\n{summary:#}");
    let why = r["verdict"]["explanation"].as_str().unwrap_or_default();
    assert!(why.contains("is not Orchard's (the listener: /usr/bin/python3"), "{why}");
}
