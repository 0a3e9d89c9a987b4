//! JSON as Python's `json.dumps` writes it by default, which ported harnesses must reproduce
//! where the real program puts JSON in front of the model: `", "` between items and `": "` after
//! keys, every non-ASCII character as `\uXXXX` (UTF-16 units), keys in their order.

use serde_json::Value;

/// `json.dumps(value)` with Python's defaults.
pub fn dumps(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        // Python writes a float with a fraction (`1.0`); serde_json keeps what was parsed.
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                string(key, out);
                out.push_str(": ");
                write(item, out);
            }
            out.push('}');
        }
    }
}

/// The JSON text `text` rewritten as `json.dumps(json.loads(text))` would write it, keys kept in
/// their order (what a Python program sends back of a tool call's arguments); `None` when `text`
/// is not JSON.
pub fn redump(text: &str) -> Option<String> {
    serde_json::from_str::<Value>(text).ok()?;
    let mut out = String::new();
    let mut chars = text.chars();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            match c {
                '\\' => {
                    out.push(c);
                    out.extend(chars.next());
                }
                '"' => {
                    in_string = false;
                    out.push(c);
                }
                c if (c as u32) > 0x7e => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
            continue;
        }
        match c {
            '"' => {
                in_string = true;
                out.push(c);
            }
            ',' => out.push_str(", "),
            ':' => out.push_str(": "),
            c if c.is_whitespace() => {}
            c => out.push(c),
        }
    }
    Some(out)
}

/// A JSON string with `ensure_ascii`: the usual short escapes, other control characters and
/// everything past ASCII as `\uXXXX`.
pub fn string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn it_writes_what_python_writes() {
        let v = json!({"command": "echo 'é' \"x\"\n", "n": [1, true, null]});
        assert_eq!(super::dumps(&v), r#"{"command": "echo '\u00e9' \"x\"\n", "n": [1, true, null]}"#);
        assert_eq!(super::dumps(&json!("😀")), r#""\ud83d\ude00""#);
        assert_eq!(
            super::redump(r#"{"path":"/a b","command":"view", "n":[1,2],"s":"x, y: é\"z"}"#).unwrap(),
            r#"{"path": "/a b", "command": "view", "n": [1, 2], "s": "x, y: \u00e9\"z"}"#
        );
        assert!(super::redump("{not json").is_none());
    }
}
