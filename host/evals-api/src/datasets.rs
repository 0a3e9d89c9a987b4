//! Uploaded task folders: a `.tar.gz` of Harbor task folders, kept by content hash in the store
//! (so that every replica can run it), checked by unpacking and loading it now.
//!
//! An upload is unpacked within the server's limits (uncompressed bytes, entries, bytes a file:
//! 413 naming the limit), its links resolved whole-chain beneath it, into a folder of its
//! tenant's own; it counts against the tenant's dataset quota (413 naming the quota) until it is
//! deleted (`DELETE /v1/datasets/{id}`) or retention forgets it.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use orchard_scheduler::UnpackError;
use serde_json::json;

use crate::{EvalService, Tenant};
use orchard_api_kit::{ApiError, ApiResult};

use crate::quota::too_large;

#[utoipa::path(post, path = "/v1/datasets", tag = "datasets", summary = "Upload Harbor task folders (.tar.gz); answers the dataset id and its tasks", request_body(content = Vec<u8>, content_type = "application/octet-stream", description = "A .tar.gz of task folders (any content type)"), responses((status = 201, description = "Stored", body = serde_json::Value), (status = 413, description = "Over an upload limit or the tenant's dataset quota (named)", body = orchard_api_kit::Problem), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn upload(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
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
    let env = service.env.clone();
    let dir = orchard_scheduler::dataset_dir(&env, &tenant.0, &id);
    let known = env.store.datasets(&tenant.0).await?.into_iter().find(|d| d.id == id);
    let (bytes, target, limits) = (body.clone(), dir.clone(), env.upload_limits);
    let unpacked = tokio::task::spawn_blocking(move || -> Result<(u64, Vec<String>), ApiError> {
        let unpacked = orchard_scheduler::unpack(&bytes, &target, limits).map_err(|e| match e {
            UnpackError::TooLarge { what, .. } => {
                // The operator's flag, so a tenant can ask for the right one to be raised.
                let flag = match what {
                    "entries" => "--upload-max-entries",
                    "bytes in one file" => "--upload-max-file-bytes",
                    _ => "--upload-max-bytes",
                };
                too_large(format!("body: {e} (the server's {flag})"))
            }
            UnpackError::Storage(io) => {
                tracing::error!("storing an upload: {io}");
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", "the server could not store the upload")
            }
            other => ApiError::invalid(format!("body: not a task archive: {other}")),
        })?;
        let tasks = orchard_eval::load_tasks_in(&target, "", "tasks").map_err(|e| {
            let _ = std::fs::remove_dir_all(&target);
            ApiError::invalid(format!("tasks: {e}"))
        })?;
        Ok((unpacked, tasks.into_iter().map(|t| t.id).collect()))
    })
    .await
    .map_err(|e| ApiError::invalid(e.to_string()))?;
    let (unpacked_bytes, tasks) = unpacked?;
    if known.is_none()
        && let Some(quota) = service.quotas.dataset_bytes
    {
        let used = env.store.dataset_usage(&tenant.0).await?;
        let cost = body.len() as u64 + unpacked_bytes;
        if used + cost > quota {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(too_large(format!(
                "datasets: this upload takes {cost} bytes and your datasets already take {used} of your quota of \
                 {quota} bytes; delete some (DELETE /v1/datasets/{{id}})"
            )));
        }
    }
    env.store.put_dataset(&id, &tenant.0, &body, unpacked_bytes, tasks.len() as u64).await?;
    Ok((StatusCode::CREATED, Json(json!({"id": id, "tasks": tasks, "unpacked_bytes": unpacked_bytes}))).into_response())
}

#[utoipa::path(get, path = "/v1/datasets", tag = "datasets", summary = "Your uploaded datasets, with what each takes and your quota",
    responses((status = 200, description = "{datasets: [...], used_bytes, quota_bytes}", body = serde_json::Value),
        (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem),
        (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn list(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
) -> ApiResult<Response> {
    let datasets = service.env.store.datasets(&tenant.0).await?;
    let used: u64 = datasets.iter().map(|d| d.bytes + d.unpacked_bytes).sum();
    Ok(Json(json!({"datasets": datasets, "used_bytes": used, "quota_bytes": service.quotas.dataset_bytes}))
        .into_response())
}

#[utoipa::path(delete, path = "/v1/datasets/{id}", tag = "datasets", summary = "Delete an uploaded dataset (refused while a job that names it runs)",
    params(("id" = String, Path, description = "The dataset id")),
    responses((status = 204, description = "Deleted"), (status = 404, description = "No such dataset of yours", body = orchard_api_kit::Problem),
        (status = 409, description = "A job that has not finished names it", body = orchard_api_kit::Problem),
        (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem),
        (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn delete(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let env = &service.env;
    let missing = || ApiError::not_found(format!("dataset {id} not found"));
    if !env.store.datasets(&tenant.0).await?.iter().any(|d| d.id == id) {
        return Err(missing());
    }
    if env.store.dataset_in_use(&tenant.0, &id).await? {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!("dataset {id} is named by a job that has not finished; cancel it first"),
        ));
    }
    if !env.store.delete_dataset(&tenant.0, &id).await? {
        return Err(missing());
    }
    remove_unpacked(&orchard_scheduler::dataset_dir(env, &tenant.0, &id)).await;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn remove_unpacked(dir: &std::path::Path) {
    if let Err(e) = tokio::fs::remove_dir_all(dir).await
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("removing an unpacked dataset: {e}");
    }
}

/// Retention and reclamation, run by the server now and then: datasets no job named for
/// `retention` are deleted (unless a running job names them), and unpacked folders whose dataset
/// is gone (deleted through another replica) are removed from this one.
pub async fn sweep(service: &EvalService, retention: Option<std::time::Duration>) {
    let env = &service.env;
    if let Some(keep) = retention {
        let before = now() - keep.as_secs_f64();
        for (tenant, id) in env.store.stale_datasets(before).await.unwrap_or_default() {
            if env.store.dataset_in_use(&tenant, &id).await.unwrap_or(true) {
                continue;
            }
            if env.store.delete_dataset(&tenant, &id).await.unwrap_or(false) {
                tracing::info!(dataset = %id, "dataset unused past its retention: deleted");
                remove_unpacked(&orchard_scheduler::dataset_dir(env, &tenant, &id)).await;
            }
        }
    }
    // <datasets_dir>/<tenant hash>/<id>: an id whose archive no tenant has is left over.
    let Ok(mut owners) = tokio::fs::read_dir(&env.datasets_dir).await else { return };
    while let Ok(Some(owner)) = owners.next_entry().await {
        let Ok(mut folders) = tokio::fs::read_dir(owner.path()).await else { continue };
        while let Ok(Some(folder)) = folders.next_entry().await {
            let name = folder.file_name().to_string_lossy().into_owned();
            let Some(hash) = name.strip_prefix("sha256_") else { continue };
            if hash.len() != 64 || hash.contains('.') {
                continue; // a staging folder of an upload in progress
            }
            if let Ok(false) = env.store.blob_exists(&format!("sha256:{hash}")).await {
                remove_unpacked(&folder.path()).await;
            }
        }
    }
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
