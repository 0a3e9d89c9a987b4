//! JUnit results as Maven (Surefire) and Gradle print them.
//!
//! No Maven or Gradle run was possible on the machine the fixtures were captured on (no access
//! to Maven Central), so these parsers are tested against the documented line formats:
//! Surefire 3 (`[INFO] pkg.Class.method -- Time elapsed: 0.01 s`, with `<<< FAILURE!` /
//! `<<< ERROR!`; per-test lines need `-Dsurefire.reportFormat=plain` or a failure), Surefire 2
//! (`method(pkg.Class)  Time elapsed: 0.01 sec  <<< FAILURE!`), and Gradle with
//! `testLogging.events "passed", "skipped", "failed"` (`pkg.Class > method() PASSED`).
//! Ids are `pkg.Class.method`.

use std::sync::LazyLock;

use regex::Regex;

use crate::{StatusMap, TestStatus, record};

static SUREFIRE3: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:\[\w+\]\s+)?([\w.$]+)\.([\w$]+)(?:\(\))? -- Time elapsed: [\d.,]+ s(?: <<< (FAILURE|ERROR)!)?")
        .unwrap()
});
static SUREFIRE2: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:\[\w+\]\s+)?([\w$]+)\(([\w.$]+)\)\s+Time elapsed: [\d.,]+ sec(?:\s+<<< (FAILURE|ERROR)!)?")
        .unwrap()
});
static SUREFIRE_SKIP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(?:\[\w+\]\s+)?([\w.$]+)\.([\w$]+)(?:\(\))? (?:-- )?(?:skipped|SKIPPED)").unwrap());
static GRADLE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^([\w.$]+) > ([\w$]+)(?:\(\))?(?:\[\d+\])? (PASSED|FAILED|SKIPPED)$").unwrap());

fn outcome(marker: Option<&str>) -> TestStatus {
    match marker {
        Some("FAILURE") => TestStatus::Failed,
        Some("ERROR") => TestStatus::Error,
        _ => TestStatus::Passed,
    }
}

pub fn maven(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.lines() {
        let line = line.trim_end();
        if let Some(c) = SUREFIRE3.captures(line) {
            record(&mut map, &format!("{}.{}", &c[1], &c[2]), outcome(c.get(3).map(|m| m.as_str())));
        } else if let Some(c) = SUREFIRE2.captures(line) {
            record(&mut map, &format!("{}.{}", &c[2], &c[1]), outcome(c.get(3).map(|m| m.as_str())));
        } else if let Some(c) = SUREFIRE_SKIP.captures(line) {
            record(&mut map, &format!("{}.{}", &c[1], &c[2]), TestStatus::Skipped);
        }
    }
    map
}

pub fn gradle(log: &str) -> StatusMap {
    let mut map = StatusMap::new();
    for line in log.lines() {
        if let Some(c) = GRADLE.captures(line.trim_end()) {
            let status = match &c[3] {
                "PASSED" => TestStatus::Passed,
                "FAILED" => TestStatus::Failed,
                _ => TestStatus::Skipped,
            };
            record(&mut map, &format!("{}.{}", &c[1], &c[2]), status);
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use TestStatus::*;

    #[test]
    fn surefire_3_and_2_lines() {
        let log = "[INFO] Running com.example.CalcTest\n\
                   [INFO] com.example.CalcTest.testAdd -- Time elapsed: 0.002 s\n\
                   [ERROR] com.example.CalcTest.testDiv -- Time elapsed: 0.004 s <<< FAILURE!\n\
                   [ERROR] com.example.CalcTest.testIo -- Time elapsed: 0.001 s <<< ERROR!\n\
                   [WARNING] com.example.CalcTest.testLater -- skipped\n\
                   testOld(com.example.LegacyTest)  Time elapsed: 0.01 sec  <<< FAILURE!\n\
                   testFine(com.example.LegacyTest)  Time elapsed: 0 sec\n\
                   [ERROR] Tests run: 4, Failures: 1, Errors: 1, Skipped: 1\n";
        let map = maven(log);
        assert_eq!(map["com.example.CalcTest.testAdd"], Passed);
        assert_eq!(map["com.example.CalcTest.testDiv"], Failed);
        assert_eq!(map["com.example.CalcTest.testIo"], Error);
        assert_eq!(map["com.example.CalcTest.testLater"], Skipped);
        assert_eq!(map["com.example.LegacyTest.testOld"], Failed);
        assert_eq!(map["com.example.LegacyTest.testFine"], Passed);
        assert_eq!(map.len(), 6);
    }

    #[test]
    fn gradle_lines() {
        let log = "> Task :test\n\ncom.example.CalcTest > testAdd() PASSED\n\
                   com.example.CalcTest > testDiv() FAILED\n    org.opentest4j.AssertionFailedError at CalcTest.java:14\n\
                   com.example.CalcTest > testLater() SKIPPED\n\nBUILD FAILED in 2s\n";
        let map = gradle(log);
        assert_eq!(
            (
                map["com.example.CalcTest.testAdd"],
                map["com.example.CalcTest.testDiv"],
                map["com.example.CalcTest.testLater"]
            ),
            (Passed, Failed, Skipped)
        );
    }
}
