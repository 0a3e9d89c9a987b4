//! Per-tenant storage quotas: checked before anything new is kept, so a tenant over one is
//! refused with 413 naming the quota, what is used and how to free it — never left half-stored.

use axum::http::StatusCode;

use crate::{ApiError, ApiResult, EvalService, Tenant};

pub(crate) fn too_large(detail: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "too_large", detail)
}

/// Refuses new work while `tenant`'s stored results are at or over their quota: results are
/// written as rollouts finish, so the check is at submit (a job may finish a little over).
pub async fn check_results(service: &EvalService, tenant: &Tenant) -> ApiResult<()> {
    let Some(quota) = service.quotas.result_bytes else { return Ok(()) };
    let used = service.env.store.result_usage(&tenant.0).await?;
    if used >= quota {
        return Err(too_large(format!(
            "results: your jobs' stored results take {used} bytes of your quota of {quota} bytes; \
             delete old evaluations (DELETE /v1/evals/{{id}}) before submitting more"
        )));
    }
    Ok(())
}

/// Refuses a plugin upload of `cost` bytes that would take `tenant` over its plugin quota.
pub async fn check_plugins(service: &EvalService, tenant: &str, cost: u64) -> ApiResult<()> {
    let Some(quota) = service.quotas.plugin_bytes else { return Ok(()) };
    let used = service.env.store.plugin_usage(tenant).await?;
    if used + cost > quota {
        return Err(too_large(format!(
            "plugins: this upload takes {cost} bytes and your plugins already take {used} of your quota of \
             {quota} bytes (every uploaded version is kept)"
        )));
    }
    Ok(())
}
