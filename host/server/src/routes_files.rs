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

use crate::{ApiError, ApiResult, AppState, Tenant};
use orchard_api_kit::{JsonBody, Query};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/sandboxes/{id}/files", get(read).post(write)).route("/sandboxes/{id}/files/list", get(list))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
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
    let bytes =
        B64.decode(body.content.as_bytes()).map_err(|e| ApiError::invalid(format!("content: not base64: {e}")))?;
    let agent = state.agent(&tenant, &id).await?;
    let written = agent.write_file(&body.path, orchard_agent_client::full(bytes), None, true).await?;
    Ok(Json(json!({"success": true, "path": body.path, "size": written.size})))
}

#[derive(Deserialize)]
struct PathQuery {
    path: String,
}

/// `GET /sandboxes/{id}/files/list` lists `/workspace` when no path is given, as Orchard Env does.
#[derive(Deserialize)]
struct ListQuery {
    #[serde(default)]
    path: Option<String>,
}

const DEFAULT_LIST_PATH: &str = "/workspace";

/// Epoch seconds as Orchard Env writes modification times: `2026-12-03T04:05:06` (UTC, the
/// sandboxes' time zone).
fn timestamp(epoch: f64) -> String {
    let secs = epoch.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
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
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let path = q.path.filter(|p| !p.is_empty()).unwrap_or_else(|| DEFAULT_LIST_PATH.into());
    let agent = state.agent(&tenant, &id).await?;
    let mut listing = agent.list(&path).await?;
    listing.entries.sort_by(|a, b| a.name.cmp(&b.name));
    let files: Vec<Value> = listing
        .entries
        .iter()
        .map(|e| {
            json!({
                "name": e.name,
                "type": if e.kind == FileKind::Directory { "directory" } else { "file" },
                "size": e.size,
                "modified": timestamp(e.modified),
                "kind": e.kind,
                "mode": format!("{:o}", e.mode),
            })
        })
        .collect();
    Ok(Json(json!({"path": path, "files": files})))
}

#[cfg(test)]
mod tests {
    #[test]
    fn modification_times_read_as_orchard_env_writes_them() {
        assert_eq!(super::timestamp(0.0), "1970-01-01T00:00:00");
        assert_eq!(super::timestamp(1_796_266_506.9), "2026-12-03T02:55:06");
        assert_eq!(super::timestamp(951_782_400.0), "2000-02-29T00:00:00");
    }
}
