//! Plugins over HTTP: list them, upload one (validated, then swapped in by name).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, put};
use axum::{Json, Router};
use base64::Engine;
use orchard_runtime::{Manifest, Registry};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::extract::parse_json;
use crate::{ApiError, ApiResult, AppState};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/plugins", get(list)).route("/plugins/{name}", put(upload))
}

fn registry(state: &AppState) -> ApiResult<&Arc<Registry>> {
    state.plugins.as_ref().ok_or_else(|| ApiError::unavailable("this server runs no plugin runtime"))
}

async fn list(State(state): State<Arc<AppState>>) -> ApiResult<Json<Value>> {
    Ok(Json(json!({ "plugins": registry(&state)?.list() })))
}

#[derive(Deserialize)]
struct UploadJson {
    /// The manifest, as TOML.
    manifest: Option<String>,
    component_base64: String,
}

/// `PUT /v1/plugins/{name}`: the body is the component (`application/wasm`, manifest embedded or
/// inferred) or JSON `{manifest, component_base64}`. Rollouts already running keep the old one.
async fn upload(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let registry = registry(&state)?.clone();
    let is_wasm = body.starts_with(b"\0asm");
    let json =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    let (bytes, manifest) = if is_wasm && !json {
        (body.to_vec(), None)
    } else {
        let upload: UploadJson = parse_json(&body)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(upload.component_base64.as_bytes())
            .map_err(|e| ApiError::unprocessable(format!("component_base64: {e}")))?;
        let manifest =
            upload.manifest.map(|m| Manifest::parse(&m, "(uploaded)")).transpose().map_err(ApiError::unprocessable)?;
        (bytes, manifest)
    };
    if let Some(m) = &manifest
        && m.name != name
    {
        return Err(ApiError::unprocessable(format!(
            "manifest: names the plugin {:?}, but the URL says {name:?}",
            m.name
        )));
    }
    let replaced = registry.get(&name).is_some();
    let origin = format!("{name}.wasm");
    // Compiling a component takes a while: off the async threads.
    let info = tokio::task::spawn_blocking(move || registry.install(&bytes, manifest, &origin))
        .await
        .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "other", e.to_string()))?
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if info.name != name {
        return Err(ApiError::unprocessable(format!(
            "the component's manifest names it {:?}, but the URL says {name:?}",
            info.name
        )));
    }
    Ok(Json(json!({ "plugin": info, "replaced": replaced })))
}
