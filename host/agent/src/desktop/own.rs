//! Orchard's own routes of the desktop service (under `/orchard/`), beside OSWorld's: what the
//! host's desktop drivers use. Input through XTEST, screenshots scaled and encoded as asked,
//! the window list and the clipboard.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use orchard_protocol::DesktopInputs;
use serde::Deserialize;

use super::osworld::{Service, error};
use super::{input, screen, windows};

pub fn routes() -> Router<Arc<Service>> {
    Router::new()
        .route("/orchard/input", post(send_input))
        .route("/orchard/shot", get(shot))
        .route("/orchard/windows", get(list_windows))
        .route("/orchard/clipboard", get(clipboard))
        .route("/orchard/vnc", post(super::vnc::start))
}

/// Runs blocking X work off the server's thread; an error is a 500 naming `what`.
async fn blocking<T: Send + 'static>(
    what: &'static str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> Result<T, Response> {
    match tokio::task::spawn_blocking(f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e:#}"))),
        Err(e) => Err(error(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))),
    }
}

/// `{"events": [...]}` → 204 once the X server has taken them all.
async fn send_input(State(s): State<Arc<Service>>, body: axum::body::Bytes) -> Response {
    let inputs: DesktopInputs = match serde_json::from_slice(&body) {
        Ok(i) => i,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("input: {e}")),
    };
    let service = s.clone();
    let sent = tokio::task::spawn_blocking(move || {
        let mut keyboard = service.keyboard.lock().unwrap_or_else(|p| p.into_inner());
        if keyboard.is_none() {
            *keyboard = Some(input::Keyboard::open(&service.display)?);
        }
        let result = keyboard.as_mut().map(|k| k.send(&inputs.events)).unwrap_or(Ok(()));
        if result.as_ref().is_err_and(|e| e.downcast_ref::<x11rb::errors::ConnectionError>().is_some()) {
            // A broken connection is opened afresh next time.
            *keyboard = None;
        }
        result
    })
    .await;
    match sent {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => error(StatusCode::BAD_REQUEST, format!("input: {e:#}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("input: {e}")),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ShotQuery {
    max_width: Option<u32>,
    jpeg_quality: Option<u8>,
}

/// The screen, scaled to `max_width` and as JPEG of `jpeg_quality` when asked (PNG otherwise).
async fn shot(State(s): State<Arc<Service>>, Query(q): Query<ShotQuery>) -> Response {
    let display = s.display.clone();
    let encoded = blocking("screenshot", move || {
        let frame = screen::capture(&display)?.fit(q.max_width);
        match q.jpeg_quality {
            Some(quality) => Ok(("image/jpeg", frame.jpeg(quality)?)),
            None => Ok(("image/png", frame.png()?)),
        }
    })
    .await;
    match encoded {
        Ok((media, bytes)) => ([(header::CONTENT_TYPE, media)], bytes).into_response(),
        Err(r) => r,
    }
}

async fn list_windows(State(s): State<Arc<Service>>) -> Response {
    let display = s.display.clone();
    match blocking("windows", move || windows::list(&display)).await {
        Ok(list) => Json(list).into_response(),
        Err(r) => r,
    }
}

async fn clipboard(State(s): State<Arc<Service>>) -> Response {
    let display = s.display.clone();
    match blocking("clipboard", move || windows::clipboard(&display)).await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(r) => r,
    }
}
