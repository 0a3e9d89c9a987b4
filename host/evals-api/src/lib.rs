//! The evaluation service's routes, mounted by `orchard serve` under `/v1`.
//!
//! Jobs belong to the tenant of the API key that submitted them: every route answers 404 for
//! another tenant's job, as if it did not exist. The request handlers only read and write the
//! store; runners (in this replica and any other on the same database) do the work.

#![warn(missing_docs)]

mod datasets;
mod evals;
mod events;
pub mod openapi;
pub mod quota;
mod secrets;
mod summary;

use std::sync::Arc;

use axum::Router;
use orchard_scheduler::{Env, Runner};

pub use evals::{
    ExportQuery, cancel_eval, check_client_tasks, eval_view, export, owned, owned_rollouts, retry_eval, submit_spec,
};
pub use events::stream as event_stream;
pub use orchard_api_kit::{ApiError, ApiResult, Query, Tenant};
pub use summary::{CellView, HarnessTotal, Matrix, summary_of};

/// The evaluation service: the job engine behind `/v1/evals`.
pub struct EvalService {
    /// What jobs are prepared with.
    pub env: Arc<Env>,
    /// This replica's runner.
    pub runner: Arc<Runner>,
    /// What each tenant may keep on the server.
    pub quotas: StorageQuotas,
}

/// Per-tenant storage quotas (`None`: unlimited). Over one, an upload or a job is refused with
/// 413 naming the quota.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StorageQuotas {
    /// Uploaded datasets: archives and their unpacked files.
    pub dataset_bytes: Option<u64>,
    /// Uploaded plugins, every version kept.
    pub plugin_bytes: Option<u64>,
    /// Stored results: trajectories of the tenant's jobs.
    pub result_bytes: Option<u64>,
}

pub use datasets::sweep as sweep_datasets;

/// The service's routes (`/evals`, `/datasets`, `/secrets`), to nest under `/v1`.
pub fn routes<S: Clone + Send + Sync + 'static>(service: Arc<EvalService>) -> Router<S> {
    use axum::routing::{delete, get, post, put};
    // The compressed upload is bounded like what it unpacks to.
    let upload_limit = usize::try_from(service.env.upload_limits.total_bytes).unwrap_or(usize::MAX);
    let datasets = Router::new()
        .route("/datasets", post(datasets::upload).get(datasets::list))
        .layer(axum::extract::DefaultBodyLimit::max(upload_limit));
    Router::new()
        .merge(datasets)
        .route("/datasets/{id}", delete(datasets::delete))
        .route("/evals", post(evals::submit).get(evals::list))
        .route("/evals/{id}", get(evals::get_one).delete(evals::delete))
        .route("/evals/{id}/rollouts", get(evals::rollouts))
        .route("/evals/{id}/rollouts/{rid}", get(evals::rollout))
        .route("/evals/{id}/events", get(events::stream))
        .route("/evals/{id}/cancel", post(evals::cancel))
        .route("/evals/{id}/retry", post(evals::retry))
        .route("/evals/{id}/export", get(evals::export))
        .route("/secrets", get(secrets::list))
        .route("/secrets/{name}", put(secrets::put).delete(secrets::delete))
        .with_state(service)
}
