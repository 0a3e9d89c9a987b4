//! Any bytes as a task.toml (or a SWE-bench row as JSON): reading the `swe` grader's metadata
//! from it never panics and says what is wrong.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../graders/swe/src/meta.rs"]
#[allow(dead_code)]
mod meta;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let value = match toml::from_str::<toml::Table>(text) {
        Ok(table) => serde_json::to_value(table).unwrap_or_default(),
        Err(_) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => v,
            Err(_) => return,
        },
    };
    if let Ok(m) = meta::SweMeta::read(&meta::row(&value)) {
        let _ = meta::patched_files(&m.eval_command);
        assert!(!m.fail_to_pass.is_empty());
        assert!(m.timeout_s.is_finite() && m.timeout_s > 0.0);
    }
});
