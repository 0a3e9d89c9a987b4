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
