//! Separate verifier environments (Harbor's `[verifier] environment_mode = "separate"`).
//!
//! An agent controls everything in its own sandbox: files outside the repository, processes
//! left running, its environment, its home directory, replaced binaries. Grading there lets it
//! grade itself. Here a rollout is graded in a *fresh* sandbox from the task's image, into which
//! only what the task declares is carried:
//!
//! - for a repository, the agent's change as a diff against the base commit, applied with the
//!   verifier's own git; changes to tests and test machinery are then dropped (see [`policy`])
//!   unless the task's gold patch touches the same files;
//! - otherwise named artifacts (files or directories), copied as they are.
//!
//! What was carried and what was dropped, and why, is the [`CarryReport`].

#![warn(missing_docs)]

pub mod carry;
pub mod policy;

use serde::{Deserialize, Serialize};

pub use carry::{Extracted, carry, extract_artifacts, extract_diff};
pub use orchard_test_logs::patched_files;

/// Where a rollout is graded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// In the agent's own sandbox, in its final state (for tasks that need the live state).
    InPlace,
    /// In a fresh sandbox carrying only what the task declares.
    Separate,
}

impl Mode {
    /// Reads a task's `environment_mode` (`separate`, or `in-place`/`shared`).
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "in-place" | "in_place" | "inplace" | "shared" => Ok(Mode::InPlace),
            "separate" => Ok(Mode::Separate),
            other => Err(format!("environment_mode {other:?}: use \"separate\" or \"in-place\"")),
        }
    }
}

/// What the task declares is carried.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CarrySpec {
    /// The repository whose change is carried.
    pub repo: Option<RepoCarry>,
    /// Files or directories carried as they are (absolute paths).
    pub artifacts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
/// A git repository whose changes are carried into the verifier's sandbox as a diff.
pub struct RepoCarry {
    /// The repository's directory (the same in both sandboxes).
    pub dir: String,
    /// The commit the change is taken against; the clean sandbox's `HEAD` when absent.
    pub base_commit: Option<String>,
    /// Drop changes to tests and test machinery.
    pub drop_test_changes: bool,
    /// Files the task's gold patch touches: never dropped.
    pub keep: std::collections::BTreeSet<String>,
}

/// A change left out of the verifier's sandbox, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dropped {
    /// The path as the task declared it.
    pub path: String,
    /// Why it was not carried.
    pub reason: String,
}

/// What went into the verifier's sandbox.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CarryReport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The commit the diff was taken against, when a repository was carried.
    pub base_commit: Option<String>,
    /// Repository paths whose change was carried.
    pub carried: Vec<String>,
    /// What was declared but not carried, with the reason.
    pub dropped: Vec<Dropped>,
    /// Artifacts carried (those that existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<String>,
    /// Size of the agent's diff as read.
    pub diff_bytes: u64,
    /// When the agent's change could not be carried (nothing of it was): why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

#[derive(Debug, thiserror::Error)]
/// Why grading in a separate environment could not be set up.
pub enum VerifierError {
    /// The verifier's own sandbox failed (not the agent's doing).
    #[error("verifier sandbox: {0}")]
    Sandbox(String),
}

/// The most the verifier reads of an agent's diff or artifacts: a change above it is not
/// carried (and the report says so).
pub const MAX_CARRY_BYTES: u64 = 64 << 20;
