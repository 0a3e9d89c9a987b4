//! Extractors whose rejections are JSON errors that name the offending field.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// A JSON body. Errors read like `body: missing field `image` at line 1 column 2`.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
        if bytes.is_empty() {
            return Err(ApiError::unprocessable("body: expected a JSON object, got nothing"));
        }
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses JSON, naming the path of the field that failed: `body: block_network: invalid type...`.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            ApiError::unprocessable(format!("body: {}", e.inner()))
        } else {
            ApiError::unprocessable(format!("body: {path}: {}", e.inner()))
        }
    })
}

/// Query parameters. Errors read like `query: invalid digit found in string` with the parameter.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::unprocessable(format!("query: {}", e.body_text())))
    }
}
