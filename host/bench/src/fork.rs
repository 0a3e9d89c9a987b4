//! Sandbox fork: how long the source is paused while a 50 MB writable layer is copied, and the
//! whole fork (copy + the child's start) — beside `cp -a` of the same bytes on the same disk
//! (the floor for a copy without reflinks) and a fresh sandbox's create (what a child costs
//! beyond its copy).

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use crate::stats::Samples;
use crate::{Row, Server};

/// Writable-layer size forked.
const LAYER_MB: u64 = 50;

pub async fn run(bin: &std::path::PathBuf, forks: usize) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (label, extra) in [("disk-limited (default)", vec![]), ("no disk limit", vec!["--default-disk", "none"])] {
        let extra: Vec<String> = extra.into_iter().map(String::from).collect();
        let server = Server::launch(bin, &extra, &[])?;
        let source = server.create_cold(0).await?;
        let fill = format!(
            "mkdir -p /workspace/data && for i in 1 2 3 4 5; do head -c {} /dev/urandom > /workspace/data/f$i; done && sync",
            LAYER_MB * 1024 * 1024 / 5
        );
        let v = server.post(&format!("/v1/sandboxes/{source}/exec"), json!({"command": fill})).await?;
        anyhow::ensure!(v["exit_code"] == 0, "filling the layer: {v}");
        let (mut paused, mut whole) = (Samples::default(), Samples::default());
        for _ in 0..forks {
            let t = Instant::now();
            let v = server.post(&format!("/v1/sandboxes/{source}/fork"), json!({"count": 1})).await?;
            whole.push(t.elapsed());
            let p = v["source_paused_seconds"].as_f64().context("no pause reported")?;
            paused.push(Duration::from_secs_f64(p));
            let child = v["sandboxes"][0]["sandbox_id"].as_str().context("no child")?.to_string();
            server.delete(&child).await?;
        }
        // References on the same machine, in the same run.
        let src = server.state.path().join("bench-copy-src");
        std::fs::create_dir_all(&src)?;
        for i in 0..5 {
            let bytes: Vec<u8> = (0..LAYER_MB * 1024 * 1024 / 5).map(|b| ((b * 2_654_435_761) >> 13) as u8).collect();
            std::fs::write(src.join(format!("f{i}")), bytes)?;
        }
        let mut copies = Samples::default();
        for i in 0..forks {
            let dst = server.state.path().join(format!("bench-copy-{i}"));
            let t = Instant::now();
            let ok = std::process::Command::new("cp").args(["-a", "--reflink=auto"]).arg(&src).arg(&dst).status()?;
            copies.push(t.elapsed());
            anyhow::ensure!(ok.success(), "cp failed");
            std::fs::remove_dir_all(&dst)?;
        }
        let mut creates = Samples::default();
        for i in 0..forks {
            let t = Instant::now();
            let id = server.create_cold(i + 1).await?;
            server.exec_true(&id).await?;
            creates.push(t.elapsed());
            server.delete(&id).await?;
        }
        let p50 = paused.pct(50.0);
        rows.push(Row {
            what: format!("fork, {label}: source paused ({LAYER_MB} MB layer), p50 / p95"),
            ours: format!("{} / {}", paused.fmt_ms(50.0), paused.fmt_ms(95.0)),
            reference: format!("cp -a of {LAYER_MB} MB, same disk: {}", copies.fmt_ms(50.0)),
            target: "p50 ≤ 100 ms".into(),
            met: Some(p50 <= Duration::from_millis(100)),
        });
        rows.push(Row {
            what: format!("fork, {label}: one child ready, p50"),
            ours: whole.fmt_ms(50.0),
            reference: format!("create → first exec: {}", creates.fmt_ms(50.0)),
            target: "-".into(),
            met: None,
        });
    }
    Ok(rows)
}
