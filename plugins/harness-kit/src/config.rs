//! A harness's configuration, read strictly (see `orchard_harness_config`): a refusal is the
//! harness's `invalid-input` error.

pub use orchard_harness_config::{CONTEXT, SAMPLING};
use serde_json::Value;

use crate::Error;

/// Parses `text` as `harness`'s configuration, refusing any key not in one of `known`.
pub fn parse(harness: &str, text: &str, known: &[&[&str]]) -> Result<Value, Error> {
    orchard_harness_config::parse(harness, text, known).map_err(Error::InvalidInput)
}
