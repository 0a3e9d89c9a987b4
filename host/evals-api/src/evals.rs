//! Submitting, reading, paging, cancelling, retrying and exporting evaluations.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use orchard_scheduler::{EvalSpec, TaskSource};
use orchard_store::{EvalFilter, EvalRow, RolloutFilter, RolloutRow};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{EvalService, Tenant};
use orchard_api_kit::{ApiError, ApiResult, Query, parse_json};

type S = State<Arc<EvalService>>;
type T = Extension<Tenant>;

/// The tenant's evaluation, or 404 (another tenant's is as good as missing).
pub async fn owned(service: &EvalService, tenant: &Tenant, id: &str) -> ApiResult<EvalRow> {
    mine(service.env.store.eval(id).await?, tenant, id)
}

/// A page of the tenant's job's rollouts, or 404 as [`owned`] answers it. The page checks its
/// owner in its own read (pages are what watching clients poll); only an empty one asks whether
/// the job is there at all.
pub async fn owned_rollouts(
    service: &EvalService,
    tenant: &Tenant,
    id: &str,
    filter: RolloutFilter,
) -> ApiResult<Vec<RolloutRow>> {
    let filter = RolloutFilter { tenant: Some(tenant.0.clone()), ..filter };
    let rows = service.env.store.rollouts(id, &filter).await?;
    if rows.is_empty() {
        owned(service, tenant, id).await?;
    }
    Ok(rows)
}

/// `found` if it is the tenant's, else 404 (another tenant's is as good as missing).
fn mine(found: Option<EvalRow>, tenant: &Tenant, id: &str) -> ApiResult<EvalRow> {
    match found {
        Some(e) if e.tenant == tenant.0 => Ok(e),
        _ => Err(ApiError::not_found(format!("evaluation {id} not found"))),
    }
}

/// A job as the API shows it.
pub fn eval_view(e: &EvalRow) -> Value {
    json!({
        "id": e.id,
        "status": e.status,
        "created_at": e.created_at,
        "finished_at": e.finished_at,
        "k": e.k,
        "total": e.total,
        "counts": {
            "queued": e.queued, "running": e.running, "done": e.done, "graded": e.graded, "passed": e.passed,
            "errored": e.errored, "unknown": e.unknown, "cancelled": e.cancelled,
        },
        // Over graded rollouts, like the mean reward; errored and unknown are counted apart.
        "pass_rate": (e.graded > 0).then(|| e.passed as f64 / e.graded as f64),
        "spec": serde_json::from_str::<Value>(&e.spec).unwrap_or(Value::Null),
    })
}

#[utoipa::path(post, path = "/v1/evals", tag = "evals", summary = "Submit an evaluation; answers at once with its id", request_body = orchard_scheduler::EvalSpec, responses((status = 201, description = "Submitted", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn submit(State(service): S, Extension(tenant): T, body: Bytes) -> ApiResult<Response> {
    let spec: EvalSpec = parse_json(&body)?;
    check_client_tasks(&spec.tasks)?;
    crate::quota::check_results(&service, &tenant).await?;
    let row = submit_spec(&service, &tenant, spec).await?;
    Ok((StatusCode::CREATED, Json(eval_view(&row))).into_response())
}

/// Refuses task sources that are not for API clients: a path on the server, or an archive id that
/// did not come from `POST /v1/datasets`.
pub fn check_client_tasks(tasks: &TaskSource) -> ApiResult<()> {
    match tasks {
        TaskSource::Dir(_) | TaskSource::Dirs(_) => Err(ApiError::invalid(
            "tasks.dir: a path on the server is not for API clients; upload the tasks (POST /v1/datasets) \
             or name a dataset the operator registered",
        )),
        TaskSource::Archive(id) if !id.starts_with("sha256:") => {
            Err(ApiError::invalid(format!("tasks.archive: {id:?} is not a dataset id from POST /v1/datasets")))
        }
        _ => Ok(()),
    }
}

/// Queues a checked job for `tenant` and wakes the runner (the API's and the web UI's submit).
pub async fn submit_spec(service: &EvalService, tenant: &Tenant, spec: EvalSpec) -> ApiResult<EvalRow> {
    let id = orchard_scheduler::new_eval_id();
    let row = orchard_scheduler::submit(&service.env, &id, &tenant.0, spec).await?;
    service.runner.wake();
    tracing::info!(eval = %id, tenant = %tenant.0, rollouts = row.total, "evaluation submitted");
    Ok(row)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    #[serde(default)]
    status: Option<String>,
    /// `created_at,id` of the last row of the previous page.
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<i64>,
}

#[utoipa::path(get, path = "/v1/evals", tag = "evals", summary = "A page of the tenant's evaluations, newest first", params(ListQuery), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn list(State(service): S, Extension(tenant): T, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    let before = match &q.cursor {
        Some(c) => {
            let (at, id) =
                c.split_once(',').ok_or_else(|| ApiError::invalid("cursor: not a cursor from a previous page"))?;
            let at: f64 = at.parse().map_err(|_| ApiError::invalid("cursor: not a cursor from a previous page"))?;
            Some((at, id.to_string()))
        }
        None => None,
    };
    let limit = q.limit.unwrap_or(50).clamp(1, 500);
    let rows = service.env.store.list_evals(&tenant.0, &EvalFilter { status: q.status.clone(), before, limit }).await?;
    let next =
        (rows.len() as i64 == limit).then(|| rows.last().map(|e| format!("{},{}", e.created_at, e.id))).flatten();
    Ok(Json(json!({"evals": rows.iter().map(eval_view).collect::<Vec<_>>(), "next_cursor": next})))
}

#[utoipa::path(get, path = "/v1/evals/{id}", tag = "evals", summary = "An evaluation: status, counts, summary, task × harness matrix", params(("id" = String, Path, description = "The evaluation id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn get_one(State(service): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    // One read for the job and its cells: watching clients poll this page.
    let (eval, cells) = service.env.store.eval_with_cells(&id).await?.unzip();
    let eval = mine(eval, &tenant, &id)?;
    let cells = cells.unwrap_or_default();
    let mut view = eval_view(&eval);
    let (summary, matrix) = crate::summary::summary_of(&eval, &cells);
    view["summary"] = summary;
    view["matrix"] = serde_json::to_value(matrix).unwrap_or(Value::Null);
    Ok(Json(view))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RolloutQuery {
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    harness: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    passed: Option<bool>,
    #[serde(default)]
    cursor: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

#[utoipa::path(get, path = "/v1/evals/{id}/rollouts", tag = "evals", summary = "A page of its rollouts in work order", params(("id" = String, Path, description = "The evaluation id"), RolloutQuery), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn rollouts(
    State(service): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    Query(q): Query<RolloutQuery>,
) -> ApiResult<Json<RolloutPage>> {
    let limit = q.limit.unwrap_or(100).clamp(1, 1000);
    let filter = RolloutFilter {
        task_id: q.task,
        harness: q.harness,
        state: q.state,
        status: q.status,
        passed: q.passed,
        after_seq: q.cursor,
        limit,
        ..Default::default()
    };
    let rows = owned_rollouts(&service, &tenant, &id, filter).await?;
    let next = (rows.len() as i64 == limit).then(|| rows.last().map(|r| r.seq)).flatten();
    // Serialized straight from the rows (a `Value` in between doubled the page's allocations).
    Ok(Json(RolloutPage { rollouts: rows, next_cursor: next }))
}

/// A page of rollouts as `/v1/evals/{id}/rollouts` answers it.
#[derive(serde::Serialize)]
pub struct RolloutPage {
    rollouts: Vec<orchard_store::RolloutRow>,
    next_cursor: Option<i64>,
}

#[utoipa::path(get, path = "/v1/evals/{id}/rollouts/{rid}", tag = "evals", summary = "One rollout: its result and whole trajectory", params(("id" = String, Path, description = "The evaluation id"), ("rid" = String, Path, description = "The rollout id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn rollout(
    State(service): S,
    Extension(tenant): T,
    Path((id, rid)): Path<(String, String)>,
) -> ApiResult<Json<Value>> {
    owned(&service, &tenant, &id).await?;
    let (row, doc) = service
        .env
        .store
        .rollout(&id, &rid)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("rollout {rid} not found in {id}")))?;
    let result = row.result.as_deref().and_then(|r| serde_json::from_str::<Value>(r).ok());
    let document = doc.as_deref().and_then(|d| serde_json::from_str::<Value>(d).ok());
    let mut view = serde_json::to_value(&row).unwrap_or(Value::Null);
    view["result"] = result.unwrap_or(Value::Null);
    view["trajectory"] = document.map(|d| d["trajectory"].clone()).unwrap_or(Value::Null);
    Ok(Json(view))
}

#[utoipa::path(post, path = "/v1/evals/{id}/cancel", tag = "evals", summary = "Cancel: queued rollouts never run, running ones stop and their sandboxes go", params(("id" = String, Path, description = "The evaluation id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn cancel(State(service): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    Ok(Json(eval_view(&cancel_eval(&service, &tenant, &id).await?)))
}

/// Cancels the tenant's job: queued rollouts never run, this replica's running ones stop now
/// (other replicas' at their next pass).
pub async fn cancel_eval(service: &EvalService, tenant: &Tenant, id: &str) -> ApiResult<EvalRow> {
    let eval = owned(service, tenant, id).await?;
    if matches!(eval.status.as_str(), "done" | "cancelled") {
        return Ok(eval);
    }
    service.env.store.cancel(id).await?;
    service.runner.stop_eval(id).await;
    tracing::info!(eval = %id, tenant = %tenant.0, "evaluation cancelled");
    owned(service, tenant, id).await
}

#[utoipa::path(delete, path = "/v1/evals/{id}", tag = "evals", summary = "Delete a finished or cancelled evaluation and its stored results (frees the results quota)", params(("id" = String, Path, description = "The evaluation id")), responses((status = 204, description = "Deleted"), (status = 409, description = "Still running: cancel it first", body = orchard_api_kit::Problem), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn delete(State(service): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<StatusCode> {
    let eval = owned(&service, &tenant, &id).await?;
    let busy = || {
        ApiError::new(StatusCode::CONFLICT, "conflict", format!("evaluation {id} is still running: cancel it first"))
    };
    if !matches!(eval.status.as_str(), "done" | "cancelled") || !service.env.store.delete_eval(&id).await? {
        return Err(busy());
    }
    tracing::info!(eval = %id, tenant = %tenant.0, "evaluation deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(post, path = "/v1/evals/{id}/retry", tag = "evals", summary = "Queue the errored and unknown rollouts again", params(("id" = String, Path, description = "The evaluation id")), responses((status = 200, description = "OK", body = serde_json::Value), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
pub async fn retry(State(service): S, Extension(tenant): T, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    let (eval, n) = retry_eval(&service, &tenant, &id).await?;
    let mut view = eval_view(&eval);
    view["retried"] = json!(n);
    Ok(Json(view))
}

/// Queues the job's errored and unknown rollouts again; answers the job and how many.
pub async fn retry_eval(service: &EvalService, tenant: &Tenant, id: &str) -> ApiResult<(EvalRow, i64)> {
    let eval = owned(service, tenant, id).await?;
    if eval.status == "cancelled" {
        return Err(ApiError::new(StatusCode::CONFLICT, "conflict", format!("evaluation {id} was cancelled")));
    }
    let n = service.env.store.retry(id).await?;
    service.runner.wake();
    tracing::info!(eval = %id, tenant = %tenant.0, rollouts = n, "evaluation retried");
    Ok((owned(service, tenant, id).await?, n))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
/// `GET /v1/evals/{id}/export`'s parameters.
pub struct ExportQuery {
    format: String,
    #[serde(default)]
    only_passed: bool,
    #[serde(default)]
    min_reward: Option<f64>,
}

#[utoipa::path(get, path = "/v1/evals/{id}/export", tag = "evals", summary = "Finished rollouts as NDJSON: training data (openai, atif, sharegpt) or whole results", params(("id" = String, Path, description = "The evaluation id"), ExportQuery), responses((status = 200, description = "One JSON document per line", content_type = "application/x-ndjson", body = String), (status = "4XX", description = "Refused: the body names what was wrong", body = orchard_api_kit::Problem), (status = 503, description = "The database is unavailable", body = orchard_api_kit::Problem)))]
/// `GET /v1/evals/{id}/export`: the job's rollouts in a training format.
pub async fn export(
    State(service): S,
    Extension(tenant): T,
    Path(id): Path<String>,
    Query(q): Query<ExportQuery>,
) -> ApiResult<Response> {
    use orchard_eval::export::{Filter, Format};
    owned(&service, &tenant, &id).await?;
    // `results`: each finished rollout's whole result with its trajectory, as `orchard eval`
    // writes it to rollouts/<id>.json (what `orchard eval --server … --out` downloads).
    let format = match q.format.as_str() {
        "results" => None,
        other => Some(Format::parse(other).map_err(|e| ApiError::invalid(format!("format: {e} or results")))?),
    };
    let filter = Filter { only_passed: q.only_passed, min_reward: q.min_reward, ..Default::default() };
    // A page at a time from the store to the client: an export of a big job is never held whole.
    let pages = futures::stream::unfold(Some(-1i64), move |after| {
        let (service, id, filter) = (service.clone(), id.clone(), filter.clone());
        async move {
            let after = after?;
            let page = match service.env.store.results_page(&id, after, 200).await {
                Ok(page) => page,
                Err(e) => return Some((Err(std::io::Error::other(e.to_string())), None)),
            };
            let last = page.last()?.0.seq;
            let mut out = String::new();
            for (row, doc) in &page {
                match format {
                    None => {
                        if let Some(line) = result_line(row, doc.as_deref()) {
                            out.push_str(&line);
                            out.push('\n');
                        }
                    }
                    Some(format) => {
                        let Some(doc) = doc else { continue };
                        let lines = orchard_eval::export::export(&format!("{doc}\n"), format, &filter)
                            .map_err(std::io::Error::other);
                        match lines {
                            Ok(lines) => lines.into_iter().for_each(|l| {
                                out.push_str(&l);
                                out.push('\n');
                            }),
                            Err(e) => return Some((Err(e), None)),
                        }
                    }
                }
            }
            Some((Ok::<_, std::io::Error>(out), Some(last)))
        }
    });
    let body = axum::body::Body::from_stream(pages);
    Ok(([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response())
}

/// A rollout's stored result with its trajectory put back in, on one line.
fn result_line(row: &orchard_store::RolloutRow, doc: Option<&str>) -> Option<String> {
    let mut result: Value = serde_json::from_str(row.result.as_deref()?).ok()?;
    if let Some(trajectory) = doc
        .and_then(|d| serde_json::from_str::<Value>(d).ok())
        .and_then(|mut d| d.get_mut("trajectory").map(Value::take))
    {
        result["trajectory"] = trajectory;
    }
    Some(result.to_string())
}
