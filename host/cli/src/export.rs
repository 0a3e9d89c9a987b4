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
    /// judge scores progress after every turn; the rising turns up to the peak are credited,
    /// the rest weighted 0 and cut after the last), or `none` (every turn weighted 1).
    /// Resolved trajectories are credited throughout.
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
    /// Only rollouts that passed.
    #[arg(long)]
    only_passed: bool,
    /// Only rollouts with at least this reward.
    #[arg(long)]
    min_reward: Option<f64>,
    /// Where to write [default: standard output].
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq)]
enum Method {
    Judge,
    None,
}

pub async fn run(args: ExportArgs) -> anyhow::Result<i32> {
    let method = match args.credit.as_deref() {
        None => None,
        Some("judge") => Some(Method::Judge),
        Some("none") => Some(Method::None),
        Some("mc") => anyhow::bail!(
            "--credit mc: Monte Carlo continuations from mid-trajectory states are not built yet (harnesses cannot \
             resume from a recorded prefix); use --credit judge"
        ),
        Some(other) => anyhow::bail!("--credit: unknown method {other:?} (judge, none)"),
    };
    let path = args.run_dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e} (is this an `orchard eval --out` directory?)", path.display()))?;
    let filter = Filter { only_passed: args.only_passed, min_reward: args.min_reward };
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
        Method::None => None,
    };
    let credits = {
        let bar = crate::eval::progress_bar(rollouts.len() as u64);
        bar.set_message("crediting");
        let jobs = rollouts.iter().map(|rollout| {
            let (judge, bar) = (judge.clone(), bar.clone());
            let reference = args.tasks.as_deref().and_then(|t| reference(t, rollout["task_id"].as_str().unwrap_or("")));
            async move {
                let turns = orchard_credit::assistant_turns(rollout);
                let credit = if rollout["passed"] == true {
                    Ok(Credit::all("resolved", turns))
                } else if let Some(judge) = judge {
                    orchard_credit::judge_curve(&judge, rollout, reference.as_deref())
                        .await
                        .map(|curve| Credit::from_curve("judge", curve))
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
