//! The HTTP kit every API crate answers with (`server`, `evals-api`, `groups`, `model-proxy`,
//! `web-ui`): one error type, one schema for it, one tenant type, and the extractors.
//!
//! Invariants:
//! - Every refusal is `{"detail": …, "kind": …}` with its status ([`ApiError`]); `detail` names
//!   what was wrong (the field, the parameter), and never what exists elsewhere.
//! - A JSON body with a field the API does not have is refused with 400 naming it, never
//!   ignored; a body that is malformed in any other way is 422 naming the path ([`parse_json`]).
//! - The [`Tenant`] of a request is set once, by the server's authentication, and read from the
//!   request's extensions by every route: no route decides who the caller is on its own.

#![warn(missing_docs)]

mod error;
mod extract;

pub use error::{ApiError, ApiResult, Problem};
mod schema;

pub use extract::{JsonBody, Query, parse_json, parse_rest, take_field};
pub use schema::object_with;
mod ws_relay;
pub use ws_relay::relay_websocket;

/// The tenant a request acts for, put in the request's extensions by the server's
/// authentication (routes read it as `Extension<Tenant>`; the web UI's pages from their session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);
