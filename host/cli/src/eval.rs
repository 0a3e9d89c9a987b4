//! `orchard eval`: tasks × harness × tools × model × grader × attempts, on local or Kubernetes sandboxes.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use orchard_eval::{Summary, summarize, write_outputs};
use orchard_sandbox::Backend;
use orchard_sandbox_local::{Launcher, LocalBackend, LocalConfig};
use orchard_scheduler::{Env, EvalSpec, ModelSpec, Runner, RunnerConfig, TaskSource};

use crate::backend::{BackendKind, KubeArgs};

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A task folder, or a folder of task folders (Harbor layout). Several folders make one
    /// evaluation spanning domains (each folder a domain in the summary); a task's `[agent]
    /// tools` then picks its own tool adapters.
    #[arg(required_unless_present_any = ["follow", "dataset"])]
    pub(crate) tasks: Vec<PathBuf>,
    /// The harness: a shipped plugin's name or a path to a .wasm. Repeat it to run every task
    /// under each harness and get a task × harness matrix.
    #[arg(long = "harness", required_unless_present = "follow")]
    pub(crate) harnesses: Vec<String>,
    /// Tool adapters for the harness (repeatable).
    #[arg(long = "tools")]
    pub(crate) tools: Vec<String>,
    /// The grader.
    #[arg(long, required_unless_present = "follow")]
    pub(crate) grader: Option<String>,
    /// Run on an Orchard server (`orchard serve`) instead of here: the task folders are
    /// uploaded, the job is submitted and followed; Ctrl-C detaches and the job goes on.
    #[arg(long, value_name = "URL")]
    pub(crate) server: Option<String>,
    /// The server's API key.
    #[arg(long, env = "ORCHARD_API_KEY", hide_env_values = true, requires = "server")]
    pub(crate) server_key: Option<String>,
    /// Re-attach to a job already submitted to --server: follow it to its end and print (and
    /// with --out download) its results.
    #[arg(long, value_name = "ID", requires = "server", conflicts_with_all = ["tasks", "dataset"])]
    pub(crate) follow: Option<String>,
    /// With --server: a dataset the server's operator registered, instead of uploading TASKS.
    #[arg(long, requires = "server", conflicts_with = "tasks")]
    pub(crate) dataset: Option<String>,
    /// With --server: the name of the server-side secret (PUT /v1/secrets/NAME) holding the
    /// model's API key. A key in --api-key / OPENAI_API_KEY is never sent to a server.
    #[arg(long, requires = "server")]
    pub(crate) api_key_secret: Option<String>,
    /// OpenAI-compatible base URL, e.g. http://localhost:8000/v1.
    #[arg(long, env = "ORCHARD_MODEL_URL")]
    pub(crate) model: Option<String>,
    /// The model's name in requests.
    #[arg(long, env = "ORCHARD_MODEL_NAME", default_value = "default")]
    pub(crate) model_name: String,
    #[arg(long, env = "OPENAI_API_KEY", hide_env_values = true)]
    pub(crate) api_key: Option<String>,
    /// A separate OpenAI-compatible endpoint for the grader's model calls (an LLM judge);
    /// the run's `--model` when absent. Same API key.
    #[arg(long, env = "ORCHARD_GRADER_MODEL_URL")]
    pub(crate) grader_model: Option<String>,
    /// The grader model's name in requests.
    #[arg(long, env = "ORCHARD_GRADER_MODEL_NAME", default_value = "default")]
    pub(crate) grader_model_name: String,
    /// Ask the endpoint for token logprobs (kept in the trajectory and in ATIF exports).
    #[arg(long)]
    pub(crate) logprobs: bool,
    /// With --logprobs against an endpoint that returns no token ids (llama.cpp): its tokenize
    /// URL (`http://HOST:PORT/extras/tokenize`); the ids are recovered through it where exact.
    #[arg(long, value_name = "URL", requires = "logprobs")]
    pub(crate) tokenize_url: Option<String>,
    /// Most model requests in flight at once.
    #[arg(long, default_value_t = 32)]
    pub(crate) model_concurrency: usize,
    /// Image for tasks that name no prebuilt one.
    #[arg(long, default_value = "host")]
    pub(crate) image: String,
    /// Attempts per task (pass@k uses k = attempts).
    #[arg(long, default_value_t = 1)]
    pub(crate) attempts: u32,
    /// Rollouts at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) concurrency: usize,
    /// Where results go [default: orchard-runs/<time>].
    #[arg(long)]
    pub(crate) out: Option<PathBuf>,
    /// Grant a capability beyond the defaults (e.g. `solution` for the oracle harness).
    #[arg(long = "grant")]
    pub(crate) grants: Vec<String>,
    /// Configuration of every harness of the run, as a JSON object.
    #[arg(long, default_value = "{}")]
    pub(crate) config: String,
    /// One harness's own configuration, `NAME=JSON`: its keys over `--config`'s for that
    /// harness only (harnesses refuse keys they do not know); repeatable.
    #[arg(long = "harness-config", value_name = "NAME=JSON")]
    pub(crate) harness_config: Vec<String>,
    /// A tool adapter's or browser driver's configuration, `NAME=JSON` (e.g.
    /// `browser={"mode":"marks"}`); repeatable.
    #[arg(long = "tool-config", value_name = "NAME=JSON")]
    pub(crate) tool_config: Vec<String>,
    /// Memory of each rollout's sandbox when its task names none ("none": no limit; "auto":
    /// 2Gi where this host can enforce it).
    #[arg(long, default_value = "auto")]
    pub(crate) sandbox_memory: String,
    /// Writable-layer size of each rollout's sandbox ("none": no limit; "auto": 10Gi where
    /// this host can enforce it).
    #[arg(long, default_value = "auto")]
    pub(crate) sandbox_disk: String,
    /// Per plugin instance: CPU seconds and memory.
    #[arg(long, default_value_t = 120.0)]
    pub(crate) plugin_cpu: f64,
    #[arg(long, default_value = "512Mi")]
    pub(crate) plugin_memory: String,
    #[arg(long)]
    plugin_dir: Option<PathBuf>,
    #[arg(long, env = "ORCHARD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    #[arg(long, env = "ORCHARD_AGENT_BIN")]
    agent_bin: Option<PathBuf>,
    /// The program cache: agent programs prepared ahead (`docs/src/harnesses.md`, the `program`
    /// harness), bound read-only at /opt/orchard/programs in every local sandbox.
    #[arg(long, env = "ORCHARD_PROGRAM_CACHE")]
    program_cache: Option<PathBuf>,
    /// Where the sandboxes run.
    #[arg(long, value_enum, default_value = "local")]
    backend: BackendKind,
    #[command(flatten)]
    kube: KubeArgs,
    /// Registries spoken to over plain HTTP (host:port).
    #[arg(long)]
    insecure_registry: Vec<String>,
}

/// `--tool-config` or `--harness-config` (`flag`) `NAME=JSON`, each a JSON object.
fn parse_named_config(
    flag: &str,
    args: &[String],
) -> anyhow::Result<std::collections::BTreeMap<String, serde_json::Value>> {
    let mut out = std::collections::BTreeMap::new();
    for arg in args {
        let (name, json) = arg.split_once('=').ok_or_else(|| anyhow::anyhow!("{flag} {arg:?}: expected NAME=JSON"))?;
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| anyhow::anyhow!("{flag} {name}: {e}"))?;
        if !value.is_object() {
            anyhow::bail!("{flag} {name}: expected a JSON object, got {value}");
        }
        out.insert(name.trim().to_string(), value);
    }
    Ok(out)
}

/// The secret name the CLI's own `--api-key` goes by (never stored: it lives in this process).
const CLI_KEY: &str = "cli-api-key";

impl EvalArgs {
    /// The job this command line asks for, run here: tasks and plugins by local path.
    fn spec(&self) -> anyhow::Result<EvalSpec> {
        let canonical = |arg: &String| -> String {
            let p = std::path::Path::new(arg);
            if arg.ends_with(".wasm") || p.is_file() {
                std::fs::canonicalize(p).map(|c| c.display().to_string()).unwrap_or_else(|_| arg.clone())
            } else {
                arg.clone()
            }
        };
        let dirs = self
            .tasks
            .iter()
            .map(|dir| {
                std::fs::canonicalize(dir)
                    .map(|d| d.display().to_string())
                    .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let source = match <[String; 1]>::try_from(dirs) {
            Ok([one]) => TaskSource::Dir(one),
            Err(dirs) if dirs.is_empty() => anyhow::bail!("TASKS: a task folder is needed"),
            Err(dirs) => TaskSource::Dirs(dirs),
        };
        let secret = self.api_key.as_ref().map(|_| CLI_KEY.to_string());
        self.spec_with(source, canonical, secret)
    }

    /// The job, with its tasks, plugin names and model key's secret as the caller resolves them.
    pub(crate) fn spec_with(
        &self,
        tasks: TaskSource,
        plugin: impl Fn(&String) -> String,
        api_key_secret: Option<String>,
    ) -> anyhow::Result<EvalSpec> {
        let model = |url: &Option<String>, name: &str, logprobs: bool| {
            url.as_ref().map(|url| ModelSpec {
                url: url.clone(),
                name: name.to_string(),
                api_key_secret: api_key_secret.clone(),
                logprobs,
                concurrency: self.model_concurrency,
                sampling: None,
                policy_version: None,
                tokenize_url: self.tokenize_url.clone().filter(|_| logprobs),
            })
        };
        Ok(EvalSpec {
            tasks,
            harnesses: self.harnesses.iter().map(&plugin).collect(),
            tools: self.tools.iter().map(&plugin).collect(),
            grader: self.grader.as_ref().map(&plugin).ok_or_else(|| anyhow::anyhow!("--grader is needed"))?,
            model: model(&self.model, &self.model_name, self.logprobs),
            grader_model: model(&self.grader_model, &self.grader_model_name, false),
            attempts: self.attempts.max(1),
            concurrency: self.concurrency.max(1),
            grants: self.grants.clone(),
            image: self.image.clone(),
            config: serde_json::from_str(&self.config).map_err(|e| anyhow::anyhow!("--config: {e}"))?,
            harness_config: parse_named_config("--harness-config", &self.harness_config)?,
            tool_config: parse_named_config("--tool-config", &self.tool_config)?,
            plugin_cpu: self.plugin_cpu,
            plugin_memory: self.plugin_memory.clone(),
            pins: Default::default(),
        })
    }
}

pub async fn run(args: EvalArgs, launcher: Arc<Launcher>) -> anyhow::Result<i32> {
    if let Some(server) = args.server.clone() {
        return crate::eval_remote::run(&args, &server).await;
    }
    let spec = args.spec()?;
    let out = args.out.clone().unwrap_or_else(|| {
        let stamp =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        PathBuf::from("orchard-runs").join(stamp.to_string())
    });
    std::fs::create_dir_all(out.join("rollouts")).map_err(|e| anyhow::anyhow!("--out {}: {e}", out.display()))?;
    // Every rollout's result and trajectory land in DIR/orchard.db the moment it finishes: a
    // killed run resumes from there.
    let store = orchard_store::Store::open(&format!("sqlite:{}", out.join("orchard.db").display()))
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", out.display()))?;
    let state_dir = args.state_dir.clone().unwrap_or_else(crate::agent_bin::default_state_dir);
    let runtime = crate::plugins::runtime(&state_dir)?;
    let registry = Arc::new(crate::plugins::deferred_registry(runtime.clone(), args.plugin_dir.as_deref())?);
    let env = Arc::new(Env {
        store: store.clone(),
        registry,
        datasets_dir: out.join("datasets"),
        datasets: Default::default(),
        local_secrets: args.api_key.iter().map(|k| (CLI_KEY.to_string(), k.clone())).collect(),
        admission: None,
        upload_limits: Default::default(),
        // The operator's own machine: any model URL.
        egress: orchard_egress::Policy::open(),
        sandbox_defaults: sandbox_defaults(&args)?,
        browser: crate::agent_bin::browser_placement(),
    });
    let previous = store
        .list_evals(LOCAL_TENANT, &orchard_store::EvalFilter { limit: 1, ..Default::default() })
        .await?
        .into_iter()
        .next();
    let eval = match previous {
        Some(e) if e.fingerprint != spec.fingerprint() => anyhow::bail!(
            "{} holds a run with other arguments ({}); resume it with the same arguments, or give another --out",
            out.display(),
            describe(&e.spec)
        ),
        Some(e) => {
            store.requeue_all_running().await?;
            eprintln!("orchard eval: resuming {}: {} of {} rollouts already done", out.display(), e.done, e.total);
            e
        }
        None => orchard_scheduler::submit(&env, &orchard_scheduler::new_eval_id(), LOCAL_TENANT, spec.clone())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    };
    let backend: Arc<dyn Backend> = match args.backend {
        BackendKind::Local => {
            let mut config = LocalConfig::new(&state_dir, crate::agent_bin::find(args.agent_bin.clone())?, launcher);
            config.registry.insecure = args.insecure_registry.clone();
            config.program_cache = args.program_cache.clone();
            LocalBackend::open(config).await.map_err(|e| anyhow::anyhow!("local backend: {e}"))?
        }
        BackendKind::Kubernetes => {
            let rollouts = eval.total as usize;
            args.kube
                .open(rollouts.max(1), Duration::from_secs(3600), &args.insecure_registry, Vec::new(), None)
                .await?
        }
    };
    eprintln!(
        "orchard eval: {} rollouts ({} attempts) with {} (tools: {}) graded by {}",
        eval.total,
        spec.attempts,
        spec.harnesses.join(" and "),
        if spec.tools.is_empty() { "none, or the task's own".into() } else { spec.tools.join(", ") },
        spec.grader
    );
    let runner = Runner::new(
        env.clone(),
        backend.clone(),
        runtime,
        RunnerConfig {
            owner: format!("cli-{}", std::process::id()),
            // `orchard eval` queues every running rollout again at start (it is its store's
            // only runner).
            predecessors: None,
            sandbox_tenant: "eval".into(),
            capacity: spec.concurrency,
            lease: Duration::from_secs(60),
            tenant_quota: None,
        },
    );
    let followed = follow(&runner, &eval.id, &out).await;
    backend.shutdown().await;
    let eval = store.eval(&eval.id).await?.ok_or_else(|| anyhow::anyhow!("the run's record is gone"))?;
    let results = orchard_scheduler::results(&store, &eval.id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let summary = summarize(&results, eval.k as u32);
    write_outputs(&out, &results, &summary)?;
    print_tables(&summary);
    println!("results: {}", out.display());
    if let Followed::RunnerFailed(why) = followed {
        anyhow::bail!(
            "the job's runner stopped with {} of {} rollouts done: {why}; run the same command again to go on",
            eval.done,
            eval.total
        );
    }
    if matches!(followed, Followed::Interrupted) {
        eprintln!(
            "orchard eval: interrupted with {} of {} rollouts done; run the same command again to go on",
            eval.done, eval.total
        );
        return Ok(130);
    }
    Ok(0)
}

/// The tenant of `orchard eval`'s own store.
const LOCAL_TENANT: &str = "local";

/// A short description of a stored spec, for the message that refuses a resume.
fn describe(spec: &str) -> String {
    match serde_json::from_str::<EvalSpec>(spec) {
        Ok(s) => format!(
            "harness {}, grader {}, {} attempts, tasks {:?}",
            s.harnesses.join(","),
            s.grader,
            s.attempts,
            s.tasks
        ),
        Err(_) => "unreadable".into(),
    }
}

/// Runs the job to its end with a progress bar, or until Ctrl-C, or until the runner fails.
async fn follow(runner: &Arc<Runner>, eval_id: &str, out: &std::path::Path) -> Followed {
    let store = runner.store().clone();
    let Ok(Some(start)) = store.eval(eval_id).await else { return Followed::Done };
    let bar = progress_bar(start.total as u64);
    let show = |bar: &indicatif::ProgressBar, e: &orchard_store::EvalRow| {
        bar.set_position(e.done as u64);
        bar.set_message(counts_message(e.passed, e.graded - e.passed, e.unknown, e.errored));
    };
    show(&bar, &start);
    let mut events = runner.subscribe();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let mut running = {
        let runner = runner.clone();
        tokio::spawn(async move {
            runner
                .run(async {
                    let _ = stop_rx.await;
                })
                .await
        })
    };
    runner.wake();
    let mut interrupted = false;
    loop {
        tokio::select! {
            event = events.recv() => {
                if let Ok(event) = event {
                    let r = &event.result;
                    if let Some(e) = &r.error {
                        bar.suspend(|| eprintln!("{}: {e}", r.rollout_id));
                    }
                    // Each result is also a file as soon as it is done.
                    let json = serde_json::to_vec_pretty(&**r).unwrap_or_default();
                    let _ = orchard_eval::write_rollout(out, &r.rollout_id, &json);
                }
            }
            _ = tokio::signal::ctrl_c() => {
                interrupted = true;
                break;
            }
            // The runner only ends when told to: ending before means it failed (a panic), and
            // what it left would never be done. Say so and end instead of waiting forever.
            ended = &mut running => {
                bar.abandon();
                let why = match ended {
                    Err(e) if e.is_panic() => "it panicked (a bug in Orchard)".to_string(),
                    Err(e) => e.to_string(),
                    Ok(()) => "it ended unasked".to_string(),
                };
                return Followed::RunnerFailed(why);
            }
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        match store.eval(eval_id).await {
            Ok(Some(e)) => {
                show(&bar, &e);
                if e.done + e.cancelled >= e.total {
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => bar.suspend(|| eprintln!("orchard eval: reading progress: {e}")),
        }
    }
    let _ = stop_tx.send(());
    let _ = running.await;
    bar.finish();
    if interrupted { Followed::Interrupted } else { Followed::Done }
}

/// How following a job ended.
enum Followed {
    Done,
    /// Ctrl-C: what was running is queued again for the next run on the same directory.
    Interrupted,
    /// The runner stopped on its own (why): the job cannot end.
    RunnerFailed(String),
}

/// The bar's message, the same here and when following a job on a server.
pub(crate) fn counts_message(passed: i64, failed: i64, unknown: i64, errors: i64) -> String {
    format!("passed {passed} · failed {failed} · unknown {unknown} · errors {errors}")
}

/// The progress bar of a job of `total` rollouts.
pub(crate) fn progress_bar(total: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} rollouts {msg}")
            .expect("template"),
    );
    bar
}

/// The tables at the end of a run: the task × harness matrix for several harnesses.
pub(crate) fn print_tables(s: &Summary) {
    if s.harnesses.len() > 1 {
        print_matrix(s);
    } else {
        print_summary(s);
    }
}

fn fmt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.3}")).unwrap_or_else(|| "—".into())
}

fn print_summary(s: &Summary) {
    // With one attempt, pass@k is pass@1 and pass^k says nothing more: one column, not three.
    let many = s.k > 1;
    let ks = |a: String, b: String| if many { format!("  {a:>8}  {b:>8}") } else { String::new() };
    let kcols = ks(format!("pass@{}", s.k), format!("pass^{}", s.k));
    let width = s.tasks.iter().map(|t| t.task_id.len()).max().unwrap_or(4).max(4);
    println!();
    println!(
        "{:<width$}  {:>8}  {:>7}  {:>7}{kcols}  {:>7}  {:>6}  rewards",
        "task", "attempts", "mean", "pass@1", "unknown", "errors"
    );
    for t in &s.tasks {
        let rewards: Vec<String> =
            t.rewards.iter().map(|r| r.map(|x| format!("{x:.2}")).unwrap_or_else(|| "?".into())).collect();
        println!(
            "{:<width$}  {:>8}  {:>7}  {:>7}{}  {:>7}  {:>6}  {}",
            t.task_id,
            t.attempts,
            fmt(t.mean_reward),
            fmt(t.pass_at_1),
            ks(fmt(t.pass_at_k), fmt(t.pass_hat_k)),
            t.unknown,
            t.errors,
            rewards.join(" ")
        );
    }
    for d in s.domains.iter().filter(|_| s.domains.len() > 1) {
        println!(
            "{:<width$}  {:>8}  {:>7}  {:>7}{}  {:>7}  {:>6}  {} passed",
            format!("[{}]", d.domain),
            d.rollouts,
            fmt(d.mean_reward),
            fmt(d.pass_at_1),
            ks(fmt(d.pass_at_k), fmt(d.pass_hat_k)),
            "",
            "",
            d.passed
        );
    }
    println!(
        "{:<width$}  {:>8}  {:>7}  {:>7}{}  {:>7}  {:>6}  {} passed of {} rollouts",
        "ALL",
        s.rollouts,
        fmt(s.mean_reward),
        fmt(s.pass_at_1),
        ks(fmt(s.pass_at_k), fmt(s.pass_hat_k)),
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
    // A summary row per domain: what transfers across harnesses, domain by domain.
    let mut domains: Vec<&str> = Vec::new();
    for d in &s.domains {
        if !domains.contains(&d.domain.as_str()) {
            domains.push(&d.domain);
        }
    }
    for d in domains.iter().filter(|_| domains.len() > 1) {
        print!("{:<width$}", format!("[{d}]"));
        for n in &names {
            let cell = s
                .domains
                .iter()
                .find(|x| x.domain == *d && x.harness == *n)
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
    let many = s.k > 1;
    let ks = |a: String, b: String| if many { format!("  {a:>8}  {b:>8}") } else { String::new() };
    println!(
        "{:<col$}  {:>10}  {:>8}  {:>6}  {:>7}  {:>6}  {:>7}{}",
        "harness",
        "domain",
        "rollouts",
        "passed",
        "unknown",
        "errors",
        "pass@1",
        ks(format!("pass@{}", s.k), format!("pass^{}", s.k))
    );
    for h in &s.harnesses {
        for d in s.domains.iter().filter(|d| d.harness == h.harness && domains.len() > 1) {
            println!(
                "{:<col$}  {:>10}  {:>8}  {:>6}  {:>7}  {:>6}  {:>7}{}",
                h.harness,
                d.domain,
                d.rollouts,
                d.passed,
                "",
                "",
                fmt(d.pass_at_1),
                ks(fmt(d.pass_at_k), fmt(d.pass_hat_k))
            );
        }
        println!(
            "{:<col$}  {:>10}  {:>8}  {:>6}  {:>7}  {:>6}  {:>7}{}",
            h.harness,
            "ALL",
            h.rollouts,
            h.passed,
            h.unknown,
            h.errors,
            fmt(h.pass_at_1),
            ks(fmt(h.pass_at_k), fmt(h.pass_hat_k))
        );
    }
}

/// The limits of sandboxes whose task names none: a local host enforces what it can ("auto");
/// a pod's limits are the kubelet's to enforce.
fn sandbox_defaults(args: &EvalArgs) -> anyhow::Result<orchard_scheduler::SandboxDefaults> {
    use crate::admission_args::{Limit, local_limit, optional};
    let parse = orchard_sandbox::parse_memory;
    let or_default = |text: &str, default: &'static str| if text == "auto" { default.to_string() } else { text.into() };
    Ok(match args.backend {
        BackendKind::Local => orchard_scheduler::SandboxDefaults {
            memory_bytes: local_limit("sandbox-memory", &args.sandbox_memory, "2Gi", Limit::Memory)?,
            disk_bytes: local_limit("sandbox-disk", &args.sandbox_disk, "10Gi", Limit::Disk)?,
        },
        BackendKind::Kubernetes => orchard_scheduler::SandboxDefaults {
            memory_bytes: optional("sandbox-memory", &or_default(&args.sandbox_memory, "2Gi"), parse)?,
            disk_bytes: optional("sandbox-disk", &or_default(&args.sandbox_disk, "10Gi"), parse)?,
        },
    })
}
