//! Accepting connections with limits: a client that opens connections and never finishes a
//! request neither starves other clients nor exhausts the server's descriptors.
//!
//! - at most `total` connections at once, and at most `per_client` from one address: a
//!   connection over either is closed as soon as it is accepted;
//! - a request's head must arrive within `header_timeout` of the connection (or of the previous
//!   answer on a kept-alive one): a connection idle that long is closed;
//! - a request body that sends nothing for `body_idle` is cut off (the handler sees an error).
//!
//! An upgraded connection (the PTY WebSocket) is handed to its session and no longer counted:
//! each needs a tenant's key and a sandbox of the tenant's, which quotas bound.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Limits on the server's connections.
pub struct ConnectionLimits {
    /// Most connections at once.
    pub total: usize,
    /// Most connections from one client address.
    pub per_client: usize,
    /// How long a request's headers may take to arrive.
    pub header_timeout: Duration,
    /// How long a request body may go without a byte.
    pub body_idle: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            total: 4096,
            per_client: 256,
            header_timeout: Duration::from_secs(30),
            body_idle: Duration::from_secs(30),
        }
    }
}

/// Connections per client address, released when a connection ends.
#[derive(Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

struct ClientSlot {
    ip: IpAddr,
    table: Arc<PerClient>,
}

impl PerClient {
    fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(ClientSlot { ip, table: self.clone() })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut map = self.table.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Serves `app` on `listener` under `limits` until `shutdown` resolves; then stops accepting,
/// lets requests in flight finish (at most 30 s) and returns.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(limits.body_idle));
    let total = Arc::new(Semaphore::new(limits.total.max(1)));
    let clients = Arc::new(PerClient::default());
    let (stopping, stop) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer): (tokio::net::TcpStream, SocketAddr) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of descriptors, or the peer gave up in the queue: not fatal.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(permit) = total.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "connection refused: the server's connection cap is reached");
            continue;
        };
        let Some(slot) = clients.take(peer.ip(), limits.per_client) else {
            tracing::debug!(%peer, "connection refused: this client's connection cap is reached");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            let _held = (permit, slot);
            tokio::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                _ = async { stop.wait_for(|stopped| *stopped).await.map(|_| ()) } => {
                    // Answers what is in flight, takes no new request.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = ended {
                tracing::debug!(%peer, "connection ended: {e}");
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a permit until it ends.
    let all = u32::try_from(limits.total.max(1)).unwrap_or(u32::MAX);
    if tokio::time::timeout(Duration::from_secs(30), total.acquire_many(all)).await.is_err() {
        tracing::warn!("connections still open 30 s after the stop: closing them");
    }
    Ok(())
}
