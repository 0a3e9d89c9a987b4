//! Orchard's HTTP server.
//!
//! - The Orchard-Env-compatible surface (`/sandboxes`, `/jobs`, files, `apply_patch`, the PTY
//!   WebSocket, `X-API-Key`), so that its Python SDK works unchanged.
//! - Orchard's own `/v1` API: streamed exec, sessions, background processes, tar in/out, batches.
//!
//! Every answer is JSON (or a byte stream where the route says so) and carries an `X-Request-ID`.

#![warn(missing_docs)]

mod admit;
mod auth;
mod jobs;
mod listener;
mod openapi;
mod pty_proxy;
mod routes_desktop;
mod routes_files;
mod routes_jobs;
mod routes_plugins;
mod routes_sandboxes;
mod routes_v1;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::HeaderValue;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use orchard_sandbox::{Backend, SandboxInfo};

pub use auth::{ApiKeys, DEFAULT_TENANT, Tenant};
pub use listener::ConnectionLimits;
pub use openapi::document_value as openapi_document;
pub use orchard_api_kit::{ApiError, ApiResult};

/// Sandboxes starting at once unless the operator says otherwise.
pub const DEFAULT_MAX_STARTING: usize = 128;

/// What every route shares.
pub struct AppState {
    /// Where sandboxes run.
    pub backend: Arc<dyn Backend>,
    /// Tenants and their keys.
    pub keys: ApiKeys,
    /// What API clients may ask for: images, resources, quotas.
    pub admission: Arc<orchard_admission::Admission>,
    /// Jobs of the compatible exec API.
    pub jobs: jobs::JobStore,
    /// The plugin registry, when the server runs plugins.
    pub plugins: Option<Arc<orchard_runtime::Registry>>,
    /// The evaluation service (`/v1/evals`), when the server runs one.
    pub evals: Option<Arc<orchard_evals_api::EvalService>>,
    /// Rollout groups for trainers (`/v1/groups`), on the evaluation service's engine.
    pub groups: Option<Arc<orchard_groups::GroupService>>,
    /// The recording OpenAI-compatible proxy (`/v1/proxy`).
    pub proxy: Option<Arc<orchard_model_proxy::ProxyService>>,
    /// Tasks as OpenEnv environments (`/v1/openenv`).
    pub openenv: Option<Arc<orchard_openenv::OpenEnvService>>,
    /// The operator's credential for `/metrics` (besides an admin tenant's key).
    pub metrics_token: Option<String>,
    /// Whether a desktop's live view may take input (`orchard serve --desktop-control`); off,
    /// live views only watch.
    pub desktop_control: bool,
    /// Creates the backend is working on at once (`orchard serve --max-starting`); more wait
    /// for a permit (see `admit`).
    pub starting: Arc<tokio::sync::Semaphore>,
}

impl AppState {
    /// The state of a server with sandboxes and plugins only (evaluations are added with [`AppState::with_evals`]).
    pub fn new(
        backend: Arc<dyn Backend>,
        keys: ApiKeys,
        admission: Arc<orchard_admission::Admission>,
        plugins: Option<Arc<orchard_runtime::Registry>>,
    ) -> Arc<Self> {
        Arc::new(AppState {
            backend,
            keys,
            admission,
            jobs: jobs::JobStore::default(),
            plugins,
            evals: None,
            groups: None,
            proxy: None,
            openenv: None,
            metrics_token: None,
            desktop_control: false,
            starting: Arc::new(tokio::sync::Semaphore::new(DEFAULT_MAX_STARTING)),
        })
    }

    /// The same state, with at most `n` sandboxes starting at once.
    pub fn with_max_starting(self: Arc<Self>, n: usize) -> Arc<Self> {
        let mut state =
            Arc::try_unwrap(self).unwrap_or_else(|_| panic!("with_max_starting before the state is shared"));
        state.starting = Arc::new(tokio::sync::Semaphore::new(n.max(1)));
        Arc::new(state)
    }

    /// The same state, letting desktop live views take input when `allowed`.
    pub fn with_desktop_control(self: Arc<Self>, allowed: bool) -> Arc<Self> {
        let mut state =
            Arc::try_unwrap(self).unwrap_or_else(|_| panic!("with_desktop_control before the state is shared"));
        state.desktop_control = allowed;
        Arc::new(state)
    }

    /// The same state, with `/metrics` also answering `token`.
    pub fn with_metrics_token(self: Arc<Self>, token: Option<String>) -> Arc<Self> {
        let mut state =
            Arc::try_unwrap(self).unwrap_or_else(|_| panic!("with_metrics_token before the state is shared"));
        state.metrics_token = token.filter(|t| !t.is_empty());
        Arc::new(state)
    }

    /// The same state, serving evaluations too.
    pub fn with_evals(self: Arc<Self>, evals: Arc<orchard_evals_api::EvalService>) -> Arc<Self> {
        let mut state = Arc::try_unwrap(self).unwrap_or_else(|_| panic!("with_evals before the state is shared"));
        state.groups = Some(orchard_groups::GroupService::new(evals.clone()));
        state.proxy = Some(orchard_model_proxy::ProxyService::new(evals.env.store.clone(), evals.env.egress.clone()));
        state.openenv = Some(orchard_openenv::OpenEnvService::new(evals.clone()));
        state.evals = Some(evals);
        Arc::new(state)
    }

    /// The sandbox the tenant calls `id` (a name it chose, or one the server gave), if it
    /// exists and is the tenant's; otherwise 404 either way, so that one tenant cannot even learn
    /// which ids another uses. The answer's `id` is the backend's: use it for the backend.
    pub async fn sandbox(&self, tenant: &Tenant, id: &str) -> ApiResult<SandboxInfo> {
        for candidate in [scoped_id(&tenant.0, id), id.to_string()] {
            if let Ok(info) = self.backend.get(&candidate).await
                && info.tenant == tenant.0
            {
                return Ok(info);
            }
        }
        Err(ApiError::not_found(format!("sandbox {id} not found")))
    }

    /// The sandbox's agent client, after the tenant check.
    pub async fn agent(&self, tenant: &Tenant, id: &str) -> ApiResult<orchard_agent_client::SharedAgent> {
        let info = self.sandbox(tenant, id).await?;
        Ok(self.backend.agent(&info.id).await?)
    }
}

/// Ids clients choose are their tenant's own: two tenants may both name a sandbox `web`. The
/// backend keeps a chosen id under a prefix derived from the tenant (ids the server makes up are
/// random and kept as they are); clients only ever see the id they chose. A server without keys
/// has one tenant (`default`, a name keys may not use): its ids are kept as chosen, so pods and
/// sandboxes keep the names their operator gave them.
pub fn scoped_id(tenant: &str, id: &str) -> String {
    use sha2::Digest;
    if tenant == auth::DEFAULT_TENANT {
        return id.to_string();
    }
    let tag = hex::encode(&sha2::Sha256::digest(tenant.as_bytes())[..4]);
    format!("t{tag}-{id}")
}

/// Longest id a client may choose (the backend's limit less the tenant's prefix).
pub const MAX_CLIENT_ID: usize = 63 - 10;

/// The id the sandbox's tenant calls it by.
pub fn client_id(info: &SandboxInfo) -> String {
    unscoped(&info.tenant, &info.id).to_string()
}

/// The id `tenant` chose, from the backend's.
pub fn unscoped<'a>(tenant: &str, id: &'a str) -> &'a str {
    let prefix = scoped_id(tenant, "");
    id.strip_prefix(&prefix).filter(|_| !prefix.is_empty()).unwrap_or(id)
}

/// JSON bodies of the compatible API (base64 file contents) may be large.
const JSON_BODY_LIMIT: usize = 256 * 1024 * 1024;

/// Every route of the server, behind authentication.
pub fn router(state: Arc<AppState>) -> Router {
    let mut v1 = routes_v1::routes().merge(routes_plugins::routes()).merge(routes_desktop::routes());
    let mut ui = Router::new();
    if let Some(evals) = &state.evals {
        v1 = v1.merge(orchard_evals_api::routes(evals.clone()));
        if let Some(groups) = &state.groups {
            v1 = v1.merge(orchard_groups::routes(groups.clone()));
        }
        if let Some(proxy) = &state.proxy {
            v1 = v1.merge(orchard_model_proxy::routes(proxy.clone()));
        }
        if let Some(openenv) = &state.openenv {
            v1 = v1.merge(orchard_openenv::routes(openenv.clone()));
        }
        let ui_state =
            Arc::new(orchard_web_ui::UiState { service: evals.clone(), sessions: Arc::new(web_sessions(&state.keys)) });
        ui = ui
            .nest("/ui", orchard_web_ui::routes(ui_state))
            .route("/ui/", get(|| async { axum::response::Redirect::to("/ui") }));
    }
    Router::new()
        .merge(ui)
        .route("/", get(routes_sandboxes::banner))
        .route("/health", get(routes_sandboxes::health))
        .route("/v1/ready", get(ready))
        .route("/ready", get(ready))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi::document))
        .merge(routes_sandboxes::routes())
        .merge(routes_jobs::routes())
        .merge(routes_files::routes())
        .nest("/v1", v1)
        .layer(DefaultBodyLimit::max(JSON_BODY_LIMIT))
        .layer(middleware::from_fn_with_state(state.clone(), auth::authenticate))
        .layer(middleware::from_fn(request_id))
        .with_state(state)
}

/// The web UI's sessions: signed with a secret every replica derives from the same keys (so a
/// session works on all of them, and changing the keys ends every session).
fn web_sessions(keys: &ApiKeys) -> orchard_web_ui::Sessions {
    use sha2::Digest;
    if keys.is_empty() {
        let secret: [u8; 32] = rand::random();
        let check: orchard_web_ui::KeyCheck = Box::new(|_| Some(DEFAULT_TENANT.to_string()));
        return orchard_web_ui::Sessions::new(secret.to_vec(), check, Some(DEFAULT_TENANT.to_string()));
    }
    let mut hasher = sha2::Sha256::new();
    hasher.update(b"orchard web UI sessions\n");
    for line in keys.fingerprint_lines() {
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
    }
    let keys = keys.clone();
    let check: orchard_web_ui::KeyCheck = Box::new(move |key| keys.tenant_of(key).map(str::to_string));
    orchard_web_ui::Sessions::new(hasher.finalize().to_vec(), check, None)
}

/// Prometheus metrics (OpenMetrics text). Gauges of what is live are read now.
async fn metrics(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> Response {
    use axum::response::IntoResponse;
    let m = orchard_metrics::metrics();
    m.sandboxes_live.set(state.backend.list().await.len() as i64);
    if let Some(evals) = &state.evals {
        m.rollouts_running.set(evals.runner.running_count() as i64);
        if let Ok(waiting) = evals.env.store.evals_waiting().await {
            m.queue_depth.set(waiting.iter().map(|w| w.2).sum());
        }
    }
    ([(axum::http::header::CONTENT_TYPE, orchard_metrics::CONTENT_TYPE)], m.encode()).into_response()
}

/// Readiness (also at `/ready`): the shipped plugins are compiled and the database answers.
/// Liveness is `/health`, which answers from the moment the server listens.
#[utoipa::path(get, path = "/v1/ready", tag = "service", summary = "Readiness: plugins compiled and the database answers", security(()),
    responses((status = 200, description = "Ready", body = serde_json::Value),
        (status = 503, description = "Plugins still compiling, or the database does not answer", body = orchard_api_kit::Problem)))]
async fn ready(axum::extract::State(state): axum::extract::State<Arc<AppState>>) -> Response {
    use axum::response::IntoResponse;
    if let Some(registry) = &state.plugins {
        let left = registry.deferred_count();
        if left > 0 {
            return ApiError::unavailable(format!("{left} plugins still compiling")).into_response();
        }
    }
    if let Some(evals) = &state.evals
        && let Err(e) = evals.env.store.ping().await
    {
        return ApiError::unavailable(format!("the database does not answer: {e}")).into_response();
    }
    axum::Json(serde_json::json!({"status": "ready"})).into_response()
}

/// Echoes the caller's `X-Request-ID` (when sane) or makes one up, on every answer.
async fn request_id(request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let mut response = next.run(request).await;
    orchard_metrics::metrics().http_response(method.as_str(), response.status().as_u16());
    tracing::debug!(request_id = %id, %method, %path, status = response.status().as_u16(), "request");
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    response
}

/// Runs the background duties: idle-sandbox reaping, the quota ledger's resync, and forgetting
/// old jobs.
pub fn spawn_housekeeping(state: Arc<AppState>, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        let mut rounds: u64 = 0;
        loop {
            tick.tick().await;
            state.backend.reap_expired().await;
            state.resync_quotas().await;
            rounds += 1;
            if rounds.is_multiple_of(60) {
                state.jobs.collect_garbage();
            }
        }
    })
}

/// Refuses to serve without authentication anywhere but loopback, unless told to.
pub fn check_listen_policy(addr: &SocketAddr, keys: &ApiKeys, allow_no_auth: bool) -> Result<(), String> {
    if keys.is_empty() && !addr.ip().is_loopback() && !allow_no_auth {
        return Err(format!(
            "refusing to listen on {addr} without API keys: set ORCHARD_API_KEYS (tenant:key,...) or --api-keys FILE, \
             listen on a loopback address, or pass --insecure-no-auth"
        ));
    }
    Ok(())
}

/// Serves until `shutdown` resolves, with the default connection limits.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, state, ConnectionLimits::default(), shutdown).await
}

/// Serves until `shutdown` resolves, under `limits` (see [`ConnectionLimits`]).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    listener::serve(listener, router(state), limits, shutdown).await
}
