use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
/// What a path is.
pub enum FileKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (never followed).
    Symlink,
    /// A device, socket or pipe.
    Other,
}

/// Metadata of one file (`GET /files/stat`, entries of `GET /files/list`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct FileEntry {
    /// Its last component.
    pub name: String,
    /// Its absolute path.
    pub path: String,
    /// What it is.
    pub kind: FileKind,
    /// Its size in bytes.
    pub size: u64,
    /// Permission bits, e.g. 0o644.
    pub mode: u32,
    /// Modification time in epoch seconds.
    pub modified: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Where a symbolic link points.
    pub link_target: Option<String>,
}

/// Answer of `GET /files/list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Listing {
    /// The directory.
    pub path: String,
    /// Its entries.
    pub entries: Vec<FileEntry>,
}

/// Answer of `PUT /files` and `PUT /tar`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct WriteResult {
    /// Where it was written.
    pub path: String,
    /// Bytes written (for a tar upload: bytes of the archive consumed).
    pub size: u64,
    /// Entries extracted (tar uploads only).
    #[serde(default, deserialize_with = "crate::null_as_default")]
    pub entries: u64,
}

/// Body of `POST /http`: an HTTP/1.1 request to a service on the sandbox's own loopback.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct HttpRequest {
    /// The port on the sandbox's loopback.
    pub port: u16,
    /// The HTTP method.
    pub method: String,
    /// Path and query.
    pub path: String,
    #[serde(default, deserialize_with = "crate::null_as_default")]
    /// Request headers.
    pub headers: Vec<(String, String)>,
    #[serde(default, deserialize_with = "crate::null_as_default")]
    /// The body, base64.
    pub body_base64: String,
    #[serde(default)]
    /// How long to wait for the answer.
    pub timeout_ms: Option<u64>,
    /// A grader's own read. The agent sends it itself over the service's grader socket (the
    /// abstract Unix socket `orchard-grader-PORT`) where one listens, so that the service can
    /// tell it from the agent's calls by the connecting process — which nothing the agent runs
    /// can be — rather than by anything in the request. Elsewhere it goes over TCP as any call.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grader: bool,
}

/// The abstract Unix socket name on which a service in the sandbox takes a grader's reads for
/// its TCP `port`.
pub fn grader_socket_name(port: u16) -> String {
    format!("orchard-grader-{port}")
}

/// Set in the environment of the image's entrypoint: the in-sandbox agent's pid, the only
/// process whose connections to a grader socket are the grader's.
pub const AGENT_PID_ENV: &str = "ORCHARD_AGENT_PID";

/// Answer of `POST /http`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct HttpResponse {
    /// The HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// The body, base64.
    pub body_base64: String,
}
