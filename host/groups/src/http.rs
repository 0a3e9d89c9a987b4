//! `POST /v1/groups`: the stream. NDJSON (one record per line) unless the client asks for
//! `text/event-stream`, then server-sent events named by the record's type.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Router};
use futures::StreamExt;
use orchard_api_kit::{ApiError, Tenant};

use crate::GroupService;
use crate::record::Record;
use crate::request::GroupRequest;

/// The group routes (`/groups`), to nest under `/v1`.
pub fn routes<S: Clone + Send + Sync + 'static>(service: Arc<GroupService>) -> Router<S> {
    Router::new().route("/groups", axum::routing::post(submit)).with_state(service)
}

/// The routes' OpenAPI paths (merged into the server's document).
pub fn openapi_paths() -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi;
    #[derive(utoipa::OpenApi)]
    #[openapi(paths(submit), components(schemas(GroupRequest, crate::request::BarOptions)))]
    struct Doc;
    Doc::openapi()
}

#[utoipa::path(post, path = "/v1/groups", tag = "training",
    summary = "Run rollout groups for a trainer; streams a record per rollout as it finishes, per group, and at the end",
    request_body = GroupRequest,
    responses(
        (status = 200, description = "NDJSON records (`type`: rollout, group, skipped, error, end), or server-sent events with `Accept: text/event-stream`", content_type = "application/x-ndjson", body = String),
        (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem),
        (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn submit(
    State(service): State<Arc<GroupService>>,
    Extension(tenant): Extension<Tenant>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let request: GroupRequest = orchard_api_kit::parse_json(&body)?;
    orchard_evals_api::check_client_tasks(&request.tasks)?;
    orchard_evals_api::quota::check_results(&service.evals, &tenant).await?;
    let groups = request.task_ids.len();
    let rx = service.start(&tenant.0, request).await?;
    tracing::info!(tenant = %tenant.0, groups, "rollout groups started");
    let records = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|r| (r, rx)) });
    let wants_sse =
        headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("text/event-stream"));
    if wants_sse {
        let events = records.map(|r: Record| {
            let json = serde_json::to_value(&r).unwrap_or_default();
            let kind = json["type"].as_str().unwrap_or("record").to_string();
            Ok::<_, Infallible>(Event::default().event(kind).data(json.to_string()))
        });
        return Ok(Sse::new(events).keep_alive(KeepAlive::default()).into_response());
    }
    let lines = records.map(|r: Record| {
        let mut line = serde_json::to_vec(&r).unwrap_or_default();
        line.push(b'\n');
        Ok::<_, Infallible>(Bytes::from(line))
    });
    Ok((StatusCode::OK, [(header::CONTENT_TYPE, "application/x-ndjson")], Body::from_stream(lines)).into_response())
}
