//! Forking a sandbox over the API: the children's filesystems are the source's at that moment —
//! new files, changed owners, deleted image files — while processes are not carried, the source
//! keeps running, and each copy goes its own way afterwards.

use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::json;

/// With a disk limit (the server's default) the layer lives in a filesystem image mounted in the
/// sandbox's own namespace; without one it is a directory on the host's disk.
#[tokio::test(flavor = "multi_thread")]
async fn children_of_a_disk_limited_sandbox_start_with_its_files() {
    fork_and_check(vec![], true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn children_of_a_sandbox_without_a_disk_limit_start_with_its_files() {
    fork_and_check(vec!["--default-disk".into(), "none".into()], false).await;
}

async fn fork_and_check(extra_args: Vec<String>, disk_limited: bool) {
    let server = Server::start_with(ServerOptions {
        api_keys: Some("alice:alice-key-1234,bob:bob-key-5678".into()),
        extra_args,
        ..Default::default()
    })
    .await
    .with_key("alice-key-1234");
    let source = server.create_host().await;
    let disk = server.call(Method::GET, &format!("/v1/sandboxes/{source}"), None).await.1["disk"].clone();
    assert_eq!(disk.is_u64(), disk_limited, "{disk}");
    let setup = server
        .sh(
            &source,
            "mkdir -p /workspace/repo && echo v1 > /workspace/repo/file && \
             head -c 5000000 /dev/urandom > /workspace/blob && sha256sum /workspace/blob | cut -c1-64 > /workspace/blob.sum && \
             touch /workspace/owned && chown 1000:1000 /workspace/owned && \
             rm /etc/mime.types && echo changed > /etc/motd && \
             (sleep 1000 & echo $! > /workspace/sleeper.pid)",
        )
        .await;
    assert_eq!(setup.exit_code, 0, "{}", setup.stderr.text);

    let (status, forked) =
        server.call(Method::POST, &format!("/v1/sandboxes/{source}/fork"), Some(json!({"count": 2}))).await;
    assert_eq!(status, 201, "{forked}\n{}", server.log());
    let children: Vec<String> =
        forked["sandboxes"].as_array().unwrap().iter().map(|s| s["sandbox_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(children.len(), 2);
    for child in &forked["sandboxes"].as_array().unwrap()[..] {
        assert_eq!(child["disk"], disk, "the children have the source's spec");
    }

    for child in &children {
        let r = server
            .sh(
                child,
                "cat /workspace/repo/file; sha256sum /workspace/blob | cut -c1-64; cat /workspace/blob.sum; \
                 stat -c %u:%g /workspace/owned; test -e /etc/mime.types && echo mime-present || echo mime-gone; cat /etc/motd; \
                 kill -0 $(cat /workspace/sleeper.pid) 2>/dev/null && echo sleeper-here || echo no-sleeper; echo $HOSTNAME",
            )
            .await;
        let lines: Vec<&str> = r.stdout.text.lines().collect();
        assert_eq!(lines[0], "v1", "{}", r.stdout.text);
        assert_eq!(lines[1], lines[2], "the 5 MB file is the same bytes");
        assert_eq!(lines[3], "1000:1000", "owners inside are kept (their host ids moved to the child's range)");
        assert_eq!(lines[4], "mime-gone", "a file deleted from the image stays deleted");
        assert_eq!(lines[5], "changed");
        assert_eq!(lines[6], "no-sleeper", "processes are not carried");
        assert_eq!(lines[7], child.as_str());
    }
    // Each goes its own way; the source was thawed and still runs its process.
    server.sh(&children[0], "echo v2 > /workspace/repo/file").await;
    let other = server.sh(&children[1], "cat /workspace/repo/file").await;
    let original =
        server.sh(&source, "cat /workspace/repo/file; kill -0 $(cat /workspace/sleeper.pid) && echo alive").await;
    assert_eq!(other.stdout.text, "v1\n");
    assert_eq!(original.stdout.text, "v1\nalive\n");

    // Another tenant's sandbox is not found; counts are bounded.
    let bob = Server::attach(&server.url, &server.state_dir).with_key("bob-key-5678");
    let (status, _) = bob.call(Method::POST, &format!("/v1/sandboxes/{source}/fork"), Some(json!({"count": 1}))).await;
    assert_eq!(status, 404);
    let (status, v) =
        server.call(Method::POST, &format!("/v1/sandboxes/{source}/fork"), Some(json!({"count": 0}))).await;
    assert_eq!(status, 422, "{v}");
    assert!(v.to_string().contains("count"), "{v}");
}

/// Without root there is no freezer (no cgroups to write): the fork goes by tar through the
/// agents, from the running source. Needs the `orchard-test` account `cargo xtask setup` makes.
#[tokio::test(flavor = "multi_thread")]
async fn an_unprivileged_host_forks_by_tar() {
    use std::io::BufRead;
    use std::os::unix::process::CommandExt;
    let user = orchard_tests::UNPRIVILEGED_USER;
    let dir = orchard_tests::unprivileged_install();
    let (bin, state) = (dir.path().join("bin"), dir.path().join("state"));
    let mut child = std::process::Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(bin.join("orchard"))
        .args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
        .arg(&state)
        // No cgroups and no loop devices without root: no limits either.
        .args(["--default-memory", "none", "--default-cpu", "none", "--default-pids", "none", "--default-disk", "none"])
        .env("ORCHARD_AGENT_BIN", bin.join("agent"))
        .env("ORCHARD_PLUGIN_DIR", orchard_tests::plugin_dir())
        .env_remove("ORCHARD_API_KEYS")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .spawn()
        .unwrap();
    // The whole group goes whatever happens (runuser and the server under it, which deletes its
    // sandboxes on TERM).
    struct Group(std::process::Child);
    impl Drop for Group {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill").args(["-TERM", "--", &format!("-{}", self.0.id())]).status();
            let _ = self.0.wait();
        }
    }
    let stderr = child.stderr.take().unwrap();
    let _group = Group(child);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("serving on http://").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
            }
        }
    });
    let addr = rx.recv_timeout(std::time::Duration::from_secs(60)).expect("the unprivileged server started");
    let server = Server::attach(&format!("http://{addr}"), &state);
    let source = server.create_host().await;
    let setup = server
        .sh(&source, "mkdir -p /workspace/repo && echo v1 > /workspace/repo/file && echo root > /root/note")
        .await;
    assert_eq!(setup.exit_code, 0, "{}", setup.stderr.text);
    let (status, forked) =
        server.call(Method::POST, &format!("/v1/sandboxes/{source}/fork"), Some(json!({"count": 1}))).await;
    assert_eq!(status, 201, "{forked}");
    assert!(forked["source_paused_seconds"].is_null(), "by tar, not frozen: {forked}");
    let copy = forked["sandboxes"][0]["sandbox_id"].as_str().unwrap().to_string();
    let seen = server.sh(&copy, "cat /workspace/repo/file /root/note").await;
    server.sh(&copy, "echo v2 > /workspace/repo/file").await;
    let original = server.sh(&source, "cat /workspace/repo/file").await;
    assert_eq!(seen.stdout.text, "v1\nroot\n", "{}", seen.stderr.text);
    assert_eq!(original.stdout.text, "v1\n");
}
