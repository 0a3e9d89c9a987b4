//! The error answer: a status, a message that names what was wrong, a machine-readable kind,
//! and for 429 and 503 how long to wait. The body is `{"detail": message, "kind": …}` (`detail`
//! is what Orchard Env clients read).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use orchard_admission::AdmissionError;
use orchard_agent_client::AgentClientError;
use orchard_sandbox::SandboxError;
use orchard_store::StoreError;

/// A refusal or failure as the API answers it.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// `invalid_input`, `not_found`, `conflict`, `capacity`, `timeout`, `unavailable`, …
    pub kind: &'static str,
    /// What was wrong, naming the field or parameter.
    pub detail: String,
    /// Seconds, for 429 and 503 (`Retry-After`).
    pub retry_after: Option<u32>,
}

/// A handler's result.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An answer of this status and kind.
    pub fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> Self {
        ApiError { status, kind, detail: detail.into(), retry_after: None }
    }
    /// 400: the request is malformed (a field the API does not have, a body that is not JSON).
    pub fn bad_request(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_input", detail)
    }
    /// 422: the request is well-formed but a value is not acceptable.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", detail)
    }
    /// 404: nothing of that name for this tenant (whether or not another tenant has one).
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", detail)
    }
    /// 503 with `Retry-After: 1`.
    pub fn unavailable(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", detail).retry_after(1)
    }
    /// The same answer, telling the client to wait `seconds` before trying again.
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status.as_u16(), self.kind, self.detail)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({"detail": self.detail, "kind": self.kind});
        let mut response = (self.status, Json(body)).into_response();
        if let Some(secs) = self.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Every error answer's schema in the OpenAPI document: what was wrong, and its kind.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// What was wrong, naming the field or parameter.
    pub detail: String,
    /// `invalid_input`, `not_found`, `unauthorized`, `rate_limited`, `unavailable`, ...
    pub kind: String,
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Invalid(m) => Self::invalid(m),
            _ => {
                // The database's own words go to the log; the client learns only that it failed.
                tracing::error!("store: {e}");
                Self::unavailable(format!("the database: {e}"))
            }
        }
    }
}

#[cfg(feature = "scheduler")]
impl From<orchard_scheduler::SchedulerError> for ApiError {
    fn from(e: orchard_scheduler::SchedulerError) -> Self {
        match e {
            orchard_scheduler::SchedulerError::Invalid(m) => Self::invalid(m),
            orchard_scheduler::SchedulerError::Store(s) => s.into(),
        }
    }
}

impl From<AdmissionError> for ApiError {
    fn from(e: AdmissionError) -> Self {
        match e {
            AdmissionError::Refused { .. } => ApiError::bad_request(e.to_string()),
            // What a tenant over its quota is told to wait before retrying.
            AdmissionError::OverQuota(message) => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "quota", message).retry_after(5)
            }
            AdmissionError::RateLimited { message, retry_after_seconds } => {
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate", message)
                    .retry_after(u32::try_from(retry_after_seconds).unwrap_or(u32::MAX))
            }
        }
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
                ApiError::new(StatusCode::TOO_MANY_REQUESTS, "capacity", message).retry_after(5)
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
