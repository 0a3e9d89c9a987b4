//! `/v1/proxy`: open a session, forward chat completions through it (plain or, for clients
//! that ask `stream: true`, as one server-sent chunk), read its record, close it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json, Router};
use orchard_api_kit::{ApiError, Tenant};
use orchard_spec::ModelSpec;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{ProxyError, ProxyService};

impl From<ProxyError> for ApiError {
    fn from(e: ProxyError) -> Self {
        match e {
            ProxyError::Invalid(m) => ApiError::invalid(m),
            ProxyError::NotFound(m) => ApiError::not_found(m),
            ProxyError::Upstream(m) => ApiError::new(StatusCode::BAD_GATEWAY, "upstream", m),
        }
    }
}

/// The proxy's routes (`/proxy/...`), to nest under `/v1`.
pub fn routes<S: Clone + Send + Sync + 'static>(service: Arc<ProxyService>) -> Router<S> {
    use axum::routing::{get, post};
    Router::new()
        .route("/proxy", post(open))
        .route("/proxy/{id}", get(record).delete(close))
        .route("/proxy/{id}/chat/completions", post(chat))
        .with_state(service)
}

/// The proxy's OpenAPI paths.
pub fn openapi_paths() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi;
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(open, record, close, chat), components(schemas(OpenSession)))]
    struct Doc;
    Doc::openapi()
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenSession {
    /// The policy's OpenAI-compatible endpoint (`sampling` and `policy_version` apply to every
    /// call through the session).
    pub model: ModelSpec,
}

type S = State<Arc<ProxyService>>;
type T = Extension<Tenant>;

#[utoipa::path(post, path = "/v1/proxy", tag = "training", summary = "Open a recording proxy session; point an OpenAI client's base URL at its base_url",
    request_body = OpenSession,
    responses((status = 201, description = "Opened: {id, base_url}", body = serde_json::Value),
        (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem)))]
pub async fn open(State(service): S, Extension(tenant): T, body: Bytes) -> Result<Response, ApiError> {
    let request: OpenSession = orchard_api_kit::parse_json(&body)?;
    let session = service.open(&tenant.0, request.model).await?;
    let view = json!({"id": session.id, "base_url": format!("/v1/proxy/{}", session.id), "model": session.spec.name});
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

#[utoipa::path(get, path = "/v1/proxy/{id}", tag = "training", summary = "The session's calls and their token-faithful segments",
    params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The record", body = serde_json::Value),
        (status = "4XX", description = "Refused", body = orchard_api_kit::Problem)))]
pub async fn record(State(service): S, Extension(tenant): T, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(service.session(&tenant.0, &id)?.record()))
}

#[utoipa::path(delete, path = "/v1/proxy/{id}", tag = "training", summary = "Close the session; answers its final record",
    params(("id" = String, Path, description = "The session id")),
    responses((status = 200, description = "The record", body = serde_json::Value),
        (status = "4XX", description = "Refused", body = orchard_api_kit::Problem)))]
pub async fn close(State(service): S, Extension(tenant): T, Path(id): Path<String>) -> Result<Json<Value>, ApiError> {
    Ok(Json(service.close(&tenant.0, &id)?.record()))
}

#[utoipa::path(post, path = "/v1/proxy/{id}/chat/completions", tag = "training",
    summary = "OpenAI chat completions through the session (recorded); `stream: true` answers one chunk then [DONE]",
    params(("id" = String, Path, description = "The session id")),
    request_body = serde_json::Value,
    responses((status = 200, description = "The endpoint's answer", body = serde_json::Value),
        (status = "4XX", description = "Refused", body = orchard_api_kit::Problem),
        (status = 502, description = "The policy's endpoint failed", body = orchard_api_kit::Problem)))]
pub async fn chat(
    State(service): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let session = service.session(&tenant.0, &id)?;
    let mut body: Value = orchard_api_kit::parse_json(&body)?;
    if !body.is_object() {
        return Err(ApiError::invalid("body: expected a JSON object"));
    }
    // The endpoint is asked for the whole answer (its ids and logprobs come with it); a client
    // that wanted a stream gets it as one chunk.
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(o) = body.as_object_mut() {
        o.remove("stream");
        o.remove("stream_options");
    }
    let (_, raw) = session.complete(body).await?;
    if !stream {
        return Ok(Json(raw).into_response());
    }
    let chunk = as_chunk(&raw);
    let events = futures::stream::iter([
        Ok::<_, std::convert::Infallible>(Event::default().data(chunk.to_string())),
        Ok(Event::default().data("[DONE]")),
    ]);
    Ok(Sse::new(events).into_response())
}

/// A whole completion as one `chat.completion.chunk` (deltas carry the message; tool calls get
/// their index).
fn as_chunk(raw: &Value) -> Value {
    let mut chunk = raw.clone();
    chunk["object"] = json!("chat.completion.chunk");
    if let Some(choices) = chunk["choices"].as_array_mut() {
        for choice in choices {
            let mut delta = choice.get("message").cloned().unwrap_or(json!({}));
            if let Some(calls) = delta["tool_calls"].as_array_mut() {
                for (i, call) in calls.iter_mut().enumerate() {
                    call["index"] = json!(i);
                }
            }
            if let Some(o) = choice.as_object_mut() {
                o.remove("message");
                o.insert("delta".into(), delta);
            }
        }
    }
    chunk
}
