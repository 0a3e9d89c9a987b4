//! JSON merge patch (RFC 7386), as `application/merge-patch+json` is applied.

use serde_json::Value;

/// Applies `patch` to `target`: objects merge key by key, `null` removes a key, anything else
/// replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Default::default());
    }
    let object = target.as_object_mut().expect("an object");
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn merges_as_rfc_7386_says() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        super::merge(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"m": 1}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"m": 1}}));
    }
}
