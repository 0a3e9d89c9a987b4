//! Orchard Env's published Python SDK (`orchard_env/client/sandbox_client.py`) against our
//! compatible surface, request by request as that client sends them: every optional field as an
//! explicit `null` (Pydantic's `Optional[...]`), retried POSTs, concurrent use, PTY frames. Where
//! our answer's shape could differ from Orchard Env's orchestrator, the client's reading wins.

use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use orchard_tests::Server;
use reqwest::Method;
use serde_json::{Value, json};

/// `SandboxClient.create_sandbox(image)` then its server-side wait, as the SDK does them.
async fn sdk_create(server: &Server, payload: Value) -> String {
    let (status, created) = server.call(Method::POST, "/sandboxes", Some(payload.clone())).await;
    assert_eq!(status, 200, "{payload} -> {created}");
    // CreateSandboxResponse: cpu and memory are strings, timeout an int.
    assert!(created["cpu"].is_string() && created["memory"].is_string(), "{created}");
    assert!(created["timeout"].is_u64(), "{created}");
    let id = created["sandbox_id"].as_str().unwrap().to_string();
    let timeout = created["timeout"].as_u64().unwrap();
    let (status, waited) = server.call(Method::GET, &format!("/sandboxes/{id}/wait?timeout={timeout}"), None).await;
    assert_eq!(status, 200, "{waited}");
    assert!(waited["ready"] == true || waited["status"] == "ready", "{waited}");
    assert!(waited["status_message"].is_string(), "status_message is read as text: {waited}");
    id
}

/// `SandboxInstance.exec(command)`: the exact body, every optional field present.
fn exec_body(command: Value) -> Value {
    json!({"command": command, "timeout_seconds": null, "cwd": null, "env": null, "login_shell": false, "wait": true})
}

/// What `JobResult(data)` reads: it indexes these keys and would raise on a missing one.
fn assert_job_shape(job: &Value) {
    for key in ["job_id", "sandbox_id", "command", "status", "created_at"] {
        assert!(!job[key].is_null(), "JobResult needs {key}: {job}");
    }
    assert!(job["command"].is_string(), "{job}");
    assert!(job["stdout"].is_string() && job["stderr"].is_string(), "{job}");
}

#[tokio::test]
async fn the_sdks_first_exec_works_with_every_optional_field_null() {
    let server = Server::start().await;
    let id = sdk_create(&server, json!({"image": "host", "block_network": true})).await;
    let (status, job) =
        server.call(Method::POST, &format!("/sandboxes/{id}/exec"), Some(exec_body(json!("echo hello")))).await;
    assert_eq!(status, 200, "{job}");
    assert_job_shape(&job);
    assert_eq!(
        (job["status"].as_str(), job["stdout"].as_str(), job["exit_code"].as_i64()),
        (Some("succeeded"), Some("hello\n"), Some(0))
    );

    // A list command, a cwd and env given, a login shell.
    let body = json!({"command": ["sh", "-c", "echo $A; pwd"], "timeout_seconds": 10, "cwd": "/tmp", "env": {"A": "1"}, "login_shell": false, "wait": true});
    let (_, job) = server.call(Method::POST, &format!("/sandboxes/{id}/exec"), Some(body)).await;
    assert_eq!(job["stdout"], "1\n/tmp\n", "{job}");
    assert_eq!(job["command"], "sh -c echo $A; pwd", "argv jobs read back as text: {job}");
    let body = json!({"command": "echo $0", "timeout_seconds": null, "cwd": null, "env": null, "login_shell": true, "wait": true});
    let (_, job) = server.call(Method::POST, &format!("/sandboxes/{id}/exec"), Some(body)).await;
    assert_eq!(job["status"], "succeeded", "{job}");

    // The SDK's fallback: submit without `wait`, then poll /jobs/{id} until it completes.
    let body = json!({"command": "sleep 0.3; echo later", "timeout_seconds": null, "cwd": null, "env": null, "login_shell": false});
    let (status, queued) = server.call(Method::POST, &format!("/sandboxes/{id}/exec"), Some(body)).await;
    assert_eq!(status, 200, "{queued}");
    let job_id = queued["job_id"].as_str().unwrap();
    let (_, early) = server.call(Method::GET, &format!("/jobs/{job_id}"), None).await;
    assert_job_shape(&early);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, job) = server.call(Method::GET, &format!("/jobs/{job_id}"), None).await;
        assert_job_shape(&job);
        if job["status"] == "succeeded" || job["status"] == "failed" {
            assert_eq!(job["stdout"], "later\n");
            break;
        }
        assert!(Instant::now() < deadline, "the job never completed: {job}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn every_compatible_route_takes_null_as_absent() {
    let server = Server::start().await;
    // create: every optional field null.
    let id = sdk_create(
        &server,
        json!({"image": "host", "block_network": null, "sandbox_id": null, "cpu": null, "memory": null, "timeout": null}),
    )
    .await;
    let (_, info) = server.call(Method::GET, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(info["block_network"], true, "null block_network is the default: {info}");
    // files: upload, download, list.
    let content = base64::engine::general_purpose::STANDARD.encode("data\n");
    let (status, up) = server
        .call(
            Method::POST,
            &format!("/sandboxes/{id}/files"),
            Some(json!({"path": "/workspace/a.txt", "content": content})),
        )
        .await;
    assert_eq!((status, &up["success"], &up["size"]), (200, &json!(true), &json!(5)), "{up}");
    let (_, down) = server.call(Method::GET, &format!("/sandboxes/{id}/files?path=/workspace/a.txt"), None).await;
    assert_eq!(down["content"], content);
    // The SDK lists "/" by default; Orchard Env's orchestrator lists /workspace when no path comes.
    let (status, listed) = server.call(Method::GET, &format!("/sandboxes/{id}/files/list"), None).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["path"], "/workspace");
    let file = &listed["files"][0];
    assert_eq!(
        (file["name"].as_str(), file["type"].as_str(), file["size"].as_u64()),
        (Some("a.txt"), Some("file"), Some(5))
    );
    let modified = file["modified"].as_str().expect("modified is a timestamp string");
    assert!(modified.len() == 19 && modified.as_bytes()[10] == b'T', "{modified}");
    // apply_patch: null timeout; heartbeat and wait with no body.
    let patch = "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+patched\n";
    let (status, applied) = server
        .call(
            Method::POST,
            &format!("/sandboxes/{id}/apply_patch"),
            Some(json!({"patch": patch, "timeout_seconds": null})),
        )
        .await;
    assert_eq!((status, &applied["success"]), (200, &json!(true)), "{applied}");
    let (status, hb) = server.call(Method::POST, &format!("/sandboxes/{id}/heartbeat"), None).await;
    assert_eq!((status, hb["status"].as_str()), (200, Some("ok")), "{hb}");
    // /v1 follows the same rule.
    let body = json!({"command": "pwd", "timeout_seconds": null, "cwd": null, "env": null, "stdin": null, "output_limit": null, "stream": null, "login_shell": null});
    let r = server.exec(&id, body).await;
    assert_eq!(r.stdout.text, "/workspace\n");
    let (status, v) = server
        .call(
            Method::POST,
            &format!("/v1/sandboxes/{id}/processes"),
            Some(json!({"command": "sleep 1", "cwd": null, "env": null})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
}

#[tokio::test]
async fn apply_patch_and_exec_work_in_workspace_by_default() {
    let server = Server::start().await;
    let id = sdk_create(&server, json!({"image": "host", "block_network": true})).await;
    let (_, job) = server
        .call(
            Method::POST,
            &format!("/sandboxes/{id}/exec"),
            Some(exec_body(json!("pwd; printf 'one\\ntwo\\n' > f.txt"))),
        )
        .await;
    assert_eq!(job["stdout"], "/workspace\n", "{job}");
    // The SDK sends only the patch and its timeout: it applies in /workspace.
    let patch = "--- a/f.txt\n+++ b/f.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+three\n";
    let (status, applied) = server
        .call(
            Method::POST,
            &format!("/sandboxes/{id}/apply_patch"),
            Some(json!({"patch": patch, "timeout_seconds": 30})),
        )
        .await;
    assert_eq!(status, 200, "{applied}");
    assert_eq!(applied["success"], true, "{applied}");
    assert!(applied["stdout"].is_string() && applied["stderr"].is_string(), "{applied}");
    let (_, job) = server
        .call(Method::POST, &format!("/sandboxes/{id}/exec"), Some(exec_body(json!("cat /workspace/f.txt"))))
        .await;
    assert_eq!(job["stdout"], "one\nthree\n");
    // A patch that does not apply says so in the SDK's fields.
    let (_, failed) = server
        .call(
            Method::POST,
            &format!("/sandboxes/{id}/apply_patch"),
            Some(json!({"patch": patch, "timeout_seconds": 30})),
        )
        .await;
    assert_eq!(failed["success"], false, "{failed}");
    assert!(failed["error"].is_string() && failed["exit_code"].as_i64().unwrap() != 0, "{failed}");
}

#[tokio::test]
async fn retried_posts_and_concurrent_clients_behave() {
    let server = Server::start().await;
    // The SDK retries a POST whose answer it lost; with a prefix it always names the id.
    let payload = json!({"image": "host", "block_network": true, "sandbox_id": "sdk-retry-1"});
    let first = sdk_create(&server, payload.clone()).await;
    let again = sdk_create(&server, payload).await;
    assert_eq!(first, again);
    let (_, listed) = server.call(Method::GET, "/sandboxes", None).await;
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 1, "a retried create made a second sandbox: {listed}");

    // AsyncSandboxClient: many sandboxes and execs in flight at once.
    let ids: Vec<String> = futures::future::join_all((0..8).map(|i| {
        sdk_create(&server, json!({"image": "host", "block_network": true, "sandbox_id": format!("sdk-async-{i}")}))
    }))
    .await;
    let runs = ids.iter().flat_map(|id| (0..4).map(move |n| (id.clone(), n)));
    let results = futures::future::join_all(runs.map(|(id, n)| {
        let server = &server;
        async move {
            let (status, job) = server
                .call(Method::POST, &format!("/sandboxes/{id}/exec"), Some(exec_body(json!(format!("echo {n}")))))
                .await;
            (status, job["stdout"].as_str().map(str::to_string), n)
        }
    }))
    .await;
    for (status, stdout, n) in results {
        assert_eq!((status, stdout), (200, Some(format!("{n}\n"))));
    }
    for id in &ids {
        let (status, v) = server.call(Method::DELETE, &format!("/sandboxes/{id}"), None).await;
        assert_eq!(status, 200, "{v}");
    }
}

#[tokio::test]
async fn the_pty_init_frame_takes_nulls_and_a_login_shell() {
    use tokio_tungstenite::tungstenite::Message;
    let server = Server::start().await;
    let id = sdk_create(&server, json!({"image": "host", "block_network": true})).await;
    let url = format!("{}/sandboxes/{id}/exec/pty", server.url.replace("http://", "ws://"));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("ws connect");
    // `_build_init_frame` with env=None, workdir=None: "env": {}, "cwd": null.
    let init = json!({"type": "init", "cmd": ["bash", "-c", "pwd; echo $0"], "env": null, "cwd": null, "rows": null, "cols": null, "login_shell": true});
    ws.send(Message::Text(init.to_string().into())).await.unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let (mut output, mut exit) = (String::new(), None);
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Ok(Some(Ok(msg))) = tokio::time::timeout_at(deadline.into(), ws.next()).await {
        let Message::Text(text) = msg else { continue };
        let frame: Value = serde_json::from_str(&text).unwrap();
        match frame["type"].as_str().unwrap() {
            "stdout" => output += &String::from_utf8_lossy(&b64.decode(frame["data"].as_str().unwrap()).unwrap()),
            "exit" => {
                exit = frame["code"].as_i64();
                break;
            }
            "error" => panic!("pty error: {frame}"),
            _ => {}
        }
    }
    assert_eq!(exit, Some(0), "{output}");
    assert!(output.contains("/workspace"), "{output}");
}
