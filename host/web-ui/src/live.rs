//! A running rollout's desktop, live: `/ui/evals/{id}/rollouts/{rid}/live` shows it on a canvas,
//! drawn by the page's script from VNC (RFB) over `…/live/vnc`, a WebSocket to an x11vnc on the
//! rollout's display through its sandbox's agent.
//!
//! Invariants: the rollout must be the signed-in tenant's job's and running (its sandbox is the
//! service's, derived from the job, the rollout and its claim); the view only watches (x11vnc's
//! `-viewonly`: input from the page reaches nothing).

use askama::Template;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use orchard_api_kit::ApiError;

use crate::{Layout, S, Signed, api_error, error_page, render};

/// The desktop service's port in a rollout's sandbox (tasks' default).
const DESKTOP_PORT: u16 = 5000;

#[derive(Template)]
#[template(path = "live.html")]
struct LivePage {
    layout: Layout,
    eval_id: String,
    rollout_id: String,
    task: String,
}

/// The running rollout's sandbox, after the checks.
async fn running_sandbox(
    state: &crate::UiState,
    signed: &Signed,
    id: &str,
    rid: &str,
) -> Result<(String, String), Response> {
    if let Err(e) = orchard_evals_api::owned(&state.service, &signed.tenant, id).await {
        return Err(api_error(e));
    }
    let found = state.service.env.store.rollout(id, rid).await.map_err(|e| api_error(e.into()))?;
    let Some((row, _)) = found else {
        return Err(error_page(StatusCode::NOT_FOUND, &format!("rollout {rid} not found in {id}")));
    };
    if row.state != "running" {
        return Err(error_page(
            StatusCode::CONFLICT,
            &format!("rollout {rid} is {}: only a running rollout's desktop can be watched", row.state),
        ));
    }
    Ok((orchard_scheduler::rollout_sandbox_id(id, rid, row.tries), row.task_id))
}

pub async fn page(State(state): S, signed: Signed, Path((id, rid)): Path<(String, String)>) -> Response {
    match running_sandbox(&state, &signed, &id, &rid).await {
        Ok((_, task)) => {
            render(&LivePage { layout: signed.layout(format!("Live: {rid}")), eval_id: id, rollout_id: rid, task })
        }
        Err(refused) => refused,
    }
}

pub async fn vnc(
    State(state): S,
    signed: Signed,
    Path((id, rid)): Path<(String, String)>,
    ws: WebSocketUpgrade,
) -> Response {
    let sandbox = match running_sandbox(&state, &signed, &id, &rid).await {
        Ok((sandbox, _)) => sandbox,
        Err(refused) => return refused,
    };
    let agent = match state.service.runner.backend().agent(&sandbox).await {
        Ok(agent) => agent,
        Err(e) => return ApiError::unavailable(format!("the rollout's sandbox: {e}")).into_response(),
    };
    let upstream = match orchard_desktop_client::Desktop::open_vnc(&*agent, DESKTOP_PORT, false).await {
        Ok(upstream) => upstream,
        Err(e) => return ApiError::unavailable(format!("the rollout's desktop: {e}")).into_response(),
    };
    ws.protocols(["binary"])
        .max_message_size(16 << 20)
        .on_upgrade(move |client| orchard_api_kit::relay_websocket(client, upstream))
}
