//! `orchard`: one binary for the environment layer.

// The arguments' doc comments are their --help text (clap), where `[default: …]` and
// `HOST[:PORT]` read as written: they are not rustdoc links.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

mod admission_args;
mod agent_bin;
mod backend;
mod convert;
mod eval;
mod eval_remote;
mod export;
mod kube;
mod plugins;
mod run;
mod serve;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "orchard", version, about = "Orchard: sandboxes and plugin-defined environments for LLM agents")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the sandbox API (Orchard-Env compatible, plus /v1).
    Serve(Box<serve::ServeArgs>),
    /// Run one command in a fresh local sandbox (no server needed), then delete it.
    Run(run::RunArgs),
    /// Evaluate a harness on tasks, graded by a grader, on local or Kubernetes sandboxes.
    Eval(Box<eval::EvalArgs>),
    /// Export trajectories for training: openai, atif, sharegpt or tokens; with credit assignment.
    Export(Box<export::ExportArgs>),
    /// Inspect plugins.
    #[command(subcommand)]
    Plugin(plugins::PluginCommand),
    /// Convert datasets (SWE-bench rows, ...) into task folders.
    #[command(subcommand)]
    Convert(convert::ConvertCommand),
    /// What to apply to a Kubernetes cluster beside the server (image pre-pulling).
    #[command(subcommand)]
    Kube(kube::KubeCommand),
    /// Compiles the component on stdin for this binary's plugin runtime (what the server runs in
    /// a child process, so that the compiler's memory is never its own).
    #[command(hide = true)]
    CompileComponent(plugins::CompileArgs),
}

fn main() {
    let cli = Cli::parse();
    // `run` is a tool in a pipeline: only warnings by default. `serve` reports what it does.
    let default_level = match cli.command {
        Command::Run(_) => "warn",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let logs = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // ORCHARD_LOG_FORMAT=json: one JSON object per line, with the span's fields (a rollout's
    // `eval` and `rollout` ids) on every line, for log pipelines.
    if std::env::var("ORCHARD_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().with_current_span(true).with_span_list(false).init();
    } else {
        logs.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init();
    }
    raise_fd_limit();
    // One TLS provider for every client in the process (model endpoints, registries, servers).
    let _ = rustls::crypto::ring::default_provider().install_default();
    match run_command(cli) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("orchard: {e:#}");
            std::process::exit(1);
        }
    }
}

fn run_command(cli: Cli) -> anyhow::Result<i32> {
    if let Command::CompileComponent(args) = &cli.command {
        return Ok(plugins::compile_component(args));
    }
    // The sandbox launcher must be forked while this process still has a single thread.
    // SAFETY: no runtime and no other thread has started yet.
    let launcher = std::sync::Arc::new(unsafe { orchard_sandbox_local::Launcher::start() }?);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(*args, launcher).await.map(|()| 0),
            Command::Run(args) => run::run(args, launcher).await,
            Command::Eval(args) => eval::run(*args, launcher).await,
            Command::Plugin(command) => plugins::run(command),
            Command::Export(args) => export::run(*args).await,
            Command::Convert(command) => convert::run(command),
            Command::Kube(command) => kube::run(command),
            Command::CompileComponent(args) => Ok(plugins::compile_component(&args)),
        }
    })
}

/// Thousands of sandboxes mean thousands of sockets: lift the soft fd limit to the hard one.
fn raise_fd_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every subcommand's defaults parse into its fields (a flag whose parser and field disagree
    /// panics only when read).
    #[test]
    fn every_command_parses_with_its_defaults() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let parsed = |args: &[&str]| Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        parsed(&["orchard", "serve"]);
        parsed(&["orchard", "run", "--", "true"]);
        parsed(&["orchard", "run", "--memory", "none", "--disk", "1Gi", "--", "true"]);
        parsed(&["orchard", "eval", "tasks", "--harness", "oracle", "--grader", "script", "--sandbox-disk", "auto"]);
        parsed(&["orchard", "serve", "--tenant-dataset-quota", "none", "--tenant-result-quota", "1"]);
    }
}
