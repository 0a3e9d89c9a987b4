use http_body_util::BodyExt;
use hyper::Response;
use hyper::body::Incoming;
use orchard_protocol::{ErrorBody, ErrorKind};

#[derive(Debug, thiserror::Error)]
/// Why a call to the agent failed.
pub enum AgentClientError {
    /// The agent could not be reached at all (connect failed, connection dropped).
    #[error("agent unreachable at {addr}: {reason}")]
    Unreachable {
        /// Where the agent was looked for.
        addr: String,
        /// What the connection said.
        reason: String,
    },
    /// The agent answered with an error.
    #[error("{message}")]
    Agent {
        /// The agent's HTTP status.
        status: u16,
        /// The agent's error kind.
        kind: ErrorKind,
        /// The agent's message, naming what was wrong.
        message: String,
    },
    /// The agent answered something we could not understand.
    #[error("agent protocol error: {0}")]
    Protocol(String),
}

impl AgentClientError {
    /// The error's kind in the plugin contract's terms.
    pub fn kind(&self) -> ErrorKind {
        match self {
            AgentClientError::Unreachable { .. } => ErrorKind::Unavailable,
            AgentClientError::Agent { kind, .. } => *kind,
            AgentClientError::Protocol(_) => ErrorKind::Other,
        }
    }
}

pub(crate) async fn from_response(response: Response<Incoming>) -> AgentClientError {
    let status = response.status().as_u16();
    match response.into_body().collect().await {
        Ok(b) => from_answer(status, &b.to_bytes()),
        Err(e) => AgentClientError::Protocol(format!("reading an error answer: {e}")),
    }
}

/// The error an agent's answer of `status` with body `bytes` says.
pub(crate) fn from_answer(status: u16, bytes: &[u8]) -> AgentClientError {
    match serde_json::from_slice::<ErrorBody>(bytes) {
        Ok(body) => AgentClientError::Agent { status, kind: body.kind, message: body.message },
        Err(_) => AgentClientError::Agent {
            status,
            kind: ErrorKind::from_http_status(status),
            message: String::from_utf8_lossy(bytes).into_owned(),
        },
    }
}
