//! The API's contract: authentication and tenants, errors that name the field, request ids.

use orchard_tests::{Server, ServerOptions};
use serde_json::json;

#[tokio::test]
async fn keys_authenticate_and_tenants_are_isolated() {
    let keys = "alice:alice-key-123,bob:bob-key-4567";
    let server = Server::start_with(ServerOptions { api_keys: Some(keys.into()), ..Default::default() }).await;
    let (status, v) = server.call(reqwest::Method::GET, "/sandboxes", None).await;
    assert_eq!(status, 401, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("X-API-Key"));
    let wrong = clone_view(&server).with_key("nope-nope");
    assert_eq!(wrong.call(reqwest::Method::GET, "/sandboxes", None).await.0, 403);
    // Probes need no key.
    assert_eq!(server.call(reqwest::Method::GET, "/health", None).await.1, json!({"status": "healthy"}));

    let alice = clone_view(&server).with_key("alice-key-123");
    let bob = clone_view(&server).with_key("bob-key-4567");
    let id = alice.create_host().await;
    let (_, v) = alice.call(reqwest::Method::GET, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(v["namespace"], "alice");
    for (method, path, body) in [
        (reqwest::Method::GET, format!("/sandboxes/{id}"), None),
        (reqwest::Method::POST, format!("/sandboxes/{id}/exec"), Some(json!({"command": "true"}))),
        (reqwest::Method::GET, format!("/sandboxes/{id}/files?path=/etc/passwd"), None),
        (reqwest::Method::POST, format!("/v1/sandboxes/{id}/exec"), Some(json!({"command": "true"}))),
        (reqwest::Method::DELETE, format!("/sandboxes/{id}"), None),
    ] {
        let (status, v) = bob.call(method.clone(), &path, body).await;
        assert_eq!(status, 404, "bob reached alice's sandbox with {method} {path}: {v}");
    }
    let (_, list) = bob.call(reqwest::Method::GET, "/sandboxes", None).await;
    assert!(list["sandboxes"].as_array().unwrap().is_empty());
    // Bob cannot read Alice's jobs either.
    let (_, job) =
        alice.call(reqwest::Method::POST, &format!("/sandboxes/{id}/exec"), Some(json!({"command": "true"}))).await;
    let (status, _) = bob.call(reqwest::Method::GET, &format!("/jobs/{}", job["job_id"].as_str().unwrap()), None).await;
    assert_eq!(status, 404);
    // The PTY takes the key as a query parameter; a wrong one is refused before upgrading.
    let ws = format!("{}/sandboxes/{id}/exec/pty?api_key=bob-key-4567", server.url.replace("http://", "ws://"));
    assert!(tokio_tungstenite::connect_async(ws).await.is_err());
    let ws = format!("{}/sandboxes/{id}/exec/pty?api_key=alice-key-123", server.url.replace("http://", "ws://"));
    assert!(tokio_tungstenite::connect_async(ws).await.is_ok());
}

/// A second handle on the same running server.
fn clone_view(s: &Server) -> Server {
    Server::attach(&s.url, &s.state_dir)
}

#[tokio::test]
async fn the_server_refuses_to_serve_openly_without_keys() {
    let out = std::process::Command::new(orchard_tests::orchard_bin())
        .args(["serve", "--listen", "0.0.0.0:0", "--state-dir", "/tmp/orchard-refuse-test"])
        .env_remove("ORCHARD_API_KEYS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to listen on 0.0.0.0:0 without API keys"));
}

#[tokio::test]
async fn bad_input_gets_a_4xx_naming_the_field_and_every_answer_has_a_request_id() {
    let server = Server::start().await;
    let cases = [
        (json!({}), "image"),
        (json!({"image": "host", "block_network": "yes"}), "block_network"),
        (json!({"image": "host", "memory": "lots"}), "memory"),
        (json!({"image": "host", "cpu": -1}), "cpu"),
        (json!({"image": "host", "sandbox_id": "Bad_ID!"}), "sandbox_id"),
        (json!({"image": "/definitely/not/here"}), "/definitely/not/here"),
    ];
    for (body, field) in cases {
        let (status, v) = server.call(reqwest::Method::POST, "/sandboxes", Some(body.clone())).await;
        assert!((400..500).contains(&status), "{body} -> {status} {v}");
        assert!(v["detail"].as_str().unwrap().contains(field), "{body}: {v} does not name {field}");
    }
    let resp = server.request(reqwest::Method::POST, "/sandboxes").body("{not json").send().await.unwrap();
    assert!(resp.status().is_client_error());
    let id = server.create_host().await;
    let (status, v) =
        server.call(reqwest::Method::POST, &format!("/sandboxes/{id}/exec"), Some(json!({"command": []}))).await;
    assert_eq!(status, 422);
    assert!(v["detail"].as_str().unwrap().contains("command"), "{v}");
    let (status, v) = server
        .call(
            reqwest::Method::POST,
            &format!("/sandboxes/{id}/exec"),
            Some(json!({"command": "true", "timeout_seconds": -3})),
        )
        .await;
    assert_eq!(status, 422);
    assert!(v["detail"].as_str().unwrap().contains("timeout_seconds"), "{v}");
    // A different create under a taken id is a conflict; repeating the same create (a client's
    // retry of a POST whose answer it lost) answers the sandbox it made.
    let (status, v) = server
        .call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": "host", "sandbox_id": id, "memory": "1Gi"})))
        .await;
    assert_eq!(status, 409, "{v}");
    let (status, v) =
        server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": "host", "sandbox_id": id}))).await;
    assert_eq!((status, v["sandbox_id"].as_str()), (200, Some(id.as_str())), "{v}");
    let (status, _) = server.call(reqwest::Method::GET, "/sandboxes/sb-nope", None).await;
    assert_eq!(status, 404);
    let (status, v) = server.call(reqwest::Method::GET, &format!("/sandboxes/{id}/wait?timeout=5"), None).await;
    assert_eq!((status, v["status"].as_str()), (200, Some("ready")));

    let resp = server
        .request(reqwest::Method::GET, "/sandboxes/sb-nope")
        .header("X-Request-ID", "trace-me-123")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-request-id"], "trace-me-123");
    for path in ["/", "/health", "/sandboxes", "/nope"] {
        let resp = server.request(reqwest::Method::GET, path).send().await.unwrap();
        assert!(!resp.headers()["x-request-id"].is_empty(), "{path}");
    }
    let (_, banner) = server.call(reqwest::Method::GET, "/", None).await;
    assert_eq!(banner["service"], "orchard");
    assert_eq!(banner["status"], "running");
}

#[tokio::test]
async fn plugins_are_listed_and_swapped_over_http() {
    use base64::Engine;
    let server = Server::start().await;
    let (status, v) = server.call(reqwest::Method::GET, "/v1/plugins", None).await;
    assert_eq!(status, 200, "{v}");
    let names: Vec<&str> = v["plugins"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    for shipped in ["oracle", "react", "script", "shell"] {
        assert!(names.contains(&shipped), "{names:?}");
    }
    let bytes = std::fs::read(orchard_tests::test_plugin_dir().join("test-harness.wasm")).unwrap();
    let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let upload = |version: &str| {
        json!({
            "manifest": format!("name = \"fixture\"\nversion = \"{version}\"\nkind = \"harness\"\ncapabilities = [\"tools\"]\n"),
            "component_base64": b64,
        })
    };
    let (status, v) = server.call(reqwest::Method::PUT, "/v1/plugins/fixture", Some(upload("1.0.0"))).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!((v["replaced"].as_bool(), v["plugin"]["version"].as_str()), (Some(false), Some("1.0.0")));
    let (status, v) = server.call(reqwest::Method::PUT, "/v1/plugins/fixture", Some(upload("2.0.0"))).await;
    assert_eq!((status, v["replaced"].as_bool()), (200, Some(true)), "{v}");
    let (_, v) = server.call(reqwest::Method::GET, "/v1/plugins", None).await;
    let fixture = v["plugins"].as_array().unwrap().iter().find(|p| p["name"] == "fixture").unwrap().clone();
    assert_eq!(fixture["version"], "2.0.0");
    // A component that fits no world is refused with the reason, and nothing changes.
    let junk = std::fs::read(orchard_tests::test_plugin_dir().join("test-no-world.wasm")).unwrap();
    let resp = server
        .request(reqwest::Method::PUT, "/v1/plugins/junk")
        .header("content-type", "application/wasm")
        .body(junk)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    assert!(resp.text().await.unwrap().contains("fits no orchard:plugin world"));
    let (status, v) = server.call(reqwest::Method::PUT, "/v1/plugins/other-name", Some(upload("3.0.0"))).await;
    assert_eq!(status, 422, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("names the plugin \"fixture\""), "{v}");
}
