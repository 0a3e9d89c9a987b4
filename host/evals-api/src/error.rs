//! Errors as the rest of the API answers them: `{"detail": …, "kind": …}` with a status.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub kind: &'static str,
    pub detail: String,
}

impl ApiError {
    pub fn new(status: StatusCode, kind: &'static str, detail: impl Into<String>) -> Self {
        ApiError { status, kind, detail: detail.into() }
    }
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_input", detail)
    }
    pub fn not_found(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", detail)
    }
}

impl From<orchard_store::StoreError> for ApiError {
    fn from(e: orchard_store::StoreError) -> Self {
        tracing::error!("store: {e}");
        match e {
            orchard_store::StoreError::Invalid(m) => Self::invalid(m),
            _ => Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", format!("the database: {e}")),
        }
    }
}

impl From<orchard_scheduler::SchedulerError> for ApiError {
    fn from(e: orchard_scheduler::SchedulerError) -> Self {
        match e {
            orchard_scheduler::SchedulerError::Invalid(m) => Self::invalid(m),
            orchard_scheduler::SchedulerError::Store(s) => s.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(serde_json::json!({"detail": self.detail, "kind": self.kind}))).into_response()
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// A JSON body whose errors name the field (`body: attempts: invalid type ...`).
pub fn parse<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> ApiResult<T> {
    if bytes.is_empty() {
        return Err(ApiError::invalid("body: expected a JSON object, got nothing"));
    }
    // Names the field that failed (`body: attempts: invalid type …`).
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let detail = match e.path().to_string().as_str() {
            "." => format!("body: {}", e.inner()),
            path => format!("body: {path}: {}", e.inner()),
        };
        // A field the API does not have is a malformed request, never ignored (`budget` sent
        // where the API has none would otherwise be silently not honoured).
        if e.inner().to_string().starts_with("unknown field") {
            ApiError::new(StatusCode::BAD_REQUEST, "invalid_input", detail)
        } else {
            ApiError::invalid(detail)
        }
    })
}

/// Query parameters whose errors are JSON naming the parameter, like every other answer.
pub struct Query<T>(pub T);

impl<T: serde::de::DeserializeOwned, S: Send + Sync> axum::extract::FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut axum::http::request::Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::invalid(format!("query: {}", e.body_text())))
    }
}
