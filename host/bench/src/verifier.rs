//! The cost of a separate verifier environment: the SWE-style examples graded by `swe`, once in
//! a clean sandbox (create + prepare + carry the agent's diff, then grade) and once in place in
//! the agent's sandbox (the reference), the same rollouts in the same run.

use std::path::Path;
use std::time::Duration;

use crate::Row;
use crate::stats::Samples;

/// Copies of the examples whose task.toml chooses `mode`.
fn tasks(examples: &Path, mode: &str) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("orchard-bench-verifier-").tempdir()?;
    for entry in std::fs::read_dir(examples)? {
        let entry = entry?;
        let toml = entry.path().join("task.toml");
        if !toml.is_file() {
            continue;
        }
        let to = dir.path().join(entry.file_name());
        let status = std::process::Command::new("cp").arg("-a").arg(entry.path()).arg(&to).status()?;
        anyhow::ensure!(status.success(), "copying {}", entry.path().display());
        let text = std::fs::read_to_string(&toml)?;
        let text = text.replace("[verifier]\n", &format!("[verifier]\nenvironment_mode = \"{mode}\"\n"));
        std::fs::write(to.join("task.toml"), text)?;
    }
    Ok(dir)
}

struct Times {
    setup: Samples,
    grade: Samples,
    total: Samples,
    passed: usize,
    rollouts: usize,
}

fn run(bin: &Path, examples: &Path, mode: &str, attempts: u32) -> anyhow::Result<Times> {
    let tasks = tasks(examples, mode)?;
    let out = tempfile::tempdir()?;
    crate::plugins::oracle_eval(bin, tasks.path(), "swe", attempts, 2, out.path(), &["--tools", "shell"])
        .map_err(|e| anyhow::anyhow!("{mode}: {e}"))?;
    let mut t = Times {
        setup: Samples::default(),
        grade: Samples::default(),
        total: Samples::default(),
        passed: 0,
        rollouts: 0,
    };
    for entry in std::fs::read_dir(out.path().join("rollouts"))? {
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(entry?.path())?)?;
        let secs = |v: &serde_json::Value| Duration::from_secs_f64(v.as_f64().unwrap_or(0.0));
        t.setup.push(secs(&r["verifier"]["setup_seconds"]));
        t.grade.push(secs(&r["grade_seconds"]));
        t.total.push(secs(&r["total_seconds"]));
        t.passed += usize::from(r["passed"] == true);
        t.rollouts += 1;
    }
    Ok(t)
}

pub fn rows(bin: &Path, examples: &Path, attempts: u32) -> anyhow::Result<Vec<Row>> {
    let in_place = run(bin, examples, "in-place", attempts)?;
    let separate = run(bin, examples, "separate", attempts)?;
    let ms = |s: &Samples| s.fmt_ms(50.0);
    let mut rows = vec![
        Row {
            what: "verifier: create + prepare + carry, p50".into(),
            ours: ms(&separate.setup),
            reference: "0 ms in place".into(),
            target: "—".into(),
            met: None,
        },
        Row {
            what: "verifier: carry + grade, p50".into(),
            ours: format!("{:.1} ms", (separate.setup.pct(50.0) + separate.grade.pct(50.0)).as_secs_f64() * 1e3),
            reference: format!("{} grade in place", ms(&in_place.grade)),
            target: "—".into(),
            met: None,
        },
        Row {
            what: "verifier: whole rollout, p50".into(),
            ours: ms(&separate.total),
            reference: format!("{} in place", ms(&in_place.total)),
            target: "—".into(),
            met: None,
        },
    ];
    rows.push(Row {
        what: "verifier: gold patches resolved".into(),
        ours: format!("{} of {}", separate.passed, separate.rollouts),
        reference: format!("{} of {} in place", in_place.passed, in_place.rollouts),
        target: "all".into(),
        met: Some(separate.passed == separate.rollouts && in_place.passed == in_place.rollouts),
    });
    Ok(rows)
}
