//! Numbers and times as pages show them.

pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// `42 s`, `3 min`, `5 h`, `2 d` ago.
pub fn age(since: f64) -> String {
    let s = (now() - since).max(0.0) as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min", s / 60),
        3600..86400 => format!("{} h", s / 3600),
        _ => format!("{} d", s / 86400),
    }
}

/// A rate as a percentage, or a dash.
pub fn pct(v: Option<f64>) -> String {
    v.map(|v| format!("{:.0}%", v * 100.0)).unwrap_or_else(|| "–".into())
}

/// A number with two decimals, or a dash.
pub fn num(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "–".into())
}

pub fn percent_of(part: i64, whole: i64) -> i64 {
    if whole > 0 { (part * 100 / whole).clamp(0, 100) } else { 0 }
}

#[cfg(test)]
mod tests {
    #[test]
    fn encodes_what_a_query_needs() {
        assert_eq!(super::url_encode("/ui/evals/ev-1?x=a b&c"), "/ui/evals/ev-1%3Fx%3Da%20b%26c");
        assert_eq!(super::pct(Some(0.5)), "50%");
        assert_eq!(super::num(None), "–");
    }
}
