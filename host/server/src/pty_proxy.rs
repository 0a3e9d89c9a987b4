//! The PTY WebSocket: the client's socket relayed frame for frame to the agent's.

use std::sync::Arc;

use axum::Extension;
use axum::extract::ws::{Message as AxMessage, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message as TMessage;

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
    ws.on_upgrade(move |client| relay(client, upstream))
}

pub(crate) async fn relay(
    client: WebSocket,
    upstream: tokio_tungstenite::WebSocketStream<orchard_agent_client::AgentStream>,
) {
    let (mut client_tx, mut client_rx) = client.split();
    let (mut up_tx, mut up_rx) = upstream.split();
    let to_agent = async {
        while let Some(Ok(msg)) = client_rx.next().await {
            let forwarded = match msg {
                AxMessage::Text(t) => TMessage::Text(t.as_str().into()),
                AxMessage::Binary(b) => TMessage::Binary(b),
                AxMessage::Close(_) => break,
                _ => continue,
            };
            if up_tx.send(forwarded).await.is_err() {
                break;
            }
        }
        let _ = up_tx.send(TMessage::Close(None)).await;
    };
    let to_client = async {
        while let Some(Ok(msg)) = up_rx.next().await {
            let forwarded = match msg {
                TMessage::Text(t) => AxMessage::Text(t.as_str().into()),
                TMessage::Binary(b) => AxMessage::Binary(b),
                TMessage::Close(_) => break,
                _ => continue,
            };
            if client_tx.send(forwarded).await.is_err() {
                break;
            }
        }
        let _ = client_tx.send(AxMessage::Close(None)).await;
    };
    tokio::select! {
        _ = to_agent => {}
        _ = to_client => {}
    }
}
