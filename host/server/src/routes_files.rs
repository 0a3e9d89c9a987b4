//! Files, Orchard Env style: base64 contents in JSON.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Extension, Json, Router};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use orchard_protocol::FileKind;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::{JsonBody, Query};
use crate::{ApiError, ApiResult, AppState, Tenant};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/sandboxes/{id}/files", get(read).post(write)).route("/sandboxes/{id}/files/list", get(list))
}

#[derive(Deserialize)]
struct WriteBody {
    path: String,
    content: String,
}

async fn write(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<WriteBody>,
) -> ApiResult<Json<Value>> {
    let bytes = B64
        .decode(body.content.as_bytes())
        .map_err(|e| ApiError::unprocessable(format!("content: not base64: {e}")))?;
    let agent = state.agent(&tenant, &id).await?;
    let written = agent.write_file(&body.path, orchard_agent_client::full(bytes), None, true).await?;
    Ok(Json(json!({"success": true, "path": body.path, "size": written.size})))
}

#[derive(Deserialize)]
struct PathQuery {
    path: String,
}

async fn read(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> ApiResult<Json<Value>> {
    let agent = state.agent(&tenant, &id).await?;
    let bytes = agent.read_file(&q.path).await?;
    Ok(Json(json!({"path": q.path, "content": B64.encode(&bytes), "size": bytes.len()})))
}

async fn list(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    Query(q): Query<PathQuery>,
) -> ApiResult<Json<Value>> {
    let agent = state.agent(&tenant, &id).await?;
    let listing = agent.list(&q.path).await?;
    let files: Vec<Value> = listing
        .entries
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "type": if e.kind == FileKind::Directory { "directory" } else { "file" },
                "size": e.size,
                "modified": e.modified,
                "kind": e.kind,
                "mode": format!("{:o}", e.mode),
            })
        })
        .collect();
    Ok(Json(json!({"path": q.path, "files": files})))
}
