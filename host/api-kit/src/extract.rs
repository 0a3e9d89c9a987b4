//! Extractors whose refusals are [`ApiError`]s that name the offending field or parameter.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::ApiError;

/// A JSON body. Errors read like `body: missing field `image` at line 1 column 2`.
pub struct JsonBody<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| ApiError::bad_request(format!("body: {e}")))?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// Parses a JSON body, naming the path of the field that failed (`body: attempts: invalid type
/// …`). A field the API does not have is 400 (a malformed request: `budget` sent where the API
/// has none would otherwise be silently not honoured); every other failure is 422.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid("body: expected a JSON object, got nothing"));
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let detail = match e.path().to_string().as_str() {
            "." => format!("body: {}", e.inner()),
            path => format!("body: {path}: {}", e.inner()),
        };
        if e.inner().to_string().starts_with("unknown field") {
            ApiError::bad_request(detail)
        } else {
            ApiError::invalid(detail)
        }
    })
}

/// Query parameters. Errors read like `query: invalid digit found in string`, naming the
/// parameter, as JSON like every other answer.
pub struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|q| Query(q.0))
            .map_err(|e| ApiError::invalid(format!("query: {}", e.body_text())))
    }
}

/// Takes `key` out of a JSON object, parsed as `T` (`None` when absent or null); the error
/// names the key. For bodies that carry their own fields beside a shared struct's: serde's
/// `flatten` cannot refuse unknown fields, so such a body takes its own keys out with this and
/// parses the rest as the shared struct, which refuses what it does not know.
pub fn take_field<T: DeserializeOwned>(
    object: &mut serde_json::Map<String, serde_json::Value>,
    key: &str,
) -> Result<Option<T>, String> {
    match object.remove(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value) => serde_json::from_value(value).map(Some).map_err(|e| format!("{key}: {e}")),
    }
}

/// The rest of a JSON object (after [`take_field`]) parsed as `T`.
pub fn parse_rest<T: DeserializeOwned>(object: serde_json::Map<String, serde_json::Value>) -> Result<T, String> {
    serde_json::from_value(serde_json::Value::Object(object)).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Job {
        attempts: u32,
    }

    #[test]
    fn an_unknown_field_is_400_naming_it() {
        let e = parse_json::<Job>(br#"{"attempts": 1, "budget": 3}"#).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.detail.contains("budget"), "{}", e.detail);
    }

    #[test]
    fn a_wrong_type_is_422_naming_the_path() {
        let e = parse_json::<Job>(br#"{"attempts": "x"}"#).unwrap_err();
        assert_eq!(e.status, 422);
        assert!(e.detail.starts_with("body: attempts:"), "{}", e.detail);
        let e = parse_json::<Job>(b"").unwrap_err();
        assert_eq!(e.status, 422);
    }
}
