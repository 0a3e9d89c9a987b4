//! What an API client may ask of a shared server: no host paths as images, registry pulls only
//! where the operator allows, resource defaults and maxima, and per-tenant quotas.

use std::time::Duration;

use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::{Value, json};

async fn refused(server: &Server, body: Value, status: u16, field: &str) -> Value {
    let (got, v) = server.call(Method::POST, "/sandboxes", Some(body.clone())).await;
    assert_eq!(got, status, "{body} -> {v}");
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(detail.starts_with(&format!("{field}:")) || detail.contains(field), "{body}: {v} does not name {field}");
    v
}

#[tokio::test]
async fn a_client_cannot_name_a_host_path_as_its_image() {
    let server = Server::start().await;
    for image in
        ["/", "/etc", "dir:/", "oci:/", "oci-archive:/etc/passwd", "docker-archive:/etc/passwd", "./state", "../"]
    {
        let v = refused(&server, json!({"image": image}), 400, "image").await;
        assert!(v["detail"].as_str().unwrap().contains("local paths are not images"), "{image}: {v}");
    }
    // The same over /v1, and for batches.
    let (status, v) = server.call(Method::POST, "/v1/sandboxes", Some(json!({"image": "/"}))).await;
    assert_eq!(status, 400, "{v}");
    let (status, v) =
        server.call(Method::POST, "/v1/sandboxes/batch", Some(json!({"image": "dir:/", "count": 2}))).await;
    assert_eq!(status, 400, "{v}");
    let (_, listed) = server.call(Method::GET, "/sandboxes", None).await;
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 0, "nothing was created: {listed}");
}

#[tokio::test]
async fn image_roots_admit_what_is_under_them_and_nothing_that_resolves_outside() {
    let tmp = tempfile::tempdir().unwrap();
    let roots = tmp.path().join("images");
    let rootfs = roots.join("tiny");
    std::fs::create_dir_all(rootfs.join("bin")).unwrap();
    std::fs::create_dir_all(rootfs.join("data")).unwrap();
    std::fs::write(rootfs.join("data/marker"), "inside the image root\n").unwrap();
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    for tool in ["sh", "cat"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(tool)).unwrap();
    }
    // A symlink out of the root, and a sibling directory the `..` form reaches.
    std::os::unix::fs::symlink("/", roots.join("to-host-root")).unwrap();
    std::fs::create_dir_all(tmp.path().join("outside")).unwrap();
    let server = Server::with_image_root(&roots).await;

    let id = server.create(json!({"image": rootfs.display().to_string()})).await;
    let r = server.exec(&id, json!({"command": ["cat", "/data/marker"]})).await;
    assert_eq!(r.stdout.text, "inside the image root\n", "{r:?}");
    for image in [
        roots.join("to-host-root").display().to_string(),
        format!("dir:{}/to-host-root/etc", roots.display()),
        format!("{}/tiny/../../outside", roots.display()),
        format!("{}/..", roots.display()),
        roots.display().to_string(),
        "/etc".to_string(),
    ] {
        let v = refused(&server, json!({"image": image}), 400, "image").await;
        assert!(v["detail"].as_str().unwrap().contains("image roots"), "{image}: {v}");
    }
}

#[tokio::test]
async fn registry_pulls_go_only_to_allowed_registries() {
    // A listener standing in for a registry on the server's own network: it must never be
    // contacted.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::start().await;
    for image in [format!("{addr}/internal/app:1"), format!("localhost:{}/x", addr.port()), "10.0.0.5/app:1".into()] {
        let v = refused(&server, json!({"image": image}), 400, "image").await;
        assert!(v["detail"].as_str().unwrap().contains("not one this server pulls from"), "{v}");
    }
    assert!(listener.accept().is_err(), "the server contacted a registry it does not allow");
    drop(listener);

    // The operator's own registries are allowed by name.
    let server = Server::start_with(ServerOptions {
        extra_args: vec!["--allowed-registry".into(), addr.to_string()],
        ..Default::default()
    })
    .await;
    let (status, v) = server.call(Method::POST, "/sandboxes", Some(json!({"image": format!("{addr}/x:1")}))).await;
    // Allowed, so it was tried: the listener is no registry, so the pull fails (not a refusal).
    assert_ne!(status, 200, "{v}");
    assert!(!v["detail"].as_str().unwrap_or_default().contains("not one this server pulls from"), "{v}");
}

#[tokio::test]
async fn the_host_image_is_the_operators_choice() {
    let server = Server::start_with(ServerOptions {
        extra_args: vec!["--host-image".into(), "deny".into()],
        ..Default::default()
    })
    .await;
    let v = refused(&server, json!({"image": "host"}), 400, "image").await;
    assert!(v["detail"].as_str().unwrap().contains("not allowed"), "{v}");
}

#[tokio::test]
async fn resources_get_defaults_and_requests_above_the_maxima_are_refused() {
    let server = Server::start_with(ServerOptions {
        extra_args: ["--default-memory", "64Mi", "--max-memory", "1Gi", "--max-cpu", "4", "--max-pids", "5000"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    })
    .await;
    // No memory asked for: the default applies, and it is enforced.
    let id = server.create(json!({"image": "host"})).await;
    let (_, info) = server.call(Method::GET, &format!("/sandboxes/{id}"), None).await;
    assert_eq!((info["memory"].as_str(), info["cpu"].as_str()), (Some("64Mi"), Some("2")), "{info}");
    assert_eq!(info["pids"], 4096, "{info}");
    let r = server.sh(&id, "perl -e '$x = \"a\" x (300*1024*1024); print \"survived\\n\"'").await;
    assert_eq!(r.exit_code, 137, "the default memory limit was not enforced: {r:?}");

    for (body, field) in [
        (json!({"image": "host", "memory": "2Gi"}), "memory"),
        (json!({"image": "host", "cpu": 8}), "cpu"),
        (json!({"image": "host", "pids": 6000}), "pids"),
        (json!({"image": "host", "disk": "1Ti"}), "disk"),
    ] {
        let v = refused(&server, body, 400, field).await;
        assert!(v["detail"].as_str().unwrap().contains("at most"), "{v}");
    }
}

#[tokio::test]
async fn a_tenant_at_its_quota_waits_and_the_others_do_not() {
    let server = Server::start_with(ServerOptions {
        api_keys: Some("alice:alice-key-1234,bob:bob-key-12345".into()),
        extra_args: ["--tenant-quota", "sandboxes=2", "--tenant-quota", "bob:memory=3Gi"].map(String::from).to_vec(),
        ..Default::default()
    })
    .await;
    let alice = Server::attach(&server.url, &server.state_dir).with_key("alice-key-1234");
    let bob = Server::attach(&server.url, &server.state_dir).with_key("bob-key-12345");
    let first = alice.create(json!({"image": "host"})).await;
    alice.create(json!({"image": "host"})).await;
    let resp = alice.request(Method::POST, "/sandboxes").json(&json!({"image": "host"})).send().await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "5");
    let v: Value = resp.json().await.unwrap();
    assert!(v["detail"].as_str().unwrap().contains("quota of 2 sandboxes"), "{v}");
    let (status, v) = alice.call(Method::POST, "/v1/sandboxes/batch", Some(json!({"image": "host", "count": 1}))).await;
    assert_eq!(status, 429, "{v}");

    // Bob is not starved by Alice, but has his own memory quota: 2 GiB each by default.
    bob.create(json!({"image": "host"})).await;
    let (status, v) = bob.call(Method::POST, "/sandboxes", Some(json!({"image": "host"}))).await;
    assert_eq!(status, 429, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("3 GiB of sandbox memory"), "{v}");
    bob.create(json!({"image": "host", "memory": "512Mi"})).await;

    // Deleting gives room back; so does idle expiry (the ledger follows the backend).
    let (status, _) = alice.call(Method::DELETE, &format!("/sandboxes/{first}"), None).await;
    assert_eq!(status, 200);
    let third = alice.create(json!({"image": "host", "timeout": 1})).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, _) = alice.call(Method::GET, &format!("/sandboxes/{third}"), None).await;
    assert_eq!(status, 404, "the idle sandbox was not reaped");
    alice.create(json!({"image": "host"})).await;
}

#[tokio::test]
async fn creates_over_a_tenants_rate_are_told_when_to_retry_and_a_storm_starts_a_few_at_a_time() {
    let server = Server::start_with(ServerOptions {
        api_keys: Some("alice:alice-key-1234,bob:bob-key-12345".into()),
        // A token every 5 s: the two creates below, one starting at a time, may take a few
        // seconds on a loaded machine (at 0.5/s a token came back before the third was asked).
        extra_args: ["--tenant-create-rate", "0.2/s,burst=2", "--create-rate", "100/s", "--max-starting", "1"]
            .map(String::from)
            .to_vec(),
        ..Default::default()
    })
    .await;
    let alice = Server::attach(&server.url, &server.state_dir).with_key("alice-key-1234");
    let bob = Server::attach(&server.url, &server.state_dir).with_key("bob-key-12345");
    // Two at once (the burst) pass, one permit at a time.
    let (a, b) = tokio::join!(alice.create(json!({"image": "host"})), alice.create(json!({"image": "host"})));
    assert_ne!(a, b);
    let resp = alice.request(Method::POST, "/sandboxes").json(&json!({"image": "host"})).send().await.unwrap();
    assert_eq!(resp.status(), 429);
    let wait: u64 = resp.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=5).contains(&wait), "retry after {wait} s");
    let v: Value = resp.json().await.unwrap();
    assert!(v["detail"].as_str().unwrap().contains("tenant's create rate (0.2/s, bursts of 2)"), "{v}");
    // A batch larger than the burst can never pass: refused, not delayed.
    let (status, v) = bob.call(Method::POST, "/v1/sandboxes/batch", Some(json!({"image": "host", "count": 3}))).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("count"), "{v}");
    // Bob's rate is his own; after the wait, Alice's next create passes.
    bob.create(json!({"image": "host"})).await;
    tokio::time::sleep(Duration::from_secs(wait)).await;
    alice.create(json!({"image": "host"})).await;
}
