//! Wire types of the agent protocol: what the host sends to `orchard-agent` and what it answers.
//!
//! The agent speaks HTTP/1.1 with JSON bodies (raw bytes for file contents and tar streams).
//! Every request carries `Authorization: Bearer <sandbox token>`.

#![warn(missing_docs)]

mod desktop;
mod exec;
mod files;
mod process;

pub use desktop::*;
pub use exec::*;
pub use files::*;
pub use process::*;

use serde::{Deserialize, Serialize};

/// Header that carries the per-sandbox token on every agent request.
pub const AUTH_HEADER: &str = "authorization";
/// Exit code reported for a command killed by its timeout (as coreutils `timeout` does).
pub const EXIT_CODE_TIMEOUT: i32 = 124;
/// Default number of bytes kept from the head and from the tail of each output stream.
pub const DEFAULT_OUTPUT_KEEP: u64 = 64 * 1024;
/// Paths the file API never serves, whatever the configured roots: they expose the agent itself.
pub const DENIED_PREFIXES: &[&str] = &["/proc", "/sys", "/.orchard"];

/// Answer of `GET /health`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Health {
    /// `ok` when the agent answers.
    pub status: String,
    /// The agent's version.
    pub version: String,
    /// The agent's pid as seen inside the sandbox (1 when it is the sandbox's init).
    pub pid: u32,
}

/// What kind of failure an agent error is; mirrors the plugin contract's `error` variant.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request was wrong (HTTP 400).
    InvalidInput,
    /// No such file, process or session (404).
    NotFound,
    /// It took too long (408).
    Timeout,
    /// Not allowed (403).
    Denied,
    /// The agent cannot do it now (503).
    Unavailable,
    /// Anything else (500).
    Other,
}

impl ErrorKind {
    /// The HTTP status the agent answers with for this kind.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::InvalidInput => 400,
            ErrorKind::Denied => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::Timeout => 408,
            ErrorKind::Unavailable => 503,
            ErrorKind::Other => 500,
        }
    }

    /// The kind an HTTP status maps back to on the client side.
    pub fn from_http_status(status: u16) -> Self {
        match status {
            400 | 409 | 413 | 422 => ErrorKind::InvalidInput,
            401 | 403 => ErrorKind::Denied,
            404 => ErrorKind::NotFound,
            408 | 504 => ErrorKind::Timeout,
            503 => ErrorKind::Unavailable,
            _ => ErrorKind::Other,
        }
    }
}

/// Body of every non-2xx agent answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What was wrong, naming it.
    pub message: String,
}

/// Deserializes an explicit JSON `null` as the field's default, as Pydantic's `Optional[...]`
/// does: clients that send every optional field (`"env": null`) mean "absent". Use with
/// `#[serde(default, deserialize_with = "orchard_protocol::null_as_default")]`.
pub fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Like [`null_as_default`] for a `bool` whose default is `true`.
pub fn null_as_true<'de, D>(deserializer: D) -> Result<bool, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Ok(Option::<bool>::deserialize(deserializer)?.unwrap_or(true))
}
