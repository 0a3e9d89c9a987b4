//! A job's rollouts, a page at a time (by cursor, so page 1,000 is as fast as page 1), filtered
//! by task, harness and status.

use askama::Template;
use axum::extract::{Path, State};
use axum::response::Response;
use orchard_api_kit::Query;
use orchard_store::RolloutFilter;
use serde::Deserialize;

use crate::format::num;
use crate::{Layout, S, Signed, api_error, render};

const PAGE: i64 = 100;

#[derive(Deserialize)]
pub struct ListQuery {
    task: Option<String>,
    harness: Option<String>,
    status: Option<String>,
    after: Option<i64>,
}

pub struct Row {
    pub rollout_id: String,
    pub task: String,
    pub harness: String,
    pub attempt: i64,
    pub state: String,
    pub status: String,
    pub reward: String,
    pub passed: String,
    pub error: String,
}

#[derive(Template)]
#[template(path = "rollouts.html")]
struct ListPage {
    layout: Layout,
    eval_id: String,
    task: String,
    harness: String,
    status: String,
    rows: Vec<Row>,
    next: Option<i64>,
}

fn non_empty(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

pub async fn page(State(state): S, signed: Signed, Path(id): Path<String>, Query(q): Query<ListQuery>) -> Response {
    let filter = RolloutFilter {
        task_id: non_empty(q.task.clone()),
        harness: non_empty(q.harness.clone()),
        status: non_empty(q.status.clone()),
        after_seq: q.after,
        limit: PAGE + 1,
        ..Default::default()
    };
    let mut rows = match orchard_evals_api::owned_rollouts(&state.service, &signed.tenant, &id, filter).await {
        Ok(rows) => rows,
        Err(e) => return api_error(e),
    };
    let more = rows.len() as i64 > PAGE;
    rows.truncate(PAGE as usize);
    let next = if more { rows.last().map(|r| r.seq) } else { None };
    let page = ListPage {
        layout: signed.layout(format!("Rollouts of {id}")),
        eval_id: id,
        task: q.task.unwrap_or_default(),
        harness: q.harness.unwrap_or_default(),
        status: q.status.unwrap_or_default(),
        rows: rows
            .iter()
            .map(|r| Row {
                rollout_id: r.rollout_id.clone(),
                task: r.task_id.clone(),
                harness: r.harness.clone(),
                attempt: r.attempt,
                state: r.state.clone(),
                status: r.status.clone().unwrap_or_default(),
                reward: num(r.reward),
                passed: r.passed.map(|p| if p { "yes" } else { "no" }).unwrap_or("–").to_string(),
                error: r.error.clone().unwrap_or_default(),
            })
            .collect(),
        next,
    };
    render(&page)
}
