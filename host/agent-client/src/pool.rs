//! Connections to one agent, kept open between requests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response, body::Incoming};
use hyper_util::rt::TokioIo;

use crate::{AgentClientError, AgentStream, Body};

const MAX_IDLE: usize = 16;
/// An idle connection is closed after this long: a host talking to thousands of sandboxes
/// would otherwise hold a descriptor and a connection's buffers for each one ever used.
const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Where an agent listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentAddr {
    /// A unix socket (the local backend's sandboxes).
    Unix(PathBuf),
    /// An address on the pod network (the Kubernetes backend's).
    Tcp(SocketAddr),
}

impl std::fmt::Display for AgentAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AgentAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            AgentAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

/// An idle connection and the number its closing timer knows it by.
type Idle = (u64, SendRequest<Body>);

pub(crate) struct Pool {
    addr: AgentAddr,
    /// Idle connections, each with a number its closing timer knows it by.
    idle: Arc<Mutex<Vec<Idle>>>,
    next_idle: Arc<std::sync::atomic::AtomicU64>,
}

impl Pool {
    pub fn new(addr: AgentAddr) -> Self {
        Pool { addr, idle: Arc::new(Mutex::new(Vec::new())), next_idle: Arc::default() }
    }

    pub fn addr(&self) -> &AgentAddr {
        &self.addr
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> AgentClientError {
        AgentClientError::Unreachable { addr: self.addr.to_string(), reason: reason.to_string() }
    }

    pub async fn connect(&self) -> Result<AgentStream, AgentClientError> {
        let connect = async {
            match &self.addr {
                AgentAddr::Unix(path) => tokio::net::UnixStream::connect(path).await.map(AgentStream::Unix),
                AgentAddr::Tcp(addr) => {
                    let s = tokio::net::TcpStream::connect(addr).await?;
                    s.set_nodelay(true)?;
                    Ok(AgentStream::Tcp(s))
                }
            }
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err(self.unreachable(e)),
            Err(_) => Err(self.unreachable("connect timed out")),
        }
    }

    async fn new_sender(&self) -> Result<SendRequest<Body>, AgentClientError> {
        let io = TokioIo::new(self.connect().await?);
        let (sender, connection) = http1::handshake(io).await.map_err(|e| self.unreachable(e))?;
        tokio::spawn(async move {
            // Upgrades keep the connection usable for WebSockets; errors end it quietly.
            let _ = connection.with_upgrades().await;
        });
        Ok(sender)
    }

    fn take_idle(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((_, sender)) = idle.pop() {
            if sender.is_ready() {
                return Some(sender);
            }
        }
        None
    }

    /// Sends on an idle connection, or a new one.
    pub async fn send(&self, request: Request<Body>) -> Result<Response<Incoming>, AgentClientError> {
        let mut sender = match self.take_idle() {
            Some(s) => s,
            None => self.new_sender().await?,
        };
        let response = sender.send_request(request).await.map_err(|e| self.unreachable(e))?;
        // HTTP/1: the connection is free again once the caller has read the response body.
        // Wait for that off the request path, then keep the connection warm for the next call.
        let (idle, next_idle) = (self.idle.clone(), self.next_idle.clone());
        tokio::spawn(async move {
            if sender.ready().await.is_err() {
                return;
            }
            let number = next_idle.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            {
                let mut idle = idle.lock().unwrap_or_else(|p| p.into_inner());
                if idle.len() >= MAX_IDLE {
                    return;
                }
                idle.push((number, sender));
            }
            // Still idle then (not taken by a request since): dropping it closes it.
            tokio::time::sleep(IDLE_TIMEOUT).await;
            idle.lock().unwrap_or_else(|p| p.into_inner()).retain(|(n, _)| *n != number);
        });
        Ok(response)
    }
}
