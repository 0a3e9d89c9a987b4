//! Reading a SWE-bench row from task metadata.

use orchard_test_logs::Framework;
use serde_json::Value;

pub struct SweMeta {
    pub repo: Option<String>,
    pub base_commit: Option<String>,
    pub test_patch: Option<String>,
    pub test_patch_path: String,
    pub eval_command: String,
    pub fail_to_pass: Vec<String>,
    pub pass_to_pass: Vec<String>,
    pub framework: Framework,
    pub framework_name: String,
    pub repo_dir: Option<String>,
    pub timeout_s: f64,
}

/// The SWE-bench row in a task's metadata: the task.toml's `[metadata]` table over its other
/// keys (`workdir`, `verifier_timeout_sec`, ...), or the metadata itself when it is a bare row.
pub fn row(task_metadata: &Value) -> Value {
    let mut merged = task_metadata.as_object().cloned().unwrap_or_default();
    if let Some(Value::Object(table)) = task_metadata.get("metadata") {
        merged.extend(table.clone());
    }
    Value::Object(merged)
}

/// A list of test ids: a JSON array, or JSON text of one (as SWE-bench's datasets store them).
fn id_list(v: &Value, key: &str) -> Result<Vec<String>, String> {
    let parsed;
    let list = match v {
        Value::Null => return Ok(vec![]),
        Value::Array(a) => a,
        Value::String(s) => {
            parsed = serde_json::from_str::<Value>(s).map_err(|e| format!("{key} is text but not a JSON list: {e}"))?;
            parsed.as_array().ok_or_else(|| format!("{key} is text but not a JSON list"))?
        }
        _ => return Err(format!("{key} must be a list of test ids")),
    };
    list.iter()
        .map(|t| t.as_str().map(str::to_string).ok_or_else(|| format!("{key} holds a non-string id: {t}")))
        .collect()
}

pub fn infer_framework(command: &str) -> Option<Framework> {
    let c = command.to_ascii_lowercase();
    let pick = |needles: &[&str]| needles.iter().any(|n| c.contains(n));
    Some(if pick(&["pytest", "py.test", "tox"]) {
        Framework::Pytest
    } else if pick(&["manage.py test", "runtests.py", "django"]) {
        Framework::Django
    } else if pick(&["bin/test"]) {
        Framework::Sympy
    } else if pick(&["unittest"]) {
        Framework::Unittest
    } else if pick(&["jest"]) {
        Framework::Jest
    } else if pick(&["mocha"]) {
        Framework::Mocha
    } else if pick(&["go test"]) {
        Framework::GoTest
    } else if pick(&["cargo test", "cargo nextest"]) {
        Framework::Cargo
    } else if pick(&["mvn", "maven"]) {
        Framework::Maven
    } else if pick(&["gradle"]) {
        Framework::Gradle
    } else {
        return None;
    })
}

pub use orchard_test_logs::patched_files;

impl SweMeta {
    pub fn read(m: &Value) -> Result<SweMeta, String> {
        let text = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let eval_command = text("eval_command")
            .or_else(|| text("test_cmd"))
            .filter(|c| !c.trim().is_empty())
            .ok_or("eval_command (or test_cmd) is missing: the grader needs the command that runs the tests")?;
        let fail_to_pass = id_list(m.get("FAIL_TO_PASS").unwrap_or(&Value::Null), "FAIL_TO_PASS")?;
        let pass_to_pass = id_list(m.get("PASS_TO_PASS").unwrap_or(&Value::Null), "PASS_TO_PASS")?;
        if fail_to_pass.is_empty() {
            return Err("FAIL_TO_PASS is empty: nothing would tell a fix from no fix".into());
        }
        let (framework, framework_name) = match text("test_framework") {
            Some(name) => (Framework::parse(&name)?, name),
            None => {
                let f = infer_framework(&eval_command)
                    .ok_or_else(|| format!("test_framework is missing and cannot be inferred from {eval_command:?}"))?;
                let name = Framework::ALL.iter().find(|(_, x)| *x == f).map(|(n, _)| n.to_string()).unwrap_or_default();
                (f, name)
            }
        };
        let timeout_s = m
            .get("eval_timeout_sec")
            .or_else(|| m.get("verifier_timeout_sec"))
            .and_then(Value::as_f64)
            .unwrap_or(1800.0);
        if !(timeout_s.is_finite() && timeout_s > 0.0) {
            return Err(format!("eval_timeout_sec {timeout_s} must be a positive number"));
        }
        Ok(SweMeta {
            repo: text("repo"),
            base_commit: text("base_commit"),
            test_patch: text("test_patch"),
            test_patch_path: text("test_patch_path").unwrap_or_else(|| "/tests/test.patch".into()),
            eval_command,
            fail_to_pass,
            pass_to_pass,
            framework,
            framework_name,
            repo_dir: text("repo_dir").or_else(|| text("workdir")),
            timeout_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_swe_bench_row_is_read_with_its_quirks() {
        let m = SweMeta::read(&json!({
            "FAIL_TO_PASS": "[\"tests/test_a.py::test_x\"]",
            "PASS_TO_PASS": ["tests/test_a.py::test_y"],
            "test_cmd": "pytest -rA tests/test_a.py",
            "base_commit": "abc123",
        }))
        .unwrap();
        assert_eq!(m.fail_to_pass, ["tests/test_a.py::test_x"]);
        assert_eq!(m.framework, Framework::Pytest);
        assert_eq!(m.test_patch_path, "/tests/test.patch");
    }

    #[test]
    fn the_metadata_table_overlays_the_task() {
        let r = row(
            &json!({"workdir": "/w", "verifier_timeout_sec": 60, "metadata": {"eval_command": "pytest", "FAIL_TO_PASS": ["t"]}}),
        );
        let m = SweMeta::read(&r).unwrap();
        assert_eq!((m.repo_dir.as_deref(), m.timeout_s, m.eval_command.as_str()), (Some("/w"), 60.0, "pytest"));
    }

    #[test]
    fn bad_rows_say_what_is_wrong() {
        let e = |v: Value| SweMeta::read(&v).err().unwrap();
        assert!(e(json!({"FAIL_TO_PASS": ["t"]})).contains("eval_command"));
        assert!(e(json!({"eval_command": "pytest", "FAIL_TO_PASS": []})).contains("FAIL_TO_PASS is empty"));
        assert!(e(json!({"eval_command": "pytest", "FAIL_TO_PASS": "not json"})).contains("not a JSON list"));
        assert!(e(json!({"eval_command": "./run.sh", "FAIL_TO_PASS": ["t"]})).contains("cannot be inferred"));
        assert!(e(json!({"eval_command": "x", "FAIL_TO_PASS": ["t"], "test_framework": "nose"})).contains("nose"));
    }

    #[test]
    fn frameworks_are_inferred_from_commands() {
        assert_eq!(infer_framework("python -m pytest -rA"), Some(Framework::Pytest));
        assert_eq!(infer_framework("./tests/runtests.py --verbosity 2"), Some(Framework::Django));
        assert_eq!(infer_framework("bin/test -C --verbose"), Some(Framework::Sympy));
        assert_eq!(infer_framework("go test -v ./..."), Some(Framework::GoTest));
        assert_eq!(infer_framework("npx jest --verbose"), Some(Framework::Jest));
    }
}
