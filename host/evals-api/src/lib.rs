//! The evaluation service's routes, mounted by `orchard serve` under `/v1`.
//!
//! Jobs belong to the tenant of the API key that submitted them: every route answers 404 for
//! another tenant's job, as if it did not exist. The request handlers only read and write the
//! store; runners (in this replica and any other on the same database) do the work.

mod datasets;
mod error;
mod evals;
mod events;
mod secrets;
mod summary;

use std::sync::Arc;

use axum::Router;
use orchard_scheduler::{Env, Runner};

pub use error::ApiError;
pub use summary::{Matrix, summary_of};

/// The tenant a request acts for (set by the server's authentication).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantId(pub String);

pub struct EvalService {
    pub env: Arc<Env>,
    pub runner: Arc<Runner>,
}

/// Every route this crate serves, as (method, path) under `/v1`: the OpenAPI document is made
/// from this list, and a test checks the router against it.
pub const ROUTES: &[(&str, &str, &str)] = &[
    ("post", "/datasets", "Upload Harbor task folders as a .tar.gz; answers the dataset id and its tasks"),
    ("post", "/evals", "Submit an evaluation; answers at once with its id"),
    ("get", "/evals", "A page of the tenant's evaluations (newest first; cursor, status filter)"),
    ("get", "/evals/{id}", "An evaluation: status, counts, summary, task × harness matrix"),
    (
        "get",
        "/evals/{id}/rollouts",
        "A page of its rollouts in work order (filters: task, harness, state, status, passed)",
    ),
    ("get", "/evals/{id}/rollouts/{rid}", "One rollout: its result and whole trajectory"),
    ("get", "/evals/{id}/events", "Server-sent events: each rollout as it finishes, counts, the end"),
    ("post", "/evals/{id}/cancel", "Cancel: queued rollouts never run, running ones stop and their sandboxes go"),
    ("post", "/evals/{id}/retry", "Queue the errored and unknown rollouts again"),
    ("get", "/evals/{id}/export", "Finished rollouts as training data: format=openai|atif|sharegpt (NDJSON)"),
    ("get", "/secrets", "The names of the tenant's secrets"),
    ("put", "/secrets/{name}", "Set a secret (a model API key); its value is never answered"),
    ("delete", "/secrets/{name}", "Delete a secret"),
];

pub fn routes<S: Clone + Send + Sync + 'static>(service: Arc<EvalService>) -> Router<S> {
    use axum::routing::{get, post, put};
    Router::new()
        .route("/datasets", post(datasets::upload))
        .route("/evals", post(evals::submit).get(evals::list))
        .route("/evals/{id}", get(evals::get_one))
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
