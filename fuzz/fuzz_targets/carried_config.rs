//! Any bytes as a path and two versions of a file an agent changed: the verifier's test
//! machinery policy decides without panicking (unreadable config counts as changed).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../host/verifier/src/policy.rs"]
#[allow(dead_code)]
mod policy;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.splitn(3, '\u{0}');
    let path = parts.next().unwrap_or_default();
    let (before, after) = (parts.next(), parts.next());
    let _ = policy::machinery_by_path(path);
    let _ = policy::test_file(path);
    for name in ["setup.cfg", "pyproject.toml", "package.json"] {
        let _ = policy::test_sections_changed(name, before, after);
    }
    // An INI file always reads, so the same text on both sides is never a change.
    if let Some(b) = before {
        assert!(!policy::test_sections_changed("setup.cfg", Some(b), Some(b)));
    }
});
