//! [`SandboxAgent`]: what the host can ask of a sandbox, whoever answers.
//!
//! The local and Kubernetes backends answer with [`crate::AgentClient`], HTTP to the
//! `orchard-agent` inside the sandbox; the in-process fake backend (`orchard-sandbox-fake`)
//! answers from memory. Everything above the sandbox layer (the runtime, evaluation, the
//! service, the groups) holds a [`SharedAgent`] and never knows which.

use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use hyper::{Method, Response};
use orchard_protocol::{
    ExecFrame, ExecRequest, ExecResult, FileEntry, Health, HttpRequest, HttpResponse, Listing, LogChunk, ProcessInfo,
    ProcessStart, SessionContinue, SessionInfo, SessionStart, WriteResult,
};

use crate::{AgentStream, Body, Result};

/// A command's frames as they come; the last one is `Exit` or `Error`.
pub type FrameStream = std::pin::Pin<Box<dyn Stream<Item = Result<ExecFrame>> + Send>>;

/// The agent of one sandbox, shared by whoever works in it.
pub type SharedAgent = Arc<dyn SandboxAgent>;

/// The operations of a sandbox's agent (the `orchard-protocol` API). Every method is safe to
/// call concurrently; errors are [`crate::AgentClientError`]s, whose `Agent` variant carries
/// the agent's own status and kind.
#[async_trait::async_trait]
pub trait SandboxAgent: Send + Sync + 'static {
    /// Where this agent is reached, for logs and the sandbox's info (`unix:/…`, `ip:port`,
    /// `memory`).
    fn describe(&self) -> String;

    /// Sends a raw protocol request (`/files?path=…`); the answer's body is left for the
    /// caller to stream. The service's compatible routes forward through this.
    async fn send(&self, method: Method, path_and_query: &str, body: Body) -> Result<Response<Body>>;

    /// The agent's `/health`.
    async fn health(&self) -> Result<Health>;

    /// Sets the working directory (made if missing) and environment of commands that name
    /// none: a sandbox claimed from a warm pool takes its creator's this way.
    async fn set_defaults(&self, cwd: Option<&str>, env: &std::collections::BTreeMap<String, String>) -> Result<()>;

    /// Runs a command to its end.
    async fn exec(&self, req: &ExecRequest) -> Result<ExecResult>;

    /// Runs a command and yields its frames as they come.
    async fn exec_stream(&self, req: &ExecRequest) -> Result<FrameStream>;

    /// Starts a background process.
    async fn start_process(&self, req: &ProcessStart) -> Result<ProcessInfo>;

    /// Starts the desktop service (the agent's own `desktop` mode) as a background process.
    async fn start_desktop(&self, req: &orchard_protocol::DesktopStart) -> Result<ProcessInfo>;

    /// Every background process, running or ended.
    async fn list_processes(&self) -> Result<Vec<ProcessInfo>>;

    /// One background process.
    async fn process(&self, id: &str) -> Result<ProcessInfo>;

    /// Sends `signal` (`TERM`, `KILL`, `INT`, …) to a background process.
    async fn signal_process(&self, id: &str, signal: &str) -> Result<ProcessInfo>;

    /// A page of a background process's output from `offset`.
    async fn process_log(&self, id: &str, offset: u64, limit: Option<u64>) -> Result<LogChunk>;

    /// Opens a shell session whose state (directory, variables) carries between commands.
    async fn start_session(&self, req: &SessionStart) -> Result<SessionInfo>;

    /// Every open session.
    async fn list_sessions(&self) -> Result<Vec<SessionInfo>>;

    /// Runs a command in a session.
    async fn session_exec(&self, id: &str, req: &ExecRequest) -> Result<ExecResult>;

    /// Continues, types into or interrupts the command a session left running.
    async fn session_continue(&self, id: &str, req: &SessionContinue) -> Result<ExecResult>;

    /// Closes a session and kills what it ran.
    async fn close_session(&self, id: &str) -> Result<()>;

    /// A file's bytes.
    async fn read_file(&self, path: &str) -> Result<Bytes>;

    /// Writes a file atomically. `mode` is octal permission bits (e.g. 0o755).
    async fn write_file(&self, path: &str, body: Body, mode: Option<u32>, create_parents: bool) -> Result<WriteResult>;

    /// A directory's entries.
    async fn list(&self, path: &str) -> Result<Listing>;

    /// One file's metadata.
    async fn stat(&self, path: &str) -> Result<FileEntry>;

    /// Removes a file, or a directory (`recursive` for a non-empty one).
    async fn remove(&self, path: &str, recursive: bool) -> Result<()>;

    /// Downloads a directory as a tar stream.
    async fn tar_download(&self, path: &str) -> Result<Response<Body>>;

    /// Uploads a tar stream and extracts it into `path`.
    async fn tar_upload(&self, path: &str, body: Body) -> Result<WriteResult>;

    /// Sends an HTTP request to a service on the sandbox's loopback.
    async fn http(&self, req: &HttpRequest) -> Result<HttpResponse>;

    /// Opens the PTY WebSocket; frames are relayed as they are.
    async fn connect_pty(&self) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>>;

    /// Opens a WebSocket carrying one TCP connection to `port` on the sandbox's own loopback
    /// (binary messages both ways); it closes when the connection does.
    async fn connect_tunnel(&self, port: u16) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>>;

    /// Starts a browser inside the sandbox with `argv` (which asks for
    /// `--remote-debugging-pipe`) and answers its DevTools pipe as a byte stream. Closing the
    /// stream kills the browser.
    async fn open_browser(&self, argv: &[String]) -> Result<tokio::io::DuplexStream>;
}
