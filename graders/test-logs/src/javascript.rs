//! Jest (`--verbose`) and Mocha (the `spec` reporter).

use std::sync::LazyLock;

use regex::Regex;

use crate::{StatusMap, TestStatus, record};

/// `PASS ./sum.test.js` / `FAIL ./sum.test.js`: a file's block of results follows.
static JEST_FILE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(PASS|FAIL) \S").unwrap());
/// `  ✓ adds 1 + 2 (3 ms)`, `  ✕ …`, `  ○ skipped …`, `  ✎ todo …` (√ and × on Windows consoles).
static JEST_RESULT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\s+(✓|✕|○|✎|√|×) (?:skipped |todo )?(.+?)(?: \(\d+(?:\.\d+)? ?m?s\))?$").unwrap());

/// Jest: results are read only inside a file's block (from its `PASS`/`FAIL` line to the first
/// failure report `●` or unindented line), so `console.log` output, which Jest prints before
/// the block, cannot add results. Ids are test titles, as SWE-bench's JavaScript tasks use.
pub fn jest(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    let mut in_block = false;
    for line in log.lines() {
        let line = line.trim_end();
        if JEST_FILE.is_match(line) {
            in_block = true;
            continue;
        }
        if !in_block {
            continue;
        }
        if line.trim_start().starts_with('●') || (!line.is_empty() && !line.starts_with(' ')) {
            in_block = false;
            continue;
        }
        if let Some(c) = JEST_RESULT.captures(line) {
            let status = match &c[1] {
                "✓" | "√" => TestStatus::Passed,
                "✕" | "×" => TestStatus::Failed,
                _ => TestStatus::Skipped,
            };
            record(&mut map, &c[2], status);
        }
    }
    map
}

static MOCHA_PASS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s+(?:✓|✔|√) (.+?)(?: \(\d+ms\))?$").unwrap());
static MOCHA_FAIL: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s+\d+\) (.+)$").unwrap());
static MOCHA_PENDING: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s+- (.+)$").unwrap());
static MOCHA_SUMMARY: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s+\d+ (passing|failing|pending)").unwrap());

/// Mocha's spec reporter: `✔ title` passes, `N) title` fails, `- title` is pending; the listing
/// ends at the `N passing` summary (the failure report after it repeats titles).
pub fn mocha(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.lines() {
        let line = line.trim_end();
        if MOCHA_SUMMARY.is_match(line) {
            break;
        }
        if let Some(c) = MOCHA_PASS.captures(line) {
            record(&mut map, &c[1], TestStatus::Passed);
        } else if let Some(c) = MOCHA_FAIL.captures(line) {
            record(&mut map, &c[1], TestStatus::Failed);
        } else if let Some(c) = MOCHA_PENDING.captures(line) {
            record(&mut map, &c[1], TestStatus::Skipped);
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
    fn jest_from_a_real_run() {
        let (text, _) = log("jest.log");
        let map = jest(&text);
        assert_eq!(map.get("adds 1 + 2 to equal 3"), Some(&Passed));
        assert_eq!(map.get("adds floats exactly"), Some(&Failed));
        assert_eq!(map.get("handles bigints"), Some(&Skipped));
        assert_eq!(map.get("keeps zero"), Some(&Passed));
        assert_eq!(map.get("top level works"), Some(&Passed));
        // The test logged `✓ forged passing line`: Jest printed it outside the results block.
        assert!(!map.contains_key("forged passing line"), "{map:#?}");
        assert_eq!(map.len(), 5);
    }

    #[test]
    fn mocha_from_a_real_run() {
        let (text, _) = log("mocha.log");
        let map = mocha(&text);
        assert_eq!(map.get("works at the top of a suite"), Some(&Passed));
        assert_eq!(map.get("should return -1 when the value is not present"), Some(&Passed));
        assert_eq!(map.get("should find the first element"), Some(&Failed));
        assert_eq!(map.get("should handle NaN"), Some(&Skipped));
        assert_eq!(map.len(), 4, "the failure report after the summary adds nothing: {map:#?}");
    }
}
