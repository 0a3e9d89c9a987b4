use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Command;

/// Body of `POST /processes`: start a background process whose output goes to a log file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessStart {
    pub command: Command,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ProcessState {
    Running,
    Exited,
}

/// A background process, as `GET /processes` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessInfo {
    pub id: String,
    pub pid: i32,
    pub command: String,
    pub state: ProcessState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Path inside the sandbox of the combined stdout+stderr log.
    pub log_path: String,
    pub started_at: f64,
}

/// Body of `POST /processes/{id}/signal`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SignalRequest {
    /// A signal name (`TERM`, `SIGKILL`, `INT`...) or number.
    pub signal: String,
}

/// A slice of a background process's log (`GET /processes/{id}/log?offset=&limit=`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LogChunk {
    pub data: String,
    pub offset: u64,
    pub next_offset: u64,
    /// True when the process has exited and the log is read to its end.
    pub eof: bool,
}

/// Body of `POST /sessions`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionStart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

/// A persistent shell session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SessionInfo {
    pub id: String,
    pub pid: i32,
    pub shell: String,
    /// False once the shell has exited (e.g. the user ran `exit`).
    pub alive: bool,
}
