//! Desktops: Orchard's desktop service (`orchard-agent desktop`: Xvfb, openbox, the session and
//! accessibility buses, XTEST input, screenshots over HTTP) beside the same work done with the
//! usual tools on the host — a bare Xvfb and openbox, `xdotool` for input and ImageMagick's
//! `import` for screenshots — in the same run.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::Row;
use crate::stats::Samples;

/// Screens in this suite: OSWorld's default size.
const SIZE: &str = "1920x1080x24";

fn agent(bin: &Path) -> anyhow::Result<PathBuf> {
    let candidates = [
        std::env::var_os("ORCHARD_AGENT_BIN").map(PathBuf::from),
        bin.ancestors().nth(2).map(|t| t.join("x86_64-unknown-linux-musl/agent/orchard-agent")),
        Some(bin.with_file_name("orchard-agent")),
    ];
    candidates
        .into_iter()
        .flatten()
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("orchard-agent not found: `cargo xtask agent`, or set ORCHARD_AGENT_BIN"))
}

fn need(program: &str, package: &str) -> anyhow::Result<()> {
    let found = Command::new("sh").args(["-c", &format!("command -v {program}")]).output()?.status.success();
    anyhow::ensure!(found, "{program} is missing: apt-get install {package}");
    Ok(())
}

/// A display number and port of this run's own.
/// Each desktop gets a display never used before in the run: one just killed may still be
/// exiting.
fn slot(i: u32) -> (u32, u16) {
    let base = 1000 + (std::process::id() % 50) * 100;
    (base + i, 20000 + (base + i) as u16 % 40000)
}

struct Killed(Vec<Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn quiet(command: &mut Command) -> &mut Command {
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null())
}

/// Orchard's desktop on display `d`: the service, answering its first screenshot.
async fn start_ours(agent: &Path, client: &reqwest::Client, d: u32, port: u16) -> anyhow::Result<Killed> {
    let child = quiet(Command::new(agent).args([
        "desktop",
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--display",
        &d.to_string(),
        "--size",
        SIZE,
    ]))
    .spawn()?;
    let service = Killed(vec![child]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(format!("http://127.0.0.1:{port}/orchard/shot")).send().await
            && r.status().is_success()
            && !r.bytes().await?.is_empty()
        {
            return Ok(service);
        }
        anyhow::ensure!(Instant::now() < deadline, "the desktop on :{d} did not answer within 30 s");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The reference desktop on display `d`: Xvfb and openbox, and a first screenshot by `import`.
fn start_reference(d: u32) -> anyhow::Result<Killed> {
    let socket = format!("/tmp/.X11-unix/X{d}");
    let _ = std::fs::remove_file(&socket);
    let _ = std::fs::remove_file(format!("/tmp/.X{d}-lock"));
    let x = quiet(Command::new("Xvfb").args([&format!(":{d}"), "-screen", "0", SIZE, "-nolisten", "tcp"])).spawn()?;
    let mut started = Killed(vec![x]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !Path::new(&socket).exists() {
        anyhow::ensure!(Instant::now() < deadline, "Xvfb :{d} did not start");
        std::thread::sleep(Duration::from_millis(2));
    }
    started.0.push(quiet(Command::new("openbox").env("DISPLAY", format!(":{d}"))).spawn()?);
    screenshot_reference(d)?;
    Ok(started)
}

fn screenshot_reference(d: u32) -> anyhow::Result<()> {
    let out = Command::new("import").args(["-display", &format!(":{d}"), "-window", "root", "png:-"]).output()?;
    anyhow::ensure!(out.status.success() && !out.stdout.is_empty(), "import failed on :{d}");
    Ok(())
}

/// One action and the screen after it, through the service.
async fn round_trip_ours(client: &reqwest::Client, port: u16, i: usize) -> anyhow::Result<()> {
    let (x, y) = (100 + (i % 50) as i32 * 10, 100 + (i % 30) as i32 * 10);
    let events = json!({"events": [{"move_to": {"x": x, "y": y}}, {"click": {"button": "left", "count": 1}}]});
    let sent = client.post(format!("http://127.0.0.1:{port}/orchard/input")).json(&events).send().await?;
    anyhow::ensure!(sent.status().is_success(), "input: {}", sent.status());
    let shot = client.get(format!("http://127.0.0.1:{port}/orchard/shot")).send().await?;
    anyhow::ensure!(shot.status().is_success(), "shot: {}", shot.status());
    shot.bytes().await?;
    Ok(())
}

fn round_trip_reference(d: u32, i: usize) -> anyhow::Result<()> {
    let (x, y) = (100 + (i % 50) * 10, 100 + (i % 30) * 10);
    let ok = Command::new("xdotool")
        .env("DISPLAY", format!(":{d}"))
        .args(["mousemove", &x.to_string(), &y.to_string(), "click", "1"])
        .status()?
        .success();
    anyhow::ensure!(ok, "xdotool failed on :{d}");
    screenshot_reference(d)
}

pub async fn run(bin: &Path, starts: usize, actions: usize, max_desktops: usize) -> anyhow::Result<Vec<Row>> {
    need("Xvfb", "xvfb")?;
    need("openbox", "openbox")?;
    need("xdotool", "xdotool")?;
    need("import", "imagemagick")?;
    let agent = agent(bin)?;
    // reqwest is built with `rustls-no-provider` here: pick the provider before any client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = reqwest::Client::new();
    let mut rows = Vec::new();
    anyhow::ensure!(starts <= 20 && max_desktops <= 32, "at most 20 starts and 32 desktops at once");

    // Start → first screenshot.
    let (mut ours, mut reference) = (Samples::default(), Samples::default());
    for i in 0..starts as u32 {
        let (d, port) = slot(i);
        let t = Instant::now();
        let desktop = start_ours(&agent, &client, d, port).await?;
        ours.push(t.elapsed());
        drop(desktop);
        let (d, _) = slot(20 + i);
        let t = Instant::now();
        let bare = start_reference(d)?;
        reference.push(t.elapsed());
        drop(bare);
    }
    rows.push(Row {
        what: format!("desktop start → first screenshot, {SIZE} (p50 of {starts})"),
        ours: ours.fmt_ms(50.0),
        reference: format!("{} (Xvfb + openbox + import)", reference.fmt_ms(50.0)),
        target: "≤ reference".into(),
        met: Some(ours.pct(50.0) <= reference.pct(50.0)),
    });

    // Action + screenshot round trips.
    let (d, port) = slot(40);
    let desktop = start_ours(&agent, &client, d, port).await?;
    let mut ours = Samples::default();
    for i in 0..actions {
        let t = Instant::now();
        round_trip_ours(&client, port, i).await?;
        ours.push(t.elapsed());
    }
    // Idle memory with the editor open.
    let opened = client
        .post(format!("http://127.0.0.1:{port}/execute"))
        .json(&json!({"command": "mousepad >/dev/null 2>&1 &", "shell": true}))
        .send()
        .await?;
    anyhow::ensure!(opened.status().is_success(), "opening the editor: {}", opened.status());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let memory = crate::browser::tree_rss(desktop.0[0].id());
    drop(desktop);
    let (rd, _) = slot(41);
    let bare = start_reference(rd)?;
    let mut reference = Samples::default();
    for i in 0..actions {
        let t = Instant::now();
        round_trip_reference(rd, i)?;
        reference.push(t.elapsed());
    }
    drop(bare);
    rows.push(Row {
        what: format!("click + screenshot round trip, {SIZE} (p50 / p99 of {actions})"),
        ours: format!("{} / {}", ours.fmt_ms(50.0), ours.fmt_ms(99.0)),
        reference: format!("{} / {} (xdotool + import)", reference.fmt_ms(50.0), reference.fmt_ms(99.0)),
        target: "≤ reference".into(),
        met: Some(ours.pct(50.0) <= reference.pct(50.0)),
    });
    rows.push(Row {
        what: "one idle desktop with Mousepad open (PSS of its process tree)".into(),
        ours: format!("{:.0} MB", memory as f64 / 1e6),
        reference: "—".into(),
        target: "reported".into(),
        met: None,
    });

    // N desktops at once, each acting in a loop: the most before a round trip's p50 passes 1 s.
    let mut fits = 0;
    let mut seen = Vec::new();
    let mut n = 1;
    while n <= max_desktops {
        let mut desktops = Vec::new();
        for i in 0..n {
            let (d, port) = slot(50 + n as u32 + i as u32);
            desktops.push((start_ours(&agent, &client, d, port).await?, port));
        }
        let mut tasks = Vec::new();
        for (_, port) in &desktops {
            let (client, port) = (client.clone(), *port);
            tasks.push(tokio::spawn(async move {
                let mut s = Samples::default();
                for i in 0..10 {
                    let t = Instant::now();
                    round_trip_ours(&client, port, i).await?;
                    s.push(t.elapsed());
                }
                anyhow::Ok(s)
            }));
        }
        let mut all = Samples::default();
        for t in tasks {
            for d in t.await??.sorted() {
                all.push(d);
            }
        }
        drop(desktops);
        let p50 = all.pct(50.0);
        seen.push(format!("{n}: {:.0} ms", p50.as_secs_f64() * 1000.0));
        if p50 > Duration::from_secs(1) {
            break;
        }
        fits = n;
        n *= 2;
    }
    rows.push(Row {
        what: format!("desktops at once on this machine, all acting (round trip p50 by count, up to {max_desktops})"),
        ours: format!("{fits} under 1 s"),
        reference: seen.join(", "),
        target: "reported".into(),
        met: None,
    });
    Ok(rows)
}
