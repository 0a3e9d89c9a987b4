//! Browsers: Orchard's (Chromium in a network namespace, driven over a pipe with our DevTools
//! client) beside the same work done directly with chromiumoxide outside any sandbox, and browser
//! rollouts many at once.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chromiumoxide::cdp::browser_protocol::input::{DispatchMouseEventParams, DispatchMouseEventType, MouseButton};
use chromiumoxide::cdp::browser_protocol::page::{CaptureScreenshotFormat, CaptureScreenshotParams};
use futures::StreamExt;
use serde_json::json;

use crate::Row;
use crate::stats::Samples;

const PAGE: &str = "data:text/html,<title>bench</title><button style='width:200px;height:80px'>press</button>";

fn chromium() -> anyhow::Result<PathBuf> {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| anyhow::anyhow!("chromium is not installed (cargo xtask setup)"))
}

/// A network namespace of the bench's own with its loopback up, as a sandbox's is.
struct Netns(String);

impl Netns {
    fn new() -> anyhow::Result<Netns> {
        let name = format!("orchard-bench-{}", std::process::id());
        let ok = std::process::Command::new("ip").args(["netns", "add", &name]).status()?.success()
            && std::process::Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]).status()?.success();
        anyhow::ensure!(ok, "ip netns add {name} failed (run as root)");
        Ok(Netns(name))
    }

    fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.0)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The memory of `pid` and every process under it (summed PSS, as `Browser::rss_bytes`), in bytes.
pub(crate) fn tree_rss(pid: u32) -> u64 {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        let Some(rest) = stat.rfind(')').map(|i| stat[i + 2..].to_string()) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ppid = fields.get(1).and_then(|f| f.parse::<u32>().ok()).unwrap_or(0);
        let rss = orchard_browser::pss_kb(&entry.path())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| fields.get(21).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0) * 4096);
        parent_of.push((p, ppid, rss));
    }
    let mut inside = vec![pid];
    let mut total = 0;
    let mut grew = true;
    while grew {
        grew = false;
        for (p, ppid, _) in &parent_of {
            if inside.contains(ppid) && !inside.contains(p) {
                inside.push(*p);
                grew = true;
            }
        }
    }
    for (p, _, rss) in &parent_of {
        if inside.contains(p) {
            total += rss;
        }
    }
    total
}

struct Measured {
    start_to_shot: Samples,
    round_trip: Samples,
    rss: Vec<u64>,
}

fn press(kind: DispatchMouseEventType) -> DispatchMouseEventParams {
    DispatchMouseEventParams::builder()
        .r#type(kind)
        .x(100.0)
        .y(40.0)
        .button(MouseButton::Left)
        .click_count(1)
        .build()
        .expect("complete")
}

async fn ours(exe: &Path, netns: &Netns, browsers: usize, actions: usize) -> anyhow::Result<Measured> {
    let mut m = Measured { start_to_shot: Samples::default(), round_trip: Samples::default(), rss: vec![] };
    for _ in 0..browsers {
        let started = Instant::now();
        let options = orchard_browser::BrowserOptions {
            binary: exe.to_path_buf(),
            netns: Some(netns.path()),
            ..Default::default()
        };
        let browser = orchard_browser::Browser::launch(options).await?;
        let tab = browser.open().await?;
        tab.screenshot().await?;
        m.start_to_shot.push(started.elapsed());
        tab.cdp("Page.navigate", json!({"url": PAGE})).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for _ in 0..actions {
            let t = Instant::now();
            for kind in ["mousePressed", "mouseReleased"] {
                tab.cdp(
                    "Input.dispatchMouseEvent",
                    json!({"type": kind, "x": 100, "y": 40, "button": "left", "clickCount": 1}),
                )
                .await?;
            }
            tab.screenshot().await?;
            m.round_trip.push(t.elapsed());
        }
        m.rss.push(browser.rss_bytes());
    }
    Ok(m)
}

async fn reference(exe: &Path, browsers: usize, actions: usize) -> anyhow::Result<Measured> {
    let mut m = Measured { start_to_shot: Samples::default(), round_trip: Samples::default(), rss: vec![] };
    for _ in 0..browsers {
        let profile = tempfile::tempdir()?;
        let started = Instant::now();
        let config = chromiumoxide::BrowserConfig::builder()
            .chrome_executable(exe)
            .user_data_dir(profile.path())
            .no_sandbox()
            .window_size(1280, 800)
            .args(["disable-gpu", "disable-background-networking", "disable-component-update", "no-first-run"])
            .launch_timeout(Duration::from_secs(90))
            .build()
            .map_err(anyhow::Error::msg)?;
        let (mut browser, mut handler) = chromiumoxide::Browser::launch(config).await?;
        let pump = tokio::spawn(async move { while handler.next().await.is_some() {} });
        let page = browser.new_page("about:blank").await?;
        let shot = || CaptureScreenshotParams::builder().format(CaptureScreenshotFormat::Png).build();
        page.execute(shot()).await?;
        m.start_to_shot.push(started.elapsed());
        page.goto(PAGE).await?;
        for _ in 0..actions {
            let t = Instant::now();
            page.execute(press(DispatchMouseEventType::MousePressed)).await?;
            page.execute(press(DispatchMouseEventType::MouseReleased)).await?;
            page.execute(shot()).await?;
            m.round_trip.push(t.elapsed());
        }
        if let Some(child) = browser.get_mut_child()
            && let Some(pid) = child.as_mut_inner().id()
        {
            m.rss.push(tree_rss(pid));
        }
        let _ = browser.close().await;
        let _ = browser.wait().await;
        pump.abort();
    }
    Ok(m)
}

fn mib(v: &[u64]) -> String {
    let mut v = v.to_vec();
    v.sort();
    v.get(v.len() / 2).map(|b| format!("{:.0} MiB", *b as f64 / (1 << 20) as f64)).unwrap_or_else(|| "—".into())
}

/// `n` copies of the shop example's first task.
fn shop_tasks(examples: &Path, n: usize) -> anyhow::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix("orchard-bench-gui-").tempdir()?;
    let shop = examples.join("shop/environment").canonicalize()?;
    let task = examples.join("cheapest-rated-running-shoe");
    for i in 0..n {
        let to = dir.path().join(format!("shoe-{i:02}"));
        std::fs::create_dir_all(to.join("solution"))?;
        for f in ["instruction.md", "task.toml", "solution/solve.sh", "solution/calls.json"] {
            std::fs::copy(task.join(f), to.join(f))?;
        }
        std::os::unix::fs::symlink(&shop, to.join("environment"))?;
    }
    Ok(dir)
}

/// Runs the oracle over `n` shop tasks at once: browsing (`tools`), or the reference.
fn rollouts(bin: &Path, tasks: &Path, n: usize, tools: &[&str]) -> anyhow::Result<(usize, Duration)> {
    let out = tempfile::tempdir()?;
    let started = Instant::now();
    crate::plugins::oracle_eval(bin, tasks, "rubric", 1, n, out.path(), tools)?;
    let elapsed = started.elapsed();
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("summary.json"))?)?;
    Ok((summary["passed"].as_u64().unwrap_or(0) as usize, elapsed))
}

pub async fn run(
    bin: &Path,
    examples: &Path,
    browsers: usize,
    actions: usize,
    concurrent: usize,
) -> anyhow::Result<Vec<Row>> {
    let exe = chromium()?;
    let netns = Netns::new()?;
    let ours = ours(&exe, &netns, browsers, actions).await?;
    let reference = reference(&exe, browsers, actions).await?;
    let ms = |s: &Samples| s.fmt_ms(50.0);
    let mut rows = vec![
        Row {
            what: format!("browser: start to first screenshot, p50 of {browsers}"),
            ours: ms(&ours.start_to_shot),
            reference: format!("{} chromiumoxide, no sandbox", ms(&reference.start_to_shot)),
            target: "—".into(),
            met: None,
        },
        Row {
            what: format!("browser: click + screenshot, p50 of {}", browsers * actions),
            ours: ms(&ours.round_trip),
            reference: format!("{} chromiumoxide, same CDP calls", ms(&reference.round_trip)),
            target: "—".into(),
            met: None,
        },
        Row {
            what: "browser: memory of one browser with a page (summed PSS)".into(),
            ours: mib(&ours.rss),
            reference: format!("{} chromiumoxide's", mib(&reference.rss)),
            target: "—".into(),
            met: None,
        },
    ];
    let tasks = shop_tasks(examples, concurrent)?;
    let tasks_path = tasks.path().to_path_buf();
    let bin = bin.to_path_buf();
    let (browsing, plain) = tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
        let marks = r#"browser={"mode": "marks"}"#;
        let browsing = rollouts(&bin, &tasks_path, concurrent, &["--tools", "browser", "--tool-config", marks])?;
        let plain = rollouts(&bin, &tasks_path, concurrent, &["--tools", "shell"])?;
        Ok((browsing, plain))
    })
    .await??;
    rows.push(Row {
        what: format!("browser: {concurrent} shop rollouts at once (oracle clicks, rubric)"),
        ours: format!("{}/{concurrent} passed in {:.1} s", browsing.0, browsing.1.as_secs_f64()),
        reference: format!("{}/{concurrent} in {:.1} s without a browser", plain.0, plain.1.as_secs_f64()),
        target: "all pass".into(),
        met: Some(browsing.0 == concurrent),
    });
    Ok(rows)
}
