//! `orchard serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::backend::{BackendKind, KubeArgs};
use orchard_sandbox::Backend;
use orchard_sandbox_local::{LocalBackend, LocalConfig};
use orchard_server::{ApiKeys, AppState};

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    #[arg(long, value_enum, default_value = "local")]
    backend: BackendKind,
    #[command(flatten)]
    kube: KubeArgs,
    /// File of `tenant:key` pairs (one per line or comma-separated). Overrides ORCHARD_API_KEYS.
    #[arg(long)]
    api_keys: Option<PathBuf>,
    /// Tenants whose keys are admins: they replace shared plugins for everybody (others'
    /// uploads are their own).
    #[arg(long = "admin-tenant", env = "ORCHARD_ADMIN_TENANTS", value_delimiter = ',')]
    admin_tenants: Vec<String>,
    /// Serve without API keys on a non-loopback address (never do this on a shared network).
    #[arg(long)]
    insecure_no_auth: bool,
    /// Where sandboxes and the image cache live [default: /var/lib/orchard, or ~/.local/state/orchard].
    #[arg(long, env = "ORCHARD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The static orchard-agent binary.
    #[arg(long, env = "ORCHARD_AGENT_BIN")]
    agent_bin: Option<PathBuf>,
    /// The program cache: agent programs prepared ahead (`docs/src/harnesses.md`, the `program`
    /// harness), bound read-only at /opt/orchard/programs in every local sandbox.
    #[arg(long, env = "ORCHARD_PROGRAM_CACHE")]
    program_cache: Option<PathBuf>,
    /// Most sandboxes at once.
    #[arg(long, default_value_t = 4096)]
    max_sandboxes: usize,
    /// Idle timeout of sandboxes created without one, in seconds.
    #[arg(long, default_value_t = 3600)]
    default_timeout: u64,
    /// Registries spoken to over plain HTTP (host:port), e.g. a local test registry.
    #[arg(long)]
    insecure_registry: Vec<String>,
    /// Leave sandboxes running when the server stops (a restarted server adopts them).
    #[arg(long)]
    keep_sandboxes: bool,
    /// Plugins to load [default: the ones the build ships].
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    #[command(flatten)]
    admission: crate::admission_args::AdmissionArgs,
    /// Keep N ready sandboxes of IMAGE (IMAGE=N[,cpu=C][,memory=M][,disk=D][,network],
    /// repeatable): a create of that image with those resources (the defaults where none is
    /// given), and the network only with `network`, is served from it; its working directory and
    /// environment are set when it is claimed.
    #[arg(long = "warm-pool", value_parser = warm_pool)]
    warm_pools: Vec<WarmPool>,
    /// Where evaluations are kept: `sqlite:PATH` [default: sqlite:<state>/orchard.db] or
    /// `postgres://user:password@host:port/db` (several replicas share one).
    #[arg(long, env = "ORCHARD_DATABASE_URL")]
    database: Option<String>,
    /// Rollouts this replica runs at once (over every tenant's evaluations).
    #[arg(long, default_value_t = 16)]
    eval_concurrency: usize,
    /// Most rollouts one tenant may have running at once, over every replica.
    #[arg(long)]
    tenant_rollouts: Option<usize>,
    /// Seconds a claimed rollout stays this replica's without renewal: when a replica dies, its
    /// rollouts run again elsewhere after this long.
    #[arg(long, default_value_t = 30.0)]
    eval_lease: f64,
    /// A dataset clients may name: NAME=DIR (a folder of Harbor task folders; repeatable).
    #[arg(long = "dataset", value_parser = name_dir)]
    datasets: Vec<(String, PathBuf)>,
    /// A model endpoint tenants may name (repeatable, or comma-separated): HOST[:PORT],
    /// *.DOMAIN[:PORT], * (any public address), ADDRESS[:PORT] or CIDR[:PORT] ([v6] in brackets).
    /// Loopback, link-local and private addresses are reachable only through a rule naming
    /// them (a network, an address, or the host exactly). Without any, tenants reach no model.
    #[arg(long = "model-allow", env = "ORCHARD_MODEL_ALLOW", value_delimiter = ',')]
    model_allow: Vec<String>,
    /// Most bytes one uploaded dataset may unpack to (file content in all).
    #[arg(long, default_value = "256Mi", value_parser = bytes)]
    upload_max_bytes: u64,
    /// Most entries (files, folders, links) in one uploaded dataset.
    #[arg(long, default_value_t = 20_000)]
    upload_max_entries: u64,
    /// Most bytes of one file in an uploaded dataset.
    #[arg(long, default_value = "64Mi", value_parser = bytes)]
    upload_max_file_bytes: u64,
    /// Per-tenant quota on uploaded datasets (archives and unpacked files), or `none`.
    #[arg(long, default_value = "2Gi", value_parser = optional_bytes)]
    tenant_dataset_quota: Quota,
    /// Per-tenant quota on uploaded plugins (every version kept), or `none`.
    #[arg(long, default_value = "1Gi", value_parser = optional_bytes)]
    tenant_plugin_quota: Quota,
    /// Per-tenant quota on stored results (trajectories), or `none`: over it, new jobs are refused.
    #[arg(long, default_value = "10Gi", value_parser = optional_bytes)]
    tenant_result_quota: Quota,
    /// Datasets no job has named for this many days are deleted (0: kept until deleted).
    #[arg(long, default_value_t = 30)]
    dataset_retention_days: u64,
    /// The credential `/metrics` answers (as `Authorization: Bearer TOKEN`), besides an admin
    /// tenant's key. Without API keys (a loopback server), `/metrics` is open.
    #[arg(long, env = "ORCHARD_METRICS_TOKEN", hide_env_values = true)]
    metrics_token: Option<String>,
    /// Let a desktop's live view (`/v1/sandboxes/{id}/desktop/vnc?control=true`) send input to
    /// the desktop; without it, live views only watch.
    #[arg(long)]
    desktop_control: bool,
    /// Most sandboxes starting at once (creates beyond it wait their turn, up to a minute).
    #[arg(long, default_value_t = orchard_server::DEFAULT_MAX_STARTING)]
    max_starting: usize,
    /// Most connections open at once.
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Most connections open at once from one client address.
    #[arg(long, default_value_t = 256)]
    max_connections_per_client: usize,
    /// Seconds a client has to send a request's head (and a kept-alive connection may idle).
    #[arg(long, default_value_t = 30.0)]
    header_timeout: f64,
    /// Seconds a request body may send nothing before it is cut off.
    #[arg(long, default_value_t = 30.0)]
    body_idle_timeout: f64,
    /// This replica's name in the evaluation queue's leases [default: $POD_NAME or the hostname].
    #[arg(long, env = "POD_NAME")]
    replica: Option<String>,
}

fn name_dir(text: &str) -> Result<(String, PathBuf), String> {
    let (name, dir) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected NAME=DIR"))?;
    Ok((name.to_string(), PathBuf::from(dir)))
}

/// A size like `2Gi`, `512M` or `1000000`.
fn bytes(text: &str) -> Result<u64, String> {
    orchard_sandbox::parse_bytes(&text.into()).map_err(|e| format!("{text:?}: {e}"))
}

/// A size, or `none` for no limit (a type of its own: clap reads `Option<T>` as "T, if given").
#[derive(Debug, Clone, Copy)]
struct Quota(Option<u64>);

fn optional_bytes(text: &str) -> Result<Quota, String> {
    if text.eq_ignore_ascii_case("none") { Ok(Quota(None)) } else { bytes(text).map(|b| Quota(Some(b))) }
}

/// A `--warm-pool`: the image, how many, and the shape where it is not the default's.
#[derive(Debug, Clone)]
struct WarmPool {
    image: String,
    size: usize,
    cpu: Option<f64>,
    memory_bytes: Option<u64>,
    disk_bytes: Option<u64>,
    network: bool,
}

fn warm_pool(text: &str) -> Result<WarmPool, String> {
    let mut parts = text.split(',');
    let first = parts.next().unwrap_or_default();
    let (image, n) = first
        .rsplit_once('=')
        .ok_or_else(|| format!("{text:?}: expected IMAGE=N[,cpu=C][,memory=M][,disk=D][,network]"))?;
    let size = n.parse().map_err(|_| format!("{text:?}: {n:?} is not a count"))?;
    let mut pool =
        WarmPool { image: image.to_string(), size, cpu: None, memory_bytes: None, disk_bytes: None, network: false };
    for part in parts {
        match part.split_once('=') {
            Some(("cpu", v)) => {
                pool.cpu = Some(
                    v.parse()
                        .ok()
                        .filter(|c: &f64| *c > 0.0)
                        .ok_or_else(|| format!("{text:?}: cpu={v}: not a number of cores"))?,
                )
            }
            Some(("memory", v)) => {
                pool.memory_bytes = Some(bytes(v).map_err(|e| format!("{text:?}: memory={v}: {e}"))?)
            }
            Some(("disk", v)) => pool.disk_bytes = Some(bytes(v).map_err(|e| format!("{text:?}: disk={v}: {e}"))?),
            None if part == "network" => pool.network = true,
            _ => return Err(format!("{text:?}: {part:?} is not one of cpu=, memory=, disk= or network")),
        }
    }
    Ok(pool)
}

pub async fn run(args: ServeArgs, launcher: Arc<orchard_sandbox_local::Launcher>) -> anyhow::Result<()> {
    let keys = match &args.api_keys {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            ApiKeys::parse(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => ApiKeys::parse(&std::env::var("ORCHARD_API_KEYS").unwrap_or_default())
            .map_err(|e| anyhow::anyhow!("ORCHARD_API_KEYS: {e}"))?,
    };
    let keys = keys.with_admins(&args.admin_tenants).map_err(|e| anyhow::anyhow!("--admin-tenant: {e}"))?;
    orchard_server::check_listen_policy(&args.listen, &keys, args.insecure_no_auth).map_err(anyhow::Error::msg)?;
    let mut admission = args.admission.build(&keys, args.max_sandboxes, &args.insecure_registry)?;
    if args.backend == BackendKind::Kubernetes {
        // A process limit per pod is the kubelet's setting (podPidsLimit), not a pod field.
        admission.resources.default_pids = None;
    }
    let admission = Arc::new(admission);
    // The shape a create gets when it asks for the image and nothing else.
    let mut pools = Vec::new();
    for pool in &args.warm_pools {
        let image =
            admission.images.admit(&pool.image).map_err(|e| anyhow::anyhow!("--warm-pool {}: {e}", pool.image))?;
        let r = &admission.resources;
        let shape = orchard_sandbox::PoolShape {
            image,
            memory_bytes: pool.memory_bytes.or(r.default_memory_bytes),
            cpu: pool.cpu.or(r.default_cpu),
            pids: r.default_pids,
            disk_bytes: pool.disk_bytes.or(r.default_disk_bytes),
            block_network: !pool.network,
        };
        pools.push((shape, pool.size));
    }
    // A pooled sandbox, unclaimed, lives no longer than any sandbox may (Kubernetes: see
    // `KubernetesConfig::pool_deadline_seconds`).
    let pool_lifetime = admission.resources.max_lifetime_seconds.map(Duration::from_secs);
    let state_dir = args.state_dir.clone().unwrap_or_else(crate::agent_bin::default_state_dir);
    let backend: Arc<dyn Backend> = match args.backend {
        BackendKind::Local => {
            let mut config = LocalConfig::new(&state_dir, crate::agent_bin::find(args.agent_bin.clone())?, launcher);
            config.max_sandboxes = args.max_sandboxes;
            config.default_ttl = Duration::from_secs(args.default_timeout);
            config.registry.insecure = args.insecure_registry.clone();
            config.pools = pools;
            config.pool_lifetime = pool_lifetime;
            config.program_cache = args.program_cache.clone();
            LocalBackend::open(config).await.map_err(|e| anyhow::anyhow!("local backend: {e}"))?
        }
        BackendKind::Kubernetes => {
            args.kube
                .open(
                    args.max_sandboxes,
                    Duration::from_secs(args.default_timeout),
                    &args.insecure_registry,
                    pools,
                    pool_lifetime,
                )
                .await?
        }
    };
    let runtime = crate::plugins::runtime(&state_dir)?;
    // Known at once, compiled in the background (the most used first) or when a job first
    // needs one: the server answers while they compile.
    let registry = Arc::new(crate::plugins::deferred_registry(runtime.clone(), args.plugin_dir.as_deref())?);
    tracing::info!("{} plugins known; compiling them in the background", registry.deferred_count());
    let database =
        args.database.clone().unwrap_or_else(|| format!("sqlite:{}", state_dir.join("orchard.db").display()));
    let store = orchard_store::Store::open(&database).await.map_err(|e| anyhow::anyhow!("--database: {e}"))?;
    let compiling = {
        let (registry, store) = (registry.clone(), store.clone());
        tokio::spawn(async move {
            let first = store.harness_usage().await.unwrap_or_default();
            let started = std::time::Instant::now();
            let failed = tokio::task::spawn_blocking(move || {
                let failed = registry.load_deferred(&first);
                // Compiling every shipped plugin leaves ~400 MB of freed heap that glibc keeps
                // for reuse: handed back, an idle server holds what it uses (~60 MB), as one
                // started on the compiled cache does.
                #[cfg(target_env = "gnu")]
                // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps.
                unsafe {
                    libc::malloc_trim(0);
                }
                failed
            })
            .await
            .unwrap_or_default();
            tracing::info!(
                seconds = started.elapsed().as_secs_f64(),
                failed = failed.len(),
                "shipped plugins compiled"
            );
        })
    };
    // Plugins uploaded before this start (or to another replica) run here too.
    orchard_scheduler::sync_plugins(&store, &registry).await.map_err(|e| anyhow::anyhow!("--database: {e}"))?;
    let env = Arc::new(orchard_scheduler::Env {
        store,
        registry: registry.clone(),
        datasets_dir: state_dir.join("datasets"),
        datasets: args.datasets.iter().cloned().collect(),
        local_secrets: Default::default(),
        admission: Some(admission.clone()),
        upload_limits: orchard_scheduler::UploadLimits {
            total_bytes: args.upload_max_bytes,
            entries: args.upload_max_entries,
            file_bytes: args.upload_max_file_bytes,
        },
        egress: orchard_egress::Policy::allow(&args.model_allow).map_err(anyhow::Error::msg)?,
        // Admission's defaults apply to every tenant's sandbox.
        sandbox_defaults: Default::default(),
        browser: crate::agent_bin::browser_placement(),
    });
    if args.model_allow.is_empty() {
        tracing::warn!("no --model-allow rule: jobs and proxy sessions that name a model endpoint will be refused");
    }
    let replica = args.replica.clone().unwrap_or_else(|| {
        nix::unistd::gethostname().ok().and_then(|h| h.into_string().ok()).unwrap_or_else(|| "orchard".into())
    });
    let runner = orchard_scheduler::Runner::new(
        env.clone(),
        backend.clone(),
        runtime,
        orchard_scheduler::RunnerConfig {
            owner: format!("{replica}/{}/{}", std::process::id(), orchard_scheduler::new_eval_id()),
            predecessors: Some(format!("{replica}/")),
            sandbox_tenant: format!("orchard-eval.{replica}"),
            capacity: args.eval_concurrency.max(1),
            lease: Duration::from_secs_f64(args.eval_lease.max(1.0)),
            tenant_quota: args.tenant_rollouts,
        },
    );
    let quotas = orchard_evals_api::StorageQuotas {
        dataset_bytes: args.tenant_dataset_quota.0,
        plugin_bytes: args.tenant_plugin_quota.0,
        result_bytes: args.tenant_result_quota.0,
    };
    let service = Arc::new(orchard_evals_api::EvalService { env, runner: runner.clone(), quotas });
    let retention =
        (args.dataset_retention_days > 0).then(|| Duration::from_secs(args.dataset_retention_days * 24 * 3600));
    let sweeping = {
        let service = service.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(600));
            loop {
                tick.tick().await;
                orchard_evals_api::sweep_datasets(&service, retention).await;
            }
        })
    };
    let state = AppState::new(backend.clone(), keys, admission, Some(registry))
        .with_evals(service)
        .with_metrics_token(args.metrics_token.clone())
        .with_desktop_control(args.desktop_control)
        .with_max_starting(args.max_starting);
    let housekeeping = orchard_server::spawn_housekeeping(state.clone(), Duration::from_secs(1));
    let (stop_runner, runner_stopped) = tokio::sync::oneshot::channel::<()>();
    let running = {
        let runner = runner.clone();
        tokio::spawn(async move {
            runner
                .run(async {
                    let _ = runner_stopped.await;
                })
                .await
        })
    };
    let listener = listen(args.listen).with_context(|| format!("listening on {}", args.listen))?;
    tracing::info!(
        "orchard {} serving on http://{} (backend {})",
        env!("CARGO_PKG_VERSION"),
        listener.local_addr()?,
        backend.name()
    );
    let limits = orchard_server::ConnectionLimits {
        total: args.max_connections.max(1),
        per_client: args.max_connections_per_client.max(1),
        header_timeout: Duration::from_secs_f64(args.header_timeout.max(0.1)),
        body_idle: Duration::from_secs_f64(args.body_idle_timeout.max(0.1)),
    };
    orchard_server::serve_with(listener, state, limits, shutdown_signal()).await?;
    // Claims go back to the queue (another replica, or this one restarted, runs them).
    let _ = stop_runner.send(());
    let _ = running.await;
    housekeeping.abort();
    sweeping.abort();
    compiling.abort();
    if args.backend == BackendKind::Kubernetes {
        tracing::info!("stopping; sandbox pods stay for the other replicas (or this one restarted) to serve");
        backend.shutdown().await;
    } else if args.keep_sandboxes {
        tracing::info!("stopping; sandboxes are left running (--keep-sandboxes)");
    } else {
        tracing::info!("stopping; deleting sandboxes");
        backend.shutdown().await;
    }
    Ok(())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// Connections the kernel queues for accept before dropping new ones: tokio's `bind` asks for
/// 1,024, and a burst of thousands of clients (a benchmark, a fleet of trainers starting
/// together) overflowed it, each dropped connection retried by its client a second later. The
/// kernel caps it at `net.core.somaxconn`.
const ACCEPT_BACKLOG: u32 = 8192;

fn listen(addr: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}
