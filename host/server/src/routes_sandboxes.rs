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

use crate::{ApiError, ApiResult, AppState, Tenant};
use orchard_api_kit::{JsonBody, Query};

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
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateBody {
    pub image: String,
    #[serde(default = "yes", deserialize_with = "orchard_protocol::null_as_true")]
    pub block_network: bool,
    #[serde(default)]
    pub sandbox_id: Option<String>,
    #[serde(default)]
    pub cpu: Option<Value>,
    #[serde(default)]
    pub memory: Option<Value>,
    /// Size limit of the writable layer (`"10Gi"`, bytes).
    #[serde(default)]
    pub disk: Option<Value>,
    /// Idle timeout in seconds.
    #[serde(default)]
    pub timeout: Option<u64>,
    // Orchard's own additions:
    #[serde(default)]
    pub pids: Option<u64>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    pub env: std::collections::BTreeMap<String, String>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    pub network_allow: Vec<String>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
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
        if let Some(id) = &self.sandbox_id {
            orchard_sandbox::valid_sandbox_id(id).map_err(ApiError::bad_request)?;
            if id.len() > crate::MAX_CLIENT_ID {
                return Err(ApiError::bad_request(format!("sandbox_id: at most {} characters", crate::MAX_CLIENT_ID)));
            }
            spec.id = Some(crate::scoped_id(&tenant.0, id));
        }
        spec.block_network = self.block_network;
        spec.cpu =
            self.cpu.as_ref().map(parse_cpu).transpose().map_err(|e| ApiError::bad_request(format!("cpu: {e}")))?;
        spec.memory_bytes = self
            .memory
            .as_ref()
            .map(parse_memory)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("memory: {e}")))?;
        spec.disk_bytes = self
            .disk
            .as_ref()
            .map(parse_memory)
            .transpose()
            .map_err(|e| ApiError::bad_request(format!("disk: {e}")))?;
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

/// Orchard's own view of a sandbox (`/v1`): amounts as numbers (bytes, cores).
pub fn sandbox_view(info: &SandboxInfo) -> Value {
    json!({
        "sandbox_id": crate::client_id(info),
        "namespace": info.tenant,
        "image": info.image,
        "pod_name": info.id,
        "block_network": info.block_network,
        "cpu": info.cpu,
        "memory": info.memory_bytes,
        "pids": info.pids,
        "disk": info.disk_bytes,
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

/// Orchard Env's view of a sandbox (`GET /sandboxes/{id}`, `/wait`): as its orchestrator
/// answers, `cpu` and `memory` are quantity strings and `status_message` is never null.
pub fn compat_view(info: &SandboxInfo) -> Value {
    let mut view = sandbox_view(info);
    view["cpu"] = json!(info.cpu.map(cpu_quantity));
    view["memory"] = json!(info.memory_bytes.map(memory_quantity));
    view["disk"] = json!(info.disk_bytes.map(memory_quantity));
    view["status_message"] = json!(info.status_message.clone().unwrap_or_default());
    view
}

/// `2`, `1.5` → `"2"`, `"1500m"` (Kubernetes' notation, which Orchard Env echoes).
pub fn cpu_quantity(cores: f64) -> String {
    if cores.fract() == 0.0 { format!("{cores:.0}") } else { format!("{}m", (cores * 1000.0).round() as u64) }
}

/// Bytes → `"2Gi"`, `"512Mi"`, or plain bytes when no binary unit divides them.
pub fn memory_quantity(bytes: u64) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

async fn create(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    JsonBody(body): JsonBody<CreateBody>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let info = state.create_sandbox(body.to_spec(&tenant)?).await?;
    Ok((
        StatusCode::OK,
        Json(json!({
            "sandbox_id": crate::client_id(&info),
            "namespace": info.tenant,
            "image": info.image,
            "block_network": info.block_network,
            "cpu": info.cpu.map(cpu_quantity),
            "memory": info.memory_bytes.map(memory_quantity),
            "timeout": info.ttl_seconds,
            "status": status_name(info.status),
        })),
    ))
}

async fn list(State(state): State<Arc<AppState>>, Extension(tenant): Extension<Tenant>) -> Json<Value> {
    let mine: Vec<Value> =
        state.backend.list().await.iter().filter(|i| i.tenant == tenant.0).map(compat_view).collect();
    Json(json!({ "sandboxes": mine }))
}

async fn get_one(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    Ok(Json(compat_view(&state.sandbox(&tenant, &id).await?)))
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
    let found = state.sandbox(&tenant, &id).await?;
    let timeout = Duration::from_secs_f64(q.timeout.unwrap_or(300.0).clamp(0.0, 3600.0));
    let info = state.backend.wait_ready(&found.id, timeout).await?;
    Ok(Json(compat_view(&info)))
}

async fn delete(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    state.delete_sandbox(&tenant, &id).await?;
    Ok(Json(json!({"sandbox_id": id, "status": "deleted"})))
}

async fn heartbeat(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let found = state.sandbox(&tenant, &id).await?;
    let info = state.backend.heartbeat(&found.id).await?;
    Ok(Json(json!({"sandbox_id": id, "status": "ok", "expires_at": info.expires_at()})))
}
