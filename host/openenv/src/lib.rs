//! Orchard's tasks as OpenEnv environments (`openenv-core`'s protocol, what TRL and other
//! trainers drive): a tenant opens a session over a task source with `POST /v1/openenv/sessions`
//! and gets a base URL; OpenEnv's own clients (`GenericEnvClient`, `MCPToolClient`) connect to
//! its `/ws`.
//!
//! - `reset` makes the next task's sandbox and environment (or the one named by `task_id`) and
//!   answers its instruction and tool names;
//! - `step` with `{"type": "list_tools"}` or `{"type": "call_tool", "tool_name", "arguments"}`
//!   calls the task's tool adapters, recorded like a harness's calls; `{"type": "submit",
//!   "answer"}` ends the episode — so does reaching the session's `max_steps` — and the task's
//!   grader gives the reward (`done` is true);
//! - `state` answers the episode's id, step count and task; `mcp` messages answer MCP's
//!   `tools/list` and `tools/call`.
//!
//! Every finished episode is a rollout of the session's job (`eval_id`, harness `openenv`), with
//! its result and trajectory: the web UI, `/v1/evals/{id}` and its export show them.
//!
//! Invariants: the base URL's token is the session's only credential (OpenEnv's client sends no
//! headers): 128 random bits, compared in constant time, never logged; a session belongs to the
//! tenant that opened it and its sandboxes are that tenant's, under its quotas; at most
//! [`MAX_SESSIONS`] per tenant, and one idle for [`IDLE`] is closed; a connection's episode is
//! abandoned (its sandbox deleted) when the connection ends.

#![warn(missing_docs)]

mod protocol;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, State, WebSocketUpgrade};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use orchard_api_kit::{ApiError, ApiResult, JsonBody, Tenant};
use orchard_evals_api::EvalService;
use orchard_scheduler::Prepared;
use serde::Deserialize;
use serde_json::{Value, json};

/// Most open sessions per tenant.
pub const MAX_SESSIONS: usize = 64;
/// A session unused this long is closed.
pub const IDLE: Duration = Duration::from_secs(3600);

/// The sessions of one server.
pub struct OpenEnvService {
    evals: Arc<EvalService>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// One session: a task source and how its episodes run.
pub(crate) struct Session {
    pub tenant: String,
    pub prepared: Prepared,
    pub job: Arc<orchard_eval::Job>,
    pub task_ids: Vec<String>,
    pub max_steps: u32,
    next: std::sync::atomic::AtomicUsize,
    last_active: Mutex<Instant>,
    /// The rewards of its finished episodes, in order.
    pub rewards: Mutex<Vec<Option<f64>>>,
}

impl Session {
    pub(crate) fn touch(&self) {
        *self.last_active.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// The task `id`, or the next in turn.
    pub(crate) fn task(&self, id: Option<&str>) -> Result<&orchard_eval::Task, String> {
        let id = match id {
            Some(id) => id.to_string(),
            None => {
                let n = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                self.task_ids[n % self.task_ids.len()].clone()
            }
        };
        self.prepared.tasks.get(&id).ok_or_else(|| format!("task_id: no task {id:?} in this session"))
    }
}

/// `POST /v1/openenv/sessions`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenBody {
    /// Where the tasks are.
    tasks: orchard_spec::TaskSource,
    /// The tasks episodes take in turn (default: all, in order).
    #[serde(default)]
    task_ids: Option<Vec<String>>,
    /// Tool adapters offered (tasks naming their own get theirs).
    #[serde(default)]
    tools: Vec<String>,
    /// The grader of the final reward.
    grader: String,
    /// Tool calls before an episode ends unsubmitted (default 30).
    #[serde(default = "thirty")]
    max_steps: u32,
    /// The image of tasks that name none.
    #[serde(default)]
    image: Option<String>,
    /// Configuration per tool adapter.
    #[serde(default)]
    tool_config: serde_json::Map<String, Value>,
}

fn thirty() -> u32 {
    30
}

impl OpenEnvService {
    /// A service on the evaluation service's engine (its tasks, plugins and sandboxes).
    pub fn new(evals: Arc<EvalService>) -> Arc<OpenEnvService> {
        Arc::new(OpenEnvService { evals, sessions: Mutex::new(HashMap::new()) })
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session a token opens, in constant time over the token.
    pub(crate) fn session(&self, token: &str) -> Option<Arc<Session>> {
        let sessions = self.sessions();
        let found = sessions
            .iter()
            .find(|(k, _)| {
                k.len() == token.len() && k.bytes().zip(token.bytes()).fold(0u8, |a, (x, y)| a | (x ^ y)) == 0
            })
            .map(|(_, s)| s.clone());
        if let Some(s) = &found {
            s.touch();
        }
        found
    }

    fn close_idle(&self) {
        self.sessions().retain(|_, s| s.last_active.lock().unwrap_or_else(|p| p.into_inner()).elapsed() < IDLE);
    }
}

/// The routes: `/openenv/sessions` (an API key's) and `/openenv/s/{token}/…` (the token's), to
/// nest under `/v1`.
pub fn routes<S: Clone + Send + Sync + 'static>(service: Arc<OpenEnvService>) -> Router<S> {
    Router::new()
        .route("/openenv/sessions", post(open))
        .route("/openenv/s/{token}/health", get(health))
        .route("/openenv/s/{token}/ws", get(websocket))
        .route("/openenv/s/{token}", axum::routing::delete(close))
        .with_state(service)
}

/// The OpenAPI paths of the session routes (the WebSocket is OpenEnv's protocol, described in
/// the book).
pub fn openapi_paths() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi;
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(open, close, health, websocket), components(schemas(OpenBody)))]
    struct Doc;
    Doc::openapi()
}

/// Paths the token authenticates (no API key): the server's authentication lets them through.
pub fn is_token_path(path: &str) -> bool {
    path.starts_with("/v1/openenv/s/")
}

#[utoipa::path(post, path = "/v1/openenv/sessions", tag = "training",
    summary = "Open an OpenEnv session over a task source; OpenEnv's clients take its base_url",
    request_body = OpenBody,
    responses((status = 201, description = "Opened: {base_url, eval_id (the job its episodes are recorded in), task_ids, max_steps}", body = serde_json::Value),
        (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem)))]
async fn open(
    State(service): State<Arc<OpenEnvService>>,
    Extension(tenant): Extension<Tenant>,
    JsonBody(body): JsonBody<OpenBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    service.close_idle();
    if service.sessions().values().filter(|s| s.tenant == tenant.0).count() >= MAX_SESSIONS {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "quota",
            format!("at most {MAX_SESSIONS} open OpenEnv sessions per tenant: close one (DELETE its base URL)"),
        ));
    }
    if body.max_steps == 0 || body.max_steps > 1000 {
        return Err(ApiError::invalid("max_steps: 1 to 1000"));
    }
    let mut spec = json!({"tasks": body.tasks, "harnesses": [], "tools": body.tools, "grader": body.grader,
        "tool_config": body.tool_config});
    if let Some(image) = &body.image {
        spec["image"] = json!(image);
    }
    let spec: orchard_spec::EvalSpec = serde_json::from_value(spec).map_err(|e| ApiError::invalid(e.to_string()))?;
    let env = self_env(&service);
    let id = format!("oe-{}", uuid::Uuid::new_v4().simple());
    let prepared = Prepared::new(env, &id, &tenant.0, spec).await.map_err(|e| ApiError::invalid(e.0))?;
    let job = Arc::new(prepared.job().map_err(|e| ApiError::invalid(e.0))?);
    // The session is a job of the tenant's: its episodes are recorded as its rollouts as they
    // finish, so they show in the web UI and the job's export like any evaluation's.
    let record = orchard_store::NewEval {
        id: id.clone(),
        tenant: tenant.0.clone(),
        spec: serde_json::to_string(&prepared.spec).map_err(|e| ApiError::invalid(e.to_string()))?,
        fingerprint: id.clone(),
        k: 1,
        rollouts: vec![],
        group: false,
    };
    self_env(&service)
        .store
        .create_open_eval(&record)
        .await
        .map_err(|e| ApiError::unavailable(format!("recording the session: {e}")))?;
    let task_ids = match body.task_ids {
        Some(ids) if ids.is_empty() => return Err(ApiError::invalid("task_ids: give at least one, or none for all")),
        Some(ids) => {
            if let Some(missing) = ids.iter().find(|id| !prepared.tasks.contains_key(*id)) {
                return Err(ApiError::invalid(format!("task_ids: no task {missing:?} in the source")));
            }
            ids
        }
        None => prepared.task_order.clone(),
    };
    if task_ids.is_empty() {
        return Err(ApiError::invalid("tasks: the source has no tasks"));
    }
    let token = hex::encode(rand::random::<[u8; 16]>());
    let session = Session {
        tenant: tenant.0.clone(),
        prepared,
        job,
        task_ids: task_ids.clone(),
        max_steps: body.max_steps,
        next: Default::default(),
        last_active: Mutex::new(Instant::now()),
        rewards: Mutex::new(Vec::new()),
    };
    service.sessions().insert(token.clone(), Arc::new(session));
    Ok((
        StatusCode::CREATED,
        Json(json!({"base_url": format!("/v1/openenv/s/{token}"), "eval_id": id, "task_ids": task_ids,
            "max_steps": body.max_steps})),
    ))
}

fn self_env(service: &OpenEnvService) -> &orchard_scheduler::Env {
    service.evals.runner.env()
}

#[utoipa::path(get, path = "/v1/openenv/s/{token}/health", tag = "training", summary = "An OpenEnv session's health",
    security(()), params(("token" = String, Path, description = "The session's token")),
    responses((status = 200, description = "{status: healthy}", body = serde_json::Value),
        (status = 404, description = "No such session", body = orchard_api_kit::Problem)))]
async fn health(State(service): State<Arc<OpenEnvService>>, Path(token): Path<String>) -> Response {
    match service.session(&token) {
        Some(_) => Json(json!({"status": "healthy"})).into_response(),
        None => not_found(),
    }
}

#[utoipa::path(delete, path = "/v1/openenv/s/{token}", tag = "training", summary = "Close an OpenEnv session",
    security(()), params(("token" = String, Path, description = "The session's token (its base URL's last part)")),
    responses((status = 204, description = "Closed"), (status = 404, description = "No such session", body = orchard_api_kit::Problem)))]
async fn close(State(service): State<Arc<OpenEnvService>>, Path(token): Path<String>) -> Response {
    match service.session(&token) {
        Some(_) => {
            service.sessions().remove(&token);
            StatusCode::NO_CONTENT.into_response()
        }
        None => not_found(),
    }
}

fn not_found() -> Response {
    ApiError::not_found("no such OpenEnv session").into_response()
}

#[utoipa::path(get, path = "/v1/openenv/s/{token}/ws", tag = "training",
    summary = "An OpenEnv session's WebSocket (OpenEnv's protocol: reset, step, state, mcp, close)",
    security(()), params(("token" = String, Path, description = "The session's token")),
    responses((status = 101, description = "Upgraded"),
        (status = 404, description = "No such session", body = orchard_api_kit::Problem),
        (status = "4XX", description = "Not a WebSocket upgrade", body = orchard_api_kit::Problem)))]
async fn websocket(
    State(service): State<Arc<OpenEnvService>>,
    Path(token): Path<String>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Response {
    let Some(session) = service.session(&token) else { return not_found() };
    let Ok(ws) = ws else {
        return ApiError::invalid("this is an OpenEnv session's WebSocket: connect with a WebSocket client")
            .into_response();
    };
    let runner = &service.evals.runner;
    let engine = protocol::Engine {
        backend: runner.backend().clone(),
        runtime: runner.runtime().clone(),
        admission: runner.env().admission.clone(),
        store: runner.env().store.clone(),
    };
    ws.max_message_size(16 << 20).on_upgrade(move |socket| protocol::serve(socket, session, engine))
}
