//! Desktops in a tenant's own sandboxes, and HTTP into their ports: what a client outside the
//! server needs to drive a desktop with its own tools (OSWorld's `DesktopEnv` through Orchard's
//! provider in `orchard_client.osworld`).
//!
//! - `POST /v1/sandboxes/{id}/desktop` starts the X desktop and its service in the sandbox (the
//!   fields of a task's `[environment.desktop]`) and answers once it serves.
//! - `GET /v1/sandboxes/{id}/desktop/vnc` is the desktop's live view: a WebSocket carrying VNC
//!   (RFB, as noVNC and websockify speak it) from a VNC server on the sandbox's loopback.
//!   It only watches unless the operator lets views take input (`--desktop-control`) and the
//!   client asks (`?control=true`).
//! - `GET`/`POST /v1/sandboxes/{id}/ports/{port}/{path}` forwards one HTTP request (the
//!   methods OSWorld's controller sends) to that port on the sandbox's own loopback, through
//!   its agent.
//!
//! Invariants: the sandbox is the caller's (another tenant's is "not found", as one that does
//! not exist); the request reaches only the sandbox's loopback (its own network namespace, never
//! the host's); the caller's credentials (`Authorization`, `X-API-Key`, cookies, `api_key=`) are
//! not passed into the sandbox, and nothing in the sandbox sets a cookie on the server's origin;
//! bodies are bounded both ways and every request has a deadline.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use orchard_desktop_client::{Desktop, DesktopSpec};
use orchard_protocol::HttpRequest;
use serde_json::{Value, json};

use crate::{ApiError, ApiResult, AppState, Tenant};

/// The largest request body forwarded (the agent's own frame holds it base64'd).
const MAX_FORWARD_BODY: usize = 8 * 1024 * 1024;
/// The longest a forwarded request may take (OSWorld's `open_file` waits for an app's window).
const FORWARD_DEADLINE: Duration = Duration::from_secs(300);
/// How long a started desktop's window (`wait_for_window`) is waited for.
const WINDOW_WAIT: Duration = Duration::from_secs(60);

/// Request headers never sent into a sandbox: the caller's credentials and hop-by-hop ones.
const DROPPED_REQUEST: &[&str] = &[
    "authorization",
    "x-api-key",
    "cookie",
    "host",
    "connection",
    "keep-alive",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
];
/// Response headers never passed back: cookies (the server's origin is not the sandbox's) and
/// hop-by-hop ones.
const DROPPED_RESPONSE: &[&str] =
    &["set-cookie", "connection", "keep-alive", "transfer-encoding", "trailer", "upgrade", "content-length"];

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/sandboxes/{id}/desktop", post(start))
        .route("/sandboxes/{id}/desktop/vnc", get(vnc))
        .route("/sandboxes/{id}/ports/{port}/{*path}", get(forward_get).post(forward_post))
        .layer(DefaultBodyLimit::max(MAX_FORWARD_BODY))
}

type S = State<Arc<AppState>>;
type T = Extension<Tenant>;

/// Starts a desktop in the sandbox: the body is a task's `[environment.desktop]` (every field
/// optional, unknown ones refused); answers its port and size once its service answers.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/desktop", tag = "sandboxes", summary = "Start an X desktop in the sandbox", params(("id" = String, Path, description = "The sandbox id")), request_body = serde_json::Value, responses((status = 200, description = "Its port, size and display", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The desktop did not start", body = orchard_api_kit::Problem)))]
async fn start(
    State(state): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let text = if body.iter().all(u8::is_ascii_whitespace) { &b"{}"[..] } else { &body[..] };
    let config: orchard_task_config::DesktopConfig =
        serde_json::from_slice(text).map_err(|e| ApiError::bad_request(format!("desktop: {e}")))?;
    config.check().map_err(|e| ApiError::invalid(e.replace("[environment.desktop] ", "desktop: ")))?;
    let agent = state.agent(&tenant, &id).await?;
    Desktop::start(&*agent, &DesktopSpec::from_config(&config)).await.map_err(desktop_error)?;
    if let Some(title) = &config.wait_for_window {
        Desktop::wait_for_window(&*agent, config.port, title, WINDOW_WAIT).await.map_err(desktop_error)?;
    }
    Ok(Json(json!({
        "port": config.port,
        "width": config.width,
        "height": config.height,
        "depth": config.depth,
        "display": format!(":{}", orchard_protocol::DESKTOP_DISPLAY),
    })))
}

fn desktop_error(e: orchard_desktop_client::DesktopError) -> ApiError {
    use orchard_desktop_client::DesktopError as E;
    match e {
        E::Invalid(m) => ApiError::invalid(m),
        E::Timeout(m) => ApiError::new(StatusCode::GATEWAY_TIMEOUT, "timeout", m),
        E::Unavailable(m) | E::Other(m) => ApiError::unavailable(m),
    }
}

type Forwarded = (Path<(String, String, String)>, RawQuery, HeaderMap, axum::body::Bytes);

/// `GET` to a port on the sandbox's loopback; the answer as the service gave it.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/ports/{port}/{path}", tag = "sandboxes", summary = "HTTP GET to a port on the sandbox's own loopback", params(("id" = String, Path, description = "The sandbox id"), ("port" = u16, Path, description = "The port in the sandbox"), ("path" = String, Path, description = "The path there")), responses((status = 200, description = "The service's answer, as it gave it"), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 502, description = "Nothing answers on that port", body = orchard_api_kit::Problem)))]
async fn forward_get(
    state: S,
    tenant: T,
    path: Path<(String, String, String)>,
    query: RawQuery,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    forward(state, tenant, Method::GET, (path, query, headers, body)).await
}

/// `POST` to a port on the sandbox's loopback; the answer as the service gave it.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/ports/{port}/{path}", tag = "sandboxes", summary = "HTTP POST to a port on the sandbox's own loopback", params(("id" = String, Path, description = "The sandbox id"), ("port" = u16, Path, description = "The port in the sandbox"), ("path" = String, Path, description = "The path there")), responses((status = 200, description = "The service's answer, as it gave it"), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 502, description = "Nothing answers on that port", body = orchard_api_kit::Problem)))]
async fn forward_post(
    state: S,
    tenant: T,
    path: Path<(String, String, String)>,
    query: RawQuery,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> ApiResult<Response> {
    forward(state, tenant, Method::POST, (path, query, headers, body)).await
}

async fn forward(State(state): S, Extension(tenant): T, method: Method, request: Forwarded) -> ApiResult<Response> {
    let (Path((id, port, path)), RawQuery(query), headers, body) = request;
    let port: u16 = port
        .parse()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| ApiError::invalid(format!("port {port:?}: expected 1 to 65535")))?;
    let agent = state.agent(&tenant, &id).await?;
    let mut target = format!("/{path}");
    if let Some(query) = query.as_deref().map(without_api_key).filter(|q| !q.is_empty()) {
        target.push('?');
        target.push_str(&query);
    }
    let headers: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| !DROPPED_REQUEST.contains(&name.as_str()))
        .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
        .collect();
    let request = HttpRequest {
        port,
        method: method.to_string(),
        path: target,
        headers,
        body_base64: B64.encode(&body),
        timeout_ms: Some(FORWARD_DEADLINE.as_millis() as u64),
        grader: false,
    };
    let answer = agent.http(&request).await.map_err(|e| {
        let e = ApiError::from(e);
        if e.status == StatusCode::NOT_FOUND {
            ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", e.detail)
        } else {
            e
        }
    })?;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let bytes = B64
        .decode(answer.body_base64.as_bytes())
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", format!("the answer's body: {e}")))?;
    let mut response = Response::builder().status(status);
    for (name, value) in &answer.headers {
        if !DROPPED_RESPONSE.contains(&name.to_ascii_lowercase().as_str()) {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from(bytes))
        .map_err(|e| ApiError::new(StatusCode::BAD_GATEWAY, "bad_gateway", format!("the answer's headers: {e}")))
        .map(IntoResponse::into_response)
}

/// The query without the caller's `api_key=` (the server's, not the sandbox's).
fn without_api_key(query: &str) -> String {
    query.split('&').filter(|kv| !kv.starts_with("api_key=") && *kv != "api_key").collect::<Vec<_>>().join("&")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_callers_key_stays_out_of_the_query() {
        assert_eq!(super::without_api_key("api_key=secret&max_nodes=5"), "max_nodes=5");
        assert_eq!(super::without_api_key("a=1&api_key=x&b=2"), "a=1&b=2");
        assert_eq!(super::without_api_key("api_keys=1"), "api_keys=1");
    }
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub(crate) struct VncQuery {
    /// Send input to the desktop too (the operator must allow it: `--desktop-control`).
    #[serde(default)]
    control: bool,
    /// The desktop service's port in the sandbox (5000 unless the task said otherwise).
    #[serde(default = "desktop_port")]
    port: u16,
    /// The caller's key, for browsers (which cannot set headers on a WebSocket); not passed on.
    #[serde(default)]
    #[allow(dead_code)]
    api_key: Option<String>,
}

fn desktop_port() -> u16 {
    5000
}

/// The desktop's live view: VNC over a WebSocket.
#[utoipa::path(get, path = "/v1/sandboxes/{id}/desktop/vnc", tag = "sandboxes", summary = "The desktop's live view: VNC (RFB) over a WebSocket, watch-only unless the operator allows input", params(("id" = String, Path, description = "The sandbox id"), VncQuery), responses((status = 101, description = "Switching to the WebSocket"), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The desktop's VNC server is not available", body = orchard_api_kit::Problem)))]
async fn vnc(
    State(state): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    query: Result<axum::extract::Query<VncQuery>, axum::extract::rejection::QueryRejection>,
    ws: Result<axum::extract::WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    match vnc_upstream(&state, &tenant, &id, query).await {
        Ok(upstream) => match ws {
            Ok(ws) => ws
                .protocols(["binary"])
                .max_message_size(16 << 20)
                .on_upgrade(move |client| orchard_api_kit::relay_websocket(client, upstream)),
            Err(e) => ApiError::bad_request(format!("the live view is a WebSocket: {e}")).into_response(),
        },
        Err(e) => e.into_response(),
    }
}

async fn vnc_upstream(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
    query: Result<axum::extract::Query<VncQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<tokio_tungstenite::WebSocketStream<orchard_agent_client::AgentStream>> {
    let axum::extract::Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if query.control && !state.desktop_control {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "denied",
            "input to a live view is off on this server (the operator allows it with `orchard serve --desktop-control`)",
        ));
    }
    let agent = state.agent(tenant, id).await?;
    Desktop::open_vnc(&*agent, query.port, query.control).await.map_err(desktop_error)
}
