//! Converters from datasets as users have them into Harbor task folders Orchard evaluates.

#![warn(missing_docs)]

pub mod claw_eval;
pub mod miniwob;
pub mod osworld;
pub mod swe_bench;
mod swe_specs;
pub mod web;

use std::path::Path;

use serde_json::Value;

/// What a conversion did: the task folders written and the rows left out, with why.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    /// The task folders written.
    pub converted: Vec<String>,
    /// (row id or line, reason)
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
/// Why a conversion failed.
pub enum ConvertError {
    #[error("{path}: {reason}")]
    /// The input is not what the converter reads.
    Input {
        /// The input file.
        path: String,
        /// What is wrong in it.
        reason: String,
    },
    #[error("{path}: {source}")]
    /// A file could not be read or written.
    Io {
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
}

/// The rows of a JSONL file (one object per line) or of a JSON array, with where each came from.
pub fn read_rows(path: &Path) -> Result<Vec<(String, Value)>, ConvertError> {
    let err = |reason: String| ConvertError::Input { path: path.display().to_string(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    if text.trim_start().starts_with('[') {
        let rows: Vec<Value> =
            serde_json::from_str(&text).map_err(|e| err(format!("not a JSON array of rows: {e}")))?;
        return Ok(rows.into_iter().enumerate().map(|(i, r)| (format!("row {}", i + 1), r)).collect());
    }
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let row = serde_json::from_str(line).map_err(|e| err(format!("line {}: not a JSON object: {e}", i + 1)))?;
        rows.push((format!("line {}", i + 1), row));
    }
    if rows.is_empty() {
        return Err(err("holds no rows".into()));
    }
    Ok(rows)
}

/// Copies a directory tree (links to files and directories are followed; anything else, such as
/// a socket, is left out).
pub(crate) fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        if source.is_dir() {
            copy_dir(&source, &target)?;
        } else if source.is_file() {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}
