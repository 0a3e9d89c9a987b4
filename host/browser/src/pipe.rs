//! The DevTools protocol over Chromium's `--remote-debugging-pipe`: JSON messages, each ended by
//! a NUL byte, commands written to the browser's fd 3 and answers and events read from its fd 4.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;
use tokio::sync::{broadcast, oneshot};

use crate::BrowserError;

/// The largest message read from the browser (a full-page screenshot of a large viewport fits).
pub const MAX_MESSAGE: usize = 64 << 20;

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, BrowserError>>>>>;

type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// A Chrome DevTools Protocol connection over the browser's pipe: calls matched to answers by id, events fanned out to subscribers.
pub struct Cdp {
    commands: tokio::sync::Mutex<Writer>,
    pending: Pending,
    next_id: AtomicU64,
    events: broadcast::Sender<Value>,
    /// Why the reader stopped, once it has.
    gone: Arc<Mutex<Option<String>>>,
}

impl Cdp {
    /// Talks to a browser through `commands` (its fd 3) and `answers` (its fd 4).
    pub fn new(commands: OwnedFd, answers: OwnedFd) -> std::io::Result<Arc<Cdp>> {
        let commands = pipe::Sender::from_owned_fd(commands)?;
        let answers = pipe::Receiver::from_owned_fd(answers)?;
        Ok(Cdp::over(answers, commands))
    }

    /// Talks to a browser over any byte stream carrying its DevTools pipe (a relay).
    pub fn over(
        answers: impl tokio::io::AsyncRead + Send + Unpin + 'static,
        commands: impl tokio::io::AsyncWrite + Send + Unpin + 'static,
    ) -> Arc<Cdp> {
        let (events, _) = broadcast::channel(1024);
        let cdp = Arc::new(Cdp {
            commands: tokio::sync::Mutex::new(Box::new(commands)),
            pending: Arc::default(),
            next_id: AtomicU64::new(1),
            events,
            gone: Arc::default(),
        });
        tokio::spawn(read_loop(Box::new(answers), cdp.pending.clone(), cdp.events.clone(), cdp.gone.clone()));
        cdp
    }

    /// Closes the command side: a relayed browser is ended by its relay.
    pub async fn close(&self) {
        use tokio::io::AsyncWriteExt;
        let _ = self.commands.lock().await.shutdown().await;
    }

    /// Events from now on (`{"method", "params", "sessionId"}`).
    pub fn events(&self) -> broadcast::Receiver<Value> {
        self.events.subscribe()
    }

    /// Sends `method` (to the tab of `session`, or the browser) and waits for its answer.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
        timeout: Duration,
    ) -> Result<Value, BrowserError> {
        if let Some(why) = self.gone.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Err(BrowserError::Gone(why));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            message["sessionId"] = s.into();
        }
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).insert(id, tx);
        let mut bytes = serde_json::to_vec(&message).unwrap_or_default();
        bytes.push(0);
        let written = self.commands.lock().await.write_all(&bytes).await;
        if let Err(e) = written {
            self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
            return Err(BrowserError::Gone(format!("writing to the browser: {e}")));
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(answer)) => answer.map_err(|e| match e {
                BrowserError::Protocol { message, .. } => BrowserError::Protocol { method: method.into(), message },
                other => other,
            }),
            Ok(Err(_)) => Err(BrowserError::Gone("the connection closed".into())),
            Err(_) => {
                self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                Err(BrowserError::Timeout { method: method.into(), seconds: timeout.as_secs_f64() })
            }
        }
    }
}

async fn read_loop(
    mut answers: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    pending: Pending,
    events: broadcast::Sender<Value>,
    gone: Arc<Mutex<Option<String>>>,
) {
    let mut buffer: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let why = loop {
        let n = match answers.read(&mut chunk).await {
            Ok(0) => break "the browser closed its DevTools pipe".to_string(),
            Ok(n) => n,
            Err(e) => break format!("reading from the browser: {e}"),
        };
        buffer.extend_from_slice(&chunk[..n]);
        while let Some(end) = buffer.iter().position(|b| *b == 0) {
            let message: Vec<u8> = buffer.drain(..=end).collect();
            dispatch(&message[..message.len() - 1], &pending, &events);
        }
        if buffer.len() > MAX_MESSAGE {
            break format!("the browser sent a message over {MAX_MESSAGE} bytes");
        }
    };
    *gone.lock().unwrap_or_else(|p| p.into_inner()) = Some(why.clone());
    for (_, tx) in pending.lock().unwrap_or_else(|p| p.into_inner()).drain() {
        let _ = tx.send(Err(BrowserError::Gone(why.clone())));
    }
}

fn dispatch(message: &[u8], pending: &Pending, events: &broadcast::Sender<Value>) {
    let Ok(v) = serde_json::from_slice::<Value>(message) else { return };
    match v.get("id").and_then(Value::as_u64) {
        Some(id) => {
            let Some(tx) = pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&id) else { return };
            let answer = match v.get("error") {
                Some(e) => Err(BrowserError::Protocol {
                    method: String::new(),
                    message: e.get("message").and_then(Value::as_str).unwrap_or("error").to_string(),
                }),
                None => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(answer);
        }
        None => {
            let _ = events.send(v);
        }
    }
}
