//! `orchard convert`: datasets as users have them into Harbor task folders.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use orchard_convert::{claw_eval, miniwob, osworld, swe_bench, web};

#[derive(Subcommand)]
pub enum ConvertCommand {
    /// SWE-bench-format rows (JSONL, or a JSON array) into one task folder per instance, graded
    /// by `swe` in a separate verifier environment. From the Hugging Face hub:
    /// `python -c "import datasets; datasets.load_dataset('princeton-nlp/SWE-bench_Verified', split='test').to_json('rows.jsonl')"`.
    SweBench(SweBenchArgs),
    /// WebVoyager rows (`{web_name, id, ques, web}`, JSONL) into task folders judged
    /// WebVoyager-style (`--grader judge`). The sites are live: the tasks allow the internet.
    Webvoyager(WebArgs),
    /// Online-Mind2Web rows (`{task_id, confirmed_task, website, reference_length}`, a JSON
    /// array) into task folders judged WebJudge-style.
    OnlineMind2web(WebArgs),
    /// DeepShop rows (WebVoyager's fields plus `attribute`, `filter`, `sort`) into task folders
    /// judged WebJudge-style with the row's requirements as the key points.
    Deepshop(WebArgs),
    /// A MiniWoB++ copy (its `html` folder; `pip download miniwob` ships one in
    /// `miniwob/html`) into one task per page, served in the sandbox and graded by the reward
    /// the page itself gives (`--grader script`).
    Miniwob(MiniwobArgs),
    /// Your own checkout of Claw-Eval into task folders over orchard-mock-services: each task
    /// that needs only the fixture services (mail, calendar, contacts, todo, notes, CRM,
    /// helpdesk) keeps its tools and is graded by `rubric` from its declared scoring and safety
    /// checks; the others are listed as skipped with why (in OUT/skipped.json too).
    ClawEval(ClawEvalArgs),
    /// OSWorld-format tasks (`evaluation_examples/examples/<domain>/<id>.json`, or any folder
    /// of them) into task folders with a desktop: each sets itself up with OSWorld's own
    /// SetupController and is graded by its own evaluator (getters and metrics) in its sandbox
    /// (`--grader script`); tasks for apps the desktop image lacks, live sites, Chrome or VM
    /// snapshots are listed as skipped with why.
    Osworld(OsworldArgs),
}

#[derive(Args)]
pub struct OsworldArgs {
    /// The tasks: a folder (searched down to 8 levels) or one task JSON.
    tasks: PathBuf,
    /// Where the task folders go (`osworld.<id>`; an existing one is replaced).
    out: PathBuf,
    /// A local mirror of the files the tasks download (by file name, or under the task's id as
    /// OSWorld's cache keeps them): those are carried into the tasks, which then need no network.
    #[arg(long)]
    files: Option<PathBuf>,
    /// The image the tasks start from: one with the apps and OSWorld's `desktop_env` (see
    /// deploy/desktop-image).
    #[arg(long, default_value = "orchard-desktop:bookworm")]
    image: String,
    /// The screen, WIDTHxHEIGHT.
    #[arg(long, default_value = "1920x1080", value_parser = parse_screen)]
    screen: (u32, u32),
    /// The agent's time limit per task, in seconds.
    #[arg(long, default_value_t = 900.0)]
    agent_timeout: f64,
}

fn parse_screen(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s.split_once('x').ok_or_else(|| format!("{s:?}: expected WIDTHxHEIGHT"))?;
    let parse = |v: &str| v.parse::<u32>().ok().filter(|n| (64..=8192).contains(n));
    match (parse(w), parse(h)) {
        (Some(w), Some(h)) => Ok((w, h)),
        _ => Err(format!("{s:?}: each side 64 to 8192 pixels")),
    }
}

#[derive(Args)]
pub struct ClawEvalArgs {
    /// The checkout (the folder holding `tasks/<id>/task.yaml`).
    checkout: PathBuf,
    /// Where the task folders go (one per task; an existing one is replaced).
    out: PathBuf,
    /// Also convert tasks whose grader.py does more than their YAML declares, graded on the
    /// declared checks alone (their scores are then not Claw-Eval's; each says why in
    /// `metadata.claw_eval.grader_differs`).
    #[arg(long)]
    declared_only: bool,
}

#[derive(Args)]
pub struct MiniwobArgs {
    /// The MiniWoB++ copy: its `html` folder, or a folder holding `html/` or `miniwob/html/`.
    dir: PathBuf,
    /// Where the task folders go.
    out: PathBuf,
    /// Only these pages (e.g. `click-test,enter-text`); all when absent.
    #[arg(long, value_delimiter = ',')]
    envs: Vec<String>,
    /// The episodes' seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The agent's time limit per task, in seconds.
    #[arg(long, default_value_t = 300.0)]
    agent_timeout: f64,
}

#[derive(Args)]
pub struct WebArgs {
    /// The rows: a .jsonl file (one row per line) or a .json array.
    rows: PathBuf,
    /// Where the task folders go (one per id; an existing one is replaced).
    out: PathBuf,
    /// The agent's time limit per task, in seconds.
    #[arg(long, default_value_t = 600.0)]
    agent_timeout: f64,
    /// A local site standing in for the real ones: an environment folder (its Dockerfile and
    /// files) copied into every task; the tasks then stay offline.
    #[arg(long)]
    environment: Option<PathBuf>,
    /// Replaces every row's start URL (with --environment, the local site's address).
    #[arg(long)]
    start_url: Option<String>,
}

#[derive(Args)]
pub struct SweBenchArgs {
    /// The rows: a .jsonl file (one row per line) or a .json array.
    rows: PathBuf,
    /// Where the task folders go (one per instance_id; an existing one is replaced).
    out: PathBuf,
    /// Put the gold patch in as the reference solution: `orchard eval OUT --harness oracle
    /// --grader swe --grant solution` then proves the conversion.
    #[arg(long)]
    gold: bool,
    /// The evaluation image's name; `{instance_id}`, `{docker_id}`, `{repo}`, `{owner}`,
    /// `{name}` and `{version}` are filled in. A row's own `image_name` / `docker_image` wins.
    #[arg(long, default_value = swe_bench::DEFAULT_IMAGE_TEMPLATE)]
    image_template: String,
    /// A TOML file of per-repository specifications (`[repos."owner/name"]` with test_cmd,
    /// framework, directives, pre, repo_dir, image, archive, timeout_sec) over the built-in ones.
    #[arg(long)]
    specs: Option<PathBuf>,
    /// The agent's time limit per task, in seconds.
    #[arg(long, default_value_t = 3000.0)]
    agent_timeout: f64,
}

pub fn run(command: ConvertCommand) -> anyhow::Result<i32> {
    match command {
        ConvertCommand::SweBench(args) => swe_bench_rows(args),
        ConvertCommand::Webvoyager(args) => web_rows(args, web::Dataset::WebVoyager),
        ConvertCommand::OnlineMind2web(args) => web_rows(args, web::Dataset::OnlineMind2Web),
        ConvertCommand::Deepshop(args) => web_rows(args, web::Dataset::DeepShop),
        ConvertCommand::ClawEval(args) => {
            let report = claw_eval::convert(&args.checkout, &args.out, args.declared_only)?;
            print_report(&report, &args.out);
            Ok(if report.converted.is_empty() { 1 } else { 0 })
        }
        ConvertCommand::Osworld(args) => {
            let options = osworld::Options {
                image: args.image,
                files: args.files,
                width: args.screen.0,
                height: args.screen.1,
                agent_timeout_sec: args.agent_timeout,
            };
            let report = osworld::convert(&args.tasks, &args.out, &options)?;
            print_report(&report, &args.out);
            Ok(if report.converted.is_empty() { 1 } else { 0 })
        }
        ConvertCommand::Miniwob(args) => {
            let options = miniwob::Options { envs: args.envs, seed: args.seed, agent_timeout_sec: args.agent_timeout };
            let report = miniwob::convert(&args.dir, &args.out, &options)?;
            print_report(&report, &args.out);
            Ok(if report.converted.is_empty() { 1 } else { 0 })
        }
    }
}

fn web_rows(args: WebArgs, dataset: web::Dataset) -> anyhow::Result<i32> {
    let options = web::Options {
        dataset,
        agent_timeout_sec: args.agent_timeout,
        environment: args.environment,
        start_url: args.start_url,
    };
    let report = web::convert(&args.rows, &args.out, &options)?;
    print_report(&report, &args.out);
    Ok(if report.converted.is_empty() { 1 } else { 0 })
}

fn print_report(report: &orchard_convert::Report, out: &std::path::Path) {
    for (row, reason) in &report.skipped {
        eprintln!("skipped {row}: {reason}");
    }
    println!(
        "{} task folder(s) in {} ({} row(s) skipped)",
        report.converted.len(),
        out.display(),
        report.skipped.len()
    );
}

fn swe_bench_rows(args: SweBenchArgs) -> anyhow::Result<i32> {
    let mut options = swe_bench::Options {
        gold: args.gold,
        image_template: args.image_template,
        agent_timeout_sec: args.agent_timeout,
        ..Default::default()
    };
    if let Some(specs) = &args.specs {
        options.specs = swe_bench::read_specs(specs)?;
        options.specs_dir = specs.parent().map(|p| p.to_path_buf()).unwrap_or_default();
    }
    let report = swe_bench::convert(&args.rows, &args.out, &options)?;
    print_report(&report, &args.out);
    Ok(if report.converted.is_empty() { 1 } else { 0 })
}
