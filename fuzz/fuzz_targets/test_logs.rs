//! Any bytes as a test log of any framework: parsing, cutting the marked region and judging
//! never panic, whatever the agent printed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use orchard_test_logs::{Framework, judge, parse, region, suite_ran};

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else { return };
    let framework = Framework::ALL[pick as usize % Framework::ALL.len()].1;
    let log = String::from_utf8_lossy(rest);
    let statuses = parse(framework, &log);
    let ids: Vec<String> = statuses.keys().take(4).cloned().collect();
    let ran = suite_ran(framework, &log);
    let _ = judge(&statuses, &ids, &["absent::test".to_string()], Some(0), ran);
    let _ = judge(&statuses, &["absent::test".to_string()], &ids, None, ran);
    if let Some((body, code)) = region(&log, "ORCHARD_TESTS_START_x\n", "ORCHARD_TESTS_END_x ") {
        let _ = (parse(framework, body), code);
    }
});
