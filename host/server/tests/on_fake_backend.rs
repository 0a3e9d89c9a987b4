//! The service's sandbox API on the in-process fake backend: no root, no namespaces, a real
//! server on loopback. Tenant scoping, the compatible and `/v1` routes, forwarded file and tar
//! streams, and the errors a client sees.

use std::sync::Arc;

use orchard_admission::Admission;
use orchard_sandbox::Backend;
use orchard_sandbox_fake::{FakeBackend, exited};
use orchard_server::{ApiKeys, AppState, router};
use serde_json::{Value, json};

struct Server {
    url: String,
    http: reqwest::Client,
    backend: Arc<FakeBackend>,
}

impl Server {
    async fn start(backend: FakeBackend) -> Server {
        // reqwest is built without a default TLS provider in this workspace.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let backend = Arc::new(backend);
        let keys = ApiKeys::parse("alice:alice-key-1,bob:bob-key-22").unwrap();
        let state = AppState::new(backend.clone(), keys, Arc::new(Admission::default()), None);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router(state)).await });
        Server { url, http: reqwest::Client::new(), backend }
    }

    fn as_(&self, key: &str, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.url)).bearer_auth(key)
    }

    async fn json(&self, key: &str, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let r = self.as_(key, method, path).json(&body).send().await.unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

const ALICE: &str = "alice-key-1";
const BOB: &str = "bob-key-22";

#[tokio::test]
async fn a_tenant_works_in_its_sandbox_and_another_cannot_see_it() {
    let server = Server::start(FakeBackend::new().with_exec(|call| match call.line().as_str() {
        "whoami" => exited(0, "fake\n", ""),
        other => exited(127, "", &format!("{other}: not scripted")),
    }))
    .await;
    let (status, made) =
        server.json(ALICE, reqwest::Method::POST, "/sandboxes", json!({"image": "host", "sandbox_id": "web"})).await;
    assert_eq!(status, 200, "{made}");
    assert_eq!(made["sandbox_id"], "web", "{made}");
    // The backend holds it under Alice's scoped id, not the name she chose.
    let stored = server.backend.list().await;
    assert_eq!(stored.len(), 1);
    assert_ne!(stored[0].id, "web");

    let (status, job) = server
        .json(ALICE, reqwest::Method::POST, "/sandboxes/web/exec", json!({"command": "whoami", "wait": true}))
        .await;
    assert_eq!(status, 200, "{job}");
    assert_eq!(job["stdout"], "fake\n", "{job}");

    // Bob: the same answer as for a sandbox that does not exist.
    let (status, seen) =
        server.json(BOB, reqwest::Method::POST, "/sandboxes/web/exec", json!({"command": "whoami"})).await;
    let (_, nothing) =
        server.json(BOB, reqwest::Method::POST, "/sandboxes/none/exec", json!({"command": "whoami"})).await;
    assert_eq!(status, 404);
    assert_eq!(
        seen["detail"].as_str().map(|d| d.replace("web", "X")),
        nothing["detail"].as_str().map(|d| d.replace("none", "X"))
    );
    let r = server.as_(BOB, reqwest::Method::GET, "/v1/sandboxes/web/files?path=/etc/passwd").send().await.unwrap();
    assert_eq!(r.status(), 404);
    // Bob may name his own `web`.
    let (status, _) =
        server.json(BOB, reqwest::Method::POST, "/sandboxes", json!({"image": "host", "sandbox_id": "web"})).await;
    assert_eq!(status, 200);
    assert_eq!(server.backend.list().await.len(), 2);
}

#[tokio::test]
async fn files_and_tars_stream_through_the_v1_routes() {
    let server = Server::start(FakeBackend::new()).await;
    let (status, _) =
        server.json(ALICE, reqwest::Method::POST, "/v1/sandboxes", json!({"image": "host", "sandbox_id": "f"})).await;
    assert_eq!(status, 200);
    let r = server
        .as_(ALICE, reqwest::Method::PUT, "/v1/sandboxes/f/files?path=/workspace/notes/a.txt&create_parents=true")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let r = server
        .as_(ALICE, reqwest::Method::GET, "/v1/sandboxes/f/files?path=/workspace/notes/a.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "hello");
    let listing: Value = server
        .as_(ALICE, reqwest::Method::GET, "/v1/sandboxes/f/files/list?path=/workspace/notes")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listing["entries"][0]["name"], "a.txt", "{listing}");
    // A tar of the directory, unpacked into another place, holds the same file.
    let tar =
        server.as_(ALICE, reqwest::Method::GET, "/v1/sandboxes/f/tar?path=/workspace/notes").send().await.unwrap();
    assert_eq!(tar.status(), 200);
    let bytes = tar.bytes().await.unwrap();
    let r =
        server.as_(ALICE, reqwest::Method::PUT, "/v1/sandboxes/f/tar?path=/srv/copy").body(bytes).send().await.unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let id = server.backend.list().await[0].id.clone();
    assert_eq!(server.backend.files(&id).unwrap().read("/srv/copy/a.txt").unwrap(), "hello");
    // The agent's refusal comes back with its status and a body naming the path.
    let r = server.as_(ALICE, reqwest::Method::GET, "/v1/sandboxes/f/files?path=/missing").send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().await.unwrap().contains("/missing"));
    // A route without its `path` is refused before the agent is asked.
    let r = server.as_(ALICE, reqwest::Method::GET, "/v1/sandboxes/f/files").send().await.unwrap();
    assert_eq!(r.status(), 422);
    assert!(r.text().await.unwrap().contains("`path`"));
}

#[tokio::test]
async fn streamed_exec_ends_with_the_exit_frame_and_a_full_backend_says_when_to_retry() {
    let server = Server::start(FakeBackend::new().with_capacity(1)).await;
    let (status, _) =
        server.json(ALICE, reqwest::Method::POST, "/v1/sandboxes", json!({"image": "host", "sandbox_id": "s"})).await;
    assert_eq!(status, 200);
    let r = server
        .as_(ALICE, reqwest::Method::POST, "/v1/sandboxes/s/exec")
        .json(&json!({"command": "echo hi there", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    let frames: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(frames.first().unwrap()["type"], "stdout", "{text}");
    assert_eq!(frames.last().unwrap()["type"], "exit", "{text}");
    assert_eq!(frames.last().unwrap()["result"]["exit_code"], 0, "{text}");

    let full =
        server.as_(ALICE, reqwest::Method::POST, "/v1/sandboxes").json(&json!({"image": "host"})).send().await.unwrap();
    assert_eq!(full.status(), 429);
    assert!(full.headers().contains_key("retry-after"), "{:?}", full.headers());
    assert_eq!(full.json::<Value>().await.unwrap()["kind"], "capacity");
    // Unknown fields are refused, naming the field.
    let (status, refused) =
        server.json(ALICE, reqwest::Method::POST, "/v1/sandboxes", json!({"image": "host", "imgae": "x"})).await;
    assert_eq!(status, 400);
    assert!(refused["detail"].as_str().unwrap().contains("imgae"), "{refused}");
    // Also where a body adds its own fields to a shared one (batch create, /v1 exec).
    for (path, body) in [
        ("/v1/sandboxes/batch", json!({"count": 1, "image": "host", "memroy": "1Gi"})),
        ("/v1/sandboxes/s/exec", json!({"command": "true", "stream": false, "timeout": 5})),
        ("/v1/exec/batch", json!({"sandbox_ids": ["s"], "command": "true", "wiat": true})),
        ("/sandboxes/s/exec", json!({"command": "true", "timeout": 5})),
    ] {
        let (status, refused) = server.json(ALICE, reqwest::Method::POST, path, body).await;
        assert_eq!(status, 400, "{path}: {refused}");
        let detail = refused["detail"].as_str().unwrap();
        assert!(detail.contains("unknown field"), "{path}: {detail}");
    }
    let (status, refused) =
        server.json(ALICE, reqwest::Method::POST, "/v1/sandboxes/batch", json!({"image": "host"})).await;
    assert_eq!(status, 422, "{refused}");
    assert!(refused["detail"].as_str().unwrap().contains("count"), "{refused}");
    let (status, ran) = server
        .json(ALICE, reqwest::Method::POST, "/v1/exec/batch", json!({"sandbox_ids": ["s"], "command": "echo ok"}))
        .await;
    assert_eq!(status, 200, "{ran}");
}
