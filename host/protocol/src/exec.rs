use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// A command: a string run by the sandbox's shell, or an argv list run without a shell.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Command {
    /// Run by `bash -c` (or `sh -c` when the image has no bash).
    Shell(String),
    /// Executed directly; quoting is preserved because there is no shell.
    Argv(Vec<String>),
}

impl Command {
    /// A short human-readable rendering, for logs and job listings.
    pub fn display(&self) -> String {
        match self {
            Command::Shell(s) => s.clone(),
            Command::Argv(argv) => argv.join(" "),
        }
    }
}

/// How much of each output stream is kept in the answer; the rest is spilled to a file.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct OutputLimit {
    /// Bytes kept from the start of the stream.
    pub head_bytes: u64,
    /// Bytes kept from its end.
    pub tail_bytes: u64,
}

impl Default for OutputLimit {
    fn default() -> Self {
        OutputLimit { head_bytes: crate::DEFAULT_OUTPUT_KEEP, tail_bytes: crate::DEFAULT_OUTPUT_KEEP }
    }
}

/// Body of `POST /exec` (and of `POST /sessions/{id}/exec`, which ignores `env`, `stdin` and
/// `login_shell`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ExecRequest {
    /// What to run.
    pub command: Command,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// Where (the sandbox's working directory when absent).
    pub cwd: Option<String>,
    #[serde(default, deserialize_with = "crate::null_as_default", skip_serializing_if = "BTreeMap::is_empty")]
    /// Added to the sandbox's environment.
    pub env: BTreeMap<String, String>,
    /// Bytes written to the command's stdin, which is then closed (default: empty stdin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Kill the command's whole process group after this many milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Sessions only: return as soon as the command has printed nothing for this long, leaving
    /// it running with the terminal as its stdin (`running` in the result says so). Continue it,
    /// type into it or interrupt it with `POST /sessions/{id}/continue`. Without this, a session
    /// command's stdin is empty and the call waits for it to end. With it, `timeout_ms` bounds
    /// the wait instead of killing: the answer comes by then, `running` and `timed_out` set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_ms: Option<u64>,
    /// Run a shell command through `bash -lc` so that profile files are read.
    #[serde(default, deserialize_with = "crate::null_as_default")]
    pub login_shell: bool,
    #[serde(default, deserialize_with = "crate::null_as_default")]
    /// How much output the answer keeps.
    pub output_limit: OutputLimit,
}

impl ExecRequest {
    /// A request running `command` with the shell.
    pub fn shell(command: impl Into<String>) -> Self {
        Self::new(Command::Shell(command.into()))
    }

    /// A request running `argv` without a shell.
    pub fn argv<S: Into<String>>(argv: impl IntoIterator<Item = S>) -> Self {
        Self::new(Command::Argv(argv.into_iter().map(Into::into).collect()))
    }

    /// A request with the defaults.
    pub fn new(command: Command) -> Self {
        ExecRequest {
            command,
            cwd: None,
            env: BTreeMap::new(),
            stdin: None,
            timeout_ms: None,
            idle_timeout_ms: None,
            login_shell: false,
            output_limit: OutputLimit::default(),
        }
    }

    /// With a time limit in milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// In a working directory.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }
}

/// One bounded output stream of a finished command.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Output {
    /// The text kept: all of it, or head + an omission marker + tail when truncated.
    pub text: String,
    /// Total bytes the command wrote to this stream.
    pub total_bytes: u64,
    /// Some of the stream is left out of `text`.
    pub truncated: bool,
    /// Path inside the sandbox of the file holding the whole stream, when truncated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_output_path: Option<String>,
}

/// The result of a finished command.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ExecResult {
    /// The exit code; 128 + signal when killed by a signal; 124 on timeout.
    pub exit_code: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Killed at its time limit.
    pub timed_out: bool,
    /// Its standard output.
    pub stdout: Output,
    /// Its standard error.
    pub stderr: Output,
    /// How long it ran.
    pub wall_seconds: f64,
    /// User + system CPU time of the command and the descendants it waited for.
    pub cpu_seconds: f64,
    /// Peak resident set size of the largest process of the command, in KiB.
    pub peak_rss_kb: u64,
    /// Sessions only: the command is still running (it went quiet for `idle_timeout_ms`); the
    /// output is what it printed so far and `exit_code` means nothing yet.
    #[serde(default, deserialize_with = "crate::null_as_default", skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
}

/// One frame of a streamed exec (`POST /exec?stream=true`): newline-delimited JSON.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecFrame {
    /// Output on stdout.
    Stdout {
        /// The text (lossily decoded).
        data: String,
    },
    /// Output on stderr.
    Stderr {
        /// The text (lossily decoded).
        data: String,
    },
    /// The last frame. The result's output texts are bounded as in buffered mode.
    Exit {
        /// The finished command's result.
        result: ExecResult,
    },
    /// The command could not be run at all.
    Error {
        /// What kind of failure.
        kind: crate::ErrorKind,
        /// What was wrong.
        message: String,
    },
}
