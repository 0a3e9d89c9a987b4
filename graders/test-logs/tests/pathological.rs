//! Logs an agent can make the tests print: one 16 MB line, a million-deep nesting, invalid
//! UTF-8, a million short lines. Every parser finishes (a quadratic one would not, at these
//! sizes) and finds nothing that was not there. Arbitrary bytes are the fuzzers' (fuzz/).

use orchard_test_logs::{Framework, parse, region, suite_ran};

fn every_framework(log: &str) {
    for (name, framework) in Framework::ALL {
        let statuses = parse(framework, log);
        assert!(statuses.len() <= 1_000_000, "{name}");
        let _ = suite_ran(framework, log);
    }
}

#[test]
fn one_line_of_16_mb() {
    let log = "PASSED tests/test_a.py::test_x ".repeat(1 << 19);
    every_framework(&log);
    assert!(region(&log, "START\n", "END ").is_none());
}

#[test]
fn a_million_deep_nesting() {
    let log = format!(
        "PASSED tests/t.py::test_x[{}]\n{}\n--- FAIL: TestX {}\n",
        "[".repeat(1 << 20),
        "{\"Action\":".repeat(1 << 20),
        "(".repeat(1 << 20)
    );
    every_framework(&log);
}

#[test]
fn invalid_utf8_is_read_lossily() {
    let mut bytes = b"============================= test session starts ==============================\n".to_vec();
    for _ in 0..100_000 {
        bytes.extend_from_slice(b"PASSED tests/t.py::test_\xff\xfe\n");
    }
    let log = String::from_utf8_lossy(&bytes);
    every_framework(&log);
}

#[test]
fn a_million_lines() {
    let log = "ok 1 - x\nPASSED t.py::test_a\n=== RUN   TestA\n".repeat(350_000);
    every_framework(&log);
}
