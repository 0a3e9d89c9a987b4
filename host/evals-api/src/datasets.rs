//! Uploaded task folders: a `.tar.gz` of Harbor task folders, kept by content hash in the store
//! (so that every replica can run it), checked by unpacking and loading it now.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde_json::json;

use crate::error::{ApiError, ApiResult};
use crate::{EvalService, TenantId};

#[utoipa::path(post, path = "/v1/datasets", tag = "datasets", summary = "Upload Harbor task folders (.tar.gz); answers the dataset id and its tasks", request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "A .tar.gz of task folders (any content type)"), responses((status = 201, description = "Stored", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = crate::openapi::Problem), (status = 503, description = "The database is unavailable", body = crate::openapi::Problem)))]
pub async fn upload(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<TenantId>,
    body: Bytes,
) -> ApiResult<Response> {
    use sha2::Digest;
    if !body.starts_with(&[0x1f, 0x8b]) {
        return Err(ApiError::invalid("body: expected a .tar.gz of Harbor task folders"));
    }
    // Ids are per tenant: the same bytes from two tenants are two datasets.
    let mut hasher = sha2::Sha256::new();
    hasher.update(tenant.0.as_bytes());
    hasher.update([0]);
    hasher.update(&body);
    let id = format!("sha256:{}", hex::encode(hasher.finalize()));
    let safe: String = id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let dir = service.env.datasets_dir.join(&safe);
    let bytes = body.to_vec();
    let unpack_dir = dir.clone();
    let tasks = tokio::task::spawn_blocking(move || -> Result<Vec<String>, String> {
        if !unpack_dir.join(".complete").is_file() {
            orchard_scheduler::unpack(&bytes, &unpack_dir).map_err(|e| format!("body: not a task archive: {e}"))?;
        }
        let tasks = orchard_eval::load_tasks(&unpack_dir).map_err(|e| format!("tasks: {e}"))?;
        Ok(tasks.into_iter().map(|t| t.id).collect())
    })
    .await
    .map_err(|e| ApiError::invalid(e.to_string()))?
    .map_err(ApiError::invalid)?;
    service.env.store.put_blob(&id, &tenant.0, &body).await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id, "tasks": tasks}))).into_response())
}
