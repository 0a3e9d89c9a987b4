//! The Kubernetes backend at scale: `orchard serve --backend kubernetes` against an API server
//! (the in-process double with injected costs and a kubelet running the real agent per pod, or
//! a real cluster with `--kubeconfig`), through a warm pool of thousands, claims all at once,
//! cold creates up to 10,000 live sandboxes, and every one deleted while creates keep coming.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::stats::Samples;
use crate::{Row, Server};

pub struct KubeBench {
    pub kubeconfig: Option<PathBuf>,
    pub namespace: String,
    pub image: String,
    pub sandboxes: usize,
    pub pool: usize,
    pub claims: usize,
    pub claim_rate: f64,
    pub latency_ms: u64,
    pub watch_delay_ms: u64,
    pub max_in_flight: usize,
    pub write_rate: f64,
    pub write_burst: u32,
    pub during_deletes: usize,
}

const AGENT_PORT: u16 = 7080;

fn agent_bin(orchard: &Path) -> PathBuf {
    std::env::var_os("ORCHARD_AGENT_BIN").map(PathBuf::from).unwrap_or_else(|| {
        let target = orchard.parent().and_then(Path::parent).unwrap_or(Path::new("target"));
        target.join("x86_64-unknown-linux-musl/agent/orchard-agent")
    })
}

/// 10,000 agents are 30,000 threads: more than the default pid_max of 32,768 leaves room for.
/// And the server holds a connection to each agent it talks to beside the bench's: more
/// descriptors than a default hard limit (the server raises its soft limit to the hard one).
fn make_room_for_agents(agents: usize) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let want = (agents as u64 * 2 + 20_000).max(getrlimit(Resource::RLIMIT_NOFILE).map_or(0, |l| l.1));
    if let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, want, want) {
        eprintln!("orchard-bench: could not raise the open-file limit to {want}: {e}");
    }
    let want = (agents * 4 + 20_000) as u64;
    let path = "/proc/sys/kernel/pid_max";
    let have: u64 = std::fs::read_to_string(path).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    if have < want {
        match std::fs::write(path, want.to_string()) {
            Ok(()) => eprintln!("orchard-bench: raised kernel.pid_max {have} -> {want} for {agents} agents"),
            Err(e) => eprintln!("orchard-bench: kernel.pid_max is {have}, {agents} agents may need {want}: {e}"),
        }
    }
}

pub async fn run(args: &KubeBench, bin: &PathBuf) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let dir = tempfile::Builder::new().prefix("orchard-bench-kube-").tempdir()?;
    // The API server: the double (with a kubelet), or the cluster the kubeconfig names.
    let double = match &args.kubeconfig {
        Some(_) => None,
        None => {
            make_room_for_agents(args.sandboxes + args.pool);
            let costs = orchard_kube_double::Costs {
                latency: Duration::from_millis(args.latency_ms),
                watch_delay: Duration::from_millis(args.watch_delay_ms),
                max_in_flight: args.max_in_flight,
            };
            let kubelet = orchard_kube_double::Kubelet::new(agent_bin(bin), AGENT_PORT, dir.path().join("pods"));
            Some(orchard_kube_double::Double::start(costs, Some(kubelet)).await?)
        }
    };
    let kubeconfig = match (&args.kubeconfig, &double) {
        (Some(path), _) => path.clone(),
        (None, Some(double)) => {
            let path = dir.path().join("kubeconfig");
            std::fs::write(
                &path,
                format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {}\n\
                     contexts:\n- name: double\n  context:\n    cluster: double\n    user: bench\n    namespace: {}\n\
                     current-context: double\nusers:\n- name: bench\n  user: {{}}\n",
                    double.url, args.namespace
                ),
            )?;
            path
        }
        (None, None) => unreachable!("a double when no kubeconfig"),
    };
    // SAFETY: the kube client below reads it; no other thread reads the environment.
    unsafe { std::env::set_var("KUBECONFIG", &kubeconfig) };
    let client = kube::Client::try_default().await.context("a Kubernetes client from the kubeconfig")?;
    let pods: kube::Api<Pod> = kube::Api::namespaced(client, &args.namespace);
    let on = match &double {
        Some(_) => format!(
            "the API server double ({} ms a request, {} ms watch delay, 429 past {} in flight)",
            args.latency_ms, args.watch_delay_ms, args.max_in_flight
        ),
        None => format!("the cluster of {}", kubeconfig.display()),
    };
    eprintln!("orchard-bench: Kubernetes suite against {on}");

    // The floor a claim stands on: one merge patch with a resourceVersion precondition, straight
    // to the API server, on a pod of our own.
    let floor = patch_floor(&pods, 200).await?;

    std::fs::write(dir.path().join("key"), "the bench's installation key")?;
    let live = args.sandboxes + args.pool + 64;
    let extra: Vec<String> = [
        "--backend",
        "kubernetes",
        "--kube-namespace",
        &args.namespace,
        "--agent-image",
        "registry.test/orchard-agent:bench",
        "--agent-port",
        &AGENT_PORT.to_string(),
        "--token-key-file",
        &dir.path().join("key").display().to_string(),
        "--host-id",
        "bench-host",
        "--reap-interval",
        "0.5",
        "--max-sandboxes",
        &live.to_string(),
        "--warm-pool",
        &format!("{}={}", args.image, args.pool),
        "--allowed-registry",
        registry_of(&args.image),
        "--kube-write-rate",
        &args.write_rate.to_string(),
        "--kube-write-burst",
        &args.write_burst.to_string(),
        "--max-connections-per-client",
        "30000",
        "--create-rate",
        "none",
        "--tenant-create-rate",
        "none",
        "--max-starting",
        "4096",
        "--default-timeout",
        "3600",
    ]
    .map(String::from)
    .to_vec();
    // 1. The warm pool fills from the server's start, in the background lane.
    let t = Instant::now();
    let server = Arc::new(Server::launch(bin, &extra, &[("KUBECONFIG", kubeconfig.display().to_string())])?);
    wait_for_pool(&pods, args.pool, Duration::from_secs(600)).await?;
    let fill = t.elapsed();
    rows.push(Row {
        what: format!("Kubernetes: warm pool of {} filled", args.pool),
        ours: format!("{:.1} s ({:.0} pods/s)", fill.as_secs_f64(), args.pool as f64 / fill.as_secs_f64()),
        reference: format!("write budget {}/s, 2 writes a pod", args.write_rate),
        target: "—".into(),
        met: None,
    });

    // 2. Claims arriving at a steady rate (open loop: each sent at its time, whatever the
    // earlier ones are doing), then, once the pool is full again, all at once.
    let before = double.as_ref().map(|d| d.requests());
    let t = Instant::now();
    let steady = paced_creates(&server, args.claims, args.claim_rate, |_| json!({"image": args.image})).await;
    let steady_took = t.elapsed();
    let (steady_ids, steady_times) = split(steady);
    rows.push(Row {
        what: format!(
            "Kubernetes: {} warm-pool claims at {}/s, create → answer p50 / p99",
            args.claims, args.claim_rate
        ),
        ours: format!(
            "{} / {} ({} ok in {:.1} s)",
            steady_times.fmt_ms(50.0),
            steady_times.fmt_ms(99.0),
            steady_ids.len(),
            steady_took.as_secs_f64()
        ),
        reference: format!(
            "one bare patch {} p50 / {} p99; agent-sandbox 851 ms p99 at 3,600",
            floor.fmt_ms(50.0),
            floor.fmt_ms(99.0)
        ),
        target: "p99 ≤ 100 ms".into(),
        met: Some(steady_ids.len() == args.claims && steady_times.pct(99.0) <= Duration::from_millis(100)),
    });
    wait_for_pool(&pods, args.pool, Duration::from_secs(600)).await?;
    let server_pid = server.child.id() as i32;
    let cpu_before = crate::refs::cpu_seconds(server_pid).unwrap_or(0.0);
    let t = Instant::now();
    let claimed = timed_creates(&server, args.claims, false, |_| json!({"image": args.image})).await;
    let burst = t.elapsed();
    let server_cpu = crate::refs::cpu_seconds(server_pid).unwrap_or(0.0) - cpu_before;
    let (burst_ids, claim_times) = split(claimed);
    rows.push(Row {
        what: format!("Kubernetes: {} warm-pool claims at once, create → answer p50 / p99", args.claims),
        ours: format!(
            "{} / {} ({} ok, all in {:.2} s)",
            claim_times.fmt_ms(50.0),
            claim_times.fmt_ms(99.0),
            burst_ids.len(),
            burst.as_secs_f64()
        ),
        reference: format!(
            "the server's own CPU: {:.2} ms a claim ({:.1} s of {:.1} s × 2 cores; the rest is the bench, the double and its agents)",
            server_cpu * 1000.0 / args.claims.max(1) as f64,
            server_cpu,
            burst.as_secs_f64()
        ),
        target: "p99 ≤ 100 ms".into(),
        met: Some(burst_ids.len() == args.claims && claim_times.pct(99.0) <= Duration::from_millis(100)),
    });
    let claim_ids: Vec<String> = steady_ids.into_iter().chain(burst_ids).collect();
    // ... and used: one command each, straight to its agent.
    let claims_ran = used(&server, &claim_ids).await;
    rows.push(Row {
        what: "  each claimed sandbox runs `echo`".into(),
        ours: format!("{claims_ran}/{} ok", claim_ids.len()),
        reference: "—".into(),
        target: "all".into(),
        met: Some(claims_ran == claim_ids.len()),
    });

    // 3. Cold creates up to the full count of live sandboxes.
    let cold = args.sandboxes.saturating_sub(claim_ids.len());
    let t = Instant::now();
    let made = timed_creates(
        &server,
        cold,
        true,
        |n| json!({"image": args.image, "entrypoint": [], "sandbox_id": format!("cold-{n}")}),
    )
    .await;
    let cold_took = t.elapsed();
    let (cold_ids, cold_times) = split(made);
    rows.push(Row {
        what: format!("Kubernetes: {cold} cold creates at once, create → Ready (from the watch) p50 / p99"),
        ours: format!(
            "{} / {} ({} ok in {:.1} s)",
            cold_times.fmt_ms(50.0),
            cold_times.fmt_ms(99.0),
            cold_ids.len(),
            cold_took.as_secs_f64()
        ),
        reference: format!("write budget {}/s after a burst of {}", args.write_rate, args.write_burst),
        target: "all ok".into(),
        met: Some(cold_ids.len() == cold),
    });
    let used_cold = used(&server, &cold_ids).await;
    let rss_live = crate::refs::status_kb(server.child.id() as i32, "VmRSS").unwrap_or(0) as f64 / 1024.0;
    let total_live = claim_ids.len() + cold_ids.len();
    rows.push(Row {
        what: format!("  host RSS with {total_live} live sandboxes (+{} pooled)", args.pool),
        ours: format!("{rss_live:.0} MB ({used_cold}/{} cold ones ran `echo`)", cold_ids.len()),
        reference: format!("{} agents running", double.as_ref().map_or(0, |d| d.running_agents())),
        target: "reported".into(),
        met: None,
    });

    // 4. Every sandbox deleted, while creates keep coming: deletes go first.
    let all: Vec<String> = claim_ids.iter().chain(&cold_ids).cloned().collect();
    let t = Instant::now();
    let server2 = server.clone();
    let storm = tokio::spawn({
        let image = args.image.clone();
        let n = args.during_deletes;
        async move {
            timed_creates(
                &server2,
                n,
                false,
                |i| json!({"image": image, "entrypoint": [], "sandbox_id": format!("late-{i}")}),
            )
            .await
        }
    });
    let deleted = timed_deletes(&server, &all).await;
    let deletes_took = t.elapsed();
    let (late_ids, late_times) = split(storm.await?);
    let (deleted_ok, delete_times) = split(deleted);
    rows.push(Row {
        what: format!(
            "Kubernetes: {} deletes at once beside {} creates, delete p50 / p99",
            all.len(),
            args.during_deletes
        ),
        ours: format!(
            "{} / {} ({} ok in {:.1} s)",
            delete_times.fmt_ms(50.0),
            delete_times.fmt_ms(99.0),
            deleted_ok.len(),
            deletes_took.as_secs_f64()
        ),
        reference: format!("the creates beside them: p50 {} ({} ok)", late_times.fmt_ms(50.0), late_ids.len()),
        target: "deletes never starved".into(),
        // Every delete answered, and the deletes' median before the creates' beside them.
        met: Some(deleted_ok.len() == all.len() && delete_times.pct(50.0) <= late_times.pct(50.0)),
    });
    let _ = timed_deletes(&server, &late_ids).await;
    let peak = server.peak_rss_kb() as f64 / 1024.0;
    rows.push(Row {
        what: "  host peak RSS over the whole run".into(),
        ours: format!("{peak:.0} MB"),
        reference: "—".into(),
        target: "reported".into(),
        met: None,
    });

    // 5. What the API server saw.
    if let (Some(double), Some(before)) = (&double, before) {
        // The pool's create (policy + pod) came before any claim; what follows it is the claim's.
        let logs: Vec<(String, Vec<String>)> =
            claim_ids.iter().map(|id| (id.clone(), double.writes_on(&format!("orchard-{id}")))).collect();
        // After the pool's two creates: the claim's patch, then the two deletes; any other
        // patch records activity (at most one every quarter TTL, capped at 30 s, of use).
        let activity =
            |log: &[String]| log.iter().skip(2).filter(|w| w.starts_with("PATCH pods")).count().saturating_sub(1);
        let claimed_writes: Vec<usize> =
            logs.iter().map(|(_, log)| log.len().saturating_sub(2) - activity(log)).collect();
        let activity_writes: usize = logs.iter().map(|(_, log)| activity(log)).sum();
        let max = claimed_writes.iter().max().copied().unwrap_or(0);
        let mean = claimed_writes.iter().sum::<usize>() as f64 / claimed_writes.len().max(1) as f64;
        for (id, log) in logs.iter().filter(|(_, log)| log.len() - activity(log) > 5).take(3) {
            eprintln!("orchard-bench: sandbox {id} cost {} writes: {}", log.len(), log.join(", "));
        }
        rows.push(Row {
            what: "Kubernetes: API writes from claim to gone, per warm-pool sandbox (mean / max)".into(),
            ours: format!("{mean:.2} / {max} (+{activity_writes} activity records in all)"),
            reference: "peers ~23 a claim; +2 to make the pool pod".into(),
            target: "≤ 3".into(),
            met: Some(max <= 3),
        });
        let after = double.requests();
        let delta = |k: &str| after.get(k).copied().unwrap_or(0) - before.get(k).copied().unwrap_or(0);
        rows.push(Row {
            what: "  reads during the run: single GETs of pods / LISTs of pods / watches".into(),
            ours: format!("{} / {} / {}", delta("GET pods"), delta("LIST pods"), delta("WATCH pods")),
            reference: format!("{} answered 429 by the in-flight limit", delta("429")),
            target: "readiness from the watch".into(),
            met: Some(delta("GET pods") < 100),
        });
    }
    drop(server);
    Ok(rows)
}

fn registry_of(image: &str) -> &str {
    image.split('/').next().unwrap_or(image)
}

async fn patch_floor(pods: &kube::Api<Pod>, n: usize) -> anyhow::Result<Samples> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orchard-bench-floor", "labels": {"app": "orchard-bench"}},
        "spec": {"containers": [{"name": "c", "image": "registry.test/pause:3", "command": ["/pause"]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await.context("creating the floor's pod")?;
    // Once the kubelet has written its status, nothing but us writes it.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut current = loop {
        let pod = pods.get("orchard-bench-floor").await?;
        if pod.status.as_ref().and_then(|s| s.phase.as_ref()).is_some() {
            break pod;
        }
        anyhow::ensure!(Instant::now() < deadline, "the floor's pod got no status from the kubelet in 60 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut samples = Samples::default();
    for i in 0..n {
        let version = current.metadata.resource_version.clone();
        let patch = json!({"metadata": {"resourceVersion": version, "annotations": {"n": i.to_string()}}});
        let t = Instant::now();
        current = pods.patch("orchard-bench-floor", &PatchParams::default(), &Patch::Merge(&patch)).await?;
        samples.push(t.elapsed());
    }
    pods.delete("orchard-bench-floor", &Default::default()).await?;
    Ok(samples)
}

async fn wait_for_pool(pods: &kube::Api<Pod>, n: usize, within: Duration) -> anyhow::Result<()> {
    let bar = indicatif::ProgressBar::new(n as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("{spinner} warm pool {pos}/{len} ready ({elapsed})")?);
    let deadline = Instant::now() + within;
    loop {
        let list = pods.list(&ListParams::default().labels("app.kubernetes.io/managed-by=orchard")).await?;
        let ready = list
            .items
            .iter()
            .filter(|p| p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("orchard.dev/pool")))
            .filter(|p| p.status.as_ref().and_then(|s| s.pod_ip.as_ref()).is_some())
            .count();
        bar.set_position(ready as u64);
        if ready >= n {
            bar.finish_and_clear();
            // The server sees them a watch delay later.
            tokio::time::sleep(Duration::from_secs(1)).await;
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "the warm pool has {ready}/{n} ready pods after {within:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

type Timed = Vec<anyhow::Result<(String, Duration)>>;

fn split(results: Timed) -> (Vec<String>, Samples) {
    let mut ids = Vec::new();
    let mut times = Samples::default();
    let mut first_error = None;
    for r in results {
        match r {
            Ok((id, took)) => {
                ids.push(id);
                times.push(took);
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        eprintln!("orchard-bench: first failure: {e:#}");
    }
    (ids, times)
}

/// One create, timed from its sending to its answer (to Ready, with `wait_ready`): its id too.
async fn create_one(server: &Server, body: serde_json::Value, wait_ready: bool) -> anyhow::Result<(String, Duration)> {
    let t = Instant::now();
    let v = server.post("/sandboxes", body).await?;
    let id = v["sandbox_id"].as_str().context("no sandbox_id")?.to_string();
    if wait_ready {
        // A create answers within 10 s, Ready or not; this waits for the rest.
        let url = format!("{}/sandboxes/{id}/wait?timeout=300", server.url);
        let ready: serde_json::Value = server.http.get(url).send().await?.error_for_status()?.json().await?;
        anyhow::ensure!(ready["status"] == "ready", "{id} is not ready: {ready}");
    }
    Ok((id, t.elapsed()))
}

/// Runs the requests as tasks, all at once, behind a progress bar.
async fn counted(
    n: usize,
    requests: impl Iterator<Item = impl std::future::Future<Output = anyhow::Result<(String, Duration)>> + Send + 'static>,
) -> Timed {
    let bar = indicatif::ProgressBar::new(n as u64);
    let out = crate::join_all_counted(&bar, requests).await;
    bar.finish_and_clear();
    out
}

/// `n` creates sent `per_second` apart, each at its time; each one's id and time to its answer.
async fn paced_creates(
    server: &Arc<Server>,
    n: usize,
    per_second: f64,
    body: impl Fn(usize) -> serde_json::Value,
) -> Timed {
    let start = tokio::time::Instant::now();
    let requests = (0..n).map(|i| {
        let (server, body) = (server.clone(), body(i));
        let at = start + Duration::from_secs_f64(i as f64 / per_second.max(0.001));
        async move {
            tokio::time::sleep_until(at).await;
            create_one(&server, body, false).await
        }
    });
    counted(n, requests).await
}

/// Requests the bench has in flight at most: a client holds a descriptor for each, and so does
/// the server, beside one per sandbox it talks to.
const MOST_AT_ONCE: usize = 4096;
static IN_FLIGHT: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MOST_AT_ONCE);

/// `n` creates fired at once (up to [`MOST_AT_ONCE`] in flight); each one's id and time to its answer.
async fn timed_creates(
    server: &Arc<Server>,
    n: usize,
    wait_ready: bool,
    body: impl Fn(usize) -> serde_json::Value,
) -> Timed {
    let requests = (0..n).map(|i| {
        let (server, body) = (server.clone(), body(i));
        async move {
            let _sending = IN_FLIGHT.acquire().await?;
            create_one(&server, body, wait_ready).await
        }
    });
    counted(n, requests).await
}

async fn timed_deletes(server: &Arc<Server>, ids: &[String]) -> Timed {
    let requests = ids.iter().cloned().map(|id| {
        let server = server.clone();
        async move {
            let _sending = IN_FLIGHT.acquire().await?;
            let t = Instant::now();
            server.delete(&id).await?;
            Ok((id, t.elapsed()))
        }
    });
    counted(ids.len(), requests).await
}

static FAILED_ECHO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Runs `echo` in each sandbox, 256 at a time; how many answered it.
async fn used(server: &Arc<Server>, ids: &[String]) -> usize {
    use futures::StreamExt;
    futures::stream::iter(ids.iter().cloned())
        .map(|id| {
            let server = server.clone();
            async move {
                let v = server.post(&format!("/v1/sandboxes/{id}/exec"), json!({"command": ["echo", "hi"]})).await;
                let ok = v.as_ref().is_ok_and(|v| v["exit_code"] == 0 && v["stdout"].to_string().contains("hi"));
                if !ok && !FAILED_ECHO.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    eprintln!("orchard-bench: first failed echo, in {id}: {v:?}");
                }
                ok
            }
        })
        .buffer_unordered(256)
        .filter(|ok| std::future::ready(*ok))
        .count()
        .await
}
