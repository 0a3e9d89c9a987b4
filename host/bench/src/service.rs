//! The evaluation service under load: 10,000 oracle rollouts of the example tasks submitted to
//! `orchard serve`, beside the same run through `orchard eval` on the same machine, once on the
//! embedded SQLite and once on a PostgreSQL shared by two replicas. While each job runs, a
//! client keeps reading the job's page and its rollout list (pages by cursor over the whole
//! job), and their p99 is reported; so are the database's bytes per rollout and the servers'
//! peak RSS.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::stats::Samples;
use crate::{Row, Server};

// The tests' PostgreSQL starter (initdb into a temporary directory, as the test account).
#[path = "../../../tests/support/postgres.rs"]
#[allow(dead_code)]
mod postgres;

/// `orchard eval` over the example tasks: rollouts per second (the reference).
fn cli(bin: &Path, tasks: &Path, rollouts: u32, attempts: u32, concurrency: usize) -> anyhow::Result<f64> {
    let out = tempfile::tempdir()?;
    let started = Instant::now();
    crate::plugins::oracle_eval(bin, tasks, "script", attempts, concurrency, out.path(), &["--tools", "shell"])?;
    Ok(f64::from(rollouts) / started.elapsed().as_secs_f64())
}

/// The example tasks, `copies` times over (`<task>-<i>`): jobs of 10,000 rollouts within the
/// 1,000 attempts a job may ask for.
fn replicated(examples: &Path, copies: usize) -> anyhow::Result<(tempfile::TempDir, u32)> {
    let dir = tempfile::Builder::new().prefix("orchard-bench-tasks-").tempdir()?;
    let mut tasks = 0;
    for entry in std::fs::read_dir(examples)? {
        let entry = entry?;
        if !entry.path().join("task.toml").is_file() {
            continue;
        }
        for i in 0..copies {
            let to = dir.path().join(format!("{}-{i}", entry.file_name().to_string_lossy()));
            let status = std::process::Command::new("cp").arg("-a").arg(entry.path()).arg(&to).status()?;
            anyhow::ensure!(status.success(), "copying {}", entry.path().display());
            tasks += 1;
        }
    }
    Ok((dir, tasks))
}

struct Measured {
    rate: f64,
    job_page: Samples,
    list_page: Samples,
    passed: u64,
}

async fn get(server: &Server, path: &str) -> anyhow::Result<(Value, Duration)> {
    let t = Instant::now();
    let resp = server.http.get(format!("{}{path}", server.url)).send().await?;
    let status = resp.status();
    let v: Value = resp.json().await?;
    if !status.is_success() {
        bail!("GET {path}: {status} {v}");
    }
    Ok((v, t.elapsed()))
}

/// Submits the job to `submit_to`, reads it from `read_from` until it is done.
async fn service_run(
    submit_to: &Server,
    read_from: &Arc<Server>,
    attempts: u32,
    concurrency: usize,
) -> anyhow::Result<Measured> {
    let job = json!({"tasks": {"dataset": "examples"}, "harnesses": ["oracle"], "tools": ["shell"],
                     "grader": "script", "grants": ["solution"], "attempts": attempts, "concurrency": concurrency});
    // Plugins compile when a server starts: wait until it is ready for work.
    let deadline = Instant::now() + Duration::from_secs(300);
    while get(submit_to, "/v1/plugins").await.map(|(v, _)| v["plugins"].as_array().map_or(0, Vec::len)).unwrap_or(0)
        == 0
    {
        anyhow::ensure!(Instant::now() < deadline, "the server never listed its plugins");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    let submitted = submit_to.post("/v1/evals", job).await?;
    let id = submitted["id"].as_str().context("no job id")?.to_string();
    let total = submitted["total"].as_u64().unwrap_or(0);
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(indicatif::ProgressStyle::with_template("  {msg} {bar:40} {pos}/{len} {per_sec}").unwrap());
    bar.set_message("service");
    // A reader beside the runner: the job's page and a page of its rollouts, in turn, as a
    // browser watching the job would.
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (server, id, done) = (read_from.clone(), id.clone(), done.clone());
        tokio::spawn(async move {
            let (mut job_page, mut list_page) = (Samples::default(), Samples::default());
            let mut cursor: Option<i64> = None;
            while !done.load(Ordering::Relaxed) {
                if let Ok((_, took)) = get(&server, &format!("/v1/evals/{id}")).await {
                    job_page.push(took);
                }
                let path = match cursor {
                    Some(c) => format!("/v1/evals/{id}/rollouts?limit=100&cursor={c}"),
                    None => format!("/v1/evals/{id}/rollouts?limit=100"),
                };
                if let Ok((v, took)) = get(&server, &path).await {
                    list_page.push(took);
                    cursor = v["next_cursor"].as_i64();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (job_page, list_page)
        })
    };
    let (finished, passed) = loop {
        let (v, _) = get(read_from, &format!("/v1/evals/{id}")).await?;
        bar.set_position(v["counts"]["done"].as_u64().unwrap_or(0));
        if v["status"] == "done" {
            break (started.elapsed(), v["counts"]["passed"].as_u64().unwrap_or(0));
        }
        anyhow::ensure!(v["status"] != "cancelled", "the job was cancelled");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    bar.finish_and_clear();
    done.store(true, Ordering::Relaxed);
    let (job_page, list_page) = reader.await?;
    Ok(Measured { rate: total as f64 / finished.as_secs_f64(), job_page, list_page, passed })
}

fn bytes_of(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("orchard.db"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn rows_of(label: &str, n: u32, cli_rate: f64, m: &Measured, db_bytes: u64, rss_kb: u64) -> Vec<Row> {
    vec![
        Row {
            what: format!("{n} oracle rollouts through the service ({label})"),
            ours: format!("{:.1} rollouts/s = {:.0} % ({}/{n} passed)", m.rate, 100.0 * m.rate / cli_rate, m.passed),
            reference: format!("{cli_rate:.1} rollouts/s `orchard eval`, same tasks and concurrency"),
            target: "≥ 95 % of orchard eval".into(),
            met: Some(m.rate >= 0.95 * cli_rate && m.passed == u64::from(n)),
        },
        Row {
            what: format!("job page / rollout-list page p99 under that load ({label})"),
            ours: format!("{} / {}", m.job_page.fmt_ms(99.0), m.list_page.fmt_ms(99.0)),
            reference: format!("p50 {} / {}", m.job_page.fmt_ms(50.0), m.list_page.fmt_ms(50.0)),
            target: "milliseconds, not ∝ job".into(),
            met: Some(
                m.job_page.pct(99.0) < Duration::from_millis(100) && m.list_page.pct(99.0) < Duration::from_millis(100),
            ),
        },
        Row {
            what: format!("database bytes per rollout, host peak RSS ({label})"),
            ours: format!("{:.1} KiB, {:.0} MB", db_bytes as f64 / f64::from(n) / 1024.0, rss_kb as f64 / 1024.0),
            reference: "result + compressed trajectory per row".into(),
            target: "report".into(),
            met: None,
        },
    ]
}

pub async fn run(bin: &Path, examples: &Path, n: u32, concurrency: usize) -> anyhow::Result<Vec<Row>> {
    let (tasks_dir, tasks) = replicated(examples, 10)?;
    let examples = tasks_dir.path();
    let attempts = (n / tasks).max(1);
    let n = attempts * tasks;
    let bin = bin.to_path_buf();
    let (shipped, _) = crate::plugins::dirs(&bin);
    eprintln!("orchard-bench: {n} oracle rollouts ({tasks} tasks × {attempts}) through `orchard eval` (the reference)");
    let cli_rate = {
        let (bin, examples) = (bin.clone(), examples.to_path_buf());
        tokio::task::spawn_blocking(move || cli(&bin, &examples, n, attempts, concurrency)).await??
    };
    let mut rows = Vec::new();

    // SQLite, one server.
    eprintln!("orchard-bench: {n} through `orchard serve` on SQLite");
    let serve_args = |concurrency: usize| {
        vec![
            "--dataset".to_string(),
            format!("examples={}", examples.display()),
            "--eval-concurrency".into(),
            concurrency.to_string(),
            "--max-sandboxes".into(),
            (concurrency + 16).to_string(),
        ]
    };
    let env = [("ORCHARD_PLUGIN_DIR", shipped.display().to_string())];
    let server = Arc::new(Server::launch(&bin, &serve_args(concurrency), &env)?);
    let m = service_run(&server, &server, attempts, concurrency).await?;
    rows.extend(rows_of("SQLite", n, cli_rate, &m, bytes_of(server.state.path()), server.peak_rss_kb()));
    drop(server);

    // PostgreSQL, two replicas sharing it, each with half the slots.
    eprintln!("orchard-bench: {n} through two `orchard serve` replicas on PostgreSQL");
    let pg = tokio::task::spawn_blocking(postgres::Postgres::start).await?;
    let url = pg.database("orchard_bench").await;
    let half = concurrency.div_ceil(2);
    let replica = |name: &str| {
        let mut args = serve_args(half);
        args.extend(["--database".to_string(), url.clone(), "--replica".into(), name.into()]);
        Server::launch(&bin, &args, &env)
    };
    let (a, b) = (Arc::new(replica("bench-a")?), Arc::new(replica("bench-b")?));
    let before = pg_bytes(&url).await?;
    let m = service_run(&a, &b, attempts, concurrency).await?;
    let db = pg_bytes(&url).await?.saturating_sub(before);
    rows.extend(rows_of("PostgreSQL, 2 replicas", n, cli_rate, &m, db, a.peak_rss_kb().max(b.peak_rss_kb())));
    Ok(rows)
}

/// The database's size on disk (tables, indexes, TOAST).
async fn pg_bytes(url: &str) -> anyhow::Result<u64> {
    let out = tokio::process::Command::new("psql")
        .args([url, "-tA", "-c", "SELECT pg_database_size(current_database())"])
        .output()
        .await?;
    anyhow::ensure!(out.status.success(), "psql: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}
