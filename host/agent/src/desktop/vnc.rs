//! `POST /orchard/vnc {"control": bool}`: a VNC server (x11vnc, the image's) on this desktop for
//! a live view, listening on the sandbox's loopback only; answers `{"port"}` once it accepts.
//! One view-only server (input ignored: `-viewonly`) and, when asked, one that takes input, each
//! started once and kept; they die with the service.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::osworld::{Service, error};

/// The view-only server's port; the one taking input is the next.
const VIEW_PORT: u16 = 5900;
/// How long x11vnc has to start listening.
const START_WAIT: Duration = Duration::from_secs(15);

/// A running VNC server.
pub struct Vnc {
    port: u16,
    process: tokio::process::Child,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VncRequest {
    #[serde(default)]
    control: bool,
}

pub async fn start(State(s): State<Arc<Service>>, body: axum::body::Bytes) -> Response {
    let text = if body.iter().all(u8::is_ascii_whitespace) { &b"{}"[..] } else { &body[..] };
    let request: VncRequest = match serde_json::from_slice(text) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("vnc: {e}")),
    };
    let mut running = s.vnc.lock().await;
    if let Some(vnc) = running.get_mut(&request.control) {
        if vnc.process.try_wait().ok().flatten().is_none() {
            return Json(json!({"port": vnc.port})).into_response();
        }
        running.remove(&request.control);
    }
    let port = VIEW_PORT + u16::from(request.control);
    let mut command = tokio::process::Command::new("x11vnc");
    command
        .args(["-display", &s.display, "-rfbport", &port.to_string(), "-localhost", "-shared", "-forever"])
        .args(["-nopw", "-noxdamage", "-quiet"])
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if !request.control {
        command.arg("-viewonly");
    }
    let mut process = match command.spawn() {
        Ok(p) => p,
        Err(e) => {
            return error(
                StatusCode::NOT_IMPLEMENTED,
                format!("vnc: starting x11vnc (is the x11vnc package in the image?): {e}"),
            );
        }
    };
    let started = Instant::now();
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            break;
        }
        if let Ok(Some(status)) = process.try_wait() {
            return error(StatusCode::INTERNAL_SERVER_ERROR, format!("vnc: x11vnc exited at start: {status}"));
        }
        if started.elapsed() > START_WAIT {
            return error(StatusCode::GATEWAY_TIMEOUT, format!("vnc: x11vnc did not listen within {START_WAIT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    running.insert(request.control, Vnc { port, process });
    Json(json!({"port": port})).into_response()
}
