//! Plugins over HTTP: list them, upload one (validated, then swapped in by name).

use std::sync::Arc;

use axum::Extension;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::routing::{get, put};
use axum::{Json, Router};
use base64::Engine;
use orchard_runtime::{Manifest, Registry};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::auth::Tenant;
use crate::{ApiError, ApiResult, AppState};
use orchard_api_kit::{Query, parse_json};

pub fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/plugins", get(list)).route("/plugins/{name}", put(upload))
}

fn registry(state: &AppState) -> ApiResult<&Arc<Registry>> {
    state.plugins.as_ref().ok_or_else(|| ApiError::unavailable("this server runs no plugin runtime"))
}

#[utoipa::path(get, path = "/v1/plugins", tag = "plugins", summary = "The plugins this tenant can run: shared ones and its own uploads", responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn list(State(state): State<Arc<AppState>>, Extension(tenant): Extension<Tenant>) -> ApiResult<Json<Value>> {
    let registry = registry(&state)?.clone();
    // A listing shows every shipped plugin as compiled (its world, imports, exports): those the
    // background loader has not reached yet are compiled now, off the async threads.
    let plugins = tokio::task::spawn_blocking(move || {
        registry.load_deferred(&[]);
        registry.list_for(&tenant.0)
    })
    .await
    .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "other", e.to_string()))?;
    Ok(Json(json!({ "plugins": plugins })))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct UploadQuery {
    /// `tenant` (yours alone; the default, and all a key that is not an admin's may do) or
    /// `shared` (replaces it for everybody; admin keys only, and their default).
    scope: Option<String>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct UploadJson {
    /// The manifest, as TOML.
    manifest: Option<String>,
    component_base64: String,
}

/// `PUT /v1/plugins/{name}`: the body is the component (`application/wasm`, manifest embedded or
/// inferred) or JSON `{manifest, component_base64}`. Rollouts already running keep the old one.
#[utoipa::path(put, path = "/v1/plugins/{name}", tag = "plugins", summary = "Upload a plugin (a component, or JSON with its manifest); swapped in by name for this tenant, or for everybody by an admin", params(("name" = String, Path, description = "The plugin's name"), UploadQuery), request_body(content = UploadJson, description = "JSON {manifest, component_base64}, or the component itself as application/wasm"), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "Busy or unavailable; try again after Retry-After", body = orchard_api_kit::Problem)))]
async fn upload(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
    Query(query): Query<UploadQuery>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    let registry = registry(&state)?.clone();
    let admin = state.keys.is_admin(&tenant.0);
    let owner: Option<String> = match query.scope.as_deref() {
        None if admin => None,
        None | Some("tenant") => Some(tenant.0.clone()),
        Some("shared") if admin => None,
        Some("shared") => {
            return Err(ApiError::new(
                axum::http::StatusCode::FORBIDDEN,
                "denied",
                "scope: only an admin key replaces a shared plugin; upload it for your tenant (scope=tenant)",
            ));
        }
        Some(other) => return Err(ApiError::bad_request(format!("scope: {other:?} is neither tenant nor shared"))),
    };
    let is_wasm = body.starts_with(b"\0asm");
    let json =
        headers.get("content-type").and_then(|v| v.to_str().ok()).is_some_and(|v| v.starts_with("application/json"));
    let (bytes, manifest, manifest_text) = if is_wasm && !json {
        (body.to_vec(), None, None)
    } else {
        let upload: UploadJson = parse_json(&body)?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(upload.component_base64.as_bytes())
            .map_err(|e| ApiError::invalid(format!("component_base64: {e}")))?;
        let manifest = upload
            .manifest
            .as_deref()
            .map(|m| Manifest::parse(m, "(uploaded)"))
            .transpose()
            .map_err(ApiError::invalid)?;
        (bytes, manifest, upload.manifest)
    };
    if let Some(m) = &manifest
        && m.name != name
    {
        return Err(ApiError::invalid(format!("manifest: names the plugin {:?}, but the URL says {name:?}", m.name)));
    }
    if let (Some(evals), Some(t)) = (&state.evals, &owner) {
        orchard_evals_api::quota::check_plugins(evals, t, bytes.len() as u64).await?;
    }
    let replaced = match &owner {
        Some(t) => registry.owns(t, &name),
        None => registry.get(&name).is_some(),
    };
    let origin = format!("{name}.wasm");
    // Compiling a component takes a while: off the async threads.
    let runtime = registry.runtime().clone();
    let bytes = Arc::new(bytes);
    let component = bytes.clone();
    let plugin = tokio::task::spawn_blocking(move || runtime.load(&component, manifest, &origin))
        .await
        .map_err(|e| ApiError::new(axum::http::StatusCode::INTERNAL_SERVER_ERROR, "other", e.to_string()))?
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    if plugin.info.name != name {
        return Err(ApiError::invalid(format!(
            "the component's manifest names it {:?}, but the URL says {name:?}",
            plugin.info.name
        )));
    }
    // Kept in the database first, so every replica (and this one after a restart) runs it.
    if let Some(evals) = &state.evals {
        evals
            .env
            .store
            .put_plugin(owner.as_deref(), &name, &plugin.info.sha256, manifest_text.as_deref(), &bytes)
            .await
            .map_err(|e| ApiError::unavailable(format!("keeping the plugin: {e}")))?;
    }
    let info = plugin.info.clone();
    registry.put(owner.clone(), plugin);
    tracing::info!(plugin = %name, sha256 = %info.sha256, tenant = %tenant.0, shared = owner.is_none(), "plugin uploaded");
    let scope = if owner.is_some() { "tenant" } else { "shared" };
    Ok(Json(json!({ "plugin": info, "replaced": replaced, "scope": scope })))
}
