//! Start-up: a fresh `orchard serve` (a new state directory, so nothing is compiled yet) answers
//! its first evaluation's first rollout. Plugins are known at once and compiled on demand (the
//! ones a job needs first), so the first rollout should not wait for all of them. The reference,
//! in the same run, is the same with every plugin already compiled (a restart on its cache).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::stats::Samples;
use crate::{Row, Server};

/// Spawn → the first rollout of a one-attempt job over the example tasks is done.
async fn first_rollout(bin: &Path, examples: &Path, env: &[(&str, String)]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let args = ["--dataset".to_string(), format!("examples={}", examples.display())];
    let server = Server::launch(&bin.to_path_buf(), &args, env)?;
    let job = json!({"tasks": {"dataset": "examples"}, "harnesses": ["oracle"], "tools": ["shell"],
                     "grader": "script", "grants": ["solution"], "attempts": 1, "concurrency": 1});
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        match server.post("/v1/evals", job.clone()).await {
            Ok(v) => break v["id"].as_str().context("no job id")?.to_string(),
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    };
    loop {
        let v: serde_json::Value =
            server.http.get(format!("{}/v1/evals/{id}", server.url)).send().await?.json().await?;
        if v["counts"]["done"].as_u64().unwrap_or(0) >= 1 {
            anyhow::ensure!(v["counts"]["passed"].as_u64().unwrap_or(0) >= 1, "the first rollout failed: {v}");
            return Ok(started.elapsed());
        }
        anyhow::ensure!(Instant::now() < deadline, "no rollout finished within 120 s: {v}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub async fn run(bin: &Path, examples: &Path, runs: usize) -> anyhow::Result<Vec<Row>> {
    let (shipped, _) = crate::plugins::dirs(bin);
    let plugins = ("ORCHARD_PLUGIN_DIR", shipped.display().to_string());
    let (mut cold, mut warm) = (Samples::default(), Samples::default());
    for _ in 0..runs {
        cold.push(first_rollout(bin, examples, std::slice::from_ref(&plugins)).await?);
    }
    // The reference: a cache every plugin is compiled into (filled by one untimed start).
    let cache = tempfile::Builder::new().prefix("orchard-bench-cache-").tempdir()?;
    let env = [plugins.clone(), ("ORCHARD_PLUGIN_CACHE", cache.path().display().to_string())];
    {
        let filler = Server::launch(&bin.to_path_buf(), &[], &env)?;
        let deadline = Instant::now() + Duration::from_secs(600);
        while std::fs::read_dir(cache.path()).map(|d| d.count()).unwrap_or(0) < 10 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Let the last one finish writing.
        tokio::time::sleep(Duration::from_secs(20)).await;
        drop(filler);
    }
    for _ in 0..runs {
        warm.push(first_rollout(bin, examples, &env).await?);
    }
    Ok(vec![Row {
        what: format!("fresh `orchard serve` → its first eval's first rollout done, p50 of {runs}"),
        ours: format!("{} (max {})", cold.fmt_ms(50.0), cold.fmt_ms(100.0)),
        reference: format!("{} with every plugin compiled already (restart on its cache)", warm.fmt_ms(50.0)),
        target: "≤ 2 s".into(),
        met: Some(cold.pct(100.0) <= Duration::from_secs(2)),
    }])
}
