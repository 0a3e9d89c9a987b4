//! Connections to one agent, kept open between requests.
//!
//! Two kinds, because where a connection is driven decides what a request costs:
//! - a buffered round trip (every JSON call: exec, files, processes) drives its connection in
//!   the caller's own task, from the request's first byte to the answer's last, and keeps the
//!   connection idle, undriven, for the next call. No hand-off between tasks (each one a
//!   wake-up, often of another thread): on a 2-core VM this took one context switch and ~5 %
//!   of the server's CPU off an exec.
//! - a streamed answer (exec frames, file downloads, logs) outlives the call that asked for it,
//!   so its connection runs on a task of its own until the caller has read it.
//!
//! An idle connection is closed after [`IDLE_TIMEOUT`] (one sweeper task per pool, only while
//! it has idle connections) and no more than [`MAX_IDLE`] are kept per agent. One the agent
//! closed while it idled is found out when it is next taken (its first poll sees the end).

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::FutureExt;
use http_body_util::BodyExt;
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

/// A connection driven by whichever task uses it (see the module doc).
struct Driven {
    sender: SendRequest<Body>,
    driver: Pin<Box<http1::Connection<TokioIo<AgentStream>, Body>>>,
    /// When it went idle.
    since: Instant,
}

/// The idle driven connections, and whether a sweeper task is watching them.
#[derive(Default)]
struct DrivenIdle {
    conns: Vec<Driven>,
    swept: bool,
}

pub(crate) struct Pool {
    addr: AgentAddr,
    /// Idle connections of streamed answers, each with a number its closing timer knows it by.
    idle: Arc<Mutex<Vec<Idle>>>,
    next_idle: Arc<std::sync::atomic::AtomicU64>,
    /// Idle connections of buffered round trips.
    driven: Arc<Mutex<DrivenIdle>>,
}

impl Pool {
    pub fn new(addr: AgentAddr) -> Self {
        Pool { addr, idle: Arc::new(Mutex::new(Vec::new())), next_idle: Arc::default(), driven: Arc::default() }
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

    /// Sends `request` and reads the whole answer, driving the connection in this task.
    pub async fn round_trip(&self, request: Request<Body>) -> Result<Response<Bytes>, AgentClientError> {
        let mut conn = match self.take_driven() {
            Some(conn) => conn,
            None => self.new_driven().await?,
        };
        let (outcome, ended) = {
            let Driven { sender, driver, .. } = &mut conn;
            let exchange = async {
                let response = sender.send_request(request).await?;
                let (parts, body) = response.into_parts();
                let bytes = body.collect().await?.to_bytes();
                Ok::<_, hyper::Error>(Response::from_parts(parts, bytes))
            };
            tokio::pin!(exchange);
            tokio::select! {
                biased;
                outcome = &mut exchange => (Some(outcome), false),
                // The connection ended (the agent closed it, or it broke). An answer it had
                // read whole is there to take; anything else will never come (the ended
                // connection still holds the request's reply slot: waiting would hang).
                _ = driver.as_mut() => ((&mut exchange).now_or_never(), true),
            }
        };
        let response = match outcome {
            Some(outcome) => outcome.map_err(|e| self.unreachable(e))?,
            None => return Err(self.unreachable("the connection closed before the answer")),
        };
        if !ended && conn.ready_again() {
            self.put_driven(conn);
        }
        Ok(response)
    }

    async fn new_driven(&self) -> Result<Driven, AgentClientError> {
        let io = TokioIo::new(self.connect().await?);
        let (sender, driver) = http1::handshake(io).await.map_err(|e| self.unreachable(e))?;
        Ok(Driven { sender, driver: Box::pin(driver), since: Instant::now() })
    }

    /// The most recently idle connection that is still open and young enough.
    fn take_driven(&self) -> Option<Driven> {
        loop {
            let mut conn = self.driven.lock().unwrap_or_else(|p| p.into_inner()).conns.pop()?;
            if conn.since.elapsed() < IDLE_TIMEOUT && conn.still_open() {
                return Some(conn);
            }
        }
    }

    /// Keeps `conn` for the next call, and makes sure a sweeper closes it once it has idled too
    /// long.
    fn put_driven(&self, mut conn: Driven) {
        conn.since = Instant::now();
        let mut idle = self.driven.lock().unwrap_or_else(|p| p.into_inner());
        if idle.conns.len() >= MAX_IDLE {
            return;
        }
        idle.conns.push(conn);
        if std::mem::replace(&mut idle.swept, true) {
            return;
        }
        let driven = Arc::downgrade(&self.driven);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(IDLE_TIMEOUT).await;
                // The pool is gone, and its connections with it.
                let Some(driven) = driven.upgrade() else { return };
                let mut idle = driven.lock().unwrap_or_else(|p| p.into_inner());
                idle.conns.retain(|c| c.since.elapsed() < IDLE_TIMEOUT);
                if idle.conns.is_empty() {
                    // Decided under the lock `put_driven` takes: the next put starts a sweeper.
                    idle.swept = false;
                    return;
                }
            }
        });
    }
}

impl Driven {
    /// Polls the connection once: one the agent closed while it idled ends here.
    fn still_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        self.driver.as_mut().poll(&mut cx).is_pending() && !self.sender.is_closed()
    }

    /// Whether the connection takes a next request now that the answer is read (HTTP/1: the
    /// answer was read to its end and the agent did not ask to close).
    fn ready_again(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if self.driver.as_mut().poll(&mut cx).is_ready() {
            return false;
        }
        matches!(self.sender.poll_ready(&mut cx), Poll::Ready(Ok(())))
    }
}
