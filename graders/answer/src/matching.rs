//! The matching rules, apart from the component so that they are tested natively.

use regex::Regex;
use serde_json::Value;

pub enum Rule {
    Exact(Vec<String>),
    Normalized(Vec<String>),
    Regex(Vec<(String, Regex)>),
    Numeric { references: Vec<(String, f64)>, absolute: f64, relative: f64 },
}

/// Lowercase, punctuation dropped, whitespace collapsed.
pub fn normalize(s: &str) -> String {
    let kept: String =
        s.chars().map(|c| if c.is_alphanumeric() { c.to_lowercase().next().unwrap_or(c) } else { ' ' }).collect();
    kept.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The whole text as a number, or else the last number in it (`The answer is 1,234.5.`).
pub fn number_in(s: &str) -> Option<f64> {
    let clean = |t: &str| t.replace([',', '_'], "").trim_end_matches('%').parse::<f64>().ok();
    if let Some(n) = clean(s.trim()) {
        return Some(n);
    }
    static NUMBER: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(r"-?\d[\d,_]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+").unwrap());
    NUMBER.find_iter(s).last().and_then(|m| clean(m.as_str()))
}

impl Rule {
    pub fn from_metadata(m: &Value) -> Result<Rule, String> {
        let references: Vec<String> = match (m.get("answers"), m.get("answer")) {
            (Some(Value::Array(list)), _) => list
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    Value::Number(n) => Ok(n.to_string()),
                    other => Err(format!("answers holds {other}, not text or a number")),
                })
                .collect::<Result<_, _>>()?,
            (Some(other), _) => return Err(format!("answers must be a list, not {other}")),
            (None, Some(Value::String(s))) => vec![s.clone()],
            (None, Some(Value::Number(n))) => vec![n.to_string()],
            (None, Some(other)) => return Err(format!("answer must be text or a number, not {other}")),
            (None, None) => return Err("no reference: set `answer` or `answers`".into()),
        };
        if references.is_empty() {
            return Err("answers is empty".into());
        }
        match m.get("match").and_then(Value::as_str).unwrap_or("normalized") {
            "exact" => Ok(Rule::Exact(references)),
            "normalized" | "normalised" => Ok(Rule::Normalized(references)),
            "regex" => references
                .into_iter()
                .map(|r| {
                    Regex::new(&format!("^(?:{r})$"))
                        .map(|re| (r.clone(), re))
                        .map_err(|e| format!("answer pattern {r:?}: {e}"))
                })
                .collect::<Result<_, _>>()
                .map(Rule::Regex),
            "numeric" => {
                let references = references
                    .into_iter()
                    .map(|r| number_in(&r).map(|n| (r.clone(), n)).ok_or(format!("reference {r:?} is not a number")))
                    .collect::<Result<_, _>>()?;
                let tol = |k: &str, d: f64| match m.get(k) {
                    None => Ok(d),
                    Some(v) => v.as_f64().filter(|x| *x >= 0.0).ok_or(format!("{k} must be a number ≥ 0")),
                };
                Ok(Rule::Numeric {
                    references,
                    absolute: tol("tolerance", 1e-6)?,
                    relative: tol("relative_tolerance", 0.0)?,
                })
            }
            other => Err(format!("match {other:?}: one of exact, normalized, regex, numeric")),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            Rule::Exact(_) => "exact",
            Rule::Normalized(_) => "normalized",
            Rule::Regex(_) => "regex",
            Rule::Numeric { .. } => "numeric",
        }
    }

    pub fn references(&self) -> Vec<String> {
        match self {
            Rule::Exact(r) | Rule::Normalized(r) => r.clone(),
            Rule::Regex(r) => r.iter().map(|(s, _)| s.clone()).collect(),
            Rule::Numeric { references, .. } => references.iter().map(|(s, _)| s.clone()).collect(),
        }
    }

    /// The reference the answer matches, if any. Surrounding whitespace never counts.
    pub fn check(&self, answer: &str) -> Option<String> {
        let answer = answer.trim();
        match self {
            Rule::Exact(refs) => refs.iter().find(|r| r.trim() == answer).cloned(),
            Rule::Normalized(refs) => refs.iter().find(|r| normalize(r) == normalize(answer)).cloned(),
            Rule::Regex(refs) => refs.iter().find(|(_, re)| re.is_match(answer)).map(|(s, _)| s.clone()),
            Rule::Numeric { references, absolute, relative } => {
                let got = number_in(answer)?;
                references
                    .iter()
                    .find(|(_, want)| (got - want).abs() <= absolute.max(relative * want.abs()))
                    .map(|(s, _)| s.clone())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(m: Value) -> Rule {
        Rule::from_metadata(&m).unwrap()
    }

    #[test]
    fn each_rule_matches_what_it_says() {
        let exact = rule(json!({"answer": "Paris", "match": "exact"}));
        assert!(exact.check(" Paris\n").is_some());
        assert!(exact.check("paris").is_none());
        let norm = rule(json!({"answer": "The Eiffel Tower"}));
        assert!(norm.check("the  eiffel tower.").is_some());
        assert!(norm.check("Eiffel Tower").is_none(), "articles are words, not noise");
        let re = rule(json!({"answers": ["4[0-9]", "forty.*"], "match": "regex"}));
        assert_eq!(re.check("42"), Some("4[0-9]".into()));
        assert!(re.check("142").is_none(), "a pattern matches the whole answer");
        assert_eq!(re.check("forty two"), Some("forty.*".into()));
        let num = rule(json!({"answer": 1.23456, "match": "numeric", "tolerance": 0.001}));
        assert!(num.check("The answer is 1.2349.").is_some());
        assert!(num.check("1.24").is_none());
        let rel = rule(json!({"answers": ["1,000,000"], "match": "numeric", "relative_tolerance": 0.01}));
        assert!(rel.check("about 1005000 people").is_some());
        assert!(rel.check("1,020,000").is_none());
    }

    #[test]
    fn any_of_several_references() {
        let r = rule(json!({"answers": ["NYC", "New York City", "new york"]}));
        assert_eq!(r.check("New York!"), Some("new york".into()));
    }

    #[test]
    fn numbers_are_found_in_text() {
        assert_eq!(number_in("-2.5e3"), Some(-2500.0));
        assert_eq!(number_in("first 3 then 7 apples"), Some(7.0));
        assert_eq!(number_in("50%"), Some(50.0));
        assert_eq!(number_in("none"), None);
    }

    #[test]
    fn bad_references_name_the_problem() {
        let e = |m: Value| Rule::from_metadata(&m).err().unwrap();
        assert!(e(json!({})).contains("set `answer` or `answers`"));
        assert!(e(json!({"answer": "(", "match": "regex"})).contains("answer pattern \"(\""));
        assert!(e(json!({"answer": "many", "match": "numeric"})).contains("\"many\" is not a number"));
        assert!(e(json!({"answer": "x", "match": "fuzzy"})).contains("one of exact, normalized, regex, numeric"));
        assert!(e(json!({"answers": []})).contains("empty"));
    }
}
