//! `orchard eval`: tasks × harness × tools × model × grader × attempts, on local or Kubernetes sandboxes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use orchard_eval::{Job, RolloutStatus, Summary, load_tasks, run_job, summarize, write_outputs};
use orchard_model::{ModelClient, ModelConfig};
use orchard_runtime::{Capability, Grants, Limits, PluginKind};
use orchard_sandbox::Backend;
use orchard_sandbox_local::{Launcher, LocalBackend, LocalConfig};

use crate::backend::{BackendKind, KubeArgs};

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A task folder, or a folder of task folders (Harbor layout).
    tasks: PathBuf,
    /// The harness: a shipped plugin's name or a path to a .wasm. Repeat it to run every task
    /// under each harness and get a task × harness matrix.
    #[arg(long = "harness", required = true)]
    harnesses: Vec<String>,
    /// Tool adapters for the harness (repeatable).
    #[arg(long = "tools")]
    tools: Vec<String>,
    /// The grader.
    #[arg(long)]
    grader: String,
    /// OpenAI-compatible base URL, e.g. http://localhost:8000/v1.
    #[arg(long, env = "ORCHARD_MODEL_URL")]
    model: Option<String>,
    /// The model's name in requests.
    #[arg(long, env = "ORCHARD_MODEL_NAME", default_value = "default")]
    model_name: String,
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// A separate OpenAI-compatible endpoint for the grader's model calls (an LLM judge);
    /// the run's `--model` when absent. Same API key.
    #[arg(long, env = "ORCHARD_GRADER_MODEL_URL")]
    grader_model: Option<String>,
    /// The grader model's name in requests.
    #[arg(long, env = "ORCHARD_GRADER_MODEL_NAME", default_value = "default")]
    grader_model_name: String,
    /// Ask the endpoint for token logprobs (kept in the trajectory and in ATIF exports).
    #[arg(long)]
    logprobs: bool,
    /// Most model requests in flight at once.
    #[arg(long, default_value_t = 32)]
    model_concurrency: usize,
    /// Image for tasks that name no prebuilt one.
    #[arg(long, default_value = "host")]
    image: String,
    /// Attempts per task (pass@k uses k = attempts).
    #[arg(long, default_value_t = 1)]
    attempts: u32,
    /// Rollouts at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Where results go [default: orchard-runs/<time>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Grant a capability beyond the defaults (e.g. `solution` for the oracle harness).
    #[arg(long = "grant")]
    grants: Vec<String>,
    /// Harness configuration, as JSON.
    #[arg(long, default_value = "{}")]
    config: String,
    /// Per plugin instance: CPU seconds and memory.
    #[arg(long, default_value_t = 120.0)]
    plugin_cpu: f64,
    #[arg(long, default_value = "512Mi")]
    plugin_memory: String,
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    #[arg(long, env = "ORCHARD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    #[arg(long, env = "ORCHARD_AGENT_BIN")]
    agent_bin: Option<PathBuf>,
    /// Where the sandboxes run.
    #[arg(long, value_enum, default_value = "local")]
    backend: BackendKind,
    #[command(flatten)]
    kube: KubeArgs,
    /// Registries spoken to over plain HTTP (host:port).
    #[arg(long)]
    insecure_registry: Vec<String>,
}

pub async fn run(args: EvalArgs, launcher: Arc<Launcher>) -> anyhow::Result<i32> {
    let tasks = load_tasks(&args.tasks)?;
    let state_dir = args.state_dir.clone().unwrap_or_else(crate::agent_bin::default_state_dir);
    let runtime = crate::plugins::runtime(&state_dir)?;
    let registry = crate::plugins::registry(runtime.clone(), args.plugin_dir.as_deref())?;
    let pick = |arg: &str, kind: PluginKind, flag: &str| -> anyhow::Result<_> {
        let plugin = registry.resolve(arg).map_err(|e| anyhow::anyhow!("--{flag} {arg}: {e}"))?;
        let ok =
            plugin.kind() == kind || (kind == PluginKind::ToolAdapter && plugin.kind() == PluginKind::BrowserDriver);
        anyhow::ensure!(ok, "--{flag} {arg}: {} is a {}, not a {kind}", plugin.id(), plugin.kind());
        Ok(plugin)
    };
    let harnesses =
        args.harnesses.iter().map(|h| pick(h, PluginKind::Harness, "harness")).collect::<anyhow::Result<Vec<_>>>()?;
    let tools =
        args.tools.iter().map(|t| pick(t, PluginKind::ToolAdapter, "tools")).collect::<anyhow::Result<Vec<_>>>()?;
    let grader = pick(&args.grader, PluginKind::Grader, "grader")?;
    let mut grants = Grants::default();
    for g in &args.grants {
        grants.0.insert(Capability::parse(g).map_err(|e| anyhow::anyhow!("--grant: {e}"))?);
    }
    let model = match &args.model {
        Some(url) => {
            let mut config = ModelConfig::new(url, &args.model_name);
            config.api_key = args.api_key.clone();
            config.concurrency = args.model_concurrency;
            config.logprobs = args.logprobs;
            Some(Arc::new(ModelClient::new(config).map_err(|e| anyhow::anyhow!("{e}"))?))
        }
        None => None,
    };
    let grader_model = match &args.grader_model {
        Some(url) => {
            let mut config = ModelConfig::new(url, &args.grader_model_name);
            config.api_key = args.api_key.clone();
            config.concurrency = args.model_concurrency;
            Some(Arc::new(ModelClient::new(config).map_err(|e| anyhow::anyhow!("--grader-model: {e}"))?))
        }
        None => None,
    };
    let harness_config: serde_json::Value =
        serde_json::from_str(&args.config).map_err(|e| anyhow::anyhow!("--config: {e}"))?;
    let memory = orchard_sandbox::parse_memory(&args.plugin_memory.as_str().into())
        .map_err(|e| anyhow::anyhow!("--plugin-memory: {e}"))?;
    let job = Arc::new(Job {
        tasks,
        harnesses,
        tools,
        grader,
        model,
        grader_model,
        default_image: args.image.clone(),
        attempts: args.attempts.max(1),
        concurrency: args.concurrency.max(1),
        harness_config,
        limits: Limits {
            memory_bytes: memory,
            cpu: Duration::from_secs_f64(args.plugin_cpu),
            wall: Duration::from_secs(3600),
        },
        grants,
    });
    let backend: Arc<dyn Backend> = match args.backend {
        BackendKind::Local => {
            let mut config = LocalConfig::new(&state_dir, crate::agent_bin::find(args.agent_bin.clone())?, launcher);
            config.registry.insecure = args.insecure_registry.clone();
            LocalBackend::open(config).await.map_err(|e| anyhow::anyhow!("local backend: {e}"))?
        }
        BackendKind::Kubernetes => {
            let rollouts = job.tasks.len() * job.harnesses.len() * job.attempts as usize;
            args.kube.open(rollouts.max(1), Duration::from_secs(3600), &args.insecure_registry, Vec::new()).await?
        }
    };
    let total = (job.tasks.len() * job.harnesses.len()) as u64 * job.attempts as u64;
    eprintln!(
        "orchard eval: {} tasks × {} attempts with {} (tools: {}) graded by {}",
        job.tasks.len(),
        job.attempts,
        job.harnesses.iter().map(|h| h.id()).collect::<Vec<_>>().join(" and "),
        if job.tools.is_empty() {
            "none".into()
        } else {
            job.tools.iter().map(|t| t.id()).collect::<Vec<_>>().join(", ")
        },
        job.grader.id()
    );
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} rollouts {msg}")
            .expect("template"),
    );
    let counts = Arc::new(std::sync::Mutex::new([0u32; 4]));
    let (bar2, counts2) = (bar.clone(), counts.clone());
    let results = run_job(job.clone(), backend.clone(), runtime, move |r| {
        let mut c = counts2.lock().unwrap_or_else(|p| p.into_inner());
        match (r.status, r.passed) {
            (RolloutStatus::Graded, true) => c[0] += 1,
            (RolloutStatus::Graded, false) => c[1] += 1,
            (RolloutStatus::Unknown, _) => c[2] += 1,
            (RolloutStatus::Error, _) => c[3] += 1,
        }
        bar2.set_message(format!("passed {} · failed {} · unknown {} · errors {}", c[0], c[1], c[2], c[3]));
        bar2.inc(1);
        if let Some(e) = &r.error {
            bar2.suspend(|| eprintln!("{}: {e}", r.rollout_id));
        }
    })
    .await;
    bar.finish();
    backend.shutdown().await;
    let summary = summarize(&results, job.attempts);
    let out = args.out.clone().unwrap_or_else(|| {
        let stamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from("orchard-runs").join(stamp.to_string())
    });
    write_outputs(&out, &results, &summary)?;
    if summary.harnesses.len() > 1 {
        print_matrix(&summary);
    } else {
        print_summary(&summary);
    }
    println!("results: {}", out.display());
    Ok(0)
}

fn fmt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "—".into())
}

fn print_summary(s: &Summary) {
    let (kcol, hatcol) = (format!("pass@{}", s.k), format!("pass^{}", s.k));
    let width = s.tasks.iter().map(|t| t.task_id.len()).max().unwrap_or(4).max(4);
    println!();
    println!(
        "{:<width$}  {:>8}  {:>7}  {:>7}  {:>8}  {:>8}  {:>7}  {:>6}  rewards",
        "task", "attempts", "mean", "pass@1", kcol, hatcol, "unknown", "errors"
    );
    for t in &s.tasks {
        let rewards: Vec<String> =
            t.rewards.iter().map(|r| r.map(|x| format!("{x:.2}")).unwrap_or_else(|| "?".into())).collect();
        println!(
            "{:<width$}  {:>8}  {:>7}  {:>7}  {:>8}  {:>8}  {:>7}  {:>6}  {}",
            t.task_id,
            t.attempts,
            fmt(t.mean_reward),
            fmt(t.pass_at_1),
            fmt(t.pass_at_k),
            fmt(t.pass_hat_k),
            t.unknown,
            t.errors,
            rewards.join(" ")
        );
    }
    println!(
        "{:<width$}  {:>8}  {:>7}  {:>7}  {:>8}  {:>8}  {:>7}  {:>6}  {} passed of {} rollouts",
        "ALL",
        s.rollouts,
        fmt(s.mean_reward),
        fmt(s.pass_at_1),
        fmt(s.pass_at_k),
        fmt(s.pass_hat_k),
        s.unknown,
        s.errors,
        s.passed,
        s.rollouts
    );
}

/// The cross-harness table: tasks down, harnesses across, mean reward and pass@k in each cell.
fn print_matrix(s: &Summary) {
    let names: Vec<&str> = s.harnesses.iter().map(|h| h.harness.as_str()).collect();
    let mut task_ids: Vec<&str> = s.tasks.iter().map(|t| t.task_id.as_str()).collect();
    task_ids.dedup();
    let width = task_ids.iter().map(|t| t.len()).max().unwrap_or(4).max(8);
    let col = names.iter().map(|n| n.len()).max().unwrap_or(8).max(17);
    println!();
    print!("{:<width$}", "task");
    for n in &names {
        print!("  {n:>col$}");
    }
    println!("\n{:<width$}  (cells: mean reward / pass@{})", "", s.k);
    for t in &task_ids {
        print!("{t:<width$}");
        for n in &names {
            let cell = s
                .tasks
                .iter()
                .find(|x| x.task_id == *t && x.harness == *n)
                .map(|x| format!("{} / {}", fmt(x.mean_reward), fmt(x.pass_at_k)))
                .unwrap_or_else(|| "—".into());
            print!("  {cell:>col$}");
        }
        println!();
    }
    print!("{:<width$}", "ALL");
    for h in &s.harnesses {
        print!("  {:>col$}", format!("{} / {}", fmt(h.mean_reward), fmt(h.pass_at_k)));
    }
    println!();
    println!();
    println!(
        "{:<col$}  {:>8}  {:>6}  {:>7}  {:>6}  {:>7}  {:>8}",
        "harness",
        "rollouts",
        "passed",
        "unknown",
        "errors",
        "pass@1",
        format!("pass@{}", s.k)
    );
    for h in &s.harnesses {
        println!(
            "{:<col$}  {:>8}  {:>6}  {:>7}  {:>6}  {:>7}  {:>8}",
            h.harness,
            h.rollouts,
            h.passed,
            h.unknown,
            h.errors,
            fmt(h.pass_at_1),
            fmt(h.pass_at_k)
        );
    }
}
