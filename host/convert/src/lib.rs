//! Converters from datasets as users have them into Harbor task folders Orchard evaluates.

pub mod swe_bench;
mod swe_specs;

/// What a conversion did: the task folders written and the rows left out, with why.
#[derive(Debug, Default, serde::Serialize)]
pub struct Report {
    pub converted: Vec<String>,
    /// (row id or line, reason)
    pub skipped: Vec<(String, String)>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{path}: {reason}")]
    Input { path: String, reason: String },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}
