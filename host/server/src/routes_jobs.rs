//! Exec as jobs (`POST /sandboxes/{id}/exec`, `GET /jobs/{id}`), and `apply_patch`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use orchard_protocol::{Command, ExecRequest};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::jobs::Submission;
use crate::{ApiError, ApiResult, AppState, Tenant};
use orchard_api_kit::{JsonBody, Query};

/// Commands without a timeout are killed after an hour.
pub const DEFAULT_EXEC_TIMEOUT: f64 = 3600.0;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/sandboxes/{id}/exec", post(submit))
        .route("/sandboxes/{id}/exec/pty", get(crate::pty_proxy::pty))
        .route("/jobs/{id}", get(job))
        .route("/jobs/{id}/wait", get(wait))
        .route("/sandboxes/{id}/apply_patch", post(apply_patch))
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecBody {
    pub command: Value,
    #[serde(default)]
    pub timeout_seconds: Option<f64>,
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    pub env: BTreeMap<String, String>,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    pub login_shell: bool,
    #[serde(default, deserialize_with = "orchard_protocol::null_as_default")]
    pub wait: bool,
    /// Orchard addition: bytes written to the command's stdin.
    #[serde(default)]
    pub stdin: Option<String>,
}

/// A command from JSON: a non-empty string, or a non-empty list of strings.
pub fn parse_command(value: &Value) -> ApiResult<Command> {
    match value {
        Value::String(s) if !s.trim().is_empty() => Ok(Command::Shell(s.clone())),
        Value::Array(items) if !items.is_empty() => items
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .map(Command::Argv)
            .ok_or_else(|| ApiError::invalid("command: every argv element must be a string")),
        _ => Err(ApiError::invalid("command: expected a non-empty string or a non-empty list of strings")),
    }
}

pub fn timeout_ms(seconds: Option<f64>) -> ApiResult<u64> {
    let s = seconds.unwrap_or(DEFAULT_EXEC_TIMEOUT);
    if !(s.is_finite() && s > 0.0 && s <= 86_400.0) {
        return Err(ApiError::invalid(format!("timeout_seconds: {s} is out of range (0, 86400]")));
    }
    Ok((s * 1000.0).round() as u64)
}

impl ExecBody {
    pub fn to_request(&self) -> ApiResult<ExecRequest> {
        let mut req = ExecRequest::new(parse_command(&self.command)?);
        req.timeout_ms = Some(timeout_ms(self.timeout_seconds)?);
        req.cwd = self.cwd.clone();
        req.env = self.env.clone();
        req.login_shell = self.login_shell;
        req.stdin = self.stdin.clone();
        Ok(req)
    }
}

async fn submit(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    headers: HeaderMap,
    JsonBody(body): JsonBody<ExecBody>,
) -> ApiResult<Json<Value>> {
    let req = body.to_request()?;
    let agent = state.agent(&tenant, &id).await?;
    let key = headers.get("idempotency-key").and_then(|v| v.to_str().ok());
    let job = match state.jobs.submit(&tenant.0, &id, body.command.clone(), key) {
        Submission::Existing(job) => job,
        Submission::New(job) => {
            let running = job.clone();
            let backend = state.backend.clone();
            tokio::spawn(async move {
                running.start();
                let outcome = agent.exec(&req).await.map_err(|e| e.to_string());
                running.finish(outcome);
                // A long command keeps its sandbox alive: count its end as activity too.
                let _ = backend.agent(&running.sandbox_id).await;
            });
            job
        }
    };
    if body.wait {
        job.wait(None).await;
        return Ok(Json(serde_json::to_value(job.view()).expect("job views serialise")));
    }
    Ok(Json(json!({"job_id": job.id, "status": "queued"})))
}

async fn job(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let job = state.jobs.get(&tenant.0, &id).ok_or_else(|| ApiError::not_found(format!("job {id} not found")))?;
    Ok(Json(serde_json::to_value(job.view()).expect("job views serialise")))
}

#[derive(Deserialize)]
struct WaitQuery {
    #[serde(default)]
    timeout: Option<f64>,
}

/// Waits for the job to finish (or `timeout` seconds) and answers its state either way.
async fn wait(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    Query(q): Query<WaitQuery>,
) -> ApiResult<Json<Value>> {
    let job = state.jobs.get(&tenant.0, &id).ok_or_else(|| ApiError::not_found(format!("job {id} not found")))?;
    let timeout = q.timeout.map(|t| Duration::from_secs_f64(t.clamp(0.0, 86_400.0)));
    job.wait(timeout).await;
    Ok(Json(serde_json::to_value(job.view()).expect("job views serialise")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatchBody {
    patch: String,
    #[serde(default)]
    timeout_seconds: Option<f64>,
    /// Orchard addition: the directory to apply in (default: the image's working directory).
    #[serde(default)]
    cwd: Option<String>,
}

/// Applies a unified diff: `git apply` inside a git work tree, `patch -p1` elsewhere.
async fn apply_patch(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    JsonBody(body): JsonBody<PatchBody>,
) -> ApiResult<Json<Value>> {
    if body.patch.trim().is_empty() {
        return Err(ApiError::invalid("patch: must not be empty"));
    }
    let agent = state.agent(&tenant, &id).await?;
    let script = r#"f=$(mktemp /tmp/.orchard-patch.XXXXXX) && cat > "$f" || exit 97
if command -v git >/dev/null 2>&1 && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git apply --verbose --whitespace=nowarn "$f"; rc=$?
else
  patch -p1 --forward --batch -i "$f"; rc=$?
fi
rm -f "$f"; exit $rc"#;
    let mut req = ExecRequest::shell(script);
    req.stdin = Some(body.patch);
    req.cwd = body.cwd;
    req.timeout_ms = Some(timeout_ms(body.timeout_seconds.or(Some(120.0)))?);
    let result = agent.exec(&req).await?;
    let success = result.exit_code == 0 && !result.timed_out;
    let error = (!success).then(|| {
        if result.timed_out {
            "applying the patch timed out".to_string()
        } else {
            format!("the patch did not apply (exit {})", result.exit_code)
        }
    });
    Ok(Json(json!({
        "success": success,
        "stdout": result.stdout.text,
        "stderr": result.stderr.text,
        "exit_code": result.exit_code,
        "error": error,
    })))
}
