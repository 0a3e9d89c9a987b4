//! A client's WebSocket relayed frame for frame to an agent's (the PTY, a tunnel to a service in
//! the sandbox such as a desktop's VNC server), until either side closes.

use axum::extract::ws::{Message as AxMessage, WebSocket};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message as TMessage;

/// Relays `client` and `upstream` both ways, frame for frame.
pub async fn relay_websocket(
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
