//! The `swe` grader: SWE-bench's evaluation, in the sandbox's final state.
//!
//! Task metadata, as a SWE-bench row carries it: `FAIL_TO_PASS` and `PASS_TO_PASS` (lists, or
//! JSON text of lists), `test_patch` (a diff; or `test_patch_path`, default `/tests/test.patch`),
//! `eval_command` (or `test_cmd`), `base_commit`, `test_framework` (`pytest`, `unittest`,
//! `django`, `sympy`, `jest`, `mocha`, `go`, `cargo`, `maven`, `gradle`; inferred from the command
//! when absent), `repo` (for the explanation), `repo_dir` or `workdir` (where the repository is),
//! `eval_timeout_sec` (default: the verifier timeout, or 1800). Read from task.toml's `[metadata]`
//! table, or from a bare row.
//!
//! Steps: the files the test patch touches are put back as they were at `base_commit` (an
//! agent's edits to the tests do not count), the patch is applied (`git apply`, then `patch
//! --fuzz=5`), and the command runs between two markers carrying a nonce drawn now — after the
//! agent finished — with its output going to a file, read whole. Only the text between the
//! markers is parsed; the rules are `orchard_test_logs::judge`'s.

use std::hash::{BuildHasher, Hasher};

use orchard_test_logs::{Resolution, judge, parse, region, suite_ran};
use serde_json::{Value, json};

pub mod meta;

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "grader" });

use exports::orchard::plugin::grading::{Environment, Guest, Score, SubScore, Trajectory, Verdict};
use orchard::plugin::sandbox::{self, Command, ExecRequest};
use orchard::plugin::types::{Error, Outcome, Task};

struct Swe;

/// 128 random bits from the host's randomness (WASI), as hex.
fn nonce() -> String {
    let state = std::collections::hash_map::RandomState::new();
    let mut a = state.build_hasher();
    a.write_u8(1);
    let mut b = std::collections::hash_map::RandomState::new().build_hasher();
    b.write_u8(2);
    format!("{:016x}{:016x}", a.finish(), b.finish())
}

fn run(script: &str, cwd: Option<&str>, timeout_s: f64) -> Result<sandbox::ExecResult, Error> {
    sandbox::exec(&ExecRequest {
        command: Command::Argv(vec!["bash".into(), "-c".into(), script.into()]),
        cwd: cwd.map(str::to_string),
        env: vec![],
        timeout_ms: Some((timeout_s * 1000.0) as u64),
        stdin: None,
    })
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn grade(task: &Task, environment: &Environment) -> Result<Verdict, Error> {
    let raw: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
    let m = match meta::SweMeta::read(&meta::row(&raw)) {
        Ok(m) => m,
        Err(reason) => return Ok(Verdict::Unknown(format!("task metadata: {reason}"))),
    };
    let cwd = m.repo_dir.as_deref();
    let id = nonce();
    // The test patch: inline, or a file the verifier's /tests brought.
    let patch = match &m.test_patch {
        Some(p) => p.clone(),
        None => match sandbox::read_file(&m.test_patch_path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(Error::NotFound(_)) => String::new(),
            Err(e) => return Err(e),
        },
    };
    let mut notes = Vec::new();
    if !patch.trim().is_empty() {
        let files = meta::patched_files(&patch);
        if let Some(base) = &m.base_commit {
            // Tests the agent edited go back to the base commit; tests the patch adds go away.
            let quoted: Vec<String> = files.iter().map(|f| quote(f)).collect();
            let script = format!(
                "for f in {}; do if git cat-file -e {}:\"$f\" 2>/dev/null; then git checkout -q {} -- \"$f\"; else rm -f \"$f\"; fi; done",
                quoted.join(" "),
                quote(base),
                quote(base)
            );
            let reset = run(&script, cwd, 120.0)?;
            if reset.exit_code != 0 {
                notes.push(format!("resetting test files failed: {}", reset.stderr.trim()));
            }
        }
        let path = format!("/tmp/orchard-test-{id}.patch");
        sandbox::write_file(&path, patch.as_bytes())?;
        let apply = run(
            &format!("git apply -v {p} 2>&1 || patch --batch --fuzz=5 -p1 -i {p} 2>&1", p = quote(&path)),
            cwd,
            120.0,
        )?;
        if apply.exit_code != 0 {
            return Ok(Verdict::Unknown(format!(
                "the test patch does not apply ({} file(s)): {}",
                files.len(),
                apply.stdout.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
            )));
        }
    }
    let (start, end) = (format!("ORCHARD_TESTS_START_{id}"), format!("ORCHARD_TESTS_END_{id} "));
    let log_path = format!("/tmp/orchard-test-{id}.log");
    let script = format!(
        "{{ echo {start}; {{ {cmd}\n}}; echo \"{end}$?\"; }} > {log} 2>&1 < /dev/null",
        cmd = m.eval_command,
        log = quote(&log_path)
    );
    let ran = run(&script, cwd, m.timeout_s)?;
    let log = match sandbox::read_file(&log_path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return Ok(Verdict::Unknown(format!("the test log could not be read: {e:?}"))),
    };
    let Some((body, code)) = region(&log, &format!("{start}\n"), &end) else {
        return Ok(Verdict::Unknown(format!(
            "the test command's start marker is missing (exit {}{})",
            ran.exit_code,
            if ran.timed_out { ", timed out" } else { "" }
        )));
    };
    let statuses = parse(m.framework, body);
    let mut j = judge(&statuses, &m.fail_to_pass, &m.pass_to_pass, code, suite_ran(m.framework, body));
    if ran.timed_out {
        j.reason = format!("the tests timed out after {} s; {}", m.timeout_s, j.reason);
    }
    let verifier = json!({
        "separate": environment.separate,
        "carried": environment.carried,
        "dropped": environment.dropped.iter().map(|d| json!({"path": d.path, "reason": d.reason})).collect::<Vec<_>>(),
    });
    let details = json!({
        "repo": m.repo, "framework": m.framework_name, "exit_code": code, "tests": j.tests,
        "notes": notes, "parsed": statuses.len(), "verifier": verifier,
    });
    orchard::plugin::log::event(orchard::plugin::log::Level::Info, "swe-grade", &details.to_string());
    let Some(resolution) = j.resolution else {
        return Ok(Verdict::Unknown(format!("{}; {details}", j.reason)));
    };
    let word = match resolution {
        Resolution::Full => "FULL",
        Resolution::Partial => "PARTIAL",
        Resolution::No => "NO",
    };
    Ok(Verdict::Graded(Score {
        reward: if resolution == Resolution::Full { 1.0 } else { 0.0 },
        passed: resolution == Resolution::Full,
        sub_scores: vec![
            SubScore { name: "fail_to_pass".into(), value: j.fail_to_pass },
            SubScore { name: "pass_to_pass".into(), value: j.pass_to_pass },
        ],
        explanation: format!("resolved {word}: {}; {details}", j.reason),
    }))
}

impl Guest for Swe {
    fn grade(
        task: Task,
        _trajectory: Trajectory,
        _outcome: Outcome,
        environment: Environment,
    ) -> Result<Verdict, Error> {
        grade(&task, &environment)
    }
}

export!(Swe);
