//! The agent's error type: a kind from the protocol and a message that names what was wrong.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use orchard_protocol::{ErrorBody, ErrorKind};

#[derive(Debug)]
pub struct AgentError {
    pub kind: ErrorKind,
    pub message: String,
}

pub type AgentResult<T> = Result<T, AgentError>;

impl AgentError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        AgentError { kind, message: message.into() }
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidInput, message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Denied, message)
    }
    pub fn other(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Other, message)
    }

    /// Maps an I/O error on `what` to the closest kind, keeping the OS's explanation.
    pub fn io(what: &str, err: std::io::Error) -> Self {
        use std::io::ErrorKind as K;
        let kind = match err.kind() {
            K::NotFound => ErrorKind::NotFound,
            K::PermissionDenied => ErrorKind::Denied,
            K::InvalidInput | K::AlreadyExists | K::NotADirectory | K::IsADirectory | K::DirectoryNotEmpty => {
                ErrorKind::InvalidInput
            }
            _ => ErrorKind::Other,
        };
        Self::new(kind, format!("{what}: {err}"))
    }
}

impl std::fmt::Display for AgentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl IntoResponse for AgentError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.kind.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(ErrorBody { kind: self.kind, message: self.message })).into_response()
    }
}
