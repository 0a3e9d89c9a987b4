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
    axum::serve(listener, orchard_mock_services::router(orchard_mock_services::App::new(store, faults))).await?;
    Ok(())
}
