//! API errors: a status, a message that names what was wrong, and a machine-readable kind.
//! The body is `{"detail": message, "kind": ...}` (`detail` is what Orchard Env clients read).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use orchard_agent_client::AgentClientError;
use orchard_sandbox::SandboxError;
use serde_json::json;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub message: String,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u32>,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, message: message.into(), retry_after: None }
    }
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", message)
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", message)
    }
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }
    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError { retry_after: Some(1), ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message) }
    }
}

impl From<orchard_evals_api::ApiError> for ApiError {
    fn from(e: orchard_evals_api::ApiError) -> Self {
        ApiError::new(e.status, e.kind, e.detail)
    }
}

impl From<SandboxError> for ApiError {
    fn from(e: SandboxError) -> Self {
        let message = e.to_string();
        match e {
            SandboxError::NotFound(_) => ApiError::not_found(message),
            SandboxError::AlreadyExists(_) => ApiError::new(StatusCode::CONFLICT, "conflict", message),
            SandboxError::InvalidSpec(_) | SandboxError::Image { .. } => ApiError::bad_request(message),
            SandboxError::Capacity(_) => {
                ApiError { retry_after: Some(5), ..ApiError::new(StatusCode::TOO_MANY_REQUESTS, "capacity", message) }
            }
            SandboxError::NotReady { .. } => ApiError::new(StatusCode::REQUEST_TIMEOUT, "timeout", message),
            SandboxError::Agent(agent) => agent.into(),
            SandboxError::Backend(_) => ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "other", message),
        }
    }
}

impl From<AgentClientError> for ApiError {
    fn from(e: AgentClientError) -> Self {
        match &e {
            AgentClientError::Unreachable { .. } => ApiError::unavailable(format!("sandbox agent unavailable: {e}")),
            AgentClientError::Agent { status, kind, message } => {
                let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
                let kind = match kind {
                    orchard_protocol::ErrorKind::InvalidInput => "invalid_input",
                    orchard_protocol::ErrorKind::NotFound => "not_found",
                    orchard_protocol::ErrorKind::Timeout => "timeout",
                    orchard_protocol::ErrorKind::Denied => "denied",
                    orchard_protocol::ErrorKind::Unavailable => "unavailable",
                    orchard_protocol::ErrorKind::Other => "other",
                };
                // The agent's 401 means our token is wrong: that is our failure, not the client's.
                if status == StatusCode::UNAUTHORIZED {
                    return ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "other",
                        "the sandbox agent refused the host's token",
                    );
                }
                ApiError::new(status, kind, message.clone())
            }
            AgentClientError::Protocol(m) => {
                ApiError::new(StatusCode::BAD_GATEWAY, "other", format!("sandbox agent: {m}"))
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status, Json(json!({"detail": self.message, "kind": self.kind}))).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}
