//! The PTY WebSocket: the client's socket relayed frame for frame to the agent's.

use std::sync::Arc;

use axum::Extension;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};

use crate::{AppState, Tenant};

pub async fn pty(
    State(state): State<Arc<AppState>>,
    Extension(tenant): Extension<Tenant>,
    Path(id): Path<String>,
    ws: WebSocketUpgrade,
) -> Response {
    let agent = match state.agent(&tenant, &id).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    // Connect before upgrading, so that an unreachable agent is a 503 and not a dead socket.
    let upstream = match agent.connect_pty().await {
        Ok(u) => u,
        Err(e) => return crate::ApiError::from(e).into_response(),
    };
    ws.on_upgrade(move |client| orchard_api_kit::relay_websocket(client, upstream))
}
