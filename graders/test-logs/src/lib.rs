//! Test-runner logs, read the way SWE-bench reads them, and its resolution rules.
//!
//! - [`parse`] turns one framework's log into a map from test id to [`TestStatus`]: pytest
//!   (`-rA` summaries and `-v` lines, parametrised ids), unittest and Django's runner, sympy's
//!   `bin/test`, Jest, Mocha, `go test` (`-v` and `-json`), `cargo test`, and Maven/Gradle
//!   JUnit output.
//! - [`region`] cuts the part of a log between two markers the grader printed around the test
//!   command, with the command's exit code: text outside it (an agent's own prints before or
//!   after) is never read.
//! - [`judge`] applies SWE-bench's rules (FAIL_TO_PASS / PASS_TO_PASS → FULL / PARTIAL / NO)
//!   with the anti-gaming rules in its docs.
//!
//! Parsers only trust the lines their runner writes in the places it writes them (pytest's
//! summary section, Jest's per-file blocks, libtest's `test … …` lines), and when one test is
//! reported twice with different outcomes, the worse one counts.

use std::collections::BTreeMap;

mod cargo;
mod gotest;
mod javascript;
mod judge;
mod junit;
mod patch;
mod python;

pub use judge::{Judgement, Resolution, judge, suite_ran};
pub use patch::patched_files;

/// One test's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TestStatus {
    // Ordered from best to worst: a test reported twice keeps the worse.
    Passed,
    /// An expected failure (pytest `xfail`, unittest `expected failure`): counts as passing.
    XFail,
    Skipped,
    Failed,
    Error,
}

impl TestStatus {
    /// Passing as SWE-bench counts it.
    pub fn passed(self) -> bool {
        matches!(self, TestStatus::Passed | TestStatus::XFail)
    }
}

/// The test frameworks whose logs can be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framework {
    Pytest,
    Unittest,
    Django,
    Sympy,
    Jest,
    Mocha,
    GoTest,
    Cargo,
    Maven,
    Gradle,
}

impl Framework {
    pub const ALL: [(&'static str, Framework); 10] = [
        ("pytest", Framework::Pytest),
        ("unittest", Framework::Unittest),
        ("django", Framework::Django),
        ("sympy", Framework::Sympy),
        ("jest", Framework::Jest),
        ("mocha", Framework::Mocha),
        ("go", Framework::GoTest),
        ("cargo", Framework::Cargo),
        ("maven", Framework::Maven),
        ("gradle", Framework::Gradle),
    ];

    pub fn parse(name: &str) -> Result<Framework, String> {
        let lower = name.trim().to_ascii_lowercase();
        let alias = match lower.as_str() {
            "go test" | "gotest" | "golang" => "go",
            "cargo test" | "rust" => "cargo",
            "junit" => "maven",
            "sympy bin/test" | "bin/test" => "sympy",
            other => other,
        };
        Framework::ALL.iter().find(|(n, _)| *n == alias).map(|(_, f)| *f).ok_or_else(|| {
            let names: Vec<&str> = Framework::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown test framework {name:?} (one of: {})", names.join(", "))
        })
    }
}

pub type StatusMap = BTreeMap<String, TestStatus>;

/// Records `status` for `test`, keeping the worse of two reports.
pub(crate) fn record(map: &mut StatusMap, test: &str, status: TestStatus) {
    let test = test.trim();
    if test.is_empty() {
        return;
    }
    map.entry(test.to_string()).and_modify(|s| *s = (*s).max(status)).or_insert(status);
}

/// Reads a log as `framework` writes it.
pub fn parse(framework: Framework, log: &str) -> StatusMap {
    match framework {
        Framework::Pytest => python::pytest(log),
        Framework::Unittest | Framework::Django => python::unittest(log),
        Framework::Sympy => python::sympy(log),
        Framework::Jest => javascript::jest(log),
        Framework::Mocha => javascript::mocha(log),
        Framework::GoTest => gotest::parse(log),
        Framework::Cargo => cargo::parse(log),
        Framework::Maven => junit::maven(log),
        Framework::Gradle => junit::gradle(log),
    }
}

/// The text between the last `start` line and the first `end<code>` line after it, and the exit
/// code printed after `end`. `None` when the start marker is missing (the command never ran);
/// a missing end marker (the run was cut short) gives the text to the end and no code.
pub fn region<'a>(log: &'a str, start: &str, end: &str) -> Option<(&'a str, Option<i32>)> {
    let from = log.rfind(start)?;
    let body = &log[from + start.len()..];
    let body = body.strip_prefix('\n').unwrap_or(body);
    match body.find(end) {
        Some(at) => {
            let code = body[at + end.len()..].lines().next().and_then(|l| l.trim().parse().ok());
            Some((&body[..at], code))
        }
        None => Some((body, None)),
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    /// A captured log and the exit code its last line records.
    pub fn log(name: &str) -> (String, i32) {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/logs/");
        let text = std::fs::read_to_string(format!("{path}{name}")).unwrap();
        let (body, last) = text.trim_end().rsplit_once('\n').unwrap();
        let code = last.strip_prefix("exit code: ").unwrap().parse().unwrap();
        (format!("{body}\n"), code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_is_cut_at_the_graders_markers() {
        let log = "agent: ORCH_START fake\nPASSED a\nORCH_START\nFAILED b\nORCH_END 1\nPASSED c\n";
        let (body, code) = region(log, "ORCH_START\n", "ORCH_END ").unwrap();
        assert_eq!((body, code), ("FAILED b\n", Some(1)));
        assert_eq!(region("no markers", "S", "E"), None);
        let (body, code) = region("S\nhalf a log", "S", "E").unwrap();
        assert_eq!((body, code), ("half a log", None));
    }

    #[test]
    fn frameworks_are_named_with_a_clear_error() {
        assert_eq!(Framework::parse("Go Test"), Ok(Framework::GoTest));
        let e = Framework::parse("nose").unwrap_err();
        assert!(e.contains("unknown test framework \"nose\"") && e.contains("pytest"), "{e}");
    }

    #[test]
    fn a_test_reported_twice_keeps_the_worse_outcome() {
        let mut m = StatusMap::new();
        record(&mut m, "t", TestStatus::Passed);
        record(&mut m, "t", TestStatus::Failed);
        record(&mut m, "t", TestStatus::Passed);
        assert_eq!(m["t"], TestStatus::Failed);
    }
}
