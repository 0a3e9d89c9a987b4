//! Per-tenant secrets: set, list names, delete. No route ever answers a value.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{EvalService, Tenant};
use orchard_api_kit::{ApiError, ApiResult, parse_json};

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretBody {
    value: String,
}

fn check_name(name: &str) -> ApiResult<()> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok { Ok(()) } else { Err(ApiError::invalid("name: 1-64 characters of letters, digits, '-', '_', '.'")) }
}

#[utoipa::path(put, path = "/v1/secrets/{name}", tag = "secrets", summary = "Set a secret (a model API key); its value is never answered", params(("name" = String, Path, description = "The secret's name")), request_body = SecretBody, responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn put(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    check_name(&name)?;
    let body: SecretBody = parse_json(&body)?;
    if body.value.is_empty() {
        return Err(ApiError::invalid("value: must not be empty"));
    }
    service.env.store.put_secret(&tenant.0, &name, &body.value).await?;
    Ok(Json(json!({"name": name})))
}

#[utoipa::path(get, path = "/v1/secrets", tag = "secrets", summary = "The names of the tenant's secrets", responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn list(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
) -> ApiResult<Json<Value>> {
    let names = service.env.store.secret_names(&tenant.0).await?;
    Ok(Json(json!({"secrets": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()})))
}

#[utoipa::path(delete, path = "/v1/secrets/{name}", tag = "secrets", summary = "Delete a secret", params(("name" = String, Path, description = "The secret's name")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn delete(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<Tenant>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    if service.env.store.delete_secret(&tenant.0, &name).await? {
        Ok(Json(json!({"name": name, "deleted": true})))
    } else {
        Err(ApiError::not_found(format!("secret {name} not found")))
    }
}
