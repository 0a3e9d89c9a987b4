//! `orchard export RUN_DIR --format openai|atif|sharegpt`.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use orchard_eval::export::{Filter, Format, export};

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// A directory written by `orchard eval --out`.
    run_dir: PathBuf,
    /// openai (chat fine-tuning JSONL), atif (Harbor's trajectory format), sharegpt.
    #[arg(long)]
    format: String,
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

pub fn run(args: ExportArgs) -> anyhow::Result<i32> {
    let format = Format::parse(&args.format).map_err(|e| anyhow::anyhow!("--format: {e}"))?;
    let path = args.run_dir.join("trajectories.jsonl");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("{}: {e} (is this an `orchard eval --out` directory?)", path.display()))?;
    let lines = export(&text, format, &Filter { only_passed: args.only_passed, min_reward: args.min_reward })
        .map_err(anyhow::Error::msg)?;
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
    eprintln!("orchard export: {} rollouts as {}", lines.len(), args.format);
    Ok(0)
}
