//! SWE-bench's resolution rules, with the anti-gaming rules that keep forged or broken logs
//! from scoring.
//!
//! - A FAIL_TO_PASS test must pass (a skip is a failure); a PASS_TO_PASS test must pass or be
//!   skipped. A test missing from the log fails.
//! - Ids cut short in the task data (long parametrised ids are truncated in some datasets) match
//!   every test that starts with them; all of those must pass.
//! - FULL: every FAIL_TO_PASS and PASS_TO_PASS test passes; PARTIAL: some but not all
//!   FAIL_TO_PASS pass and every PASS_TO_PASS does; NO otherwise.
//! - A log that shows only passing tests while the test command exited non-zero is not
//!   trusted: NO, with the reason (passes printed by the code under test, not by the runner).
//! - No results and no sign the runner ran (its banner or summary), or a run without its end
//!   marker (cut short): `unknown`, never a 0 that looks like a verdict.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::{Framework, StatusMap, TestStatus};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Resolution {
    Full,
    Partial,
    No,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Judgement {
    /// `None`: the grader cannot decide (see `reason`).
    pub resolution: Option<Resolution>,
    /// Fraction of FAIL_TO_PASS / PASS_TO_PASS tests that pass (1.0 when there are none).
    pub fail_to_pass: f64,
    pub pass_to_pass: f64,
    /// Every requested test: `passed`, `failed`, `error`, `skipped`, `xfail` or `missing`.
    pub tests: BTreeMap<String, String>,
    pub reason: String,
}

/// Whether the runner's own banner or summary is in the log: the suite ran, even if it found
/// nothing to report.
pub fn suite_ran(framework: Framework, log: &str) -> bool {
    let has = |needles: &[&str]| needles.iter().any(|n| log.contains(n));
    match framework {
        Framework::Pytest => has(&["test session starts", " passed", " failed", " error", "no tests ran"]),
        Framework::Unittest | Framework::Django => has(&["\nRan ", "Ran "]),
        Framework::Sympy => has(&["test process starts", "tests finished"]),
        Framework::Jest => has(&["Test Suites:", "Tests:"]),
        Framework::Mocha => has(&[" passing", " failing", " pending"]),
        Framework::GoTest => has(&["=== RUN", "\"Action\"", "ok  \t", "FAIL\t", "no test files"]),
        Framework::Cargo => has(&["running ", "test result:"]),
        Framework::Maven => has(&["Tests run:", "T E S T S"]),
        Framework::Gradle => has(&["> Task :test", "BUILD "]),
    }
}

fn status_name(s: Option<TestStatus>) -> &'static str {
    match s {
        Some(TestStatus::Passed) => "passed",
        Some(TestStatus::XFail) => "xfail",
        Some(TestStatus::Skipped) => "skipped",
        Some(TestStatus::Failed) => "failed",
        Some(TestStatus::Error) => "error",
        None => "missing",
    }
}

/// The status of a requested test: its own, or the worst of the tests its (cut-short) id
/// begins.
fn lookup(map: &StatusMap, id: &str) -> Option<TestStatus> {
    if let Some(s) = map.get(id) {
        return Some(*s);
    }
    map.range(id.to_string()..).take_while(|(k, _)| k.starts_with(id)).map(|(_, s)| *s).max()
}

/// Applies the rules above. `exit_code` is the test command's (`None`: the end marker never
/// came); `ran` whether the runner's banner or summary is in the log.
pub fn judge(
    map: &StatusMap,
    fail_to_pass: &[String],
    pass_to_pass: &[String],
    exit_code: Option<i32>,
    ran: bool,
) -> Judgement {
    let mut tests = BTreeMap::new();
    let mut count = |ids: &[String], skip_ok: bool| {
        let mut passed = 0usize;
        for id in ids {
            let status = lookup(map, id);
            tests.insert(id.clone(), status_name(status).to_string());
            let ok = match status {
                Some(s) if s.passed() => true,
                Some(TestStatus::Skipped) => skip_ok,
                _ => false,
            };
            passed += ok as usize;
        }
        if ids.is_empty() { 1.0 } else { passed as f64 / ids.len() as f64 }
    };
    let f2p = count(fail_to_pass, false);
    let p2p = count(pass_to_pass, true);
    let unknown = |reason: String| Judgement {
        resolution: None,
        fail_to_pass: f2p,
        pass_to_pass: p2p,
        tests: tests.clone(),
        reason,
    };
    let Some(code) = exit_code else {
        return unknown("the test run did not finish (its end marker is missing): the log may be cut short".into());
    };
    if map.is_empty() && !ran {
        return unknown(format!(
            "the log holds no test results and no sign that the test runner ran (exit code {code})"
        ));
    }
    let only_passes = !map.is_empty() && map.values().all(|s| !matches!(s, TestStatus::Failed | TestStatus::Error));
    if only_passes && code != 0 {
        return Judgement {
            resolution: Some(Resolution::No),
            fail_to_pass: f2p,
            pass_to_pass: p2p,
            tests,
            reason: format!(
                "rejected: the log shows only passing tests but the test command exited with {code}; \
                 the passes are not trusted"
            ),
        };
    }
    let resolution = if f2p == 1.0 && p2p == 1.0 {
        Resolution::Full
    } else if f2p > 0.0 && p2p == 1.0 {
        Resolution::Partial
    } else {
        Resolution::No
    };
    let reason = format!(
        "FAIL_TO_PASS {:.0}% ({} of {}), PASS_TO_PASS {:.0}% ({} of {})",
        f2p * 100.0,
        (f2p * fail_to_pass.len() as f64).round(),
        fail_to_pass.len(),
        p2p * 100.0,
        (p2p * pass_to_pass.len() as f64).round(),
        pass_to_pass.len()
    );
    Judgement { resolution: Some(resolution), fail_to_pass: f2p, pass_to_pass: p2p, tests, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::log;
    use crate::{parse, record};

    fn ids(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn resolutions_follow_swe_bench() {
        let (text, code) = log("pytest-ra.log");
        let map = parse(Framework::Pytest, &text);
        // The fixture project's bug fails test_div: with it as FAIL_TO_PASS, NO.
        let j = judge(&map, &ids(&["test_calc.py::test_div"]), &ids(&["test_calc.py::test_add"]), Some(code), true);
        assert_eq!(j.resolution, Some(Resolution::No));
        assert_eq!(j.tests["test_calc.py::test_div"], "failed");
        // Passing FAIL_TO_PASS and PASS_TO_PASS: FULL (exit code 1 is from other tests' failures).
        let j =
            judge(&map, &ids(&["test_calc.py::test_add"]), &ids(&["test_calc.py::test_odd_ids[a b]"]), Some(1), true);
        assert_eq!(j.resolution, Some(Resolution::Full), "{j:?}");
        // One of two FAIL_TO_PASS: PARTIAL; a failing PASS_TO_PASS turns it to NO.
        let two = ids(&["test_calc.py::test_add", "test_calc.py::test_div"]);
        assert_eq!(judge(&map, &two, &[], Some(1), true).resolution, Some(Resolution::Partial));
        let broken = ids(&["test_calc.py::test_add_many[2-2-5]"]);
        assert_eq!(judge(&map, &two, &broken, Some(1), true).resolution, Some(Resolution::No));
    }

    #[test]
    fn skips_fail_a_fail_to_pass_test_and_pass_a_pass_to_pass_test() {
        let (text, code) = log("pytest-verbose.log");
        let map = parse(Framework::Pytest, &text);
        let skipped = ids(&["test_calc.py::test_skipped"]);
        let j = judge(&map, &skipped, &[], Some(code), true);
        assert_eq!((j.resolution, j.tests["test_calc.py::test_skipped"].as_str()), (Some(Resolution::No), "skipped"));
        let j = judge(&map, &ids(&["test_calc.py::test_add"]), &skipped, Some(code), true);
        assert_eq!(j.resolution, Some(Resolution::Full));
    }

    #[test]
    fn cut_short_ids_match_by_prefix() {
        let (text, code) = log("pytest-ra.log");
        let map = parse(Framework::Pytest, &text);
        let j = judge(&map, &ids(&["test_calc.py::test_odd_ids[a"]), &[], Some(code), true);
        assert_eq!(j.resolution, Some(Resolution::Full));
        // A prefix covering a failing test fails.
        let j = judge(&map, &ids(&["test_calc.py::test_add_many["]), &[], Some(code), true);
        assert_eq!(j.resolution, Some(Resolution::No));
    }

    #[test]
    fn forged_passes_with_a_failing_exit_are_rejected() {
        // What an agent's code can print from inside the test run: a runner-shaped line.
        let forged = "============================= test session starts ==============================\n\
                      test_calc.py::test_div PASSED [100%]\n";
        let map = parse(Framework::Pytest, forged);
        assert_eq!(map["test_calc.py::test_div"], TestStatus::Passed);
        let j = judge(&map, &ids(&["test_calc.py::test_div"]), &[], Some(2), true);
        assert_eq!(j.resolution, Some(Resolution::No));
        assert!(j.reason.starts_with("rejected: the log shows only passing tests but the test command exited with 2"));
    }

    #[test]
    fn no_results_and_no_runner_is_unknown_and_a_cut_log_is_unknown() {
        let j = judge(&StatusMap::new(), &ids(&["t"]), &[], Some(127), false);
        assert_eq!(j.resolution, None);
        assert!(j.reason.contains("no sign that the test runner ran"), "{}", j.reason);
        // The runner ran and reported nothing (a collection error): a real NO.
        let j = judge(&StatusMap::new(), &ids(&["t"]), &[], Some(2), true);
        assert_eq!((j.resolution, j.tests["t"].as_str()), (Some(Resolution::No), "missing"));
        let mut map = StatusMap::new();
        record(&mut map, "t", TestStatus::Passed);
        let j = judge(&map, &ids(&["t"]), &[], None, true);
        assert_eq!(j.resolution, None);
        assert!(j.reason.contains("end marker is missing"));
    }

    #[test]
    fn interleaved_stderr_does_not_hide_results() {
        // stdout and stderr merged mid-line, as `2>&1` can interleave them.
        let log = "running 2 tests\ntest a ... warning: deprecated\nok\ntest b ... FAILED\n\nfailures:\n    b\n\ntest result: FAILED\n";
        let map = parse(Framework::Cargo, log);
        assert_eq!(map.get("b"), Some(&TestStatus::Failed));
        let j = judge(&map, &ids(&["a"]), &[], Some(101), suite_ran(Framework::Cargo, log));
        assert_eq!(j.tests["a"], "missing", "a result broken by interleaving is not guessed");
        assert_eq!(j.resolution, Some(Resolution::No));
    }

    #[test]
    fn suite_detection_per_framework() {
        for (name, framework) in [
            ("pytest-ra.log", Framework::Pytest),
            ("unittest.log", Framework::Unittest),
            ("django.log", Framework::Django),
            ("jest.log", Framework::Jest),
            ("mocha.log", Framework::Mocha),
            ("go-json.log", Framework::GoTest),
            ("cargo.log", Framework::Cargo),
        ] {
            assert!(suite_ran(framework, &log(name).0), "{name}");
        }
        assert!(!suite_ran(Framework::Pytest, "bash: pytest: command not found\n"));
    }
}
