//! `orchard convert swe-bench`, offline: SWE-bench-format rows written from the example
//! repositories (their base commits, test patches, gold patches and test ids), converted with
//! `--gold`, then evaluated by the oracle and graded by `swe` in a separate verifier: every
//! instance resolves. The published evaluation images cannot be pulled here; a specs file
//! stands the packed example repositories in for them.

use std::path::{Path, PathBuf};

use orchard_tests::evals::{eval, read_json};
use orchard_tests::orchard;
use serde_json::{Value, json};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/swe-mini")
}

/// A SWE-bench row for example `task`, as the datasets store one (lists as JSON text).
fn row(task: &str) -> Value {
    let dir = examples().join(task);
    let toml: toml::Table = toml::from_str(&std::fs::read_to_string(dir.join("task.toml")).unwrap()).unwrap();
    let meta = toml["metadata"].as_table().unwrap();
    let list = |k: &str| {
        let items: Vec<String> = meta[k].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect();
        serde_json::to_string(&items).unwrap()
    };
    let solve = std::fs::read_to_string(dir.join("solution/solve.sh")).unwrap();
    let gold = solve.split("<<'PATCH'\n").nth(1).unwrap().split("\nPATCH").next().unwrap().to_string() + "\n";
    json!({
        "instance_id": format!("orchard-examples__{task}-1"),
        "repo": meta["repo"].as_str().unwrap(),
        "base_commit": meta["base_commit"].as_str().unwrap(),
        "patch": gold,
        "test_patch": std::fs::read_to_string(dir.join("tests/test.patch")).unwrap(),
        "problem_statement": std::fs::read_to_string(dir.join("instruction.md")).unwrap(),
        "hints_text": "",
        "created_at": "2026-01-01T00:00:00Z",
        "version": "1.0",
        "FAIL_TO_PASS": list("FAIL_TO_PASS"),
        "PASS_TO_PASS": list("PASS_TO_PASS"),
        "environment_setup_commit": meta["base_commit"].as_str().unwrap(),
    })
}

fn specs(dir: &Path) -> PathBuf {
    let path = dir.join("specs.toml");
    let archive = |t: &str| examples().join(t).join("environment/repo.tar.gz").display().to_string();
    std::fs::write(
        &path,
        format!(
            "[repos.\"orchard-examples/stats\"]\ntest_cmd = \"python3 -m pytest -rA -p no:cacheprovider\"\nframework = \"pytest\"\n\
             repo_dir = \"/workspace\"\narchive = {:?}\n\n\
             [repos.\"orchard-examples/text\"]\ntest_cmd = \"python3 -m pytest -rA -p no:cacheprovider\"\nframework = \"pytest\"\n\
             repo_dir = \"/workspace\"\narchive = {:?}\n\n\
             [repos.\"orchard-examples/wordcount\"]\ntest_cmd = \"GOCACHE=/tmp/go-cache GOPATH=/tmp/go GOFLAGS=-mod=mod go test -v ./...\"\n\
             framework = \"go\"\ndirectives = \"none\"\nrepo_dir = \"/workspace\"\narchive = {:?}\n",
            archive("py-mean"),
            archive("py-slugify"),
            archive("go-wordcount")
        ),
    )
    .unwrap();
    path
}

#[test]
fn converted_rows_with_their_gold_patches_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<String> = ["py-mean", "py-slugify", "go-wordcount"].iter().map(|t| row(t).to_string()).collect();
    let mut broken = row("py-mean");
    broken["instance_id"] = "broken-1".into();
    broken.as_object_mut().unwrap().remove("test_patch");
    let rows_path = dir.path().join("rows.jsonl");
    std::fs::write(&rows_path, format!("{}\n{}\n", rows.join("\n"), broken)).unwrap();
    let out = dir.path().join("tasks");
    let specs = specs(dir.path());
    let (code, stdout, stderr) = orchard(&[
        "convert",
        "swe-bench",
        &rows_path.display().to_string(),
        &out.display().to_string(),
        "--gold",
        "--specs",
        &specs.display().to_string(),
    ]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(stdout.contains("3 task folder(s)"), "{stdout}");
    assert!(stderr.contains("skipped broken-1: line 4: test_patch is missing or empty"), "{stderr}");
    // The task carries what the grader needs, and never the gold patch in its metadata.
    let task = std::fs::read_to_string(out.join("orchard-examples__py-mean-1/task.toml")).unwrap();
    assert!(
        task.contains("eval_command = \"python3 -m pytest -rA -p no:cacheprovider tests/test_stats.py\""),
        "{task}"
    );
    assert!(!task.contains("return sum(values) / len(values)"), "{task}");
    assert!(out.join("orchard-examples__py-mean-1/tests/test.patch").is_file());
    // Harbor's own TaskConfig reads every folder the converter wrote.
    if let Some(n) = orchard_tests::harbor_validates(&out) {
        assert_eq!(n, 3);
    }

    let tasks = out.display().to_string();
    let (summary, results, _) =
        eval(&[&tasks, "--harness", "oracle", "--tools", "shell", "--grader", "swe", "--grant", "solution"]);
    for entry in std::fs::read_dir(results.path().join("rollouts")).unwrap() {
        let r = read_json(&entry.unwrap().path());
        assert_eq!(r["reward"], 1.0, "{r:#}");
        assert_eq!(r["verifier"]["environment"], "separate", "{r:#}");
        assert!(r["verdict"]["explanation"].as_str().unwrap().starts_with("resolved FULL"), "{r:#}");
    }
    assert_eq!(summary["rollouts"], 3, "{summary:#}");
}

#[test]
fn rows_of_upstream_repositories_name_their_images_and_commands() {
    let dir = tempfile::tempdir().unwrap();
    let test_patch = "diff --git a/tests/forms_tests/test_media.py b/tests/forms_tests/test_media.py\n--- a/tests/forms_tests/test_media.py\n+++ b/tests/forms_tests/test_media.py\n@@ -1 +1 @@\n-a\n+b\n";
    let rows = [
        json!({"instance_id": "django__django-11019", "repo": "django/django", "base_commit": "93e892bb645b16ebaf287beb5fe7f3ffe8d10408",
               "problem_statement": "Media merging", "test_patch": test_patch, "patch": "diff --git a/x b/x\n", "version": "3.0",
               "FAIL_TO_PASS": "[\"test_merge (forms_tests.test_media.FormsMediaTestCase)\"]", "PASS_TO_PASS": "[]"}),
        json!({"instance_id": "owner__lib-7", "repo": "owner/lib", "base_commit": "abc", "problem_statement": "p",
               "test_patch": "diff --git a/src/a.test.js b/src/a.test.js\n", "FAIL_TO_PASS": ["t"], "PASS_TO_PASS": []}),
        json!({"instance_id": "swesmith__x.1", "repo": "swesmith/x", "base_commit": "abc", "problem_statement": "p",
               "image_name": "jyangballin/swesmith.x86_64.x", "test_patch": "diff --git a/t/test_a.py b/t/test_a.py\n",
               "FAIL_TO_PASS": ["t/test_a.py::test_a"]}),
    ];
    let rows_path = dir.path().join("rows.json");
    std::fs::write(&rows_path, serde_json::to_string(&rows).unwrap()).unwrap();
    let out = dir.path().join("tasks");
    let (code, stdout, stderr) =
        orchard(&["convert", "swe-bench", &rows_path.display().to_string(), &out.display().to_string()]);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let django = std::fs::read_to_string(out.join("django__django-11019/task.toml")).unwrap();
    assert!(
        django.contains("docker_image = \"swebench/sweb.eval.x86_64.django_1776_django-11019:latest\""),
        "{django}"
    );
    assert!(
        django.contains(
            "eval_command = \"source /opt/miniconda3/bin/activate && conda activate testbed && ./tests/runtests.py \
             --verbosity 2 --settings=test_sqlite --parallel 1 forms_tests.test_media\""
        ),
        "{django}"
    );
    assert!(django.contains("test_framework = \"django\""), "{django}");
    assert!(!out.join("django__django-11019/solution").exists(), "no --gold, no solution");
    // A JavaScript repository with no known command is skipped, saying what to give.
    assert!(stderr.contains("skipped owner__lib-7: row 2: no test command is known for owner/lib"), "{stderr}");
    let smith = std::fs::read_to_string(out.join("swesmith__x.1/task.toml")).unwrap();
    assert!(smith.contains("docker_image = \"jyangballin/swesmith.x86_64.x\""), "{smith}");
}
