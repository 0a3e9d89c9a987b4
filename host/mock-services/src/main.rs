//! `orchard-mock-services --fixture FILE [--listen 127.0.0.1:8900] [--faults SEED:RATE[:MS]]`

use clap::Parser;

#[derive(Parser)]
#[command(
    about = "Mock productivity services (mail, calendar, contacts, docs, todo, files, crm, helpdesk) from a fixture"
)]
struct Args {
    /// The fixture: a JSON object of services and their records. Read once at start; with
    /// `--forget-fixture` it is deleted after (so an agent in the same sandbox cannot read it).
    #[arg(long)]
    fixture: std::path::PathBuf,
    #[arg(long)]
    forget_fixture: bool,
    #[arg(long, default_value = "127.0.0.1:8900")]
    listen: std::net::SocketAddr,
    /// Seeded error injection: SEED:RATE[:TIMEOUT_MS].
    #[arg(long)]
    faults: Option<String>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let text = std::fs::read_to_string(&args.fixture)
        .map_err(|e| anyhow::anyhow!("--fixture {}: {e}", args.fixture.display()))?;
    let fixture: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("--fixture {}: {e}", args.fixture.display()))?;
    let store = orchard_mock_services::Store::from_fixture(fixture)
        .map_err(|e| anyhow::anyhow!("--fixture {}: {e}", args.fixture.display()))?;
    if args.forget_fixture {
        std::fs::remove_file(&args.fixture)?;
    }
    let faults =
        args.faults.as_deref().map(orchard_mock_services::Faults::parse).transpose().map_err(anyhow::Error::msg)?;
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    eprintln!("orchard-mock-services listening on http://{}", listener.local_addr()?);
    let app = orchard_mock_services::App::new(store, faults);
    let grader = GraderDoor::bind(args.listen.port(), agent_pid())?;
    let graders = axum::serve(grader, orchard_mock_services::grader_router(app.clone()));
    let agents = axum::serve(listener, orchard_mock_services::router(app));
    tokio::try_join!(async { graders.await }, async { agents.await })?;
    Ok(())
}

/// The in-sandbox agent's pid: the one process whose connections are the grader's. Set by the
/// agent for the image's entrypoint; else this process's parent (the agent started it).
fn agent_pid() -> u32 {
    // `orchard_protocol::AGENT_PID_ENV`, spelled out: this small static binary does not link it.
    std::env::var("ORCHARD_AGENT_PID")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(std::os::unix::process::parent_id)
}

/// The grader's door: the abstract Unix socket `orchard-grader-PORT` (the network namespace's,
/// no file to find or remove), taking connections only from the agent process. Any other
/// process that connects is closed at once: it has the TCP door.
struct GraderDoor {
    listener: tokio::net::UnixListener,
    agent_pid: u32,
}

impl GraderDoor {
    fn bind(port: u16, agent_pid: u32) -> anyhow::Result<GraderDoor> {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("orchard-grader-{port}");
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
        let listener = std::os::unix::net::UnixListener::bind_addr(&addr)
            .map_err(|e| anyhow::anyhow!("the grader socket @{name}: {e}"))?;
        listener.set_nonblocking(true)?;
        Ok(GraderDoor { listener: tokio::net::UnixListener::from_std(listener)?, agent_pid })
    }
}

impl axum::serve::Listener for GraderDoor {
    type Io = tokio::net::UnixStream;
    type Addr = tokio::net::unix::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((stream, addr)) = self.listener.accept().await else {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            };
            // The kernel's word for who connected (SO_PEERCRED), not anything they sent.
            let pid = stream.peer_cred().ok().and_then(|c| c.pid());
            if pid.is_some_and(|p| p >= 0 && p as u32 == self.agent_pid) {
                return (stream, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}
