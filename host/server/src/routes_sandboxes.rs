//! Sandbox lifecycle, Orchard Env style.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use orchard_sandbox::{SandboxInfo, SandboxSpec, SandboxStatus, parse_cpu, parse_memory};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::{JsonBody, Query};
use crate::{ApiError, ApiResult, AppState, Tenant};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(get_one).delete(delete))
        .route("/sandboxes/{id}/wait", get(wait))
        .route("/sandboxes/{id}/heartbeat", post(heartbeat))
}

pub async fn banner() -> Json<Value> {
    Json(json!({"service": "orchard", "version": env!("CARGO_PKG_VERSION"), "status": "running"}))
}

pub async fn health() -> Json<Value> {
    Json(json!({"status": "healthy"}))
}

/// `POST /sandboxes`, and the shared part of every create.
#[derive(Debug, Clone, Deserialize)]
pub struct CreateBody {
    pub image: String,
    #[serde(default = "yes")]
    pub block_network: bool,
    #[serde(default)]
    pub sandbox_id: Option<String>,
    #[serde(default)]
    pub cpu: Option<Value>,
    #[serde(default)]
    pub memory: Option<Value>,
    /// Idle timeout in seconds.
    #[serde(default)]
    pub timeout: Option<u64>,
    // Orchard's own additions:
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub network_allow: Vec<String>,
    #[serde(default)]
    pub file_roots: Vec<String>,
    #[serde(default)]
    pub workdir: Option<String>,
    /// The image's own entrypoint and command, run behind the agent (`[]`: none).
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
}

fn yes() -> bool {
    true
}

impl CreateBody {
    pub fn to_spec(&self, tenant: &Tenant) -> ApiResult<SandboxSpec> {
        let mut spec = SandboxSpec::new(tenant.0.clone(), self.image.clone());
        spec.id = self.sandbox_id.clone();
        spec.block_network = self.block_network;
        spec.cpu =
            self.cpu.as_ref().map(parse_cpu).transpose().map_err(|e| ApiError::bad_request(format!("cpu: {e}")))?;
        spec.memory_bytes = self
            .memory
            .as_ref()
            .map(parse_memory)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("memory: {e}")))?;
        spec.ttl_seconds = self.timeout;
        spec.pids = self.pids;
        spec.env = self.env.clone();
        spec.network_allow = self.network_allow.clone();
        spec.file_roots = self.file_roots.clone();
        spec.workdir = self.workdir.clone();
        spec.entrypoint = self.entrypoint.clone();
        if self.image.trim().is_empty() {
            return Err(ApiError::bad_request("image: must not be empty"));
        }
        Ok(spec)
    }
}

fn status_name(s: SandboxStatus) -> &'static str {
    match s {
        SandboxStatus::Pending => "pending",
        SandboxStatus::Ready => "ready",
        SandboxStatus::Unschedulable => "unschedulable",
        SandboxStatus::Failed => "failed",
    }
}

/// The full sandbox view (`GET /sandboxes/{id}`), with Orchard's extra fields.
pub fn sandbox_view(info: &SandboxInfo) -> Value {
    json!({
        "sandbox_id": info.id,
        "namespace": info.tenant,
        "image": info.image,
        "pod_name": info.id,
        "block_network": info.block_network,
        "cpu": info.cpu,
        "memory": info.memory_bytes,
        "pids": info.pids,
        "timeout": info.ttl_seconds,
        "created_at": info.created_at,
        "last_active": info.last_active,
        "expires_at": info.expires_at(),
        "ready": info.status == SandboxStatus::Ready,
        "status": status_name(info.status),
        "status_message": info.status_message,
        "backend": info.backend,
    })
}

async fn create(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let spec = body.to_spec(&tenant)?;
    let info = state.backend.create(spec).await?;
    Ok((
        StatusCode::OK,
        Json(json!({
            "sandbox_id": info.id,
            "namespace": info.tenant,
            "image": info.image,
            "block_network": info.block_network,
            "cpu": body.cpu,
            "memory": body.memory,
            "timeout": info.ttl_seconds,
            "status": status_name(info.status),
        })),
    ))
}

async fn list(State(state): State<Arc<AppState>>, Extension(tenant): Extension<Tenant>) -> Json<Value> {
    let mine: Vec<Value> =
        state.backend.list().await.iter().filter(|i| i.tenant == tenant.0).map(sandbox_view).collect();
    Json(json!({ "sandboxes": mine }))
}

async fn get_one(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    match state.sandbox(&tenant, &id).await {
        Ok(info) => Ok(Json(sandbox_view(&info))),
        Err(e) => Err(e),
    }
}

#[derive(Deserialize)]
struct WaitQuery {
    #[serde(default)]
    timeout: Option<f64>,
}

async fn wait(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> ApiResult<Json<Value>> {
    state.sandbox(&tenant, &id).await?;
    let timeout = Duration::from_secs_f64(q.timeout.unwrap_or(300.0).clamp(0.0, 3600.0));
    let info = state.backend.wait_ready(&id, timeout).await?;
    Ok(Json(sandbox_view(&info)))
}

async fn delete(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    state.sandbox(&tenant, &id).await?;
    state.backend.delete(&id).await?;
    Ok(Json(json!({"sandbox_id": id, "status": "deleted"})))
}

async fn heartbeat(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    state.sandbox(&tenant, &id).await?;
    let info = state.backend.heartbeat(&id).await?;
    Ok(Json(json!({"sandbox_id": id, "status": "ok", "expires_at": info.expires_at()})))
}
