//! The hosted service against a tenant who attacks it: every probe that once got through —
//! link chains out of an upload, model URLs aimed at the host's network, plugin paths on the
//! server, unbounded uploads and connections, names that leak across tenants, open metrics,
//! sessions that outlive sign-out, login CSRF, a liveness probe that waits for compiles — is
//! reproduced here against the real `orchard serve` and shown refused.

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::{Value, json};

const KEYS: &str = "alice:alice-key-1234,bob:bob-key-123456,root:root-key-123456";

fn options(extra: &[&str]) -> ServerOptions {
    ServerOptions {
        api_keys: Some(KEYS.into()),
        extra_args: extra.iter().map(|s| s.to_string()).chain(["--admin-tenant".into(), "root".into()]).collect(),
        ..Default::default()
    }
}

fn as_tenant(server: &Server, key: &str) -> Server {
    Server::attach(&server.url, &server.state_dir).with_key(key)
}

/// One entry of a hand-made archive.
enum Entry<'a> {
    File(&'a str, &'a [u8]),
    Link(&'a str, &'a str),
}

fn archive(entries: &[Entry]) -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    for entry in entries {
        let mut header = tar::Header::new_gnu();
        match entry {
            Entry::File(path, data) => {
                header.set_size(data.len() as u64);
                header.set_mode(0o755);
                header.set_entry_type(tar::EntryType::Regular);
                tar.append_data(&mut header, path, *data).unwrap();
            }
            Entry::Link(path, target) => {
                header.set_size(0);
                header.set_mode(0o777);
                header.set_entry_type(tar::EntryType::Symlink);
                tar.append_link(&mut header, path, target).unwrap();
            }
        }
    }
    tar.into_inner().unwrap().finish().unwrap()
}

const TASK_TOML: &[u8] = b"version = \"1.0\"\n[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n";
const TEST_SH: &[u8] = b"#!/bin/sh\necho 1 > /logs/verifier/reward.txt\n";

async fn post_dataset(server: &Server, body: Vec<u8>) -> (u16, Value) {
    let resp = server.request(Method::POST, "/v1/datasets").body(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// What the attacks aim at: the first line of the host's `/etc/shadow` (the server runs as root).
fn shadow_line() -> String {
    std::fs::read_to_string("/etc/shadow").unwrap().lines().next().unwrap().to_string()
}

fn refused_without_leaks(status: u16, body: &Value, server: &Server, what: &str) {
    let text = body.to_string();
    assert!((400..500).contains(&status), "{what}: {status} {text}");
    assert!(!text.contains(&shadow_line()), "{what}: quotes /etc/shadow: {text}");
    assert!(!text.contains(&server.state_dir.display().to_string()), "{what}: names the state dir: {text}");
}

#[tokio::test]
async fn uploaded_links_never_reach_outside_their_dataset() {
    let server = Server::start_with(options(&[])).await;
    let alice = as_tenant(&server, "alice-key-1234");
    let bob = as_tenant(&server, "bob-key-123456");
    // Bob's dataset, the one an attacker's `solution -> up/..` once reached.
    let (status, v) = post_dataset(
        &bob,
        archive(&[
            Entry::File("b1/task.toml", TASK_TOML),
            Entry::File("b1/instruction.md", b"bob's private instruction"),
            Entry::File("b1/tests/test.sh", TEST_SH),
        ]),
    )
    .await;
    assert_eq!(status, 201, "{v}");

    // A chain of links, each harmless by its own text: `up -> ..` and a file through `up`.
    let deep = format!("up/t1/up/t1/up/t1/up/t1/up/t1/up/{}etc/shadow", "../".repeat(12));
    let attacks: Vec<(&str, Vec<u8>)> = vec![
        (
            "task.toml through a chain",
            archive(&[
                Entry::Link("t1/up", ".."),
                Entry::Link("t1/task.toml", &deep),
                Entry::File("t1/tests/test.sh", TEST_SH),
            ]),
        ),
        (
            "instruction.md through a chain",
            archive(&[
                Entry::File("t1/task.toml", TASK_TOML),
                Entry::Link("t1/up", ".."),
                Entry::Link("t1/instruction.md", &deep),
                Entry::File("t1/tests/test.sh", TEST_SH),
            ]),
        ),
        (
            "solution up to every tenant's datasets",
            archive(&[
                Entry::File("t1/task.toml", TASK_TOML),
                Entry::File("t1/instruction.md", b"hi"),
                Entry::File("t1/tests/test.sh", TEST_SH),
                Entry::Link("t1/up", "../.."),
                Entry::Link("t1/solution", "up/.."),
            ]),
        ),
        (
            "an absolute link",
            archive(&[Entry::File("t1/task.toml", TASK_TOML), Entry::Link("t1/instruction.md", "/etc/shadow")]),
        ),
    ];
    for (what, body) in attacks {
        let (status, v) = post_dataset(&alice, body).await;
        refused_without_leaks(status, &v, &server, what);
        assert_eq!(status, 422, "{what}: {v}");
        assert!(v.to_string().contains("outside"), "{what}: the error says why: {v}");
    }

    // A link that stays inside the upload is a link like any other.
    let (status, v) = post_dataset(
        &alice,
        archive(&[
            Entry::File("shared/text.md", b"Write hello.txt"),
            Entry::File("t1/task.toml", TASK_TOML),
            Entry::Link("t1/instruction.md", "../shared/text.md"),
            Entry::File("t1/tests/test.sh", TEST_SH),
        ]),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["tasks"], json!(["t1"]), "{v}");
}

#[tokio::test]
async fn a_registered_dataset_is_read_beneath_its_folder() {
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("tasks/t1");
    std::fs::create_dir_all(task.join("tests")).unwrap();
    std::fs::write(task.join("task.toml"), TASK_TOML).unwrap();
    std::fs::write(task.join("tests/test.sh"), TEST_SH).unwrap();
    std::os::unix::fs::symlink("/etc/shadow", task.join("instruction.md")).unwrap();
    let dataset = format!("mine={}", tmp.path().join("tasks").display());
    let server = Server::start_with(options(&["--dataset", &dataset])).await;
    let alice = as_tenant(&server, "alice-key-1234");
    let job = json!({"tasks": {"dataset": "mine"}, "harnesses": ["oracle"], "tools": ["shell"], "grader": "script"});
    let (status, v) = alice.call(Method::POST, "/v1/evals", Some(job)).await;
    refused_without_leaks(status, &v, &server, "a registered task's link out");
    assert!(!v.to_string().contains(&tmp.path().display().to_string()), "names the operator's folder: {v}");
    assert!(v.to_string().contains("instruction.md"), "names the file: {v}");
}

#[tokio::test]
async fn tenants_name_plugins_never_paths_on_the_server() {
    let server = Server::start_with(options(&[])).await;
    // Every shipped plugin compiled: a job refused meanwhile would say so, not what is compared.
    wait_ready(&server).await;
    let alice = as_tenant(&server, "alice-key-1234");
    let real = orchard_tests::plugin_dir().join("script.wasm");
    assert!(real.is_file());
    let mut answers = Vec::new();
    for (field, reference) in [
        ("tools", "/etc/shadow".to_string()),
        ("tools", "/nowhere/missing.wasm".to_string()),
        ("tools", real.display().to_string()),
        ("grader", real.display().to_string()),
        ("grader", "/etc/shadow".to_string()),
    ] {
        let line = match field {
            "tools" => format!("[agent]\ntimeout_sec = 60\ntools = [{reference:?}]\n"),
            _ => format!("[agent]\ntimeout_sec = 60\n[verifier]\ngrader = {reference:?}\n"),
        };
        let toml = format!("version = \"1.0\"\n{line}");
        let (status, v) = post_dataset(
            &alice,
            archive(&[
                Entry::File("t1/task.toml", toml.as_bytes()),
                Entry::File("t1/instruction.md", b"hi"),
                Entry::File("t1/tests/test.sh", TEST_SH),
            ]),
        )
        .await;
        assert_eq!(status, 201, "{v}");
        let id = v["id"].as_str().unwrap();
        let job = json!({"tasks": {"archive": id}, "harnesses": ["oracle"], "tools": ["shell"], "grader": "script",
                         "grants": ["solution"]});
        let (status, v) = alice.call(Method::POST, "/v1/evals", Some(job)).await;
        refused_without_leaks(status, &v, &server, &format!("{field} = {reference}"));
        // One answer whatever lies on disk: the reference, not what is there.
        answers.push(v["detail"].as_str().unwrap_or_default().replace(&reference, "REF"));
    }
    assert_eq!(answers[0], answers[1], "a missing path and /etc/shadow answer alike: {answers:#?}");
    assert_eq!(answers[0], answers[2], "a real plugin file answers like a missing one: {answers:#?}");
    assert_eq!(answers[3], answers[4], "{answers:#?}");
}

/// A mock model that answers 400 with a body holding a secret, and counts its requests.
async fn leaky_model() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let counter = counter.clone();
        async move {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            (axum::http::StatusCode::BAD_REQUEST, "internal-secret-7f3a: upstream detail")
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), hits)
}

#[tokio::test]
async fn tenants_reach_only_the_model_endpoints_the_operator_allows() {
    let (allowed, hits) = leaky_model().await;
    let port = allowed.rsplit(':').next().unwrap().trim_end_matches("/v1").to_string();
    let mut opts = options(&[]);
    opts.env.push(("ORCHARD_MODEL_ALLOW".into(), format!("127.0.0.1:{port}")));
    let server = Server::start_with(opts).await;
    let alice = as_tenant(&server, "alice-key-1234");
    let own_port = server.url.rsplit(':').next().unwrap().to_string();
    let (status, v) = post_dataset(
        &alice,
        archive(&[
            Entry::File("t/task.toml", TASK_TOML),
            Entry::File("t/instruction.md", b"hi"),
            Entry::File("t/tests/test.sh", TEST_SH),
        ]),
    )
    .await;
    assert_eq!(status, 201, "{v}");
    let dataset = v["id"].as_str().unwrap().to_string();
    let denied = [
        format!("http://127.0.0.1:{own_port}/v1"),
        "http://localhost:22/v1".to_string(),
        "http://10.1.2.3/v1".to_string(),
        "http://169.254.169.254/latest".to_string(),
        "http://[::1]:8080/v1".to_string(),
        "http://192.168.0.1/v1".to_string(),
        "http://example.com/v1".to_string(),
    ];
    for url in &denied {
        let model = json!({"url": url, "name": "m"});
        let (status, v) = alice.call(Method::POST, "/v1/proxy", Some(json!({"model": model}))).await;
        assert_eq!(status, 422, "{url}: {v}");
        assert!(v["detail"].as_str().unwrap().contains("model.url"), "names the field: {v}");
        let tokenize = json!({"url": allowed, "name": "m", "tokenize_url": url});
        let (status, v) = alice.call(Method::POST, "/v1/proxy", Some(json!({"model": tokenize}))).await;
        assert_eq!(status, 422, "{url}: {v}");
        assert!(v["detail"].as_str().unwrap().contains("tokenize_url"), "names the field: {v}");
        let job = json!({"tasks": {"archive": dataset}, "harnesses": ["react"], "tools": ["shell"],
                         "grader": "script", "model": model});
        let (status, v) = alice.call(Method::POST, "/v1/evals", Some(job)).await;
        assert_eq!(status, 422, "{url}: {v}");
        assert!(v["detail"].as_str().unwrap().contains("model.url"), "names the field: {v}");
        let grader_job = json!({"tasks": {"archive": dataset}, "harnesses": ["oracle"], "tools": ["shell"],
                                "grader": "judge", "grader_model": model});
        let (status, v) = alice.call(Method::POST, "/v1/evals", Some(grader_job)).await;
        assert_eq!(status, 422, "{url}: {v}");
        assert!(v["detail"].as_str().unwrap().contains("grader_model.url"), "names the field: {v}");
        let group = json!({"tasks": {"archive": dataset}, "task_ids": ["t"], "size": 2,
                           "harness": "react", "tools": ["shell"], "grader": "script", "model": model});
        let (status, v) = alice.call(Method::POST, "/v1/groups", Some(group)).await;
        assert_eq!(status, 422, "{url}: {v}");
    }
    // Open and closed ports answer alike: nothing to scan with.
    let answer = |url: String| {
        let alice = &alice;
        async move {
            let (_, v) = alice.call(Method::POST, "/v1/proxy", Some(json!({"model": {"url": url, "name": "m"}}))).await;
            v["detail"].as_str().unwrap().replace(&url, "URL")
        }
    };
    assert_eq!(answer(format!("http://127.0.0.1:{own_port}/v1")).await, answer("http://127.0.0.1:1/v1".into()).await);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "nothing was sent anywhere");

    // The allowed endpoint is reached, and its body never comes back to the tenant.
    let (status, session) =
        alice.call(Method::POST, "/v1/proxy", Some(json!({"model": {"url": allowed, "name": "m"}}))).await;
    assert_eq!(status, 201, "{session}");
    let base = session["base_url"].as_str().unwrap();
    let (status, v) = alice
        .call(
            Method::POST,
            &format!("{base}/chat/completions"),
            Some(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
    assert!(status >= 400, "{status} {v}");
    eprintln!("the tenant saw: {status} {v}");
    assert!(hits.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    assert!(!v.to_string().contains("internal-secret-7f3a"), "echoes the upstream body: {v}");
    // The operator's log keeps it (read from the server's stderr by a thread: a moment behind).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.log().contains("internal-secret-7f3a") {
        assert!(Instant::now() < deadline, "the operator's log does not keep it:\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Bytes of files under `dir`.
fn du(dir: &Path) -> u64 {
    let out = std::process::Command::new("du").args(["-sb"]).arg(dir).output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn uploads_are_bounded_while_unpacking_and_quotas_hold() {
    let server = Server::start_with(options(&[
        "--tenant-dataset-quota",
        "1Mi",
        "--tenant-plugin-quota",
        "64Ki",
        "--tenant-result-quota",
        "1",
    ]))
    .await;
    let alice = as_tenant(&server, "alice-key-1234");

    // 1 GiB of zeros in a ~1 MiB upload: refused while unpacking, nothing kept.
    let tmp = tempfile::tempdir().unwrap();
    let task = tmp.path().join("t1");
    std::fs::create_dir_all(&task).unwrap();
    std::fs::write(task.join("task.toml"), TASK_TOML).unwrap();
    std::fs::File::create(task.join("instruction.md")).unwrap().set_len(1 << 30).unwrap();
    let out =
        std::process::Command::new("tar").arg("-czf").arg("-").arg("-C").arg(tmp.path()).arg("t1").output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.len() < 4 << 20, "{}", out.stdout.len());
    let before = du(&server.state_dir);
    let (status, v) = post_dataset(&alice, out.stdout).await;
    assert_eq!(status, 413, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("instruction.md"), "names the file: {v}");
    assert!(v["detail"].as_str().unwrap().contains("upload-max-file-bytes"), "names the limit: {v}");
    assert!(du(&server.state_dir) < before + (8 << 20), "kept what it refused");

    // Many entries: refused by count.
    let many: Vec<(String, Vec<u8>)> = (0..20_001).map(|i| (format!("t1/f{i}"), Vec::new())).collect();
    let entries: Vec<Entry> = many.iter().map(|(p, d)| Entry::File(p, d)).collect();
    let (status, v) = post_dataset(&alice, archive(&entries)).await;
    assert_eq!(status, 413, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("entries"), "{v}");

    // The dataset quota: incompressible data, two uploads that do not fit together.
    let noise = |seed: u8| -> Vec<u8> {
        let mut x = seed as u64 | 1;
        (0..300 << 10)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    };
    let dataset = |seed: u8| {
        let data = noise(seed);
        archive(&[
            Entry::File("t1/task.toml", TASK_TOML),
            Entry::File("t1/instruction.md", b"hi"),
            Entry::File("t1/tests/test.sh", TEST_SH),
            Entry::File("t1/environment/blob.bin", &data),
        ])
    };
    let (status, first) = post_dataset(&alice, dataset(1)).await;
    assert_eq!(status, 201, "{first}");
    let (status, v) = post_dataset(&alice, dataset(2)).await;
    assert_eq!(status, 413, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("quota"), "{v}");
    let (_, listed) = alice.call(Method::GET, "/v1/datasets", None).await;
    assert_eq!(listed["datasets"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["quota_bytes"], 1 << 20, "{listed}");
    // Another tenant neither sees nor deletes it.
    let bob = as_tenant(&server, "bob-key-123456");
    let first_id = first["id"].as_str().unwrap();
    let (status, _) = bob.call(Method::DELETE, &format!("/v1/datasets/{first_id}"), None).await;
    assert_eq!(status, 404);
    let (status, v) = alice.call(Method::DELETE, &format!("/v1/datasets/{first_id}"), None).await;
    assert_eq!(status, 204, "{v}");
    let (status, v) = post_dataset(&alice, dataset(2)).await;
    assert_eq!(status, 201, "freed by the delete: {v}");

    // The plugin quota.
    use base64::Engine;
    let bytes = std::fs::read(orchard_tests::plugin_dir().join("shell.wasm")).unwrap();
    assert!(bytes.len() > 64 << 10);
    let upload = json!({
        "manifest": "name = \"shell\"\nversion = \"9.0.0\"\nkind = \"tool-adapter\"\ncapabilities = [\"sandbox\", \"log\"]\n",
        "component_base64": base64::engine::general_purpose::STANDARD.encode(&bytes),
    });
    let (status, v) = alice.call(Method::PUT, "/v1/plugins/shell", Some(upload)).await;
    assert_eq!(status, 413, "{v}");
    assert!(v.to_string().contains("plugins"), "{v}");

    // The results quota (1 byte): the first job runs, the next waits for a delete.
    let id = v_id(
        &post_dataset(
            &alice,
            archive(&[
                Entry::File("t2/task.toml", TASK_TOML),
                Entry::File("t2/instruction.md", b"hi"),
                Entry::File("t2/tests/test.sh", TEST_SH),
                Entry::File("t2/solution/solve.sh", b"#!/bin/sh\ntrue\n"),
            ]),
        )
        .await,
    );
    let job = json!({"tasks": {"archive": id}, "harnesses": ["oracle"], "tools": ["shell"], "grader": "script",
                     "grants": ["solution"]});
    let (status, v) = alice.call(Method::POST, "/v1/evals", Some(job.clone())).await;
    assert_eq!(status, 201, "{v}");
    let eval = v["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (_, v) = alice.call(Method::GET, &format!("/v1/evals/{eval}"), None).await;
        if v["status"] == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "{v}\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, v) = alice.call(Method::POST, "/v1/evals", Some(job.clone())).await;
    assert_eq!(status, 413, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("results"), "{v}");
    // Bob's results are his own.
    let (status, v) = bob.call(Method::DELETE, &format!("/v1/evals/{eval}"), None).await;
    assert_eq!(status, 404, "{v}");
    let (status, v) = alice.call(Method::DELETE, &format!("/v1/evals/{eval}"), None).await;
    assert_eq!(status, 204, "{v}");
    let (status, v) = alice.call(Method::POST, "/v1/evals", Some(job)).await;
    assert_eq!(status, 201, "freed by the delete: {v}");
}

fn v_id((status, v): &(u16, Value)) -> String {
    assert_eq!(*status, 201, "{v}");
    v["id"].as_str().unwrap().to_string()
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count()
}

/// What the descriptors are (for a failure's message).
fn fd_targets(pid: u32) -> Vec<String> {
    let mut targets: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|t| t.display().to_string())
        .collect();
    targets.sort();
    targets
}

/// The server's TCP connections from `source` still open (by /proc/net/tcp: hex address).
fn connections_from(source: [u8; 4]) -> usize {
    let hex = format!("{:02X}{:02X}{:02X}{:02X}", source[3], source[2], source[1], source[0]);
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap()
        .lines()
        .skip(1)
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // The server's side: remote address is the slow client's, state ESTABLISHED (01).
            f.len() > 3 && f[2].starts_with(&hex) && f[3] == "01"
        })
        .count()
}

/// A connection from `source` (another loopback address: another client) to the server.
async fn connect_from(source: &str, server: &Server) -> std::net::TcpStream {
    let target: std::net::SocketAddr = server.url.trim_start_matches("http://").parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
    let stream = socket.connect(target).await.unwrap().into_std().unwrap();
    stream.set_nonblocking(false).unwrap();
    stream
}

/// Whether the server has closed `stream` (a read answers end of file or a reset).
fn closed(stream: &mut std::net::TcpStream) -> bool {
    stream.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let mut buf = [0u8; 512];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue, // a 408 or 503 before the close
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                return false;
            }
            Err(_) => return true,
        }
    }
}

#[tokio::test]
async fn a_slow_client_neither_starves_another_nor_holds_connections() {
    let server = Server::start_with(options(&[
        "--max-connections-per-client",
        "16",
        "--header-timeout",
        "2",
        "--body-idle-timeout",
        "2",
    ]))
    .await;
    let pid = server.pid().unwrap();
    let alice = as_tenant(&server, "alice-key-1234");
    // Compiled plugins stay open (mapped): count descriptors once they all are.
    wait_ready(&server).await;
    let baseline = open_fds(pid);

    // 40 request heads and 40 bodies that never finish, from 127.0.0.2.
    let (mut heads, mut bodies) = (Vec::new(), Vec::new());
    for _ in 0..40 {
        let mut s = connect_from("127.0.0.2", &server).await;
        let _ = s.write_all(b"GET /v1/evals HTTP/1.1\r\nHost: x\r\nX-Slow: ");
        heads.push(s);
        let mut s = connect_from("127.0.0.2", &server).await;
        let _ = s.write_all(
            b"POST /v1/evals HTTP/1.1\r\nHost: x\r\nX-API-Key: bob-key-123456\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"tasks\":",
        );
        bodies.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another client is served at once, and the server holds no more than the cap for the slow one.
    let started = Instant::now();
    let (status, v) = alice.call(Method::GET, "/v1/evals", None).await;
    assert_eq!(status, 200, "{v}");
    assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    let held = open_fds(pid).saturating_sub(baseline);
    assert!(held <= 16 + 8, "{held} descriptors held for one client (cap 16)");
    let refused_at_once = heads.iter_mut().chain(bodies.iter_mut()).map(closed).filter(|c| *c).count();
    assert!(refused_at_once >= 80 - 16, "only {refused_at_once} of 80 over the cap were closed");

    // Past the header and body deadlines, every slow connection is gone.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let still_open = heads.iter_mut().chain(bodies.iter_mut()).map(closed).filter(|c| !*c).count();
    assert_eq!(still_open, 0, "slow connections still held after their deadline");
    // A few for the other client's pooled connection and the store; none per slow connection.
    assert_eq!(connections_from([127, 0, 0, 2]), 0, "the server still holds the slow client's connections");
    assert!(open_fds(pid) <= baseline + 8, "{:#?}", fd_targets(pid));
    assert!(open_fds(pid) <= baseline + 8, "{} descriptors after the deadline ({baseline} before)", open_fds(pid));
    // And the slow client's address may connect again.
    let mut s = connect_from("127.0.0.2", &server).await;
    s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
}

#[tokio::test]
async fn tenants_learn_nothing_of_each_other_from_names_or_metrics() {
    let server = Server::start_with(options(&["--metrics-token", "ops-token-123456"])).await;
    let alice = as_tenant(&server, "alice-key-1234");
    let bob = as_tenant(&server, "bob-key-123456");
    let (status, a) =
        alice.call(Method::POST, "/sandboxes", Some(json!({"sandbox_id": "worker-1", "image": "host"}))).await;
    assert_eq!(status, 200, "{a}");
    let (status, b) =
        bob.call(Method::POST, "/sandboxes", Some(json!({"sandbox_id": "worker-1", "image": "host"}))).await;
    assert_eq!(status, 200, "another tenant's id is free for bob: {b}");
    assert_eq!(a["sandbox_id"], "worker-1", "{a}");
    assert_eq!(b["sandbox_id"], "worker-1", "{b}");
    // Each reaches its own.
    let ra = alice.sh("worker-1", "echo $((6*7))").await;
    assert_eq!(ra.stdout.text.trim(), "42", "{ra:?}");
    let (status, _) = bob.call(Method::DELETE, "/sandboxes/worker-1", None).await;
    assert_eq!(status, 200);
    let (status, v) = alice.call(Method::GET, "/sandboxes/worker-1", None).await;
    assert_eq!(status, 200, "bob's delete took alice's sandbox: {v}");
    // Her own id is hers: the same create again is the same sandbox, another one a conflict.
    let (status, v) = alice
        .call(Method::POST, "/sandboxes", Some(json!({"sandbox_id": "worker-1", "image": "host", "memory": "1Gi"})))
        .await;
    assert_eq!(status, 409, "alice's own id is taken: {v}");
    assert!(!v.to_string().contains("-worker-1"), "the server's name for it: {v}");
    let (status, _) = alice.call(Method::DELETE, "/sandboxes/worker-1", None).await;
    assert_eq!(status, 200);

    // Metrics: the operator's credential, and no tenant-chosen names in labels.
    let http = orchard_tests::http_client();
    let metrics = |auth: Option<(&'static str, String)>| {
        let mut req = http.get(format!("{}/metrics", server.url));
        if let Some((h, v)) = auth {
            req = req.header(h, v);
        }
        req.send()
    };
    assert_eq!(metrics(None).await.unwrap().status(), 401);
    assert_eq!(metrics(Some(("x-api-key", "alice-key-1234".into()))).await.unwrap().status(), 401);
    let ok = metrics(Some(("authorization", "Bearer ops-token-123456".into()))).await.unwrap();
    assert_eq!(ok.status(), 200);
    let text = ok.text().await.unwrap();
    assert!(text.contains("orchard_"), "{text}");
    assert!(!text.contains("worker-1"), "a tenant's sandbox id in metrics");
    assert_eq!(metrics(Some(("x-api-key", "root-key-123456".into()))).await.unwrap().status(), 200, "an admin key");
}

/// A cookie jar of one: the session cookie a response sets.
fn session_cookie(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("orchard_session=") && !v.starts_with("orchard_session=;"))
        .map(|v| v.split(';').next().unwrap().to_string())
}

#[tokio::test]
async fn web_sessions_end_at_sign_out_and_sign_in_is_only_from_this_origin() {
    let server = Server::start_with(options(&[])).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .unwrap();
    let login = |headers: Vec<(&'static str, String)>| {
        let mut req = http
            .post(format!("{}/ui/login", server.url))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("api_key=alice-key-1234&next=%2Fui");
        for (k, v) in headers {
            req = req.header(k, v);
        }
        req.send()
    };
    // Another site's page auto-posting its own key: refused, no cookie.
    let host = server.url.trim_start_matches("http://").to_string();
    for headers in [
        vec![("origin", "https://evil.example".to_string())],
        vec![("sec-fetch-site", "cross-site".to_string()), ("origin", "https://evil.example".to_string())],
        vec![("origin", "null".to_string())],
    ] {
        let resp = login(headers.clone()).await.unwrap();
        assert_eq!(resp.status(), 403, "{headers:?}");
        assert!(session_cookie(&resp).is_none(), "{headers:?}");
    }
    // From this server's own page.
    let resp =
        login(vec![("origin", format!("http://{host}")), ("sec-fetch-site", "same-origin".into())]).await.unwrap();
    assert_eq!(resp.status(), 303);
    let cookie = session_cookie(&resp).expect("a session");
    let page = http.get(format!("{}/ui", server.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    let csrf = html.split("name=\"csrf\" value=\"").nth(1).unwrap().split('"').next().unwrap().to_string();

    // Sign out: the same cookie never opens a page again.
    let resp = http
        .post(format!("{}/ui/logout", server.url))
        .header("cookie", &cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("csrf={csrf}"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 303);
    let again = http.get(format!("{}/ui", server.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(again.status(), 303, "the old cookie still opens the UI");
    assert!(again.headers()["location"].to_str().unwrap().starts_with("/ui/login"));
    // A restart keeps the revocation (every replica reads it from the store).
    let mut server = server;
    let state = server.state_dir.clone();
    server.stop();
    let mut opts = options(&[]);
    opts.state_dir = Some(state);
    let restarted = Server::start_with(opts).await;
    let after = http.get(format!("{}/ui", restarted.url)).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(after.status(), 303, "revocation lost on restart");
}

async fn wait_ready(server: &Server) {
    let http = orchard_tests::http_client();
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let status = http.get(format!("{}/ready", server.url)).send().await.unwrap().status();
        if status == 200 {
            return;
        }
        assert!(Instant::now() < deadline, "never ready\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test]
async fn health_answers_at_once_and_ready_when_plugins_are_compiled() {
    // A cold plugin cache: every shipped plugin must compile.
    let cache = tempfile::tempdir().unwrap();
    let mut opts = options(&[]);
    opts.env.push(("ORCHARD_PLUGIN_CACHE".into(), cache.path().display().to_string()));
    let started = Instant::now();
    let server = Server::start_with(opts).await;
    let http = orchard_tests::http_client();
    let health = http.get(format!("{}/health", server.url)).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let first_ready = http.get(format!("{}/ready", server.url)).send().await.unwrap().status();
    assert_eq!(first_ready, 503, "ready before any plugin compiled");
    let answered_in = started.elapsed();
    wait_ready(&server).await;
    eprintln!("health in {answered_in:?}, ready after {:?}", started.elapsed());
    assert!(answered_in < Duration::from_secs(10), "{answered_in:?}");
}
