//! `/v1/openapi.json` against the server that publishes it: every `/v1` route the router has is
//! in the document and every documented operation is routed, and Schemathesis (a real client
//! that reads only the document) finds no server error, no undocumented status or content type
//! and no answer that breaks its schema, with real ids of a live sandbox, session and job.

use std::collections::BTreeSet;
use std::path::Path;

use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::{Value, json};

/// The `/v1` routes in the router's source: (METHOD, path). Each `.route("...", ...)` of the
/// files whose routers are nested under `/v1`, and the `/v1/...` routes of the top router.
fn routes_in_source() -> BTreeSet<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let files = [
        ("host/server/src/routes_v1.rs", "/v1"),
        ("host/server/src/routes_plugins.rs", "/v1"),
        ("host/server/src/routes_desktop.rs", "/v1"),
        ("host/evals-api/src/lib.rs", "/v1"),
        ("host/groups/src/http.rs", "/v1"),
        ("host/model-proxy/src/http.rs", "/v1"),
        ("host/openenv/src/lib.rs", "/v1"),
        ("host/server/src/lib.rs", ""),
    ];
    let method = regex::Regex::new(r"\b(get|post|put|delete|patch)\(").unwrap();
    let mut out = BTreeSet::new();
    for (file, prefix) in files {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        for call in text.split(".route(\"").skip(1) {
            let (path, rest) = call.split_once('"').unwrap();
            // A wildcard (`{*path}`) is documented as the parameter it is (`{path}`).
            let full = format!("{prefix}{path}").replace("{*", "{");
            if !full.starts_with("/v1/") {
                continue;
            }
            // The methods of this call: each `.route(...)` is on one line.
            let rest = rest.lines().next().unwrap_or(rest);
            for m in method.captures_iter(rest) {
                out.insert((m[1].to_uppercase(), full.clone()));
            }
        }
    }
    out
}

fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            if ["get", "post", "put", "delete", "patch"].contains(&method.as_str()) {
                out.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    out
}

#[tokio::test]
async fn the_document_has_every_v1_route_and_every_operation_in_it_is_routed() {
    let server =
        Server::start_with(ServerOptions { api_keys: Some("alice:alice-key-1234".into()), ..Default::default() }).await;
    // Public, like /v1/ready: a client reads it before it has a key.
    let resp = server.http.get(format!("{}/v1/openapi.json", server.url)).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let doc: Value = resp.json().await.unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."), "{}", doc["openapi"]);

    let source = routes_in_source();
    assert!(source.len() > 30, "the source scan found too little: {source:?}");
    let doc_ops = documented(&doc);
    let undocumented: Vec<_> = source.difference(&doc_ops).collect();
    let unrouted: Vec<_> = doc_ops.difference(&source).collect();
    assert!(undocumented.is_empty(), "routes missing from /v1/openapi.json: {undocumented:?}");
    assert!(unrouted.is_empty(), "documented but not in the router: {unrouted:?}");

    // Every documented operation reaches a handler: never the router's 404 or 405. A handler's
    // refusal is JSON with a `kind`; the router's own answers are not.
    let server = server.with_key("alice-key-1234");
    for (method, path) in &doc_ops {
        let concrete = path.replace("{name}", "some-name").replace('{', "x-").replace('}', "");
        let resp = server.request(Method::from_bytes(method.as_bytes()).unwrap(), &concrete).send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap();
        assert_ne!(status, 405, "{method} {path}");
        if status == 404 {
            let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            assert!(v["kind"].is_string(), "{method} {path}: the router's 404, not a handler's: {body:?}");
        }
    }

    // Request bodies are described by their schemas (a client generator needs them).
    let create = &doc["paths"]["/v1/sandboxes"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert_eq!(create["$ref"], "#/components/schemas/CreateBody", "{create}");
    let spec = &doc["components"]["schemas"]["EvalSpec"];
    for field in ["tasks", "harnesses", "grader"] {
        assert!(spec["required"].as_array().unwrap().iter().any(|f| f == field), "{spec}");
    }
}

#[tokio::test]
async fn schemathesis_finds_nothing_wrong_with_the_api() {
    let st = which("st").expect("schemathesis (`st`) is missing: run `cargo xtask setup`");
    let server =
        Server::start_with(ServerOptions { api_keys: Some("alice:alice-key-1234".into()), ..Default::default() })
            .await
            .with_key("alice-key-1234");
    // Live ids, so that the operations on a sandbox, a session and a job reach their logic.
    let sandbox = server.create_host().await;
    let (_, session) = server.call(Method::POST, &format!("/v1/sandboxes/{sandbox}/sessions"), Some(json!({}))).await;
    let sid = session["session_id"].as_str().or(session["id"].as_str()).expect("session id").to_string();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("schemathesis.toml");
    std::fs::write(
        &config,
        format!(
            "[[operations]]\ninclude-path-regex = '^/v1/sandboxes/\\{{id\\}}'\nparameters = {{ \"path.id\" = \"{sandbox}\", \"path.sid\" = \"{sid}\" }}\n"
        ),
    )
    .unwrap();
    let out = std::process::Command::new(st)
        .current_dir(dir.path())
        .args(["--config-file", config.to_str().unwrap(), "run", &format!("{}/v1/openapi.json", server.url)])
        // One worker, so that the seeded run is the same every time: with two, Python 3.11's `ast`
        // failed inside Hypothesis once ("SystemError: AST constructor recursion depth mismatch",
        // CPython gh-106905, while Hypothesis described a lambda) and Schemathesis reported that
        // as an error of the operation it was generating for.
        .args(["-H", "X-API-Key: alice-key-1234", "--max-examples", "10", "-w", "1", "--seed", "1"])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        ])
        // Deleting the sandbox half-way would leave the rest of its operations nothing to test.
        .args(["--exclude-name", "DELETE /v1/sandboxes/{id}"])
        // The desktop routes start real X servers, and the port routes pass on whatever a service
        // in the sandbox answers (a 5xx of its own included): no fixed schema describes those.
        .args(["--exclude-path-regex", "/(desktop|ports/)"])
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{report}\n{}\n{}", String::from_utf8_lossy(&out.stderr), server.log());
    // It really ran the operations (a broken document would have it test nothing).
    assert!(report.contains("Tested:") && !report.contains("Tested: 0"), "{report}");
    // And nothing it sent took the server down (a fresh connection: the pooled one sat idle
    // through the whole run, longer than the server keeps an idle connection).
    let fresh = orchard_tests::http_client();
    let ready = fresh.get(format!("{}/v1/ready", server.url)).send().await;
    let status = ready.as_ref().map(|r| r.status().as_u16());
    assert_eq!(status.as_ref().ok(), Some(&200), "{ready:?}\n{}", server.log());
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}
