//! Which changes to a repository are test machinery: files that decide how tests run or what
//! they report rather than what the code does. A change to one of them is dropped from what
//! the verifier carries (unless the task's gold patch touches the same file), because an agent
//! that edits them can make failing tests report success without fixing anything.

use serde_json::Value;

/// Why a path is test machinery by its name alone, or `None`.
pub fn machinery_by_path(path: &str) -> Option<&'static str> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let name = *parts.last()?;
    let dirs = &parts[..parts.len() - 1];
    let lower = name.to_ascii_lowercase();
    let reason = match lower.as_str() {
        "conftest.py" => "a pytest conftest (its hooks can rewrite test outcomes)",
        "pytest.ini" | ".pytest.ini" | "tox.ini" | "noxfile.py" => "test runner configuration",
        "sitecustomize.py" | "usercustomize.py" => "runs in every Python process at start",
        "go.work" | "go.work.sum" => "redirects the modules `go test` builds",
        ".babelrc" | ".babelrc.json" | ".babelrc.js" | ".babelrc.cjs" | ".babelrc.mjs" => {
            "transforms test files before they run"
        }
        "pytest.py" | "unittest.py" | "pluggy.py" if dirs.is_empty() => {
            "shadows the test runner for a run from the repository root"
        }
        _ => "",
    };
    if !reason.is_empty() {
        return Some(reason);
    }
    let config_of = |tool: &str| {
        lower.strip_prefix(tool).is_some_and(|rest| {
            rest.starts_with('.')
                && ["js", "cjs", "mjs", "ts", "cts", "mts", "json", "yml", "yaml"].iter().any(|e| rest.ends_with(e))
        })
    };
    if ["jest.config", "vitest.config", "karma.conf", "ava.config", "babel.config", "playwright.config"]
        .iter()
        .any(|t| config_of(t))
        || lower.starts_with(".mocharc")
    {
        return Some("JavaScript test runner configuration");
    }
    if lower.ends_with(".pth") {
        return Some("a .pth file (Python executes its import lines at start)");
    }
    if lower.ends_with(".pyc") || dirs.contains(&"__pycache__") {
        return Some("compiled Python (may stand in for a test module)");
    }
    if dirs.iter().any(|d| d.ends_with(".egg-info") || d.ends_with(".dist-info")) {
        return Some("package metadata (its entry points load pytest plugins)");
    }
    if dirs.first().is_some_and(|d| matches!(*d, "pytest" | "_pytest" | "unittest" | "pluggy")) {
        return Some("shadows the test runner for a run from the repository root");
    }
    None
}

/// Why a path is a test file, or `None`: changes to tests are not the fix (the task's test
/// patch sets the tests that decide).
pub fn test_file(path: &str) -> Option<&'static str> {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let name = parts.last()?.to_ascii_lowercase();
    let dirs = &parts[..parts.len() - 1];
    if dirs.iter().any(|d| matches!(*d, "tests" | "test" | "__tests__" | "testing")) {
        return Some("a file under a test directory");
    }
    let py_test = name.ends_with(".py") && (name.starts_with("test_") || name.ends_with("_test.py"));
    let go_test = name.ends_with("_test.go");
    let js_test = [".test.", ".spec."].iter().any(|m| name.contains(m));
    (py_test || go_test || js_test).then_some("a test file")
}

/// The files whose test sections are compared rather than the whole file.
pub fn has_test_sections(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    matches!(name, "setup.cfg" | "pyproject.toml" | "package.json")
}

/// Whether the test sections of `path` differ between `before` and `after` (either may be
/// absent: a file added or removed). Unreadable content counts as different.
pub fn test_sections_changed(path: &str, before: Option<&str>, after: Option<&str>) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let sections = |text: Option<&str>| -> Option<Value> {
        let Some(text) = text else { return Some(Value::Null) };
        match name {
            "setup.cfg" => Some(ini_sections(text, &["tool:pytest", "pytest", "options.entry_points", "coverage:run"])),
            "pyproject.toml" => {
                let doc: toml::Table = toml::from_str(text).ok()?;
                let doc = serde_json::to_value(doc).ok()?;
                Some(serde_json::json!({
                    "tool.pytest": doc.pointer("/tool/pytest"),
                    "tool.tox": doc.pointer("/tool/tox"),
                    "pytest11": doc.pointer("/project/entry-points/pytest11"),
                }))
            }
            "package.json" => {
                let doc: Value = serde_json::from_str(text).ok()?;
                Some(serde_json::json!({
                    "jest": doc.get("jest"), "mocha": doc.get("mocha"), "ava": doc.get("ava"),
                    "vitest": doc.get("vitest"), "babel": doc.get("babel"), "scripts": doc.get("scripts"),
                }))
            }
            _ => Some(Value::Null),
        }
    };
    let normalise = |v: Option<Value>| v.map(|v| if v == Value::Null { serde_json::json!({}) } else { v });
    match (normalise(sections(before)), normalise(sections(after))) {
        (Some(a), Some(b)) => !same_sections(&a, &b),
        _ => true,
    }
}

/// Null and absent are the same section.
fn same_sections(a: &Value, b: &Value) -> bool {
    let keys: std::collections::BTreeSet<&String> =
        a.as_object().into_iter().chain(b.as_object()).flat_map(|m| m.keys()).collect();
    keys.into_iter().all(|k| a.get(k).unwrap_or(&Value::Null) == b.get(k).unwrap_or(&Value::Null))
}

/// The named sections of an INI file, each as its non-blank, non-comment lines (trimmed).
fn ini_sections(text: &str, wanted: &[&str]) -> Value {
    let mut out = serde_json::Map::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            let name = name.trim().to_ascii_lowercase();
            current = wanted.contains(&name.as_str()).then_some(name);
            continue;
        }
        if t.is_empty() || t.starts_with('#') || t.starts_with(';') {
            continue;
        }
        if let Some(section) = &current {
            let lines = out.entry(section.clone()).or_insert_with(|| Value::Array(vec![]));
            if let Value::Array(a) = lines {
                a.push(Value::String(t.to_string()));
            }
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn machinery_is_known_by_its_name() {
        for p in [
            "conftest.py",
            "src/pkg/conftest.py",
            "pytest.ini",
            "tox.ini",
            "lib/sitecustomize.py",
            "usercustomize.py",
            "x/evil.pth",
            "jest.config.js",
            "jest.config.ts",
            ".mocharc.yml",
            ".mocharc.json",
            "go.work",
            "pytest.py",
            "_pytest/runner.py",
            "pkg/__pycache__/m.cpython-311.pyc",
            "pkg.egg-info/entry_points.txt",
            "babel.config.js",
        ] {
            assert!(machinery_by_path(p).is_some(), "{p}");
        }
        for p in ["stats.py", "src/pytest_helpers.py", "src/_pytest/runner.py", "docs/conftest.md", "jest.md", "README"]
        {
            assert_eq!(machinery_by_path(p), None, "{p}");
        }
    }

    #[test]
    fn test_files_are_known_by_name_and_place() {
        for p in
            ["tests/test_stats.py", "pkg/tests/helpers.py", "count_test.go", "src/a.test.ts", "b.spec.js", "test_x.py"]
        {
            assert!(test_file(p).is_some(), "{p}");
        }
        for p in ["stats.py", "count.go", "src/latest.py", "contest.py"] {
            assert_eq!(test_file(p), None, "{p}");
        }
    }

    #[test]
    fn only_test_sections_of_shared_config_files_count() {
        let before = "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n";
        let meta_only = "[metadata]\nname = y\n\n[tool:pytest]\naddopts = -q\n";
        let test_too = "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q -p evil\n";
        assert!(!test_sections_changed("setup.cfg", Some(before), Some(meta_only)));
        assert!(test_sections_changed("setup.cfg", Some(before), Some(test_too)));
        let py = "[project]\nname = \"x\"\n";
        let py_version = "[project]\nname = \"x\"\nversion = \"2\"\n";
        let py_plugin = "[project]\nname = \"x\"\n[project.entry-points.pytest11]\nevil = \"evil\"\n";
        let py_opts = "[project]\nname = \"x\"\n[tool.pytest.ini_options]\naddopts = \"-p evil\"\n";
        assert!(!test_sections_changed("pyproject.toml", Some(py), Some(py_version)));
        assert!(test_sections_changed("pyproject.toml", Some(py), Some(py_plugin)));
        assert!(test_sections_changed("pyproject.toml", Some(py), Some(py_opts)));
        assert!(test_sections_changed("pyproject.toml", Some(py), Some("not = [toml")));
        let pkg = r#"{"name": "x", "scripts": {"test": "jest"}}"#;
        assert!(!test_sections_changed(
            "package.json",
            Some(pkg),
            Some(r#"{"name": "y", "scripts": {"test": "jest"}}"#)
        ));
        assert!(test_sections_changed(
            "package.json",
            Some(pkg),
            Some(r#"{"name": "x", "scripts": {"test": "true"}}"#)
        ));
        // A new setup.cfg with only metadata is not machinery; one with a pytest section is.
        assert!(!test_sections_changed("setup.cfg", None, Some("[metadata]\nname = x\n")));
        assert!(test_sections_changed("setup.cfg", None, Some("[pytest]\naddopts = -p evil\n")));
    }
}
