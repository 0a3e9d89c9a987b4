//! `orchard`: one binary for the environment layer.

mod agent_bin;
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
    Serve(serve::ServeArgs),
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    raise_fd_limit();
    let cli = Cli::parse();
    // The sandbox launcher must be forked while this process still has a single thread.
    let launcher = match &cli.command {
        // SAFETY: no runtime and no other thread has started yet.
        Command::Serve(_) => Some(std::sync::Arc::new(unsafe { orchard_sandbox_local::Launcher::start() }?)),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async move {
        match cli.command {
            Command::Serve(args) => serve::run(args, launcher.expect("started above")).await,
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
