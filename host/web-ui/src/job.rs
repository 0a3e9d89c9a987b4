//! One job: progress and counts (live over server-sent events), the task × harness matrix, the
//! per-harness table, the rollouts that errored or could not be graded with their reasons, and
//! cancel, retry and export.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::{Extension, Form};
use orchard_evals_api::{ExportQuery, Matrix, Query};
use orchard_store::{EvalRow, RolloutFilter, RolloutRow};

use crate::format::{num, pct, percent_of};
use crate::{CsrfForm, Layout, S, Signed, UiState, api_error, render};

pub struct Counts {
    pub queued: i64,
    pub running: i64,
    pub done: i64,
    pub passed: i64,
    pub errored: i64,
    pub unknown: i64,
    pub cancelled: i64,
}

pub struct CellText {
    pub mean: String,
    pub pass_k: String,
    pub pass_hat_k: String,
    pub done: i64,
    /// `pass`, `fail`, `mixed` or `none`, for its colour.
    pub class: &'static str,
}

pub struct MatrixRow {
    pub task: String,
    pub cells: Vec<CellText>,
}

pub struct TotalRow {
    pub harness: String,
    pub done: i64,
    pub passed: i64,
    pub errored: i64,
    pub unknown: i64,
    pub mean: String,
    pub pass_1: String,
    pub pass_k: String,
    pub pass_hat_k: String,
}

pub struct Problem {
    pub rollout_id: String,
    pub task: String,
    pub harness: String,
    pub attempt: i64,
    pub status: String,
    pub reason: String,
}

/// What the live part of the page shows (rendered whole, and again as a fragment).
pub struct Live {
    pub id: String,
    pub status: String,
    pub total: i64,
    pub percent: i64,
    pub pass_rate: String,
    pub counts: Counts,
    pub k: i64,
    pub harnesses: Vec<String>,
    pub matrix: Vec<MatrixRow>,
    pub totals: Vec<TotalRow>,
    pub problems: Vec<Problem>,
    pub finished: bool,
}

#[derive(Template)]
#[template(path = "job.html")]
struct JobPage {
    layout: Layout,
    live: Live,
    spec: String,
}

#[derive(Template)]
#[template(path = "job_live.html")]
struct JobLive {
    live: Live,
}

fn cell_text(c: Option<&orchard_evals_api::CellView>) -> CellText {
    let Some(c) = c else {
        return CellText { mean: "–".into(), pass_k: "–".into(), pass_hat_k: "–".into(), done: 0, class: "none" };
    };
    let decided = c.done - c.unknown - c.errored;
    let class = match (c.passed, decided) {
        (_, 0) => "none",
        (p, d) if p == d => "pass",
        (0, _) => "fail",
        _ => "mixed",
    };
    CellText { mean: num(c.mean_reward), pass_k: pct(c.pass_at_k), pass_hat_k: pct(c.pass_hat_k), done: c.done, class }
}

fn problem(r: &RolloutRow) -> Problem {
    let result: serde_json::Value =
        r.result.as_deref().and_then(|t| serde_json::from_str(t).ok()).unwrap_or(serde_json::Value::Null);
    let reason = r
        .error
        .clone()
        .or_else(|| result["verdict"]["reason"].as_str().map(str::to_string))
        .or_else(|| {
            result["failure"].as_object().map(|f| {
                format!(
                    "{} in {}: {}",
                    f.get("plugin").and_then(|v| v.as_str()).unwrap_or("?"),
                    f.get("call").and_then(|v| v.as_str()).unwrap_or("?"),
                    f.get("message").and_then(|v| v.as_str()).unwrap_or("")
                )
            })
        })
        .unwrap_or_default();
    Problem {
        rollout_id: r.rollout_id.clone(),
        task: r.task_id.clone(),
        harness: r.harness.clone(),
        attempt: r.attempt,
        // An errored rollout says where it failed (sandbox, environment, plugin, model, grader,
        // limit), as the result typed it.
        status: match (r.status.clone().unwrap_or_default(), result["failed_in"].as_str()) {
            (status, Some(class)) => format!("{status} ({class})"),
            (status, None) => status,
        },
        reason,
    }
}

async fn load(state: &UiState, signed: &Signed, id: &str) -> Result<(EvalRow, Live), Response> {
    let store = &state.service.env.store;
    let eval = orchard_evals_api::owned(&state.service, &signed.tenant, id).await.map_err(api_error)?;
    let cells = store.cells(id).await.map_err(|e| api_error(e.into()))?;
    let (_, matrix): (_, Matrix) = orchard_evals_api::summary_of(&eval, &cells);
    let mut problems = Vec::new();
    for status in ["error", "unknown"] {
        let filter = RolloutFilter { status: Some(status.into()), limit: 50, with_result: true, ..Default::default() };
        let rows = store.rollouts(id, &filter).await.map_err(|e| api_error(e.into()))?;
        problems.extend(rows.iter().map(problem));
    }
    let rows = matrix
        .tasks
        .iter()
        .map(|task| MatrixRow {
            task: task.clone(),
            cells: matrix
                .harnesses
                .iter()
                .map(|h| cell_text(matrix.cells.iter().find(|c| &c.task_id == task && &c.harness == h)))
                .collect(),
        })
        .collect();
    let totals = matrix
        .totals
        .iter()
        .map(|t| TotalRow {
            harness: t.harness.clone(),
            done: t.done,
            passed: t.passed,
            errored: t.errored,
            unknown: t.unknown,
            mean: num(t.mean_reward),
            pass_1: pct(t.pass_at_1),
            pass_k: pct(t.pass_at_k),
            pass_hat_k: pct(t.pass_hat_k),
        })
        .collect();
    let decided = eval.graded;
    let live = Live {
        id: eval.id.clone(),
        status: eval.status.clone(),
        total: eval.total,
        percent: percent_of(eval.done, eval.total),
        pass_rate: pct((decided > 0).then(|| eval.passed as f64 / decided as f64)),
        counts: Counts {
            queued: eval.queued,
            running: eval.running,
            done: eval.done,
            passed: eval.passed,
            errored: eval.errored,
            unknown: eval.unknown,
            cancelled: eval.cancelled,
        },
        k: matrix.k,
        harnesses: matrix.harnesses.clone(),
        matrix: rows,
        totals,
        problems,
        finished: matches!(eval.status.as_str(), "done" | "cancelled"),
    };
    Ok((eval, live))
}

pub async fn page(State(state): S, signed: Signed, Path(id): Path<String>) -> Response {
    match load(&state, &signed, &id).await {
        Ok((eval, live)) => {
            let spec = serde_json::from_str::<serde_json::Value>(&eval.spec)
                .and_then(|v| serde_json::to_string_pretty(&v))
                .unwrap_or_default();
            render(&JobPage { layout: signed.layout(format!("Job {id}")), live, spec })
        }
        Err(r) => r,
    }
}

/// The page's live part alone, swapped in by its script as rollouts finish.
pub async fn live_fragment(State(state): S, signed: Signed, Path(id): Path<String>) -> Response {
    match load(&state, &signed, &id).await {
        Ok((_, live)) => render(&JobLive { live }),
        Err(r) => r,
    }
}

/// The job's events, for the page's script (the same stream as `/v1/evals/{id}/events`).
pub async fn events(State(state): S, signed: Signed, Path(id): Path<String>, headers: HeaderMap) -> Response {
    orchard_evals_api::event_stream(State(state.service.clone()), Extension(signed.tenant), Path(id), headers)
        .await
        .into_response()
}

/// Downloads (the same NDJSON as `/v1/evals/{id}/export`).
pub async fn export(State(state): S, signed: Signed, Path(id): Path<String>, q: Query<ExportQuery>) -> Response {
    let answer =
        orchard_evals_api::export(State(state.service.clone()), Extension(signed.tenant), Path(id.clone()), q).await;
    match answer {
        Ok(mut r) => {
            let name = format!("attachment; filename=\"{id}.jsonl\"");
            if let Ok(v) = name.parse() {
                r.headers_mut().insert(axum::http::header::CONTENT_DISPOSITION, v);
            }
            r
        }
        Err(e) => api_error(e),
    }
}

pub async fn cancel(
    State(state): State<Arc<UiState>>,
    signed: Signed,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(r) = signed.check_csrf(&state, &headers, &form.csrf) {
        return r;
    }
    back_to_job(&id, orchard_evals_api::cancel_eval(&state.service, &signed.tenant, &id).await.map(drop))
}

pub async fn retry(
    State(state): State<Arc<UiState>>,
    signed: Signed,
    Path(id): Path<String>,
    headers: HeaderMap,
    Form(form): Form<CsrfForm>,
) -> Response {
    if let Err(r) = signed.check_csrf(&state, &headers, &form.csrf) {
        return r;
    }
    back_to_job(&id, orchard_evals_api::retry_eval(&state.service, &signed.tenant, &id).await.map(drop))
}

/// After a job's form: back to its page, or the error as a page.
fn back_to_job(id: &str, outcome: Result<(), orchard_api_kit::ApiError>) -> Response {
    match outcome {
        Ok(()) => Redirect::to(&format!("/ui/evals/{id}")).into_response(),
        Err(e) => api_error(e),
    }
}
