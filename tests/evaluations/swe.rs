//! The `swe` grader end to end: the SWE-style example tasks on real git repositories in real
//! sandboxes, solved by the oracle with the gold patch and with patches that should not pass.

use std::path::{Path, PathBuf};

use orchard_tests::evals::{eval, read_json};
use serde_json::Value;

fn swe_examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/swe-mini")
}

/// A copy of one example task whose reference solution is `solve` instead of the gold patch.
fn with_solution(root: &Path, task: &str, solve: &str) -> PathBuf {
    let dest = root.join(task);
    let status = std::process::Command::new("cp").arg("-r").arg(swe_examples().join(task)).arg(&dest).status().unwrap();
    assert!(status.success());
    std::fs::write(dest.join("solution/solve.sh"), format!("#!/bin/bash\nset -e\ncd /workspace\n{solve}\n")).unwrap();
    dest
}

fn grade(tasks: &Path) -> Vec<Value> {
    let tasks = tasks.display().to_string();
    let (_, out, _) =
        eval(&[&tasks, "--harness", "oracle", "--tools", "shell", "--grader", "swe", "--grant", "solution"]);
    let mut rollouts: Vec<Value> =
        std::fs::read_dir(out.path().join("rollouts")).unwrap().map(|e| read_json(&e.unwrap().path())).collect();
    rollouts.sort_by(|a, b| a["task_id"].as_str().cmp(&b["task_id"].as_str()));
    rollouts
}

fn sub(rollout: &Value, name: &str) -> f64 {
    let subs = rollout["verdict"]["sub_scores"].as_array().unwrap();
    subs.iter().find(|s| s[0] == name).unwrap()[1].as_f64().unwrap()
}

fn explanation(rollout: &Value) -> &str {
    rollout["verdict"]["explanation"].as_str().unwrap_or_else(|| panic!("{rollout:#}"))
}

#[test]
fn the_gold_patches_resolve_every_example() {
    let rollouts = grade(&swe_examples());
    assert_eq!(rollouts.len(), 3);
    for r in &rollouts {
        assert_eq!(r["verdict"]["verdict"], "graded", "{r:#}");
        assert_eq!((r["reward"].as_f64(), r["passed"].as_bool()), (Some(1.0), Some(true)), "{r:#}");
        assert!(explanation(r).starts_with("resolved FULL: "), "{}", explanation(r));
        assert_eq!((sub(r, "fail_to_pass"), sub(r, "pass_to_pass")), (1.0, 1.0));
    }
    // The per-test statuses are in the explanation.
    assert!(explanation(&rollouts[0]).contains("\"TestCountWhitespace/tabs_and_newlines\":\"passed\""));
}

#[test]
fn empty_breaking_partial_and_test_editing_patches_do_not_pass() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    // Nothing changed: every FAIL_TO_PASS test still fails.
    with_solution(root, "go-wordcount", "true");
    // mean() fixed, total() broken: a PASS_TO_PASS test fails, so NO whatever FAIL_TO_PASS says.
    with_solution(
        root,
        "py-mean",
        "cat > stats.py <<'PY'\ndef total(values):\n    return 0\n\n\ndef mean(values):\n    return sum(values) / len(values) if values else 0.0\n\n\ndef maximum(values):\n    return max(values)\nPY",
    );
    // Punctuation dropped, runs not collapsed: one FAIL_TO_PASS test of three, so PARTIAL.
    with_solution(
        root,
        "py-slugify",
        "python3 - <<'PY'\nimport re\np = 'text.py'\ns = open(p).read().replace('return title.lower().replace(\" \", \"-\")', 'return re.sub(r\"[^a-z0-9 -]\", \"\", title.lower()).replace(\" \", \"-\")')\nopen(p, 'w').write('import re\\n' + s)\nPY",
    );
    let rollouts = grade(root);
    let [go, mean, slug] = [&rollouts[0], &rollouts[1], &rollouts[2]];

    assert_eq!(go["reward"], 0.0);
    assert!(
        explanation(go).starts_with("resolved NO: FAIL_TO_PASS 0% (0 of 4), PASS_TO_PASS 100%"),
        "{}",
        explanation(go)
    );

    assert_eq!((mean["reward"].as_f64(), mean["passed"].as_bool()), (Some(0.0), Some(false)));
    assert_eq!((sub(mean, "fail_to_pass"), sub(mean, "pass_to_pass")), (1.0, 0.5));
    assert!(explanation(mean).starts_with("resolved NO: "), "{}", explanation(mean));
    assert!(explanation(mean).contains("\"tests/test_stats.py::test_total\":\"failed\""));

    assert_eq!(slug["reward"], 0.0);
    assert!(
        explanation(slug).starts_with("resolved PARTIAL: FAIL_TO_PASS 33% (1 of 3), PASS_TO_PASS 100%"),
        "{}",
        explanation(slug)
    );
}

#[test]
fn empty_patches_resolve_nothing() {
    let dir = tempfile::tempdir().unwrap();
    for task in ["go-wordcount", "py-mean", "py-slugify"] {
        with_solution(dir.path(), task, "true");
    }
    for r in grade(dir.path()) {
        assert_eq!((r["reward"].as_f64(), r["passed"].as_bool()), (Some(0.0), Some(false)), "{r:#}");
        assert_eq!(sub(&r, "fail_to_pass"), 0.0, "{r:#}");
        assert_eq!(sub(&r, "pass_to_pass"), 1.0, "{r:#}");
        assert!(explanation(&r).starts_with("resolved NO: FAIL_TO_PASS 0%"), "{}", explanation(&r));
    }
}

#[test]
fn an_agent_that_rewrites_the_tests_gains_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The agent "fixes" the task by writing the FAIL_TO_PASS tests itself, trivially passing,
    // and commits nothing to stats.py.
    with_solution(
        dir.path(),
        "py-mean",
        "cat >> tests/test_stats.py <<'PY'\n\n\ndef test_mean_is_exact():\n    assert True\n\n\ndef test_mean_of_nothing():\n    assert True\nPY",
    );
    let rollouts = grade(dir.path());
    let r = &rollouts[0];
    assert_eq!(r["reward"], 0.0, "{r:#}");
    assert!(explanation(r).starts_with("resolved NO: FAIL_TO_PASS 0% (0 of 2)"), "{}", explanation(r));
}

#[test]
fn a_task_whose_tests_cannot_run_is_unknown_not_zero() {
    let dir = tempfile::tempdir().unwrap();
    let task = with_solution(dir.path(), "py-mean", "true");
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    std::fs::write(
        task.join("task.toml"),
        toml.replace("eval_command = \"python3 -m pytest", "eval_command = \"no-such-runner -m pytest"),
    )
    .unwrap();
    let rollouts = grade(dir.path());
    let r = &rollouts[0];
    assert_eq!(r["status"], "unknown", "{r:#}");
    assert!(r["verdict"]["reason"].as_str().unwrap().contains("no sign that the test runner ran"), "{r:#}");
}

#[test]
fn a_test_log_of_a_gigabyte_is_unknown_not_a_pass() {
    let dir = tempfile::tempdir().unwrap();
    let task = with_solution(dir.path(), "py-mean", "true");
    let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
    // The tests print 1.1 GB of lines that would read as passes.
    let flood = "python3 -c \\\"import sys; line = 'PASSED tests/test_stats.py::test_mean_is_exact\\\\n' * 20000; [sys.stdout.write(line) for _ in range(1200)]\\\"";
    let toml = toml.replace(
        "eval_command = \"python3 -m pytest -rA -p no:cacheprovider tests/test_stats.py\"",
        &format!("eval_command = \"{flood}\""),
    );
    assert!(toml.contains("1200"), "{toml}");
    std::fs::write(task.join("task.toml"), toml).unwrap();
    let rollouts = grade(dir.path());
    let r = &rollouts[0];
    assert_eq!(r["status"], "unknown", "{r:#}");
    let reason = r["verdict"]["reason"].as_str().unwrap();
    assert!(reason.contains("a plugin reads at most 268435456 bytes"), "{reason}");
}
