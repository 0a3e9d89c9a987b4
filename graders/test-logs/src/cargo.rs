//! `cargo test` (libtest's default output).

use std::sync::LazyLock;

use regex::Regex;

use crate::{StatusMap, TestStatus, record};

static LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^test (\S+)(?: - should panic)? \.\.\. (ok|FAILED|ignored)").unwrap());

/// `test path::name ... ok|FAILED|ignored`, and the `failures:` list (which a forged `ok` line
/// cannot outvote: the worse report wins).
pub fn parse(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    let mut in_failures_list = false;
    for line in log.lines() {
        let line = line.trim_end();
        if let Some(c) = LINE.captures(line) {
            let status = match &c[2] {
                "ok" => TestStatus::Passed,
                "FAILED" => TestStatus::Failed,
                _ => TestStatus::Skipped,
            };
            record(&mut map, &c[1], status);
            continue;
        }
        // The plain list of failing tests comes last: `failures:` then indented names.
        if line == "failures:" {
            in_failures_list = true;
            continue;
        }
        if in_failures_list {
            match line.strip_prefix("    ") {
                Some(name) if !name.contains(' ') => record(&mut map, name, TestStatus::Failed),
                _ => in_failures_list = false,
            }
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::log;
    use TestStatus::*;

    #[test]
    fn cargo_from_a_real_run() {
        let (text, code) = log("cargo.log");
        let map = parse(&text);
        assert_eq!(map.get("tests::adds"), Some(&Passed));
        assert_eq!(map.get("tests::divides"), Some(&Failed));
        assert_eq!(map.get("tests::slow"), Some(&Skipped));
        assert_eq!(map.get("tests::nested::inner"), Some(&Passed));
        assert_eq!(map.len(), 4);
        assert_eq!(code, 101);
    }

    #[test]
    fn the_failures_list_outvotes_a_forged_ok() {
        let log = "test a::b ... ok\n\nfailures:\n    a::b\n\ntest result: FAILED. 0 passed; 1 failed\n";
        assert_eq!(parse(log)["a::b"], Failed);
    }
}
