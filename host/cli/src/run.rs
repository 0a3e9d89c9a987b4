//! `orchard run`: one command in a fresh local sandbox, streamed, then the sandbox is gone.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use futures::StreamExt;
use orchard_protocol::{ExecFrame, ExecRequest};
use orchard_sandbox::{Backend, SandboxSpec, parse_cpu};
use orchard_sandbox_local::{Launcher, LocalBackend, LocalConfig};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// `host`, a rootfs directory, an OCI layout (`oci:DIR[:TAG]`), an image archive, or a
    /// registry reference.
    #[arg(long, default_value = "host")]
    image: String,
    /// Memory limit, e.g. `512Mi`; "none": no limit; "auto": `orchard serve`'s 2Gi where this
    /// host can enforce it (root) — a command's runaway code fills the sandbox, not the host.
    #[arg(long, default_value = "auto")]
    memory: String,
    /// CPU limit in cores, e.g. `0.5`.
    #[arg(long)]
    cpu: Option<String>,
    /// Size limit of the sandbox's writable layer, e.g. `10Gi` (ENOSPC past it); "none": no
    /// limit; "auto": 10Gi where this host can enforce it (root, loop devices).
    #[arg(long, default_value = "auto")]
    disk: String,
    /// Open the network (NAT; the host itself stays unreachable).
    #[arg(long)]
    network: bool,
    /// Kill the command after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    #[arg(long, env = "ORCHARD_STATE_DIR")]
    state_dir: Option<PathBuf>,
    #[arg(long, env = "ORCHARD_AGENT_BIN")]
    agent_bin: Option<PathBuf>,
    /// The command; one argument is run by the shell, several are run as an argv.
    #[arg(required = true, last = true)]
    command: Vec<String>,
}

pub async fn run(args: RunArgs, launcher: Arc<Launcher>) -> anyhow::Result<i32> {
    let state_dir = args.state_dir.clone().unwrap_or_else(crate::agent_bin::default_state_dir);
    let config = LocalConfig::new(&state_dir, crate::agent_bin::find(args.agent_bin.clone())?, launcher);
    let backend = LocalBackend::open(config).await.map_err(|e| anyhow::anyhow!("local backend: {e}"))?;
    let mut spec = SandboxSpec::new("default", &args.image);
    spec.block_network = !args.network;
    use crate::admission_args::{Limit, local_limit};
    spec.memory_bytes = local_limit("memory", &args.memory, "2Gi", Limit::Memory)?;
    spec.disk_bytes = local_limit("disk", &args.disk, "10Gi", Limit::Disk)?;
    spec.cpu = args.cpu.as_ref().map(|c| parse_cpu(&c.as_str().into())).transpose().map_err(anyhow::Error::msg)?;
    let info = backend.create(spec).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let outcome = stream(&*backend, &info.id, &args).await;
    backend.delete(&info.id).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    backend.wait_cleanups().await;
    backend.remove_empty_cgroup_groups();
    outcome
}

async fn stream(backend: &dyn Backend, id: &str, args: &RunArgs) -> anyhow::Result<i32> {
    let agent = backend.agent(id).await?;
    let mut req = match args.command.as_slice() {
        [one] => ExecRequest::shell(one.clone()),
        many => ExecRequest::argv(many.iter().cloned()),
    };
    req.timeout_ms = Some(args.timeout * 1000);
    let mut frames = std::pin::pin!(agent.exec_stream(&req).await?);
    while let Some(frame) = frames.next().await {
        match frame? {
            ExecFrame::Stdout { data } => {
                print!("{data}");
                std::io::stdout().flush()?;
            }
            ExecFrame::Stderr { data } => eprint!("{data}"),
            ExecFrame::Exit { result } => {
                if result.timed_out {
                    eprintln!("orchard: the command timed out after {} s", args.timeout);
                }
                return Ok(result.exit_code);
            }
            ExecFrame::Error { message, .. } => anyhow::bail!("{message}"),
        }
    }
    anyhow::bail!("the sandbox's agent closed the stream early")
}
