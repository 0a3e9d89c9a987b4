//! Label selectors, the equality-based forms (`k=v`, `k==v`, `k!=v`, `k`, `!k`).

use serde_json::Value;

pub enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// Parses a selector; set-based forms (`in`, `notin`) are refused, naming the term.
pub fn parse(selector: &str) -> Result<Vec<Term>, String> {
    selector
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|term| {
            if term.contains(' ') || term.contains('(') {
                Err(format!("label selector term {term:?}: only k=v, k!=v, k and !k are served by this double"))
            } else if let Some((k, v)) = term.split_once("!=") {
                Ok(Term::NotEquals(k.into(), v.into()))
            } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
                Ok(Term::Equals(k.into(), v.into()))
            } else if let Some(k) = term.strip_prefix('!') {
                Ok(Term::Absent(k.into()))
            } else {
                Ok(Term::Exists(term.into()))
            }
        })
        .collect()
}

pub fn matches(terms: &[Term], object: &Value) -> bool {
    let labels = &object["metadata"]["labels"];
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    terms.iter().all(|term| match term {
        Term::Equals(k, v) => label(k) == Some(v.as_str()),
        Term::NotEquals(k, v) => label(k) != Some(v.as_str()),
        Term::Exists(k) => label(k).is_some(),
        Term::Absent(k) => label(k).is_none(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn equality_terms() {
        let pod = json!({"metadata": {"labels": {"app": "orchard", "tier": "x"}}});
        let sel = |s: &str| super::matches(&super::parse(s).unwrap(), &pod);
        assert!(sel("app=orchard") && sel("app==orchard,tier") && sel("!gone") && sel("tier!=y") && sel(""));
        assert!(!sel("app=other") && !sel("gone") && !sel("!tier"));
        assert!(super::parse("app in (a,b)").is_err());
    }
}
