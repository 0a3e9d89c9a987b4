//! pytest, unittest / Django, and sympy's `bin/test`.

use std::sync::LazyLock;

use regex::Regex;

use crate::{StatusMap, TestStatus, record};

fn status_word(word: &str) -> Option<TestStatus> {
    Some(match word {
        "PASSED" | "XPASS" => TestStatus::Passed,
        "FAILED" => TestStatus::Failed,
        "SKIPPED" => TestStatus::Skipped,
        "ERROR" => TestStatus::Error,
        "XFAIL" => TestStatus::XFail,
        _ => return None,
    })
}

/// A pytest section header: `==== short test summary info ====`.
static SECTION: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^=+ (.+?) =+$").unwrap());
/// `path::test[param] STATUS (reason) [ 50%]`, as `-v` prints while running.
static VERBOSE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\S+::.+?) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?: \(.*\))?\s*(?:\[\s*\d+%\])?\s*$").unwrap()
});
/// `[gw0] [ 50%] PASSED path::test`, as pytest-xdist prints.
static XDIST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\[gw\d+\] \[\s*\d+%\] (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+::.+)$").unwrap()
});

/// The id in a summary line's rest: `path::test[a - b] - message` → `path::test[a - b]`.
fn summary_id(rest: &str) -> &str {
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ' ' if depth <= 0 && rest[i..].starts_with(" - ") => return &rest[..i],
            _ => {}
        }
    }
    rest
}

/// pytest: the `-rA` short summary (`PASSED path::test`), and `-v` lines while the session
/// runs. Each is read only in its own section, so that a test's captured output (a `PASSES` or
/// `FAILURES` section) cannot add results; a log without section headers is read whole.
pub fn pytest(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    let sectioned = log.lines().any(|l| SECTION.is_match(l));
    let mut section = String::new();
    for line in log.lines() {
        let line = line.trim_end();
        if let Some(c) = SECTION.captures(line) {
            section = c[1].to_string();
            continue;
        }
        let in_run = !sectioned || section.starts_with("test session starts");
        let in_summary = !sectioned || section == "short test summary info";
        if in_run {
            if let Some(c) = VERBOSE.captures(line) {
                record(&mut map, &c[1], status_word(&c[2]).expect("the regex lists statuses"));
                continue;
            }
            if let Some(c) = XDIST.captures(line) {
                record(&mut map, &c[2], status_word(&c[1]).expect("the regex lists statuses"));
                continue;
            }
        }
        if in_summary && let Some((word, rest)) = line.split_once(' ') {
            // `SKIPPED [1] file.py:24: reason` names no test: nothing to record.
            if let Some(status) = status_word(word)
                && rest.contains("::")
            {
                record(&mut map, summary_id(rest), status);
            }
        }
    }
    map
}

/// `test_name (module.Class) ... ok`; a docstring may sit between the name and `... status`,
/// and a test's own output may push the status onto a line of its own.
static UNIT_START: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(\w+) \(([\w.]+)\)(.*)$").unwrap());
/// `FAIL: test_name (module.Class)` headers of the failure report.
static UNIT_FAILURE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(FAIL|ERROR): (\w+) \(([\w.]+)\)").unwrap());

fn unit_status(text: &str) -> Option<TestStatus> {
    let t = text.trim();
    Some(match t {
        "ok" => TestStatus::Passed,
        "FAIL" => TestStatus::Failed,
        "ERROR" => TestStatus::Error,
        "expected failure" => TestStatus::XFail,
        "unexpected success" => TestStatus::Failed,
        _ if t.starts_with("skipped") => TestStatus::Skipped,
        _ => return None,
    })
}

/// SWE-bench's id: `test_x (module.Class)`. Python 3.11+ prints `(module.Class.test_x)`.
fn unit_id(method: &str, path: &str) -> String {
    let class = path.strip_suffix(method).and_then(|p| p.strip_suffix('.')).unwrap_or(path);
    format!("{method} ({class})")
}

/// unittest and Django's runner at verbosity 2.
pub fn unittest(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    let mut pending: Option<String> = None;
    for line in log.lines() {
        let line = line.trim_end();
        if let Some(c) = UNIT_FAILURE.captures(line) {
            let status = if &c[1] == "FAIL" { TestStatus::Failed } else { TestStatus::Error };
            record(&mut map, &unit_id(&c[2], &c[3]), status);
            pending = None;
            continue;
        }
        if let Some(c) = UNIT_START.captures(line) {
            let id = unit_id(&c[1], &c[2]);
            match c[3].rsplit_once(" ... ").map(|(_, s)| unit_status(s)) {
                Some(Some(status)) if c[3].starts_with(" ...") || c[3].contains(" ... ") => {
                    record(&mut map, &id, status);
                    pending = None;
                }
                _ => pending = Some(id),
            }
            continue;
        }
        if let Some(id) = &pending {
            let status = match line.rsplit_once(" ... ") {
                Some((_, s)) => unit_status(s),
                None => unit_status(line),
            };
            if let Some(status) = status {
                record(&mut map, id, status);
                pending = None;
            }
        }
    }
    map
}

/// `___ sympy/core/tests/test_x.py:test_name ___` failure headers.
static SYMPY_HEADER: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^_+ \S+:(test_\w+) _+$").unwrap());
static SYMPY_LINE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^(test_\w+)\s+(ok|F|E|f|X|s|w|Skip)\s*$").unwrap());

/// sympy's `bin/test` with `-v`: `test_name ok` / `F` / `E`; failure report headers fail too.
pub fn sympy(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.lines() {
        let line = line.trim_end();
        if let Some(c) = SYMPY_LINE.captures(line) {
            let status = match &c[2] {
                "ok" => TestStatus::Passed,
                "F" | "X" => TestStatus::Failed,
                "E" => TestStatus::Error,
                "f" => TestStatus::XFail,
                _ => TestStatus::Skipped,
            };
            record(&mut map, &c[1], status);
        } else if let Some(c) = SYMPY_HEADER.captures(line) {
            record(&mut map, &c[1], TestStatus::Failed);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::log;
    use TestStatus::*;

    fn expect(map: &StatusMap, want: &[(&str, TestStatus)]) {
        for (id, status) in want {
            assert_eq!(map.get(*id), Some(status), "{id} in {map:#?}");
        }
    }

    #[test]
    fn pytest_summary_from_a_real_run() {
        let (text, _) = log("pytest-ra.log");
        let map = pytest(&text);
        expect(
            &map,
            &[
                ("test_calc.py::test_add", Passed),
                ("test_calc.py::test_div", Failed),
                ("test_calc.py::test_add_many[2-2-5]", Failed),
                ("test_calc.py::test_add_many[-1-1-0]", Passed),
                ("test_calc.py::test_odd_ids[a b]", Passed),
                ("test_calc.py::test_odd_ids[x[y]]", Passed),
                ("test_calc.py::test_odd_ids[tab\\tsep]", Passed),
                ("test_calc.py::test_known_failure", XFail),
                ("test_calc.py::test_uses_broken_fixture", Error),
                ("test_calc.py::TestGroup::test_inside_class", Passed),
            ],
        );
        // The test printed `PASSED test_calc.py::test_forged`: it sits in the PASSES section.
        assert!(!map.contains_key("test_calc.py::test_forged"), "{map:#?}");
        assert_eq!(map.len(), 11, "the skip names no test id: {map:#?}");
    }

    #[test]
    fn pytest_verbose_lines_from_a_real_run() {
        let (text, _) = log("pytest-verbose.log");
        let map = pytest(&text);
        expect(
            &map,
            &[
                ("test_calc.py::test_skipped", Skipped),
                ("test_calc.py::test_odd_ids[a b]", Passed),
                ("test_calc.py::test_known_failure", XFail),
                ("test_calc.py::test_add_many[2-2-5]", Failed),
            ],
        );
        assert_eq!(map.len(), 12);
    }

    #[test]
    fn summary_ids_keep_dashes_inside_brackets() {
        assert_eq!(summary_id("t.py::test[a - b] - assert 1"), "t.py::test[a - b]");
        assert_eq!(summary_id("t.py::test - AssertionError"), "t.py::test");
        let xdist = pytest("[gw1] [ 50%] FAILED t.py::test_x\n");
        assert_eq!(xdist["t.py::test_x"], Failed);
    }

    #[test]
    fn unittest_from_a_real_run() {
        let (text, _) = log("unittest.log");
        let map = unittest(&text);
        expect(
            &map,
            &[
                ("test_add (test_units.CalcTests)", Passed),
                ("test_div (test_units.CalcTests)", Failed),
                ("test_error (test_units.CalcTests)", Error),
                ("test_expected (test_units.CalcTests)", XFail),
                ("test_skip (test_units.CalcTests)", Skipped),
                ("test_with_docstring (test_units.CalcTests)", Passed),
            ],
        );
        assert_eq!(map.len(), 6);
    }

    #[test]
    fn django_from_a_real_run() {
        let (text, _) = log("django.log");
        let map = unittest(&text);
        expect(
            &map,
            &[
                ("test_broken (shop.tests.PriceTests)", Error),
                ("test_discount (shop.tests.PriceTests)", Failed),
                ("test_multiline_doc (shop.tests.PriceTests)", Passed),
                ("test_total (shop.tests.PriceTests)", Passed),
            ],
        );
    }

    #[test]
    fn unittest_output_between_name_and_status() {
        let map = unittest("test_a (m.C) ... printed by the test\nok\ntest_b (m.C) ... FAIL\n");
        assert_eq!((map["test_a (m.C)"], map["test_b (m.C)"]), (Passed, Failed));
        // A forged `ok` for a test that the failure report then names fails.
        let forged = unittest("test_c (m.C) ... ok\n\n====\nFAIL: test_c (m.C)\n----\n");
        assert_eq!(forged["test_c (m.C)"], Failed);
    }

    #[test]
    fn sympy_lines_and_failure_headers() {
        let log = "sympy/core/tests/test_x.py[3] \ntest_one ok\ntest_two F\ntest_three E\ntest_four f\n\
                   ________ sympy/core/tests/test_x.py:test_one ________\n";
        let map = sympy(log);
        assert_eq!(map["test_one"], Failed, "the report names it failing");
        assert_eq!((map["test_two"], map["test_three"], map["test_four"]), (Failed, Error, XFail));
    }
}
