//! Orchard's own API, `/v1`: what Orchard Env's API cannot express.
//!
//! Streamed exec (NDJSON frames), persistent shell sessions, background processes, raw file and
//! tar streams (no base64, no size cap, nothing held in memory), and batches: create N sandboxes
//! with all-or-nothing admission, run one command across N sandboxes.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures::{StreamExt, TryStreamExt};
use orchard_agent_client::{SandboxAgent, full, streaming};
use orchard_protocol::{ExecRequest, OutputLimit, ProcessStart, SessionStart, SignalRequest};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::routes_jobs::{ExecBody, parse_command, timeout_ms};
use crate::routes_sandboxes::{CreateBody, sandbox_view};
use crate::{ApiError, ApiResult, AppState, Tenant};
use orchard_api_kit::{JsonBody, parse_json, parse_rest, take_field};

/// Most sandboxes a batch create or exec may name.
const MAX_BATCH: usize = 4096;
/// How many execs of a batch run at once.
const BATCH_CONCURRENCY: usize = 64;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(crate::routes_sandboxes::health))
        .route("/sandboxes", post(create).get(list))
        .route("/sandboxes/batch", post(create_batch))
        .route("/sandboxes/{id}", get(get_one).delete(delete))
        .route("/sandboxes/{id}/fork", post(fork))
        .route("/sandboxes/{id}/exec", post(exec))
        .route("/exec/batch", post(exec_batch))
        .route("/sandboxes/{id}/sessions", post(session_start).get(session_list))
        .route("/sandboxes/{id}/sessions/{sid}", axum::routing::delete(session_close))
        .route("/sandboxes/{id}/sessions/{sid}/exec", post(session_exec))
        .route("/sandboxes/{id}/sessions/{sid}/continue", post(session_continue))
        .route("/sandboxes/{id}/processes", post(process_start).get(process_list))
        .route("/sandboxes/{id}/processes/{pid}", get(process_get))
        .route("/sandboxes/{id}/processes/{pid}/signal", post(process_signal))
        .route("/sandboxes/{id}/processes/{pid}/log", get(process_log))
        .route("/sandboxes/{id}/files", get(file_read).put(file_write).delete(file_remove))
        .route("/sandboxes/{id}/files/list", get(file_list))
        .route("/sandboxes/{id}/files/stat", get(file_stat))
        .route("/sandboxes/{id}/tar", get(tar_download).put(tar_upload))
}

type S = State<Arc<AppState>>;
type T = Extension<Tenant>;

#[utoipa::path(post, path = "/v1/sandboxes", tag = "sandboxes", summary = "Create a sandbox", request_body = crate::routes_sandboxes::CreateBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn create(State(state): S, Extension(tenant): T, JsonBody(body): JsonBody<CreateBody>) -> ApiResult<Json<Value>> {
    let info = state.create_sandbox(body.to_spec(&tenant)?).await?;
    Ok(Json(sandbox_view(&info)))
}

#[utoipa::path(get, path = "/v1/sandboxes", tag = "sandboxes", summary = "The tenant's sandboxes", responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn list(State(state): S, Extension(tenant): T) -> Json<Value> {
    let mine: Vec<Value> =
        state.backend.list().await.iter().filter(|i| i.tenant == tenant.0).map(sandbox_view).collect();
    Json(json!({ "sandboxes": mine }))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}", tag = "sandboxes", summary = "One sandbox", params(("id" = String, Path, description = "The sandbox id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn get_one(State(state): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(sandbox_view(&state.sandbox(&tenant, &id).await?)))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}", tag = "sandboxes", summary = "Delete a sandbox (its processes are gone when this answers)", params(("id" = String, Path, description = "The sandbox id")), responses((status = 204, description = "Deleted"), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn delete(State(state): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<StatusCode> {
    state.delete_sandbox(&tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(try_from = "Map<String, Value>")]
struct BatchCreateBody {
    count: usize,
    spec: CreateBody,
}

impl utoipa::PartialSchema for BatchCreateBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        orchard_api_kit::object_with::<CreateBody>(&[("count", usize::schema(), true)])
    }
}

impl utoipa::ToSchema for BatchCreateBody {}

impl TryFrom<Map<String, Value>> for BatchCreateBody {
    type Error = String;
    fn try_from(mut object: Map<String, Value>) -> Result<Self, String> {
        let count = take_field(&mut object, "count")?.ok_or("missing field `count`")?;
        Ok(BatchCreateBody { count, spec: parse_rest(object)? })
    }
}

/// Creates `count` sandboxes or none: admission is checked up front, and if any create fails
/// the ones already made are deleted again.
#[utoipa::path(post, path = "/v1/sandboxes/batch", tag = "sandboxes", summary = "Create N sandboxes, all or none", request_body = BatchCreateBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn create_batch(
    State(state): S,
    Extension(tenant): T,
    JsonBody(body): JsonBody<BatchCreateBody>,
) -> ApiResult<Json<Value>> {
    if body.count == 0 || body.count > MAX_BATCH {
        return Err(ApiError::invalid(format!("count: must be between 1 and {MAX_BATCH}")));
    }
    if body.spec.sandbox_id.is_some() {
        return Err(ApiError::invalid("sandbox_id: cannot be given for a batch (ids are generated)"));
    }
    let made = state.create_sandboxes(body.spec.to_spec(&tenant)?, body.count).await?;
    let views: Vec<Value> = made.iter().map(sandbox_view).collect();
    Ok(Json(json!({ "sandboxes": views })))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ForkBody {
    /// How many children (1 to 64).
    #[serde(default = "one")]
    count: usize,
}

fn one() -> usize {
    1
}

/// New sandboxes whose filesystem is the source's at this moment; processes are not carried.
#[utoipa::path(post, path = "/v1/sandboxes/{id}/fork", tag = "sandboxes",
    summary = "Fork a sandbox: N new sandboxes with its files as they are now (processes are not carried; each starts as a fresh sandbox of the same spec)",
    params(("id" = String, Path, description = "The sandbox id")), request_body = ForkBody,
    responses((status = 201, description = "The children", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn fork(
    State(state): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ForkBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    if body.count == 0 || body.count > orchard_sandbox::MAX_FORK {
        return Err(ApiError::invalid(format!("count: must be between 1 and {}", orchard_sandbox::MAX_FORK)));
    }
    let source = state.sandbox(&tenant, &id).await?;
    // The children count against the tenant's quota like any create.
    let mut shape = orchard_sandbox::SandboxSpec::new(tenant.0.clone(), source.image.clone());
    (shape.memory_bytes, shape.cpu) = (source.memory_bytes, source.cpu);
    let mut reservation = state.admission.quotas.reserve(&shape, body.count)?;
    let started = std::time::Instant::now();
    let forked = state.backend.fork(&source.id, body.count).await?;
    for child in &forked.sandboxes {
        reservation.commit(&child.id);
    }
    let views: Vec<Value> = forked.sandboxes.iter().map(sandbox_view).collect();
    let seconds = started.elapsed().as_secs_f64();
    let paused = forked.source_paused.map(|d| d.as_secs_f64());
    Ok((
        StatusCode::CREATED,
        Json(json!({ "source": id, "sandboxes": views, "seconds": seconds, "source_paused_seconds": paused })),
    ))
}

/// `/v1` exec: the Orchard Env fields plus output limits, answered with the full result.
#[derive(Deserialize)]
#[serde(try_from = "Map<String, Value>")]
struct V1ExecBody {
    base: ExecBody,
    output_limit: Option<OutputLimit>,
    stream: bool,
}

impl utoipa::PartialSchema for V1ExecBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        orchard_api_kit::object_with::<ExecBody>(&[
            ("output_limit", OutputLimit::schema(), false),
            ("stream", bool::schema(), false),
        ])
    }
}

impl utoipa::ToSchema for V1ExecBody {}

impl TryFrom<Map<String, Value>> for V1ExecBody {
    type Error = String;
    fn try_from(mut object: Map<String, Value>) -> Result<Self, String> {
        let output_limit = take_field(&mut object, "output_limit")?;
        let stream = take_field(&mut object, "stream")?.unwrap_or(false);
        Ok(V1ExecBody { output_limit, stream, base: parse_rest(object)? })
    }
}

impl V1ExecBody {
    fn request(&self) -> ApiResult<ExecRequest> {
        let mut req = self.base.to_request()?;
        if let Some(limit) = self.output_limit {
            req.output_limit = limit;
        }
        Ok(req)
    }
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/exec", tag = "exec", summary = "Run a command; the full result, or NDJSON frames with stream", params(("id" = String, Path, description = "The sandbox id")), request_body = V1ExecBody, responses((status = 200, description = "The result (or application/x-ndjson frames when stream is true)", body = orchard_protocol::ExecResult), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn exec(
    State(state): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<V1ExecBody>,
) -> ApiResult<Response> {
    let req = body.request()?;
    let agent = state.agent(&tenant, &id).await?;
    if !body.stream {
        return Ok(Json(agent.exec(&req).await?).into_response());
    }
    let frames = agent.exec_stream(&req).await?;
    let lines = frames.map(|frame| {
        let frame =
            frame.unwrap_or_else(|e| orchard_protocol::ExecFrame::Error { kind: e.kind(), message: e.to_string() });
        let mut line = serde_json::to_vec(&frame).expect("frames serialise");
        line.push(b'\n');
        Ok::<_, std::io::Error>(bytes::Bytes::from(line))
    });
    Ok(([(axum::http::header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response())
}

#[derive(Deserialize)]
#[serde(try_from = "Map<String, Value>")]
struct BatchExecBody {
    sandbox_ids: Vec<String>,
    base: ExecBody,
}

impl utoipa::PartialSchema for BatchExecBody {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        orchard_api_kit::object_with::<ExecBody>(&[("sandbox_ids", Vec::<String>::schema(), true)])
    }
}

impl utoipa::ToSchema for BatchExecBody {}

impl TryFrom<Map<String, Value>> for BatchExecBody {
    type Error = String;
    fn try_from(mut object: Map<String, Value>) -> Result<Self, String> {
        let sandbox_ids = take_field(&mut object, "sandbox_ids")?.ok_or("missing field `sandbox_ids`")?;
        Ok(BatchExecBody { sandbox_ids, base: parse_rest(object)? })
    }
}

/// Runs one command in many sandboxes; each gets its own result or error.
#[utoipa::path(post, path = "/v1/exec/batch", tag = "exec", summary = "Run one command in many sandboxes", request_body = BatchExecBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn exec_batch(
    State(state): S,
    Extension(tenant): T,
    JsonBody(body): JsonBody<BatchExecBody>,
) -> ApiResult<Json<Value>> {
    if body.sandbox_ids.is_empty() || body.sandbox_ids.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!("sandbox_ids: give between 1 and {MAX_BATCH} ids")));
    }
    let req = body.base.to_request()?;
    let runs = body.sandbox_ids.into_iter().map(|id| {
        let (state, tenant, req) = (state.clone(), tenant.clone(), req.clone());
        async move {
            let outcome = match state.agent(&tenant, &id).await {
                Ok(agent) => agent.exec(&req).await.map_err(ApiError::from),
                Err(e) => Err(e),
            };
            match outcome {
                Ok(result) => json!({"sandbox_id": id, "result": result}),
                Err(e) => json!({"sandbox_id": id, "error": {"detail": e.detail, "kind": e.kind, "status": e.status.as_u16()}}),
            }
        }
    });
    let results: Vec<Value> = futures::stream::iter(runs).buffered(BATCH_CONCURRENCY).collect().await;
    Ok(Json(json!({ "results": results })))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions", tag = "sessions", summary = "Start a persistent bash session", params(("id" = String, Path, description = "The sandbox id")), request_body(content = Option<orchard_protocol::SessionStart>, description = "Optional"), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn session_start(
    State(state): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<Value>> {
    let req: SessionStart = if body.is_empty() { SessionStart::default() } else { parse_json(&body)? };
    let agent = state.agent(&tenant, &id).await?;
    Ok(Json(json!(agent.start_session(&req).await?)))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/sessions", tag = "sessions", summary = "The sandbox's sessions", params(("id" = String, Path, description = "The sandbox id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn session_list(State(state): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({"sessions": state.agent(&tenant, &id).await?.list_sessions().await?})))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SessionExecBody {
    command: Value,
    #[serde(default)]
    timeout_seconds: Option<f64>,
    /// Answer once the command has been quiet this long, leaving it running (see `continue`).
    #[serde(default)]
    idle_seconds: Option<f64>,
    #[serde(default)]
    output_limit: Option<OutputLimit>,
}

/// Body of `POST /v1/sandboxes/{id}/sessions/{sid}/continue`.
#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct SessionContinueBody {
    #[serde(default)]
    input: Option<String>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    interrupt: bool,
    #[serde(default)]
    timeout_seconds: Option<f64>,
    #[serde(default)]
    idle_seconds: Option<f64>,
    #[serde(default)]
    output_limit: Option<OutputLimit>,
}

fn idle_ms(seconds: Option<f64>) -> ApiResult<Option<u64>> {
    seconds
        .map(|s| {
            timeout_ms(Some(s)).map_err(|_| ApiError::invalid(format!("idle_seconds: {s} is out of range (0, 86400]")))
        })
        .transpose()
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions/{sid}/continue", tag = "sessions", summary = "Type into, wait on or interrupt a command left running", params(("id" = String, Path, description = "The sandbox id"), ("sid" = String, Path, description = "The session id")), request_body = SessionContinueBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn session_continue(
    State(state): S,
    Extension(tenant): T,
    Path((id, sid)): Path<(String, String)>,
    JsonBody(body): JsonBody<SessionContinueBody>,
) -> ApiResult<Json<Value>> {
    let req = orchard_protocol::SessionContinue {
        input: body.input,
        interrupt: body.interrupt,
        timeout_ms: Some(timeout_ms(body.timeout_seconds)?),
        idle_timeout_ms: idle_ms(body.idle_seconds)?,
        output_limit: body.output_limit.unwrap_or_default(),
    };
    let agent = state.agent(&tenant, &id).await?;
    Ok(Json(json!(agent.session_continue(&sid, &req).await?)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/sessions/{sid}/exec", tag = "sessions", summary = "Run a command in a session", params(("id" = String, Path, description = "The sandbox id"), ("sid" = String, Path, description = "The session id")), request_body = SessionExecBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn session_exec(
    State(state): S,
    Extension(tenant): T,
    Path((id, sid)): Path<(String, String)>,
    JsonBody(body): JsonBody<SessionExecBody>,
) -> ApiResult<Json<Value>> {
    let mut req = ExecRequest::new(parse_command(&body.command)?);
    req.timeout_ms = Some(timeout_ms(body.timeout_seconds)?);
    req.idle_timeout_ms = idle_ms(body.idle_seconds)?;
    if let Some(limit) = body.output_limit {
        req.output_limit = limit;
    }
    let agent = state.agent(&tenant, &id).await?;
    Ok(Json(json!(agent.session_exec(&sid, &req).await?)))
}

#[utoipa::path(delete, path = "/v1/sandboxes/{id}/sessions/{sid}", tag = "sessions", summary = "Close a session", params(("id" = String, Path, description = "The sandbox id"), ("sid" = String, Path, description = "The session id")), responses((status = 204, description = "Closed"), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn session_close(
    State(state): S,
    Extension(tenant): T,
    Path((id, sid)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    state.agent(&tenant, &id).await?.close_session(&sid).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct ProcessBody {
    command: Value,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    env: std::collections::BTreeMap<String, String>,
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/processes", tag = "processes", summary = "Start a background process", params(("id" = String, Path, description = "The sandbox id")), request_body = ProcessBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn process_start(
    State(state): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<ProcessBody>,
) -> ApiResult<Json<Value>> {
    let req = ProcessStart { command: parse_command(&body.command)?, cwd: body.cwd, env: body.env };
    Ok(Json(json!(state.agent(&tenant, &id).await?.start_process(&req).await?)))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes", tag = "processes", summary = "Background processes", params(("id" = String, Path, description = "The sandbox id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn process_list(State(state): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({"processes": state.agent(&tenant, &id).await?.list_processes().await?})))
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes/{pid}", tag = "processes", summary = "One background process", params(("id" = String, Path, description = "The sandbox id"), ("pid" = String, Path, description = "The process id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn process_get(
    State(state): S,
    Extension(tenant): T,
    Path((id, pid)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(state.agent(&tenant, &id).await?.process(&pid).await?)))
}

#[utoipa::path(post, path = "/v1/sandboxes/{id}/processes/{pid}/signal", tag = "processes", summary = "Send a signal to a background process", params(("id" = String, Path, description = "The sandbox id"), ("pid" = String, Path, description = "The process id")), request_body = orchard_protocol::SignalRequest, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn process_signal(
    State(state): S,
    Extension(tenant): T,
    Path((id, pid)): Path<(String, String)>,
    JsonBody(body): JsonBody<SignalRequest>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(state.agent(&tenant, &id).await?.signal_process(&pid, &body.signal).await?)))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct LogQuery {
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    offset: u64,
    #[serde(default)]
    limit: Option<u64>,
}

#[utoipa::path(get, path = "/v1/sandboxes/{id}/processes/{pid}/log", tag = "processes", summary = "A page of a background process's output", params(("id" = String, Path, description = "The sandbox id"), ("pid" = String, Path, description = "The process id"), LogQuery), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn process_log(
    State(state): S,
    Extension(tenant): T,
    Path((id, pid)): Path<(String, String)>,
    orchard_api_kit::Query(q): orchard_api_kit::Query<LogQuery>,
) -> ApiResult<Json<Value>> {
    Ok(Json(json!(state.agent(&tenant, &id).await?.process_log(&pid, q.offset, q.limit).await?)))
}

/// Forwards a request to the agent as it is, streaming the body both ways.
async fn forward(
    agent: &dyn SandboxAgent,
    method: Method,
    path: &str,
    query: Option<String>,
    body: Option<Body>,
) -> ApiResult<Response> {
    let target = match query {
        Some(q) if !q.is_empty() => format!("{path}?{q}"),
        _ => path.to_string(),
    };
    let upload = match body {
        Some(b) => streaming(b.into_data_stream().map_err(std::io::Error::other)),
        None => full(bytes::Bytes::new()),
    };
    let response = agent.send(method, &target, upload).await?;
    let (parts, incoming) = response.into_parts();
    let mut out = Response::new(Body::new(incoming));
    for name in [axum::http::header::CONTENT_TYPE, axum::http::header::CONTENT_LENGTH] {
        if let Some(v) = parts.headers.get(&name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    *out.status_mut() = parts.status;
    Ok(out)
}

fn require_path(query: &Option<String>) -> ApiResult<()> {
    let has = query.as_deref().unwrap_or("").split('&').any(|kv| kv.starts_with("path="));
    if has { Ok(()) } else { Err(ApiError::invalid("query: missing parameter `path`")) }
}

macro_rules! forwarding {
    ($name:ident, $method:expr, $agent_path:literal, $with_body:literal) => {
        async fn $name(
            State(state): S,
            Extension(tenant): T,
            Path(id): Path<String>,
            RawQuery(query): RawQuery,
            body: Body,
        ) -> ApiResult<Response> {
            require_path(&query)?;
            let agent = state.agent(&tenant, &id).await?;
            forward(&*agent, $method, $agent_path, query, $with_body.then_some(body)).await
        }
    };
}

forwarding!(file_read, Method::GET, "/files", false);
forwarding!(file_write, Method::PUT, "/files", true);
forwarding!(file_remove, Method::DELETE, "/files", false);
forwarding!(file_list, Method::GET, "/files/list", false);
forwarding!(file_stat, Method::GET, "/files/stat", false);
forwarding!(tar_download, Method::GET, "/tar", false);
forwarding!(tar_upload, Method::PUT, "/tar", true);
