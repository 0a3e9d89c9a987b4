//! The agent's HTTP surface: routes, authentication, request parsing.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Request, State, WebSocketUpgrade};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use orchard_protocol::{
    ExecFrame, ExecRequest, Health, ProcessInfo, ProcessStart, SessionInfo, SessionStart, SignalRequest, WriteResult,
};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::config::Listen;
use crate::error::{AgentError, AgentResult};
use crate::state::AgentState;
use crate::{exec, files, process, pty_ws, session, tar_io};

type AppState = Arc<AgentState>;

pub async fn serve(state: AppState) -> anyhow::Result<()> {
    let app = router(state.clone());
    let mut servers = Vec::new();
    for listen in state.config.listen.clone() {
        let app = app.clone();
        servers.push(tokio::spawn(async move {
            match listen {
                Listen::Tcp(addr) => axum::serve(tokio::net::TcpListener::bind(addr).await?, app).await,
                Listen::Unix(path) => {
                    let _ = std::fs::remove_file(&path);
                    axum::serve(tokio::net::UnixListener::bind(&path)?, app).await
                }
                Listen::Fd(fd) => serve_inherited(fd, app).await,
            }
        }));
    }
    for server in servers {
        server.await??;
    }
    Ok(())
}

/// Serves on a listening socket inherited from whoever started us (the local backend binds it on
/// the host, outside the sandbox, so that nothing inside the sandbox can even see it).
async fn serve_inherited(fd: i32, app: Router) -> std::io::Result<()> {
    use nix::sys::socket::{AddressFamily, SockaddrLike, SockaddrStorage, getsockname};
    use std::os::fd::{FromRawFd, OwnedFd};
    // SAFETY: the fd was handed to us for this purpose and nothing else in the agent uses it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // Commands we start must not inherit it.
    nix::fcntl::fcntl(&owned, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    let family = getsockname::<SockaddrStorage>(fd).map_err(std::io::Error::from)?.family();
    if family == Some(AddressFamily::Unix) {
        let listener = std::os::unix::net::UnixListener::from(owned);
        listener.set_nonblocking(true)?;
        axum::serve(tokio::net::UnixListener::from_std(listener)?, app).await
    } else {
        let listener = std::net::TcpListener::from(owned);
        listener.set_nonblocking(true)?;
        axum::serve(tokio::net::TcpListener::from_std(listener)?, app).await
    }
}

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/defaults", axum::routing::put(defaults_put))
        .route("/lifetime", axum::routing::put(lifetime_put))
        .route("/exec", post(exec_handler))
        .route("/processes", post(process_start).get(process_list))
        .route("/processes/{id}", get(process_get))
        .route("/processes/{id}/signal", post(process_signal))
        .route("/processes/{id}/log", get(process_log))
        .route("/sessions", post(session_start).get(session_list))
        .route("/sessions/{id}", axum::routing::delete(session_delete))
        .route("/sessions/{id}/exec", post(session_exec))
        .route("/sessions/{id}/continue", post(session_continue))
        .route("/files", get(file_read).put(file_write).delete(file_remove))
        .route("/files/list", get(file_list))
        .route("/files/stat", get(file_stat))
        .route("/tar", get(tar_download).put(tar_upload))
        .route("/pty", get(pty_handler))
        .route("/browser", get(browser_handler))
        .route("/tunnel/{port}", get(tunnel_handler))
        .route("/desktop", post(desktop_start))
        .route("/http", post(http_forward))
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .with_state(state)
}

async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if !state.config.token.accepts(presented) {
        let body = orchard_protocol::ErrorBody {
            kind: orchard_protocol::ErrorKind::Denied,
            message: "missing or wrong sandbox token".into(),
        };
        return (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    }
    next.run(request).await
}

/// A JSON body whose parse error names the field and position.
struct JsonBody<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> axum::extract::FromRequest<S> for JsonBody<T> {
    type Rejection = AgentError;
    async fn from_request(req: Request, state: &S) -> Result<Self, AgentError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| AgentError::invalid(format!("body: {e}")))?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| AgentError::invalid(format!("body: {e}")))
    }
}

/// Query parameters whose parse error names the parameter.
struct Q<T>(T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Q<T> {
    type Rejection = AgentError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, AgentError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Q(q.0))
            .map_err(|e| AgentError::invalid(format!("query: {}", e.body_text())))
    }
}

/// Sets the working directory and environment of commands that name none.
async fn defaults_put(
    State(state): State<AppState>,
    JsonBody(body): JsonBody<crate::defaults::Defaults>,
) -> Result<StatusCode, AgentError> {
    state.defaults.set(body)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Lifetime {
    /// Unix seconds the sandbox ends at.
    die_at: u64,
}

async fn lifetime_put(JsonBody(body): JsonBody<Lifetime>) -> StatusCode {
    crate::lifetime::set(body.die_at);
    StatusCode::NO_CONTENT
}

async fn health() -> Json<Health> {
    Json(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into(), pid: std::process::id() })
}

#[derive(Deserialize)]
struct ExecQuery {
    #[serde(default)]
    stream: bool,
}

async fn exec_handler(
    State(state): State<AppState>,
    Q(q): Q<ExecQuery>,
    JsonBody(req): JsonBody<ExecRequest>,
) -> AgentResult<Response> {
    if !q.stream {
        return Ok(Json(exec::run(&state, req, None).await?).into_response());
    }
    let (tx, rx) = mpsc::channel::<ExecFrame>(32);
    tokio::spawn(async move {
        let last = match exec::run(&state, req, Some(tx.clone())).await {
            Ok(result) => ExecFrame::Exit { result },
            Err(e) => ExecFrame::Error { kind: e.kind, message: e.message },
        };
        let _ = tx.send(last).await;
    });
    let lines = futures::stream::unfold(rx, |mut rx| async move {
        let frame = rx.recv().await?;
        let mut line = serde_json::to_vec(&frame).expect("frames serialise");
        line.push(b'\n');
        Some((Ok::<_, std::io::Error>(Bytes::from(line)), rx))
    });
    let mut response = Body::from_stream(lines).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    Ok(response)
}

async fn process_start(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<ProcessStart>,
) -> AgentResult<Json<ProcessInfo>> {
    let id = state.next_id("proc");
    let proc_ = process::start(&state, id.clone(), req)?;
    let info = proc_.info();
    state.processes.lock().await.insert(id, proc_);
    Ok(Json(info))
}

/// Starts the desktop service (this binary's `desktop` mode) as a background process.
async fn desktop_start(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<orchard_protocol::DesktopStart>,
) -> AgentResult<Json<ProcessInfo>> {
    let me = std::env::current_exe().map_err(|e| AgentError::other(format!("desktop: where is the agent: {e}")))?;
    let mut argv = vec![
        me.to_string_lossy().into_owned(),
        "desktop".into(),
        "--listen".into(),
        format!("127.0.0.1:{}", req.port),
        "--display".into(),
        req.display.to_string(),
        "--size".into(),
        format!("{}x{}x{}", req.width, req.height, req.depth),
    ];
    if let Some(wm) = &req.window_manager {
        argv.extend(["--window-manager".into(), wm.clone()]);
    }
    let start = ProcessStart { command: orchard_protocol::Command::Argv(argv), cwd: None, env: Default::default() };
    let port = req.port;
    let started = process_start(State(state.clone()), JsonBody(start)).await?;
    state.desktops.lock().unwrap_or_else(|p| p.into_inner()).insert(port, started.0.pid);
    Ok(started)
}

async fn process_list(State(state): State<AppState>) -> Json<Vec<ProcessInfo>> {
    let mut list: Vec<_> = state.processes.lock().await.values().map(|p| p.info()).collect();
    list.sort_by(|a, b| a.started_at.total_cmp(&b.started_at));
    Json(list)
}

async fn find_process(state: &AgentState, id: &str) -> AgentResult<Arc<process::BackgroundProcess>> {
    state.processes.lock().await.get(id).cloned().ok_or_else(|| AgentError::not_found(format!("no process {id}")))
}

async fn process_get(State(state): State<AppState>, Path(id): Path<String>) -> AgentResult<Json<ProcessInfo>> {
    Ok(Json(find_process(&state, &id).await?.info()))
}

async fn process_signal(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<SignalRequest>,
) -> AgentResult<Json<ProcessInfo>> {
    let p = find_process(&state, &id).await?;
    p.signal(&req.signal)?;
    Ok(Json(p.info()))
}

#[derive(Deserialize)]
struct LogQuery {
    #[serde(default)]
    offset: u64,
    limit: Option<u64>,
}

async fn process_log(
    State(state): State<AppState>,
    Path(id): Path<String>,
    Q(q): Q<LogQuery>,
) -> AgentResult<Response> {
    let p = find_process(&state, &id).await?;
    Ok(Json(p.read_log(q.offset, q.limit)?).into_response())
}

async fn session_start(State(state): State<AppState>, body: Bytes) -> AgentResult<Json<SessionInfo>> {
    let req: SessionStart = if body.is_empty() {
        SessionStart::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| AgentError::invalid(format!("body: {e}")))?
    };
    let id = state.next_id("session");
    let s = session::Session::start(&state, id.clone(), req).await?;
    let info = s.info();
    state.sessions.lock().await.insert(id, s);
    Ok(Json(info))
}

async fn session_list(State(state): State<AppState>) -> Json<Vec<SessionInfo>> {
    Json(state.sessions.lock().await.values().map(|s| s.info()).collect())
}

async fn session_by_id(state: &AppState, id: &str) -> AgentResult<std::sync::Arc<session::Session>> {
    state.sessions.lock().await.get(id).cloned().ok_or_else(|| AgentError::not_found(format!("no session {id}")))
}

async fn session_exec(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<ExecRequest>,
) -> AgentResult<Response> {
    let s = session_by_id(&state, &id).await?;
    Ok(Json(s.exec(req).await?).into_response())
}

async fn session_continue(
    State(state): State<AppState>,
    Path(id): Path<String>,
    JsonBody(req): JsonBody<orchard_protocol::SessionContinue>,
) -> AgentResult<Response> {
    let s = session_by_id(&state, &id).await?;
    Ok(Json(s.resume(req).await?).into_response())
}

async fn session_delete(State(state): State<AppState>, Path(id): Path<String>) -> AgentResult<StatusCode> {
    let s = state.sessions.lock().await.remove(&id).ok_or_else(|| AgentError::not_found(format!("no session {id}")))?;
    s.kill();
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
struct PathQuery {
    path: String,
}

async fn file_read(State(state): State<AppState>, Q(q): Q<PathQuery>) -> AgentResult<Response> {
    let (file, len) = files::open_for_read(&state.confinement, &q.path)?;
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    Ok(response)
}

#[derive(Deserialize)]
struct WriteQuery {
    path: String,
    /// Octal permission bits, e.g. `755`.
    mode: Option<String>,
    #[serde(default = "yes")]
    create_parents: bool,
}

fn yes() -> bool {
    true
}

async fn file_write(State(state): State<AppState>, uri: axum::http::Uri, body: Body) -> AgentResult<Json<WriteResult>> {
    let mut stream = body.into_data_stream();
    let outcome = write_file(&state, &uri, &mut stream).await;
    if outcome.is_err() {
        drain(&mut stream).await;
    }
    outcome
}

/// Reads and drops what is left of a refused upload, so that the refusal reaches the client
/// (an HTTP/1 client still sending its body reads no answer from a connection that closed).
async fn drain(stream: &mut axum::body::BodyDataStream) {
    while let Some(Ok(_)) = stream.next().await {}
}

async fn write_file(
    state: &AppState,
    uri: &axum::http::Uri,
    stream: &mut axum::body::BodyDataStream,
) -> AgentResult<Json<WriteResult>> {
    let q: WriteQuery = axum::extract::Query::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| AgentError::invalid(format!("query: {}", e.body_text())))?;
    let mode = match &q.mode {
        Some(m) => {
            Some(u32::from_str_radix(m, 8).map_err(|_| AgentError::invalid(format!("mode: {m:?} is not octal")))?)
        }
        None => None,
    };
    let mut write = files::AtomicWrite::begin(&state.confinement, &q.path, mode, q.create_parents)?;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| AgentError::invalid(format!("body: {e}")))?;
        write.write(&chunk)?;
    }
    let size = write.commit()?;
    Ok(Json(WriteResult { path: q.path, size, entries: 0 }))
}

#[derive(Deserialize)]
struct RemoveQuery {
    path: String,
    #[serde(default)]
    recursive: bool,
}

async fn file_remove(State(state): State<AppState>, Q(q): Q<RemoveQuery>) -> AgentResult<StatusCode> {
    files::remove(&state.confinement, &q.path, q.recursive)?;
    Ok(StatusCode::NO_CONTENT)
}

async fn file_list(State(state): State<AppState>, Q(q): Q<PathQuery>) -> AgentResult<Response> {
    Ok(Json(files::list(&state.confinement, &q.path)?).into_response())
}

async fn file_stat(State(state): State<AppState>, Q(q): Q<PathQuery>) -> AgentResult<Response> {
    Ok(Json(files::stat(&state.confinement, &q.path)?).into_response())
}

async fn tar_download(State(state): State<AppState>, Q(q): Q<PathQuery>) -> AgentResult<Response> {
    let rx = tar_io::archive(&state.confinement, &q.path)?;
    let chunks = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let mut response = Body::from_stream(chunks).into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-tar"));
    Ok(response)
}

async fn tar_upload(State(state): State<AppState>, uri: axum::http::Uri, body: Body) -> AgentResult<Json<WriteResult>> {
    let mut stream = body.into_data_stream();
    let q: PathQuery = match axum::extract::Query::try_from_uri(&uri) {
        Ok(q) => q.0,
        Err(e) => {
            drain(&mut stream).await;
            return Err(AgentError::invalid(format!("query: {}", e.body_text())));
        }
    };
    let stream = stream.map(|r| r.map_err(std::io::Error::other));
    let mut reader = tokio_util::io::SyncIoBridge::new(tokio_util::io::StreamReader::new(stream));
    let path = q.path.clone();
    let state2 = state.clone();
    let (size, entries) = tokio::task::spawn_blocking(move || {
        let outcome = tar_io::extract(&state2.confinement, &path, &mut reader);
        // The rest of the body is read before answering, on success too: an archive ends with
        // padding after its end-of-archive blocks (Python's tarfile and GNU tar pad to 10 KiB),
        // and an answer sent before the body is read makes the server drop the connection while
        // the client is still writing it — the client then sees a failed write, not the answer.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
        outcome
    })
    .await
    .map_err(|e| AgentError::other(format!("tar: {e}")))??;
    Ok(Json(WriteResult { path: q.path, size, entries }))
}

async fn http_forward(
    State(state): State<AppState>,
    JsonBody(req): JsonBody<orchard_protocol::HttpRequest>,
) -> AgentResult<Json<orchard_protocol::HttpResponse>> {
    let desktop = state.desktops.lock().unwrap_or_else(|p| p.into_inner()).get(&req.port).copied();
    Ok(Json(crate::http_proxy::forward(req, desktop).await?))
}

async fn browser_handler(ws: WebSocketUpgrade) -> Response {
    // DevTools messages (screenshots) are large.
    ws.max_message_size(64 << 20).on_upgrade(crate::browser::run)
}

async fn tunnel_handler(axum::extract::Path(port): axum::extract::Path<u16>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(16 << 20).on_upgrade(move |socket| crate::tunnel::run(socket, port))
}

async fn pty_handler(State(state): State<AppState>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| pty_ws::run(state, socket))
}
