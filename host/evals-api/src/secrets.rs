//! Per-tenant secrets: set, list names, delete. No route ever answers a value.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::{ApiError, ApiResult, parse};
use crate::{EvalService, TenantId};

#[derive(Deserialize)]
struct SecretBody {
    value: String,
}

fn check_name(name: &str) -> ApiResult<()> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok { Ok(()) } else { Err(ApiError::invalid("name: 1-64 characters of letters, digits, '-', '_', '.'")) }
}

pub async fn put(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<TenantId>,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<Value>> {
    check_name(&name)?;
    let body: SecretBody = parse(&body)?;
    if body.value.is_empty() {
        return Err(ApiError::invalid("value: must not be empty"));
    }
    service.env.store.put_secret(&tenant.0, &name, &body.value).await?;
    Ok(Json(json!({"name": name})))
}

pub async fn list(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<TenantId>,
) -> ApiResult<Json<Value>> {
    let names = service.env.store.secret_names(&tenant.0).await?;
    Ok(Json(json!({"secrets": names.iter().map(|n| json!({"name": n})).collect::<Vec<_>>()})))
}

pub async fn delete(
    State(service): State<Arc<EvalService>>,
    Extension(tenant): Extension<TenantId>,
    Path(name): Path<String>,
) -> ApiResult<Json<Value>> {
    if service.env.store.delete_secret(&tenant.0, &name).await? {
        Ok(Json(json!({"name": name, "deleted": true})))
    } else {
        Err(ApiError::not_found(format!("secret {name} not found")))
    }
}
