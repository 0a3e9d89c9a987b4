//! The host side of every import: what a plugin's calls into the host do.

pub mod browser;
mod log;
mod model;
mod sandbox;
mod tools;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub(crate) use tools::ToolRouter;

use crate::bindings::WitError;
use crate::manifest::Capability;
use crate::rollout::RolloutContext;

/// What a plugin may print to stdout/stderr before the rest is dropped.
const OUTPUT_CAPTURE: usize = 64 * 1024;

/// Counts the CPU a plugin's guest code uses, in epoch ticks: time spent waiting on the host (the
/// model, the sandbox, a tool) is subtracted, so a plugin is charged for its own work only.
pub(crate) struct CpuMeter {
    ticks: Arc<AtomicU64>,
    start: u64,
    waited: u64,
    pub(crate) budget: u64,
}

impl CpuMeter {
    fn now(&self) -> u64 {
        self.ticks.load(Ordering::Relaxed)
    }

    pub(crate) fn used(&self) -> u64 {
        self.now().saturating_sub(self.start).saturating_sub(self.waited)
    }
}

/// The data of one plugin instance's store.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limits: StoreLimits,
    /// `name@version`, for errors and the trajectory.
    pub(crate) plugin: String,
    granted: BTreeSet<Capability>,
    pub(crate) run: Arc<RolloutContext>,
    pub(crate) meter: CpuMeter,
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: MemoryOutputPipe,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HostState {
    pub(crate) fn new(
        plugin: String,
        granted: BTreeSet<Capability>,
        run: Arc<RolloutContext>,
        limits: StoreLimits,
        ticks: Arc<AtomicU64>,
        cpu_budget_ticks: u64,
    ) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        // Deny by default: no preopened directories, no sockets, no environment, no arguments.
        // Output goes to bounded in-memory pipes that end up in the trajectory.
        let wasi = WasiCtx::builder().stdout(stdout.clone()).stderr(stderr.clone()).build();
        let start = ticks.load(Ordering::Relaxed);
        HostState {
            wasi,
            table: ResourceTable::new(),
            limits,
            plugin,
            granted,
            run,
            meter: CpuMeter { ticks, start, waited: 0, budget: cpu_budget_ticks },
            stdout,
            stderr,
        }
    }

    /// Refuses an import whose capability was not granted to this plugin.
    fn require(&self, capability: Capability) -> Result<(), WitError> {
        if self.granted.contains(&capability) {
            Ok(())
        } else {
            Err(WitError::Denied(format!(
                "plugin {} may not use the {capability:?} capability (not in its manifest, or not granted for this run)",
                self.plugin
            )))
        }
    }

    /// Runs a host operation that waits (I/O), keeping the wait off the plugin's CPU bill.
    async fn waiting<F: std::future::Future>(&mut self, f: F) -> F::Output {
        let began = self.meter.now();
        let out = f.await;
        self.meter.waited += self.meter.now().saturating_sub(began);
        out
    }

    /// Milliseconds since the rollout began.
    fn at_ms(&self) -> u64 {
        self.run.started.elapsed().as_millis() as u64
    }
}

impl crate::bindings::tool_adapter::orchard::plugin::types::Host for HostState {}

/// Maps an agent error to the contract's error variant.
fn agent_error(e: orchard_agent_client::AgentClientError) -> WitError {
    use orchard_protocol::ErrorKind as K;
    let message = e.to_string();
    match e.kind() {
        K::InvalidInput => WitError::InvalidInput(message),
        K::NotFound => WitError::NotFound(message),
        K::Timeout => WitError::Timeout(message),
        K::Denied => WitError::Denied(message),
        K::Unavailable => WitError::Unavailable(message),
        K::Other => WitError::Other(message),
    }
}
