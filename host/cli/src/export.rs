//! `orchard export RUN_DIR --format openai|atif|sharegpt|tokens [--credit judge|none]`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use orchard_credit::Credit;
use orchard_eval::export::{Filter, Format, export};
use serde_json::Value;

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A directory written by `orchard eval --out`.
    run_dir: PathBuf,
    /// openai (chat fine-tuning JSONL), atif (Harbor's trajectory format), sharegpt, tokens
    /// (`{input_ids, loss_mask, turn_spans}` from the recorded token-faithful segments).
    #[arg(long)]
    format: String,
    /// Credit assignment for unresolved trajectories (openai and tokens): `judge` (a hindsight
    /// judge scores progress after every turn), `mc` (Monte Carlo: K continuations by the policy
    /// from the state after turn t, replayed into a fresh sandbox; searched, not every turn), or
    /// `none` (every turn weighted 1). The turns where the value rose, up to its peak, are
    /// credited, the rest weighted 0 and cut after the last. Resolved trajectories are credited
    /// throughout.
    #[arg(long)]
    credit: Option<String>,
    /// The judge's OpenAI-compatible base URL (with `--credit judge`).
    #[arg(long)]
    judge_model: Option<String>,
    #[arg(long, default_value = "judge")]
    judge_model_name: String,
    /// The environment variable holding the judge's API key.
    #[arg(long)]
    judge_api_key_env: Option<String>,
    /// The run's task folders: the judge also reads each task's reference solution and tests.
    #[arg(long)]
    tasks: Option<PathBuf>,
    /// Trajectories judged at once.
    #[arg(long, default_value_t = 8)]
    judge_concurrency: usize,
    /// `--credit mc`: the policy's OpenAI-compatible base URL and model name.
    #[arg(long)]
    model: Option<String>,
    #[arg(long, default_value = "default")]
    model_name: String,
    /// `--credit mc`: the harness that continues (it must take `resume`: react does), the tools
    /// and the grader of the run.
    #[arg(long, default_value = "react")]
    harness: String,
    #[arg(long = "tools", default_values_t = ["shell".to_string()])]
    tools: Vec<String>,
    #[arg(long, default_value = "script")]
    grader: String,
    /// `--credit mc`: continuations per evaluated turn, and turns on the first grid.
    #[arg(long, default_value_t = 4)]
    mc_k: u32,
    #[arg(long, default_value_t = 5)]
    mc_points: usize,
    /// Only rollouts that passed.
    #[arg(long)]
    only_passed: bool,
    /// Only rollouts with at least this reward.
    #[arg(long)]
    min_reward: Option<f64>,
    /// Only rollouts of this harness (repeatable): e.g. train on react's trajectories of a
    /// cross-harness matrix.
    #[arg(long = "from-harness", value_name = "HARNESS")]
    from_harness: Vec<String>,
    /// Only rollouts of tasks of this domain (repeatable; a domain is a task folder's name).
    #[arg(long = "domain")]
    domains: Vec<String>,
    /// Where to write [default: standard output].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq)]
enum Method {
    Judge,
    Mc,
    None,
}

pub async fn run(args: ExportArgs) -> anyhow::Result<i32> {
    let method = match args.credit.as_deref() {
        None => None,
        Some("judge") => Some(Method::Judge),
        Some("none") => Some(Method::None),
        Some("mc") => Some(Method::Mc),
        Some(other) => anyhow::bail!("--credit: unknown method {other:?} (judge, mc, none)"),
    };
    let path = args.run_dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e} (is this an `orchard eval --out` directory?)", path.display()))?;
    let filter = Filter {
        only_passed: args.only_passed,
        min_reward: args.min_reward,
        harnesses: args.from_harness.clone(),
        domains: args.domains.clone(),
    };
    let lines = match (args.format.as_str(), method) {
        ("tokens", _) | ("openai", Some(_)) => credited(&args, &text, &filter, method.unwrap_or(Method::None)).await?,
        (_, Some(_)) => anyhow::bail!("--credit: only with --format openai or tokens"),
        (format, None) => {
            let format = Format::parse(format).map_err(|e| anyhow::anyhow!("--format: {e} (or tokens)"))?;
            export(&text, format, &filter).map_err(anyhow::Error::msg)?
        }
    };
    let mut sink: Box<dyn Write> = match &args.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    for line in &lines {
        writeln!(sink, "{line}")?;
    }
    sink.flush()?;
    eprintln!("orchard export: {} records as {}", lines.len(), args.format);
    Ok(0)
}

/// The kept rollouts with their credit, exported as `args.format` (openai or tokens).
async fn credited(args: &ExportArgs, text: &str, filter: &Filter, method: Method) -> anyhow::Result<Vec<String>> {
    let mut rollouts = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).map_err(|e| anyhow::anyhow!("trajectories.jsonl line {}: {e}", i + 1))?;
        if filter.keeps(&v) {
            rollouts.push(v);
        }
    }
    let judge = match method {
        Method::Judge => {
            let url =
                args.judge_model.as_ref().ok_or_else(|| anyhow::anyhow!("--credit judge needs --judge-model URL"))?;
            let mut config = orchard_model::ModelConfig::new(url, &args.judge_model_name);
            config.concurrency = args.judge_concurrency.max(1);
            if let Some(var) = &args.judge_api_key_env {
                config.api_key =
                    Some(std::env::var(var).map_err(|_| anyhow::anyhow!("--judge-api-key-env: {var} is not set"))?);
            }
            Some(Arc::new(orchard_model::ModelClient::new(config)?))
        }
        Method::None | Method::Mc => None,
    };
    if method == Method::Mc {
        anyhow::ensure!(args.tasks.is_some(), "--credit mc needs --tasks DIR (the run's task folders)");
        anyhow::ensure!(args.model.is_some(), "--credit mc needs --model URL (the policy)");
    }
    let credits = {
        let bar = crate::eval::progress_bar(rollouts.len() as u64);
        bar.set_message("crediting");
        let jobs = rollouts.iter().map(|rollout| {
            let (judge, bar) = (judge.clone(), bar.clone());
            async move {
                let turns = orchard_credit::assistant_turns(rollout);
                let credit = if rollout["passed"] == true {
                    Ok(Credit::all("resolved", turns))
                } else if method == Method::Mc {
                    let value = |t: usize| monte_carlo(args, rollout, t);
                    orchard_credit::mc_curve(turns, args.mc_points, value)
                        .await
                        .map(|curve| Credit::from_sparse_curve("mc", curve))
                        .map_err(|e| e.to_string())
                } else if let Some(judge) = judge {
                    // Read only for the trajectories the judge scores.
                    let task_id = rollout["task_id"].as_str().unwrap_or("");
                    let reference = args.tasks.as_deref().and_then(|t| reference(t, task_id));
                    orchard_credit::judge_curve(&judge, rollout, reference.as_deref())
                        .await
                        .map(|curve| Credit::from_curve("judge", curve))
                        .map_err(|e| e.to_string())
                } else {
                    Ok(Credit::all("none", turns))
                };
                bar.inc(1);
                credit
            }
        });
        let out: Vec<_> = futures::future::join_all(jobs).await;
        bar.finish_and_clear();
        out
    };
    let (mut lines, mut failed, mut nothing) = (Vec::new(), 0, 0);
    for (rollout, credit) in rollouts.iter().zip(credits) {
        let credit = match credit {
            Ok(c) => c,
            Err(e) => {
                failed += 1;
                eprintln!("orchard export: {}: not exported: {e}", rollout["rollout_id"].as_str().unwrap_or("?"));
                continue;
            }
        };
        let records = if args.format == "tokens" {
            orchard_credit::token_records(rollout, &credit)
        } else {
            orchard_credit::weighted_openai(rollout, &credit).into_iter().collect()
        };
        if records.is_empty() {
            nothing += 1;
        }
        lines.extend(records.iter().map(|r| r.to_string()));
    }
    if nothing > 0 {
        eprintln!("orchard export: {nothing} rollouts gave nothing to learn from (no credited turn, or no token ids)");
    }
    anyhow::ensure!(failed == 0 || !lines.is_empty(), "every trajectory failed to be credited");
    Ok(lines)
}

/// `V(t)`: the mean reward of `--mc-k` continuations of the rollout's task by the policy, from
/// the state after its first `t` turns (an `orchard eval` of that task whose harness replays
/// them first). Rollouts that could not be graded do not count.
async fn monte_carlo(args: &ExportArgs, rollout: &Value, t: usize) -> Result<f64, String> {
    let task = rollout["task_id"].as_str().ok_or("a rollout without a task id")?;
    let tasks = args.tasks.as_ref().ok_or("--tasks")?;
    let out = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = serde_json::json!({"resume": orchard_credit::resume_turns(rollout, t)});
    let mut cmd = tokio::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
    cmd.arg("eval").arg(tasks.join(task)).args(["--harness", &args.harness, "--grader", &args.grader]);
    for tool in &args.tools {
        cmd.args(["--tools", tool]);
    }
    cmd.args(["--model", args.model.as_deref().unwrap_or_default(), "--model-name", &args.model_name])
        .args(["--attempts", &args.mc_k.to_string(), "--concurrency", &args.mc_k.to_string()])
        .args(["--config", &config.to_string()])
        .arg("--out")
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let run = cmd.output().await.map_err(|e| format!("running orchard eval: {e}"))?;
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).map_err(|e| {
        format!("continuations from turn {t} of {task}: {e}: {}", String::from_utf8_lossy(&run.stderr).trim())
    })?;
    let rewards: Vec<f64> = lines
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["status"] == "graded")
        .filter_map(|r| r["reward"].as_f64())
        .collect();
    if rewards.is_empty() {
        return Err(format!("no continuation from turn {t} of {task} could be graded"));
    }
    Ok(rewards.iter().sum::<f64>() / rewards.len() as f64)
}

/// A task's reference solution and tests as text, for the judge.
fn reference(tasks: &Path, task_id: &str) -> Option<String> {
    let dir = tasks.join(task_id);
    let mut text = String::new();
    for sub in ["solution", "tests"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else { continue };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
        files.sort();
        for f in files {
            if let Ok(content) = std::fs::read_to_string(&f) {
                text.push_str(&format!("### {sub}/{}\n{content}\n", f.file_name()?.to_string_lossy()));
            }
        }
    }
    (!text.is_empty()).then_some(text)
}
