//! A harness's configuration, read strictly.
//!
//! Invariants:
//! - The configuration is a JSON object (empty text or `null` is the empty object).
//! - Every key in it is one the harness reads; any other is refused by name, with the keys the
//!   harness does know, so a typo (`step_limt`) fails the rollout with a clear error instead of
//!   silently running on the defaults.

use serde_json::{Value, json};

/// The sampling keys every harness that asks a model reads (see `orchard_harness_kit::sampling`).
pub const SAMPLING: &[&str] = &["temperature", "top_p", "max_tokens", "seed", "extra_body"];

/// The context policy's keys (see `orchard_harness_kit::context::Policy`).
pub const CONTEXT: &[&str] =
    &["max_observation_chars", "context_tokens", "compaction", "keep_recent_messages", "max_images"];

/// Parses `text` as `harness`'s configuration, refusing any key not in one of `known`.
pub fn parse(harness: &str, text: &str, known: &[&[&str]]) -> Result<Value, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(json!({}));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| format!("{harness} config is not JSON: {e}"))?;
    let map = match value {
        Value::Null => return Ok(json!({})),
        Value::Object(ref map) => map,
        other => {
            let kind = match other {
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::String(_) => "a string",
                _ => "an array",
            };
            return Err(format!("{harness} config must be a JSON object, not {kind}"));
        }
    };
    let is_known = |key: &str| known.iter().any(|set| set.contains(&key));
    let unknown: Vec<&str> = map.keys().map(String::as_str).filter(|k| !is_known(k)).collect();
    if unknown.is_empty() {
        return Ok(value);
    }
    let mut all: Vec<&str> = known.concat();
    all.sort_unstable();
    all.dedup();
    let plural = if unknown.len() == 1 { "" } else { "s" };
    Err(format!(
        "{harness} config: unknown key{plural} {} (known: {})",
        unknown.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", "),
        all.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(r: Result<Value, String>) -> String {
        r.expect_err("a refusal")
    }

    #[test]
    fn empty_and_null_are_the_empty_object() {
        assert_eq!(parse("h", "", &[]).unwrap(), json!({}));
        assert_eq!(parse("h", " null ", &[]).unwrap(), json!({}));
    }

    #[test]
    fn known_keys_pass_from_every_set() {
        let v = parse("h", r#"{"step_limit": 3, "temperature": 0}"#, &[&["step_limit"], SAMPLING]).unwrap();
        assert_eq!(v["step_limit"], 3);
    }

    #[test]
    fn an_unknown_key_is_named_with_the_known_ones() {
        let m = message(parse("mini-swe", r#"{"step_limt": 3}"#, &[&["step_limit"], SAMPLING]));
        assert!(m.starts_with("mini-swe config: unknown key `step_limt` (known: extra_body, max_tokens"), "{m}");
        assert!(m.contains("step_limit"), "{m}");
    }

    #[test]
    fn text_that_is_not_an_object_is_refused() {
        assert!(message(parse("h", "{", &[])).starts_with("h config is not JSON"));
        assert_eq!(message(parse("h", "[1]", &[])), "h config must be a JSON object, not an array");
        assert_eq!(message(parse("h", "\"x\"", &[])), "h config must be a JSON object, not a string");
    }
}
