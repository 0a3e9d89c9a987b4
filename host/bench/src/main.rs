//! `orchard-bench`: the sandbox layer's numbers, each beside a reference measured in the same run.
//!
//! Starts a real `orchard serve` (release build) with its own state directory and drives it over
//! HTTP like any client would. Run it with `cargo xtask bench`.

mod bar;
mod bar_real;
mod browser;
mod desktop;
mod fork;
mod kube;
mod plugins;
mod refs;
mod service;
mod startup;
mod stats;
mod verifier;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use stats::Samples;

#[derive(Parser)]
#[command(about = "Benchmarks of Orchard's sandbox layer")]
struct Args {
    /// Exec round trips to time.
    #[arg(long, default_value_t = 2000)]
    execs: usize,
    /// Create -> first exec cycles to time.
    #[arg(long, default_value_t = 100)]
    creates: usize,
    /// Sandboxes in the parallel run.
    #[arg(long, default_value_t = 1000)]
    parallel: usize,
    /// Commands per sandbox in the parallel run.
    #[arg(long, default_value_t = 4)]
    commands: usize,
    /// The orchard binary [default: beside this one].
    #[arg(long)]
    orchard: Option<PathBuf>,
    /// Browsers started (and timed) in the browser suite, each way.
    #[arg(long, default_value_t = 10)]
    browsers: usize,
    /// Click + screenshot round trips per browser.
    #[arg(long, default_value_t = 20)]
    browser_actions: usize,
    /// Browser rollouts at once.
    #[arg(long, default_value_t = 16)]
    browser_rollouts: usize,
    /// Desktops started (and timed) in the desktop suite, each way; click + screenshot round
    /// trips; the most desktops at once.
    #[arg(long, default_value_t = 10)]
    desktops: usize,
    #[arg(long, default_value_t = 50)]
    desktop_actions: usize,
    #[arg(long, default_value_t = 16)]
    max_desktops: usize,
    /// Forks of a 50 MB writable layer timed in the fork suite (each way).
    #[arg(long, default_value_t = 20)]
    forks: usize,
    /// Which benchmarks: sandboxes, plugins, service, startup, verifier, browser, desktop, fork, kubernetes, bar (simulated),
    /// bar-real (through `orchard serve`), or all.
    #[arg(long, default_value = "all")]
    suite: String,
    /// Oracle rollouts in the end-to-end plugin run.
    #[arg(long, default_value_t = 1000)]
    rollouts: u32,
    /// Oracle rollouts of the example tasks through the evaluation service (and `orchard eval`).
    #[arg(long, default_value_t = 10_000)]
    service_rollouts: u32,
    /// Rollouts at once in the service runs and their `orchard eval` reference.
    #[arg(long, default_value_t = 16)]
    service_concurrency: usize,
    /// Size of the warm pool the server keeps (host image, default resources).
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Fresh coin tasks in the bar-real suite, the rollouts each side spends per task set, and
    /// how many task sets (seeds 1..=N) are pooled.
    #[arg(long, default_value_t = 200)]
    bar_tasks: usize,
    #[arg(long, default_value_t = 1600)]
    bar_budget: u32,
    #[arg(long, default_value_t = 3)]
    bar_seeds: u64,
    /// Kubernetes suite: a real cluster's kubeconfig; without it, the in-process API server
    /// double with a kubelet that runs the real agent per pod.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Kubernetes suite: the namespace sandboxes go to, and the image they run (its registry
    /// is allowed; the warm pool is of it).
    #[arg(long, default_value = "orchard-sandboxes")]
    kube_namespace: String,
    #[arg(long, default_value = "registry.test/python:3.12")]
    kube_image: String,
    /// Kubernetes suite: live sandboxes at the peak, the warm pool, and the claims made from
    /// it in each of its two phases (steady, then at once).
    #[arg(long, default_value_t = 10_000)]
    kube_sandboxes: usize,
    #[arg(long, default_value_t = 3_700)]
    kube_pool: usize,
    #[arg(long, default_value_t = 3_600)]
    kube_claims: usize,
    /// Kubernetes suite: claims a second in the steady phase (the burst phase sends them all at once).
    #[arg(long, default_value_t = 400.0)]
    kube_claim_rate: f64,
    /// Kubernetes suite, the double's costs: latency of each request, delay of each watch
    /// event, and requests in flight past which it answers 429.
    #[arg(long, default_value_t = 5)]
    kube_latency_ms: u64,
    #[arg(long, default_value_t = 10)]
    kube_watch_delay_ms: u64,
    #[arg(long, default_value_t = 400)]
    kube_max_in_flight: usize,
    /// Kubernetes suite: the server's API write rate and burst (--kube-write-rate/-burst).
    #[arg(long, default_value_t = 1000.0)]
    kube_write_rate: f64,
    #[arg(long, default_value_t = 4000)]
    kube_write_burst: u32,
    /// Kubernetes suite: creates fired while every sandbox is deleted.
    #[arg(long, default_value_t = 1000)]
    kube_during_deletes: usize,
}

struct Server {
    child: Child,
    url: String,
    http: reqwest::Client,
    state: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(bin: &PathBuf, max: usize, pool: usize) -> anyhow::Result<Server> {
        // Every request of the bench comes from one loopback address: a thousand sandboxes at
        // once need as many connections from it (the server's default allows 256 per client).
        let args = [
            "--max-sandboxes".to_string(),
            max.to_string(),
            "--warm-pool".into(),
            format!("host={pool}"),
            "--max-connections-per-client".into(),
            "4096".into(),
        ];
        Self::launch(bin, &args, &[])
    }

    /// `orchard serve` on a loopback port of its own, with a fresh state directory.
    fn launch(bin: &PathBuf, extra: &[String], env: &[(&str, String)]) -> anyhow::Result<Server> {
        let state = tempfile::Builder::new().prefix("orchard-bench-").tempdir()?;
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0")?;
            l.local_addr()?.port()
        };
        // reqwest is built with `rustls-no-provider` in this workspace (oci-client asks for it):
        // pick the provider before any client exists.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().pool_max_idle_per_host(512).timeout(Duration::from_secs(300)).build()?;
        let child = Command::new(bin)
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(extra)
            .arg("--state-dir")
            .arg(state.path())
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", std::env::var("ORCHARD_BENCH_LOG").unwrap_or_else(|_| "warn".into()))
            .stdout(Stdio::null())
            .stderr(match std::env::var_os("ORCHARD_BENCH_SERVER_LOG") {
                Some(path) => Stdio::from(std::fs::File::create(path)?),
                None => Stdio::inherit(),
            })
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let server = Server { child, url: format!("http://127.0.0.1:{port}"), http, state };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("orchard serve did not come up");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        let resp = self.http.post(format!("{}{path}", self.url)).json(&body).send().await?;
        let status = resp.status();
        let v: Value = resp.json().await?;
        if !status.is_success() {
            bail!("POST {path}: {status} {v}");
        }
        Ok(v)
    }

    async fn delete(&self, id: &str) -> anyhow::Result<()> {
        let url = format!("{}/sandboxes/{id}", self.url);
        // A delete is idempotent: one sent on a kept-alive connection the server was closing
        // just then ("connection closed before message completed") is sent again, once.
        let resp = match self.http.delete(&url).send().await {
            Err(e) if e.is_request() && !e.is_timeout() => self.http.delete(&url).send().await?,
            other => other?,
        };
        if !resp.status().is_success() {
            bail!("DELETE {id}: {}", resp.status());
        }
        Ok(())
    }

    /// A plain create (served from the warm pool while it has sandboxes).
    async fn create(&self) -> anyhow::Result<String> {
        let v = self.post("/sandboxes", json!({"image": "host"})).await?;
        Ok(v["sandbox_id"].as_str().context("no id")?.to_string())
    }

    /// A create the pool cannot serve (it names its id): a sandbox started from nothing.
    async fn create_cold(&self, n: usize) -> anyhow::Result<String> {
        let v = self
            .post("/sandboxes", json!({"image": "host", "sandbox_id": format!("cold-{n}-{}", std::process::id())}))
            .await?;
        Ok(v["sandbox_id"].as_str().context("no id")?.to_string())
    }

    /// Orchard Env's route: the job runs and is answered in one call (`wait: true`).
    async fn exec_compat(&self, id: &str) -> anyhow::Result<()> {
        let v = self.post(&format!("/sandboxes/{id}/exec"), json!({"command": "true", "wait": true})).await?;
        if v["exit_code"] != 0 {
            bail!("exec failed: {v}");
        }
        Ok(())
    }

    async fn exec_true(&self, id: &str) -> anyhow::Result<()> {
        let v = self.post(&format!("/v1/sandboxes/{id}/exec"), json!({"command": ["true"]})).await?;
        if v["exit_code"] != 0 {
            bail!("exec failed: {v}");
        }
        Ok(())
    }

    fn peak_rss_kb(&self) -> u64 {
        refs::status_kb(self.child.id() as i32, "VmHWM").unwrap_or(0)
    }
}

pub(crate) struct Row {
    pub(crate) what: String,
    pub(crate) ours: String,
    pub(crate) reference: String,
    pub(crate) target: String,
    pub(crate) met: Option<bool>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The BAR simulation needs no server, sandbox or plugin.
    if args.suite == "bar" {
        print_table(&bar::rows(&orchard_bar::sim::Setup::default()));
        return Ok(());
    }
    let bin = match &args.orchard {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("orchard"),
    };
    anyhow::ensure!(bin.is_file(), "{} not found: build it with `cargo build --release -p orchard-cli`", bin.display());
    // Plugins compiled once, into a cache every server of the run maps (as an operator's server
    // does after its first start): peak RSS is then the servers' own, not the compiler's.
    let cache = bin.parent().and_then(std::path::Path::parent).map(|t| t.join("bench-plugin-cache"));
    if let Some(cache) = &cache {
        // SAFETY: set before any other thread of this process exists.
        unsafe { std::env::set_var("ORCHARD_PLUGIN_CACHE", cache) };
        let warmed = Command::new(&bin).args(["plugin", "list"]).stdout(Stdio::null()).status()?;
        anyhow::ensure!(warmed.success(), "orchard plugin list failed");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let mut rows = Vec::new();
    if matches!(args.suite.as_str(), "all" | "sandboxes") {
        rows.extend(runtime.block_on(run(&args, &bin))?);
    }
    if matches!(args.suite.as_str(), "all" | "plugins") {
        rows.extend(runtime.block_on(plugins::run(&bin, 2000))?);
        let examples = bin.ancestors().nth(3).map(|root| root.join("examples/tasks")).filter(|p| p.is_dir());
        let examples = examples.ok_or_else(|| anyhow::anyhow!("examples/tasks not found above {}", bin.display()))?;
        rows.extend(plugins::rollouts(&bin, &examples, args.rollouts)?);
    }
    if matches!(args.suite.as_str(), "all" | "service") {
        let examples = bin.ancestors().nth(3).map(|root| root.join("examples/tasks")).filter(|p| p.is_dir());
        let examples = examples.ok_or_else(|| anyhow::anyhow!("examples/tasks not found above {}", bin.display()))?;
        rows.extend(runtime.block_on(service::run(
            &bin,
            &examples,
            args.service_rollouts,
            args.service_concurrency,
        ))?);
    }
    if matches!(args.suite.as_str(), "all" | "startup") {
        let examples = bin.ancestors().nth(3).map(|root| root.join("examples/tasks")).filter(|p| p.is_dir());
        let examples = examples.ok_or_else(|| anyhow::anyhow!("examples/tasks not found above {}", bin.display()))?;
        rows.extend(runtime.block_on(startup::run(&bin, &examples, 3))?);
    }
    if matches!(args.suite.as_str(), "all" | "verifier") {
        let swe = bin.ancestors().nth(3).map(|root| root.join("examples/swe-mini")).filter(|p| p.is_dir());
        let swe = swe.ok_or_else(|| anyhow::anyhow!("examples/swe-mini not found above {}", bin.display()))?;
        rows.extend(verifier::rows(&bin, &swe, 20)?);
    }
    if matches!(args.suite.as_str(), "all" | "browser") {
        let gui = bin.ancestors().nth(3).map(|root| root.join("examples/gui")).filter(|p| p.is_dir());
        let gui = gui.ok_or_else(|| anyhow::anyhow!("examples/gui not found above {}", bin.display()))?;
        rows.extend(runtime.block_on(browser::run(
            &bin,
            &gui,
            args.browsers,
            args.browser_actions,
            args.browser_rollouts,
        ))?);
    }
    if matches!(args.suite.as_str(), "all" | "desktop") {
        rows.extend(runtime.block_on(desktop::run(&bin, args.desktops, args.desktop_actions, args.max_desktops))?);
    }
    if matches!(args.suite.as_str(), "all" | "fork") {
        rows.extend(runtime.block_on(fork::run(&bin, args.forks))?);
    }
    if matches!(args.suite.as_str(), "all" | "kubernetes") {
        let kube = kube::KubeBench {
            kubeconfig: args.kubeconfig.clone(),
            namespace: args.kube_namespace.clone(),
            image: args.kube_image.clone(),
            sandboxes: args.kube_sandboxes,
            pool: args.kube_pool,
            claims: args.kube_claims,
            claim_rate: args.kube_claim_rate,
            latency_ms: args.kube_latency_ms,
            watch_delay_ms: args.kube_watch_delay_ms,
            max_in_flight: args.kube_max_in_flight,
            write_rate: args.kube_write_rate,
            write_burst: args.kube_write_burst,
            during_deletes: args.kube_during_deletes,
        };
        rows.extend(runtime.block_on(kube::run(&kube, &bin))?);
    }
    if matches!(args.suite.as_str(), "all" | "bar") {
        rows.extend(bar::rows(&orchard_bar::sim::Setup::default()));
    }
    if matches!(args.suite.as_str(), "all" | "bar-real") {
        rows.extend(runtime.block_on(bar_real::run(&bin, args.bar_tasks, args.bar_budget, args.bar_seeds))?);
    }
    anyhow::ensure!(
        !rows.is_empty(),
        "--suite: sandboxes, plugins, service, startup, verifier, browser, desktop, fork, kubernetes, bar, bar-real or all"
    );
    print_table(&rows);
    Ok(())
}

async fn run(args: &Args, bin: &PathBuf) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let server = Arc::new(Server::start(bin, args.parallel + args.pool + 16, args.pool)?);
    eprintln!("orchard-bench: server at {} (state {})", server.url, server.state.path().display());

    // 1. Exec round trip, through Orchard Env's route and through /v1, beside the floor.
    let id = server.create().await?;
    for _ in 0..50 {
        server.exec_true(&id).await?;
        server.exec_compat(&id).await?;
    }
    let (mut ours, mut compat) = (Samples::default(), Samples::default());
    for _ in 0..args.execs {
        let t = Instant::now();
        server.exec_compat(&id).await?;
        compat.push(t.elapsed());
        let t = Instant::now();
        server.exec_true(&id).await?;
        ours.push(t.elapsed());
    }
    let floor = refs::fork_exec_true(args.execs);
    let ratio = compat.pct(50.0).as_secs_f64() / floor.pct(50.0).as_secs_f64();
    rows.push(Row {
        what: "exec `true`, Orchard Env route (wait: true), p50".into(),
        ours: compat.fmt_ms(50.0),
        reference: format!("{} bare fork+exec on the host; Orchard Env's agent 2.7 ms", floor.fmt_ms(50.0)),
        target: "≤ 1.5× the floor".into(),
        met: Some(ratio <= 1.5),
    });
    rows.push(Row {
        what: "  … as a multiple of the fork+exec floor".into(),
        ours: format!("{ratio:.2}×"),
        reference: "—".into(),
        target: "≤ 1.5×".into(),
        met: Some(ratio <= 1.5),
    });
    rows.push(Row {
        what: "exec `true` via /v1, p50 / p99".into(),
        ours: format!("{} / {}", ours.fmt_ms(50.0), ours.fmt_ms(99.0)),
        reference: format!("{} / {} bare fork+exec", floor.fmt_ms(50.0), floor.fmt_ms(99.0)),
        target: "—".into(),
        met: None,
    });

    // 2. Agent idle RSS (the sandbox above has been idle since its last exec).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let record: Value = serde_json::from_slice(&std::fs::read(
        server.state.path().join("run/sandboxes").join(&id).join("sandbox.json"),
    )?)?;
    let agent_rss = refs::status_kb(record["init_pid"].as_i64().unwrap_or(0) as i32, "VmRSS").unwrap_or(0);
    let python_rss = refs::python_http_server_rss_kb();
    rows.push(Row {
        what: "agent idle RSS".into(),
        ours: format!("{:.1} MB", agent_rss as f64 / 1024.0),
        reference: match python_rss {
            Some(kb) => format!("{:.1} MB idle `python3 -m http.server`", kb as f64 / 1024.0),
            None => "python3 not available".into(),
        },
        target: "≤ 5 MB".into(),
        met: Some(agent_rss > 0 && agent_rss <= 5 * 1024),
    });
    server.delete(&id).await?;

    // 3. Create -> first exec completed: from the warm pool (kept warm: a pause between
    //    cycles lets it refill, as between a trainer's batches) and from nothing.
    for n in 0..5 {
        let id = server.create_cold(1_000_000 + n).await?;
        server.delete(&id).await?;
    }
    let (mut warm, mut cold) = (Samples::default(), Samples::default());
    for _ in 0..args.creates {
        // Long enough for the pool to have made up for the last claim (a cold start, below).
        tokio::time::sleep(Duration::from_millis(150)).await;
        let t = Instant::now();
        let id = server.create().await?;
        server.exec_true(&id).await?;
        warm.push(t.elapsed());
        server.delete(&id).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for n in 0..args.creates {
        let t = Instant::now();
        let id = server.create_cold(n).await?;
        server.exec_true(&id).await?;
        cold.push(t.elapsed());
        server.delete(&id).await?;
    }
    let bwrap = refs::bwrap_start(args.creates.min(50));
    let bwrap = bwrap.map(|s| s.fmt_ms(50.0)).unwrap_or_else(|e| e);
    rows.push(Row {
        what: "create → first exec, warm pool, p50".into(),
        ours: warm.fmt_ms(50.0),
        reference: format!("bare `bwrap … true` {bwrap}"),
        target: "≤ 1 ms".into(),
        met: Some(warm.pct(50.0) <= Duration::from_millis(1)),
    });
    let runc = refs::runc_start(20);
    rows.push(Row {
        what: "create → first exec, cold (10 GiB disk limit, own userns, seccomp), p50 / p99".into(),
        ours: format!("{} / {}", cold.fmt_ms(50.0), cold.fmt_ms(99.0)),
        reference: format!(
            "`runc run` {}; Daytona ~0.1 s, E2B 0.44 s (published)",
            runc.map(|s| s.fmt_ms(50.0)).unwrap_or_else(|e| e)
        ),
        target: "≤ 10 ms / 20 ms".into(),
        met: Some(cold.pct(50.0) <= Duration::from_millis(10) && cold.pct(99.0) <= Duration::from_millis(20)),
    });

    // 4. Many sandboxes in parallel: from nothing, then from a warm pool as large as the run.
    rows.extend(parallel(&server, args, false).await);
    drop(server);
    let pooled = Arc::new(Server::start(bin, args.parallel + args.pool + 16, args.parallel)?);
    wait_pool_full(&pooled, args.parallel).await;
    rows.extend(parallel(&pooled, args, true).await);
    Ok(rows)
}

/// Many sandboxes in parallel: all created, then all run their commands, then all deleted (each
/// phase with every sandbox at once), so that each phase's cost shows on its own.
async fn parallel(server: &Arc<Server>, args: &Args, from_pool: bool) -> Vec<Row> {
    let mut rows = Vec::new();
    let n = args.parallel;
    let bar = indicatif::ProgressBar::new((n * 3) as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {wide_bar} {pos}/{len} steps ({elapsed}) {msg}")
            .expect("template"),
    );
    let started = Instant::now();
    bar.set_message("creating");
    let created = join_all_counted(
        &bar,
        (0..n).map(|i| {
            let server = server.clone();
            async move {
                // Named ids are started from nothing; plain creates take pooled sandboxes.
                if from_pool { server.create().await } else { server.create_cold(2_000_000 + i).await }
            }
        }),
    )
    .await;
    let t_create = started.elapsed();
    let ids: Vec<String> = created.iter().filter_map(|r| r.as_ref().ok().cloned()).collect();
    bar.set_message("running commands");
    let commands = args.commands;
    let ran = join_all_counted(
        &bar,
        ids.iter().cloned().map(|id| {
            let server = server.clone();
            async move {
                for _ in 0..commands {
                    server.post(&format!("/v1/sandboxes/{id}/exec"), json!({"command": "echo $HOSTNAME"})).await?;
                }
                anyhow::Ok(())
            }
        }),
    )
    .await;
    let t_exec = started.elapsed() - t_create;
    bar.set_message("deleting");
    let deleted = join_all_counted(
        &bar,
        ids.iter().cloned().map(|id| {
            let server = server.clone();
            async move { server.delete(&id).await }
        }),
    )
    .await;
    let total = started.elapsed();
    bar.finish_and_clear();
    let failures: Vec<String> = created
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| format!("create: {e:#}")))
        .chain(ran.iter().filter_map(|r| r.as_ref().err().map(|e| format!("exec: {e:#}"))))
        .chain(deleted.iter().filter_map(|r| r.as_ref().err().map(|e| format!("delete: {e:#}"))))
        .collect();
    if let Some(first) = failures.first() {
        eprintln!("orchard-bench: {} failures; first: {first}", failures.len());
    }
    let ok = ids.len() - ran.iter().filter(|r| r.is_err()).count() - deleted.iter().filter(|r| r.is_err()).count();
    let total_cmds = (ok * args.commands) as f64;
    rows.push(Row {
        what: format!(
            "{n} sandboxes × {} commands, in parallel, {}",
            args.commands,
            if from_pool { "from a warm pool" } else { "from nothing" }
        ),
        ours: format!("{:.1} % ok in {:.1} s", 100.0 * ok as f64 / n as f64, total.as_secs_f64()),
        reference: "Orchard Env: 100 % ok, 26 s (cluster)".into(),
        target: "100 %".into(),
        met: Some(ok == n),
    });
    rows.push(Row {
        what: "  phases: create / commands / delete".into(),
        ours: format!(
            "{:.1} / {:.1} / {:.1} s",
            t_create.as_secs_f64(),
            t_exec.as_secs_f64(),
            (total - t_create - t_exec).as_secs_f64()
        ),
        reference: "—".into(),
        target: "—".into(),
        met: None,
    });
    rows.push(Row {
        what: "  commands/s, end to end (all commands / total)".into(),
        ours: format!("{:.0} cmd/s", total_cmds / total.as_secs_f64()),
        reference: "Orchard Env: ~154 cmd/s (4000 / 26 s)".into(),
        target: "≥ 500 cmd/s".into(),
        met: Some(total_cmds / total.as_secs_f64() >= 500.0),
    });
    rows.push(Row {
        what: format!("  commands/s with {n} sandboxes live"),
        ours: format!("{:.0} cmd/s", total_cmds / t_exec.as_secs_f64()),
        reference: "—".into(),
        target: "—".into(),
        met: None,
    });
    let rss = server.peak_rss_kb() as f64 / 1024.0;
    rows.push(Row {
        what: "  host peak RSS (orchard serve)".into(),
        ours: format!("{rss:.0} MB"),
        reference: "—".into(),
        target: "< 150 MB".into(),
        met: Some(rss < 150.0),
    });
    rows
}

/// Waits until the server's warm pool holds `n` sandboxes (they are the state dir's records).
async fn wait_pool_full(server: &Server, n: usize) {
    let dir = server.state.path().join("run/sandboxes");
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} filling the warm pool {pos}/{len} ({elapsed})")
            .expect("template"),
    );
    loop {
        let have = std::fs::read_dir(&dir).map(|d| d.count()).unwrap_or(0);
        bar.set_position(have as u64);
        if have >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bar.finish_and_clear();
}

/// Runs futures as tasks, all at once, ticking the bar as each finishes.
async fn join_all_counted<T: Send + 'static>(
    bar: &indicatif::ProgressBar,
    futures: impl Iterator<Item = impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static>,
) -> Vec<anyhow::Result<T>> {
    let tasks: Vec<_> = futures
        .map(|f| {
            let bar = bar.clone();
            tokio::spawn(async move {
                let r = f.await;
                bar.inc(1);
                r
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        out.push(t.await.unwrap_or_else(|e| Err(anyhow::anyhow!("task: {e}"))));
    }
    out
}

fn print_table(rows: &[Row]) {
    let w0 = rows.iter().map(|r| r.what.chars().count()).max().unwrap_or(0);
    let w1 = rows.iter().map(|r| r.ours.chars().count()).max().unwrap_or(0).max(4);
    let w2 = rows.iter().map(|r| r.reference.chars().count()).max().unwrap_or(0).max(9);
    let w3 = rows.iter().map(|r| r.target.chars().count()).max().unwrap_or(0).max(6);
    let pad = |s: &str, w: usize| format!("{s}{}", " ".repeat(w.saturating_sub(s.chars().count())));
    println!(
        "| {} | {} | {} | {} | met |",
        pad("what", w0),
        pad("ours", w1),
        pad("reference (same run)", w2),
        pad("target", w3)
    );
    println!("|{}|{}|{}|{}|-----|", "-".repeat(w0 + 2), "-".repeat(w1 + 2), "-".repeat(w2 + 2), "-".repeat(w3 + 2));
    for r in rows {
        let met = match r.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "",
        };
        println!(
            "| {} | {} | {} | {} | {} |",
            pad(&r.what, w0),
            pad(&r.ours, w1),
            pad(&r.reference, w2),
            pad(&r.target, w3),
            pad(met, 3)
        );
    }
}
