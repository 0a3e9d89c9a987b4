use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    File,
    Directory,
    Symlink,
    Other,
}

/// Metadata of one file (`GET /files/stat`, entries of `GET /files/list`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileEntry {
    pub name: String,
    pub path: String,
    pub kind: FileKind,
    pub size: u64,
    /// Permission bits, e.g. 0o644.
    pub mode: u32,
    /// Modification time in epoch seconds.
    pub modified: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<String>,
}

/// Answer of `GET /files/list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Listing {
    pub path: String,
    pub entries: Vec<FileEntry>,
}

/// Answer of `PUT /files` and `PUT /tar`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WriteResult {
    pub path: String,
    /// Bytes written (for a tar upload: bytes of the archive consumed).
    pub size: u64,
    /// Entries extracted (tar uploads only).
    #[serde(default)]
    pub entries: u64,
}
