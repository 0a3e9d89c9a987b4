use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Command;

/// Body of `POST /processes`: start a background process whose output goes to a log file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ProcessStart {
    /// What to run.
    pub command: Command,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Where.
    pub cwd: Option<String>,
    #[serde(default, deserialize_with = "crate::null_as_default", skip_serializing_if = "BTreeMap::is_empty")]
    /// Added to the sandbox's environment.
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
/// Whether a background process still runs.
pub enum ProcessState {
    /// Still running.
    Running,
    /// Ended.
    Exited,
}

/// A background process, as `GET /processes` lists it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ProcessInfo {
    /// The agent's id for it.
    pub id: String,
    /// Its process id inside the sandbox.
    pub pid: i32,
    /// What it runs.
    pub command: String,
    /// Running or ended.
    pub state: ProcessState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its exit code, once ended.
    pub exit_code: Option<i32>,
    /// Path inside the sandbox of the combined stdout+stderr log.
    pub log_path: String,
    /// Epoch seconds.
    pub started_at: f64,
}

/// Body of `POST /processes/{id}/signal`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A signal name (`TERM`, `SIGKILL`, `INT`...) or number.
    pub signal: String,
}

/// A slice of a background process's log (`GET /processes/{id}/log?offset=&limit=`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct LogChunk {
    /// The bytes of the log from `offset` (lossily decoded).
    pub data: String,
    /// Where this page starts.
    pub offset: u64,
    /// Where the next page starts.
    pub next_offset: u64,
    /// True when the process has exited and the log is read to its end.
    pub eof: bool,
}

/// Body of `POST /sessions`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SessionStart {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Its starting directory.
    pub cwd: Option<String>,
    #[serde(default, deserialize_with = "crate::null_as_default", skip_serializing_if = "BTreeMap::is_empty")]
    /// Added to the sandbox's environment.
    pub env: BTreeMap<String, String>,
}

/// Body of `POST /sessions/{id}/continue`: what to do with the command a session is still
/// running, then how long to wait. The answer holds only output printed since the last answer.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct SessionContinue {
    /// Text typed into the terminal (include the newline to press Enter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<String>,
    /// Interrupt the command (SIGINT to its process group, then SIGKILL), as C-c would.
    #[serde(default, deserialize_with = "crate::null_as_default")]
    pub interrupt: bool,
    /// Answer by then at the latest (`running` and `timed_out` set), leaving the command running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Answer once the command has printed nothing for this long (default: wait for it to end).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    #[serde(default, deserialize_with = "crate::null_as_default")]
    /// How much output the answer keeps.
    pub output_limit: crate::OutputLimit,
}

/// A persistent shell session.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct SessionInfo {
    /// The agent's id for it.
    pub id: String,
    /// The shell's process id.
    pub pid: i32,
    /// The shell.
    pub shell: String,
    /// False once the shell has exited (e.g. the user ran `exit`).
    pub alive: bool,
}
