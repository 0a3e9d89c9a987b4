//! Matching JSON: a rubric names a value by JSON pointer and says what it must be. A string in
//! the rubric is a regular expression searched in the value's text (a string as it is, anything
//! else as JSON; an array matches when any element does); any other JSON value must be equal
//! (numbers compared as numbers).

use std::collections::BTreeMap;

use regex::Regex;
use serde_json::Value;

/// What a value must be: a regex (a JSON string) or an exact JSON value.
pub fn matches(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::String(pattern), _) => {
            let Ok(re) = Regex::new(pattern) else { return false };
            match actual {
                Value::String(s) => re.is_match(s),
                Value::Array(items) => items.iter().any(|i| matches(expected, i)) || re.is_match(&actual.to_string()),
                Value::Null => false,
                other => re.is_match(&other.to_string()),
            }
        }
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        _ => expected == actual,
    }
}

/// Every pattern a `where` table holds, for checking them up front.
pub fn patterns(filter: &BTreeMap<String, Value>) -> impl Iterator<Item = &str> {
    filter.values().filter_map(Value::as_str)
}

/// Whether `item` satisfies every `pointer → expected` of `filter`. A pointer that names nothing
/// fails (so does `""` on a missing value); a pointer not starting with `/` names a top-level key.
pub fn satisfies(item: &Value, filter: &BTreeMap<String, Value>) -> bool {
    filter.iter().all(|(pointer, expected)| lookup(item, pointer).is_some_and(|v| matches(expected, v)))
}

pub fn lookup<'a>(item: &'a Value, pointer: &str) -> Option<&'a Value> {
    if pointer.is_empty() || pointer.starts_with('/') {
        item.pointer(pointer)
    } else {
        item.pointer(&format!("/{pointer}"))
    }
}

/// How many of `items` satisfy `filter`.
pub fn count(items: &[Value], filter: &BTreeMap<String, Value>) -> usize {
    items.iter().filter(|i| satisfies(i, filter)).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_patterns_and_the_rest_must_be_equal() {
        assert!(matches(&json!("^Re: .*budget"), &json!("Re: Q3 budget")));
        assert!(matches(&json!("ana@"), &json!(["bo@x", "ana@corp.test"])), "any element of an array");
        assert!(matches(&json!("201"), &json!(201)), "numbers as text");
        assert!(matches(&json!(201), &json!(201.0)));
        assert!(!matches(&json!(201), &json!("201")));
        assert!(!matches(&json!("x"), &Value::Null));
        assert!(matches(&json!({"a": 1}), &json!({"a": 1})));
    }

    #[test]
    fn filters_select_by_pointer() {
        let calls = vec![
            json!({"method": "POST", "path": "/mail/send", "status": 201, "body": {"to": ["ana@corp.test"]}}),
            json!({"method": "POST", "path": "/mail/send", "status": 400, "body": {"subject": "x"}}),
            json!({"method": "GET", "path": "/mail/messages", "status": 200}),
        ];
        let f = |v: Value| serde_json::from_value::<BTreeMap<String, Value>>(v).unwrap();
        assert_eq!(count(&calls, &f(json!({"path": "^/mail/send$"}))), 2);
        assert_eq!(count(&calls, &f(json!({"/path": "^/mail/send$", "/status": 201}))), 1);
        assert_eq!(count(&calls, &f(json!({"/body/to": "ana@"}))), 1);
        assert_eq!(count(&calls, &f(json!({"/body/cc": ".*"}))), 0, "a missing value never matches");
        assert_eq!(count(&calls, &f(json!({}))), 3);
    }
}
