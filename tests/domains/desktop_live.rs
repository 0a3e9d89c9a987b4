//! A desktop's live view: `GET /v1/sandboxes/{id}/desktop/vnc` is VNC (RFB) over a WebSocket,
//! from a real x11vnc on the sandbox's display through the agent's tunnel. It watches only —
//! a pointer event moves nothing — unless the operator lets views take input
//! (`--desktop-control`) and the client asks; it is the tenant's own.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

const KEYS: &str = "alice:alice-key-1234,bob:bob-key-5678";

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// An RFB client over the WebSocket, reading whole protocol messages out of frames.
struct Rfb {
    socket: Socket,
    buffer: Vec<u8>,
}

impl Rfb {
    async fn read(&mut self, n: usize) -> Vec<u8> {
        while self.buffer.len() < n {
            let next = tokio::time::timeout(Duration::from_secs(20), self.socket.next()).await.expect("RFB: no data");
            match next {
                Some(Ok(Message::Binary(b))) => self.buffer.extend_from_slice(&b),
                Some(Ok(Message::Close(c))) => panic!("the live view closed: {c:?}"),
                Some(Ok(_)) => {}
                other => panic!("the live view ended: {other:?}"),
            }
        }
        self.buffer.drain(..n).collect()
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.socket.send(Message::Binary(bytes.to_vec().into())).await.unwrap();
    }

    /// The handshake through ServerInit: the framebuffer's size.
    async fn handshake(&mut self) -> (u16, u16) {
        let version = self.read(12).await;
        assert!(version.starts_with(b"RFB 003."), "{:?}", String::from_utf8_lossy(&version));
        self.send(b"RFB 003.008\n").await;
        let count = self.read(1).await[0] as usize;
        let types = self.read(count).await;
        assert!(types.contains(&1), "x11vnc offers no 'None' security: {types:?}");
        self.send(&[1]).await;
        assert_eq!(self.read(4).await, [0, 0, 0, 0], "security result");
        self.send(&[1]).await; // ClientInit: shared
        let init = self.read(24).await;
        let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
        let _name = self.read(name_len).await;
        (u16::from_be_bytes([init[0], init[1]]), u16::from_be_bytes([init[2], init[3]]))
    }

    async fn point(&mut self, x: u16, y: u16) {
        let [xh, xl] = x.to_be_bytes();
        let [yh, yl] = y.to_be_bytes();
        self.send(&[5, 0, xh, xl, yh, yl]).await;
    }
}

async fn open(server: &Server, sandbox: &str, query: &str) -> Result<Rfb, (u16, String)> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let url = format!("{}/v1/sandboxes/{sandbox}/desktop/vnc?{query}", server.url.replace("http://", "ws://"));
    let mut request = url.into_client_request().unwrap();
    request.headers_mut().insert("Sec-WebSocket-Protocol", "binary".parse().unwrap());
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, _)) => Ok(Rfb { socket, buffer: Vec::new() }),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => {
            let body = String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).into_owned();
            Err((r.status().as_u16(), body))
        }
        Err(e) => panic!("{e}"),
    }
}

async fn desktop(server: &Server) -> String {
    let sandbox = server.create_host().await;
    let (status, body) = server
        .call(Method::POST, &format!("/v1/sandboxes/{sandbox}/desktop"), Some(json!({"width": 800, "height": 600})))
        .await;
    assert_eq!(status, 200, "{body}");
    sandbox
}

async fn pointer(server: &Server, sandbox: &str) -> Value {
    let (status, at) =
        server.call(Method::GET, &format!("/v1/sandboxes/{sandbox}/ports/5000/cursor_position"), None).await;
    assert_eq!(status, 200, "{at}");
    at
}

#[tokio::test(flavor = "multi_thread")]
async fn the_live_view_watches_and_takes_input_only_where_the_operator_allows() {
    let server = Server::start_with(ServerOptions { api_keys: Some(KEYS.into()), ..Default::default() })
        .await
        .with_key("alice-key-1234");
    let sandbox = desktop(&server).await;
    let before = pointer(&server, &sandbox).await;

    // Watching: the screen's size comes through; a pointer event moves nothing.
    let mut view = open(&server, &sandbox, "api_key=alice-key-1234").await.expect("the live view");
    assert_eq!(view.handshake().await, (800, 600));
    view.point(123, 77).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(pointer(&server, &sandbox).await, before, "a watch-only view moved the pointer");

    // Input is the operator's to allow; another tenant's sandbox is not found; no key, no view.
    let (status, body) = open(&server, &sandbox, "api_key=alice-key-1234&control=true").await.err().unwrap();
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--desktop-control"), "{body}");
    let (status, _) = open(&server, &sandbox, "api_key=bob-key-5678").await.err().unwrap();
    assert_eq!(status, 404);
    let (status, _) = open(&server, &sandbox, "").await.err().unwrap();
    assert_eq!(status, 401);
    let (status, body) = open(&server, &sandbox, "api_key=alice-key-1234&colour=1").await.err().unwrap();
    assert_eq!(status, 400, "{body}");

    // Where the operator allows it, a view that asks takes input: the pointer moves.
    let operator = Server::start_with(ServerOptions {
        api_keys: Some(KEYS.into()),
        extra_args: vec!["--desktop-control".into()],
        ..Default::default()
    })
    .await
    .with_key("alice-key-1234");
    let sandbox = desktop(&operator).await;
    let mut control =
        open(&operator, &sandbox, "api_key=alice-key-1234&control=true").await.expect("a controlling view");
    assert_eq!(control.handshake().await, (800, 600));
    control.point(123, 77).await;
    let mut moved = Value::Null;
    for _ in 0..50 {
        moved = pointer(&operator, &sandbox).await;
        if moved == json!([123, 77]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(moved, json!([123, 77]), "the controlling view's pointer event did not arrive");
}
