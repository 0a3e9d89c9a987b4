//! `/tunnel/{port}`: a WebSocket carrying one TCP connection to a port on the sandbox's own
//! loopback (binary messages both ways), for services a client speaks a stream protocol to —
//! the desktop's VNC server for a live view. The connection is made from inside the sandbox
//! (its network namespace), so only what listens there is reached; it closes when either side
//! does.

use axum::extract::ws::{Message, WebSocket};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub async fn run(mut socket: WebSocket, port: u16) {
    let stream = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => s,
        Err(e) => {
            let said = format!("tunnel: nothing answers on port {port} in the sandbox: {e}");
            let _ = socket
                .send(Message::Close(Some(axum::extract::ws::CloseFrame { code: 1011, reason: said.into() })))
                .await;
            return;
        }
    };
    let (from_port, to_port) = stream.into_split();
    relay_bytes(socket, from_port, to_port).await;
}

/// Carries a byte stream over a WebSocket until either side ends: binary messages are written
/// to `to`, what `from` gives is sent as binary messages (64 KiB at most each).
pub async fn relay_bytes(
    socket: WebSocket,
    mut from: impl tokio::io::AsyncRead + Unpin,
    mut to: impl tokio::io::AsyncWrite + Unpin,
) {
    let (mut sink, mut messages) = socket.split();
    let upstream = async {
        while let Some(Ok(message)) = messages.next().await {
            let bytes = match message {
                Message::Binary(b) => b,
                Message::Close(_) => break,
                _ => continue,
            };
            if to.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    let downstream = async {
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match from.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sink.send(Message::Binary(chunk[..n].to_vec().into())).await.is_err() {
                        break;
                    }
                }
            }
        }
        let _ = sink.send(Message::Close(None)).await;
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
}
