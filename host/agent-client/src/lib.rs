//! The host's client for `orchard-agent`.
//!
//! Talks HTTP/1.1 to the agent's unix socket (local backend) or `ip:port` (Kubernetes backend),
//! keeps idle connections for reuse so that an exec costs one request, not one connect, and turns
//! the agent's answers back into `orchard-protocol` types.

#![warn(missing_docs)]

mod agent;
mod error;
mod pool;
mod stream;

use std::time::Duration;

use bytes::Bytes;
use futures::{Stream, TryStreamExt};
use http_body_util::BodyExt;
use hyper::{Method, Request, Response, StatusCode, body::Incoming};
use orchard_protocol::{
    ExecRequest, ExecResult, FileEntry, Health, Listing, LogChunk, ProcessInfo, ProcessStart, SessionInfo,
    SessionStart, SignalRequest, WriteResult,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use agent::{FrameStream, SandboxAgent, SharedAgent};
pub use error::AgentClientError;
pub use pool::AgentAddr;
pub use stream::AgentStream;

/// The request body type: a boxed stream of byte chunks.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// What every call answers.
pub type Result<T> = std::result::Result<T, AgentClientError>;

/// A body from bytes in memory.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    http_body_util::Full::new(bytes.into()).map_err(|never| match never {}).boxed_unsync()
}

/// A body from a stream of chunks (uploads of any size without holding them in memory).
pub fn streaming<S>(stream: S) -> Body
where
    S: Stream<Item = std::io::Result<Bytes>> + Send + 'static,
{
    http_body_util::StreamBody::new(stream.map_ok(hyper::body::Frame::data)).boxed_unsync()
}

/// The HTTP client of one sandbox's `orchard-agent`: what the local and Kubernetes backends
/// hand out as their [`SandboxAgent`].
pub struct AgentClient {
    pool: pool::Pool,
    bearer: String,
}

impl AgentClient {
    /// A client of the agent at `addr`, which answers requests bearing `token`.
    pub fn new(addr: AgentAddr, token: &str) -> Self {
        AgentClient { pool: pool::Pool::new(addr), bearer: format!("Bearer {token}") }
    }

    /// Where the agent listens.
    pub fn addr(&self) -> &AgentAddr {
        self.pool.addr()
    }

    /// Polls `/health` until the agent answers or `timeout` passes.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<Health> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            match self.health().await {
                Ok(h) => return Ok(h),
                Err(e) if tokio::time::Instant::now() + pause >= deadline => return Err(e),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
            }
        }
    }

    /// Sends a raw request; the answer's body is left for the caller to stream.
    async fn send_raw(&self, method: Method, path_and_query: &str, body: Body) -> Result<Response<Incoming>> {
        let response = self.pool.send(self.request(method, path_and_query, body)?).await?;
        if response.status().is_success() {
            return Ok(response);
        }
        Err(error::from_response(response).await)
    }

    fn request(&self, method: Method, path_and_query: &str, body: Body) -> Result<Request<Body>> {
        Request::builder()
            .method(method)
            .uri(format!("http://agent{path_and_query}"))
            .header(hyper::header::AUTHORIZATION, &self.bearer)
            .header(hyper::header::HOST, "agent")
            .body(body)
            .map_err(|e| AgentClientError::Protocol(e.to_string()))
    }

    /// Sends a request and reads its whole answer (a success's body, or the agent's error).
    async fn buffered(&self, method: Method, path: &str, body: Body) -> Result<Bytes> {
        let response = self.pool.round_trip(self.request(method, path, body)?).await?;
        if response.status().is_success() {
            return Ok(response.into_body());
        }
        Err(error::from_answer(response.status().as_u16(), response.body()))
    }

    /// Sends a request and decodes a JSON answer.
    async fn call<T: DeserializeOwned>(&self, method: Method, path: &str, body: Body) -> Result<T> {
        let bytes = self.buffered(method, path, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| AgentClientError::Protocol(format!("bad answer: {e}")))
    }

    async fn call_json<T: DeserializeOwned>(&self, method: Method, path: &str, body: &impl Serialize) -> Result<T> {
        let bytes = serde_json::to_vec(body).map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        self.call(method, path, full(bytes)).await
    }

    /// Brings the sandbox's hard lifetime to `die_at` (Unix seconds), kept by the agent itself
    /// (see the agent's `lifetime`); a later deadline than one in force is ignored.
    pub async fn set_lifetime(&self, die_at: u64) -> Result<()> {
        let bytes = serde_json::to_vec(&serde_json::json!({ "die_at": die_at }))
            .map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        self.call_empty(Method::PUT, "/lifetime", full(bytes)).await
    }

    async fn call_empty(&self, method: Method, path: &str, body: Body) -> Result<()> {
        self.buffered(method, path, body).await.map(drop)
    }

    async fn connect_ws(&self, path: &str) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>> {
        let io = self.pool.connect().await?;
        let request = Request::builder()
            .uri(format!("ws://agent/{path}"))
            .header(hyper::header::AUTHORIZATION, &self.bearer)
            .header(hyper::header::HOST, "agent")
            .header("Connection", "Upgrade")
            .header("Upgrade", "websocket")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", tokio_tungstenite::tungstenite::handshake::client::generate_key())
            .body(())
            .map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        let (ws, _response) = tokio_tungstenite::client_async(request, io).await.map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(r) if r.status() == StatusCode::UNAUTHORIZED => {
                AgentClientError::Agent {
                    status: 401,
                    kind: orchard_protocol::ErrorKind::Denied,
                    message: "agent refused the token".into(),
                }
            }
            other => AgentClientError::Protocol(format!("{path} handshake: {other}")),
        })?;
        Ok(ws)
    }
}

#[async_trait::async_trait]
impl SandboxAgent for AgentClient {
    fn describe(&self) -> String {
        self.pool.addr().to_string()
    }

    async fn send(&self, method: Method, path_and_query: &str, body: Body) -> Result<Response<Body>> {
        let response = self.send_raw(method, path_and_query, body).await?;
        Ok(response.map(|incoming| incoming.map_err(std::io::Error::other).boxed_unsync()))
    }

    async fn health(&self) -> Result<Health> {
        self.call(Method::GET, "/health", full(Bytes::new())).await
    }

    async fn exec(&self, req: &ExecRequest) -> Result<ExecResult> {
        self.call_json(Method::POST, "/exec", req).await
    }

    /// Runs a command and yields its frames as they come; the last one is `Exit` or `Error`.
    async fn exec_stream(&self, req: &ExecRequest) -> Result<FrameStream> {
        let bytes = serde_json::to_vec(req).map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        let response = self.send_raw(Method::POST, "/exec?stream=true", full(bytes)).await?;
        Ok(Box::pin(stream::ndjson_frames(response.into_body())))
    }

    async fn start_process(&self, req: &ProcessStart) -> Result<ProcessInfo> {
        self.call_json(Method::POST, "/processes", req).await
    }

    async fn start_desktop(&self, req: &orchard_protocol::DesktopStart) -> Result<ProcessInfo> {
        self.call_json(Method::POST, "/desktop", req).await
    }

    async fn list_processes(&self) -> Result<Vec<ProcessInfo>> {
        self.call(Method::GET, "/processes", full(Bytes::new())).await
    }

    async fn process(&self, id: &str) -> Result<ProcessInfo> {
        self.call(Method::GET, &format!("/processes/{}", encode(id)), full(Bytes::new())).await
    }

    async fn signal_process(&self, id: &str, signal: &str) -> Result<ProcessInfo> {
        let body = SignalRequest { signal: signal.to_string() };
        self.call_json(Method::POST, &format!("/processes/{}/signal", encode(id)), &body).await
    }

    async fn process_log(&self, id: &str, offset: u64, limit: Option<u64>) -> Result<LogChunk> {
        let mut path = format!("/processes/{}/log?offset={offset}", encode(id));
        if let Some(limit) = limit {
            path += &format!("&limit={limit}");
        }
        self.call(Method::GET, &path, full(Bytes::new())).await
    }

    async fn start_session(&self, req: &SessionStart) -> Result<SessionInfo> {
        self.call_json(Method::POST, "/sessions", req).await
    }

    async fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        self.call(Method::GET, "/sessions", full(Bytes::new())).await
    }

    async fn session_exec(&self, id: &str, req: &ExecRequest) -> Result<ExecResult> {
        self.call_json(Method::POST, &format!("/sessions/{}/exec", encode(id)), req).await
    }

    /// Continues, types into or interrupts the command a session left running.
    async fn session_continue(&self, id: &str, req: &orchard_protocol::SessionContinue) -> Result<ExecResult> {
        self.call_json(Method::POST, &format!("/sessions/{}/continue", encode(id)), req).await
    }

    async fn close_session(&self, id: &str) -> Result<()> {
        self.call_empty(Method::DELETE, &format!("/sessions/{}", encode(id)), full(Bytes::new())).await
    }

    async fn read_file(&self, path: &str) -> Result<Bytes> {
        let response = self.send_raw(Method::GET, &format!("/files?path={}", encode(path)), full(Bytes::new())).await?;
        let body = response.into_body().collect().await.map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        Ok(body.to_bytes())
    }

    /// Writes a file atomically. `mode` is octal permission bits (e.g. 0o755).
    async fn write_file(&self, path: &str, body: Body, mode: Option<u32>, create_parents: bool) -> Result<WriteResult> {
        let mut query = format!("/files?path={}&create_parents={create_parents}", encode(path));
        if let Some(mode) = mode {
            query += &format!("&mode={mode:o}");
        }
        self.call(Method::PUT, &query, body).await
    }

    async fn list(&self, path: &str) -> Result<Listing> {
        self.call(Method::GET, &format!("/files/list?path={}", encode(path)), full(Bytes::new())).await
    }

    async fn stat(&self, path: &str) -> Result<FileEntry> {
        self.call(Method::GET, &format!("/files/stat?path={}", encode(path)), full(Bytes::new())).await
    }

    async fn set_defaults(&self, cwd: Option<&str>, env: &std::collections::BTreeMap<String, String>) -> Result<()> {
        let body = serde_json::json!({"cwd": cwd, "env": env});
        let bytes = serde_json::to_vec(&body).map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        self.call_empty(Method::PUT, "/defaults", full(bytes)).await
    }

    async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        self.call_empty(
            Method::DELETE,
            &format!("/files?path={}&recursive={recursive}", encode(path)),
            full(Bytes::new()),
        )
        .await
    }

    /// Downloads a directory as a tar stream.
    async fn tar_download(&self, path: &str) -> Result<Response<Body>> {
        self.send(Method::GET, &format!("/tar?path={}", encode(path)), full(Bytes::new())).await
    }

    /// Uploads a tar stream and extracts it into `path`.
    async fn tar_upload(&self, path: &str, body: Body) -> Result<WriteResult> {
        self.call(Method::PUT, &format!("/tar?path={}", encode(path)), body).await
    }

    /// Sends an HTTP request to a service on the sandbox's loopback.
    async fn http(&self, req: &orchard_protocol::HttpRequest) -> Result<orchard_protocol::HttpResponse> {
        self.call_json(Method::POST, "/http", req).await
    }

    /// Opens the PTY WebSocket (`/pty`); frames are relayed as they are.
    async fn connect_pty(&self) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>> {
        self.connect_ws("pty").await
    }

    async fn connect_tunnel(&self, port: u16) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>> {
        self.connect_ws(&format!("tunnel/{port}")).await
    }

    /// Starts a browser inside the sandbox (`/browser`) with `argv` (which asks for
    /// `--remote-debugging-pipe`) and answers its DevTools pipe as a byte stream: what is
    /// written reaches the browser's fd 3, what it writes to fd 4 is read. Closing the stream
    /// kills the browser.
    async fn open_browser(&self, argv: &[String]) -> Result<tokio::io::DuplexStream> {
        use futures::{SinkExt, StreamExt};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_tungstenite::tungstenite::Message;
        let mut ws = self.connect_ws("browser").await?;
        let start = serde_json::json!({"argv": argv}).to_string();
        ws.send(Message::Text(start.into())).await.map_err(|e| AgentClientError::Protocol(e.to_string()))?;
        let first = match ws.next().await {
            Some(Ok(Message::Text(t))) => serde_json::from_str::<serde_json::Value>(&t).unwrap_or_default(),
            other => return Err(AgentClientError::Protocol(format!("browser relay: no answer ({other:?})"))),
        };
        if first.get("ready").is_none() {
            let said = first.get("error").and_then(|e| e.as_str()).unwrap_or("the agent refused").to_string();
            return Err(AgentClientError::Agent {
                status: 500,
                kind: orchard_protocol::ErrorKind::Unavailable,
                message: said,
            });
        }
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        tokio::spawn(async move {
            let (mut from_us, mut to_us) = tokio::io::split(ours);
            let (mut sink, mut stream) = ws.split();
            let up = async {
                let mut chunk = vec![0u8; 64 * 1024];
                loop {
                    match from_us.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if sink.send(Message::Binary(chunk[..n].to_vec().into())).await.is_err() {
                                break;
                            }
                        }
                    }
                }
                let _ = sink.send(Message::Close(None)).await;
            };
            let down = async {
                while let Some(Ok(message)) = stream.next().await {
                    match message {
                        Message::Binary(b) if to_us.write_all(&b).await.is_err() => break,
                        Message::Close(_) => break,
                        _ => {}
                    }
                }
                let _ = to_us.shutdown().await;
            };
            tokio::select! {
                () = up => {}
                () = down => {}
            }
        });
        Ok(theirs)
    }
}

/// Percent-encodes a query or path value.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decodes a percent-encoded query value (`+` is a space; a malformed escape is kept as it is).
pub fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                match u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""), 16) {
                    Ok(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
