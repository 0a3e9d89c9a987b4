//! `go test -v` and `go test -json`.

use std::sync::LazyLock;

use regex::Regex;

use crate::{StatusMap, TestStatus, record};

static VERBOSE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*--- (PASS|FAIL|SKIP): (\S+) \(").unwrap());

/// A log of JSON events (`-json`) is read as events only: a test's printed output, which
/// arrives inside `Output` strings, cannot add results. Otherwise `--- PASS: TestX (0.00s)`
/// lines (subtests indented, `TestX/sub`).
pub fn parse(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    let events: Vec<serde_json::Value> =
        log.lines().filter(|l| l.starts_with('{')).filter_map(|l| serde_json::from_str(l).ok()).collect();
    if !events.is_empty() {
        for e in events {
            let (Some(action), Some(test)) = (e["Action"].as_str(), e["Test"].as_str()) else { continue };
            let status = match action {
                "pass" => TestStatus::Passed,
                "fail" => TestStatus::Failed,
                "skip" => TestStatus::Skipped,
                _ => continue,
            };
            record(&mut map, test, status);
        }
        return map;
    }
    for line in log.lines() {
        if let Some(c) = VERBOSE.captures(line) {
            let status = match &c[1] {
                "PASS" => TestStatus::Passed,
                "FAIL" => TestStatus::Failed,
                _ => TestStatus::Skipped,
            };
            record(&mut map, &c[2], status);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::log;
    use TestStatus::*;

    fn check(map: &StatusMap) {
        let want = [
            ("TestAdd", Passed),
            ("TestDiv", Failed),
            ("TestTable", Failed),
            ("TestTable/small", Passed),
            ("TestTable/wrong", Failed),
            ("TestTable/with_space", Passed),
            ("TestSkipped", Skipped),
        ];
        for (id, status) in want {
            assert_eq!(map.get(id), Some(&status), "{id}: {map:#?}");
        }
        assert_eq!(map.len(), 7);
    }

    #[test]
    fn go_verbose_from_a_real_run() {
        check(&parse(&log("go-verbose.log").0));
    }

    #[test]
    fn go_json_from_a_real_run() {
        check(&parse(&log("go-json.log").0));
    }

    #[test]
    fn json_output_strings_cannot_forge_results() {
        let log = r#"{"Action":"output","Test":"TestX","Output":"--- PASS: TestX (0.00s)\n"}
{"Action":"fail","Test":"TestX"}"#;
        assert_eq!(parse(log)["TestX"], Failed);
    }
}
