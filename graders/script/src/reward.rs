//! Reading Harbor's reward files. What they hold is written by the task's tests, which run
//! where an agent may have left things behind: any text at all must end in a number or a reason.

/// The reward and sub-scores from `reward.txt` (preferred) or `reward.json`; `Err` says why
/// neither gives one.
pub fn read(txt: Option<&str>, json: Option<&str>) -> Result<(f64, Vec<(String, f64)>), String> {
    if let Some(text) = txt {
        return match text.trim().parse::<f64>() {
            Ok(r) if r.is_finite() => Ok((r, vec![])),
            _ => Err(format!("reward.txt holds {:?}, not a number", tail(text.trim(), 100))),
        };
    }
    let Some(text) = json else {
        return Err("the tests wrote no /logs/verifier/reward.txt or reward.json".into());
    };
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|_| "reward.json is not a JSON object of numbers".to_string())?;
    let mut subs = Vec::new();
    for (name, value) in &map {
        match value.as_f64() {
            Some(v) if v.is_finite() => subs.push((name.clone(), v)),
            _ => return Err(format!("reward.json: {:?} is not a number", tail(name, 100))),
        }
    }
    if subs.is_empty() {
        return Err("reward.json is empty".into());
    }
    let reward = map
        .get("reward")
        .and_then(serde_json::Value::as_f64)
        .unwrap_or_else(|| subs.iter().map(|s| s.1).sum::<f64>() / subs.len() as f64);
    Ok((reward, subs))
}

/// The last `chars` characters of `text`.
pub fn tail(text: &str, chars: usize) -> String {
    let count = text.chars().count();
    text.chars().skip(count.saturating_sub(chars)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewards_are_numbers_or_reasons() {
        assert_eq!(read(Some(" 0.5\n"), None), Ok((0.5, vec![])));
        assert!(read(Some("NaN"), None).unwrap_err().contains("not a number"));
        assert!(read(Some("inf"), None).unwrap_err().contains("not a number"));
        assert_eq!(read(None, Some(r#"{"a": 1, "b": 0}"#)).unwrap().0, 0.5);
        assert_eq!(read(None, Some(r#"{"reward": 0.25, "b": 1}"#)).unwrap().0, 0.25);
        assert!(read(None, Some("[1]")).is_err());
        assert!(read(None, Some("{}")).unwrap_err().contains("empty"));
        assert!(read(None, None).unwrap_err().contains("wrote no"));
    }
}
