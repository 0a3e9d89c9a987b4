//! The host side of every import: what a plugin's calls into the host do.

#[macro_use]
pub mod browser;
mod config;
#[macro_use]
mod desktop;
#[macro_use]
mod log;
#[macro_use]
mod model;
#[macro_use]
pub(crate) mod sandbox;
#[macro_use]
mod tools;

use std::collections::BTreeSet;
use std::sync::Arc;

use wasmtime::StoreLimits;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

pub(crate) use tools::ToolRouter;

use crate::contract::v0_1::WitError;
use crate::manifest::Capability;
use crate::rollout::RolloutContext;

/// What a plugin may print to stdout/stderr before the rest is dropped.
const OUTPUT_CAPTURE: usize = 64 * 1024;

/// Counts the CPU time a plugin's guest code uses.
///
/// Sampled at every epoch tick while guest code runs, from the running thread's CPU clock: time
/// the plugin spends waiting on the host (the model, the sandbox, a tool) or waiting for a
/// thread (other rollouts running) is not charged. The executor may move a rollout between
/// threads, so a sample only counts against the previous one taken on the same thread.
pub(crate) struct CpuMeter {
    pub(crate) used_ns: u64,
    pub(crate) budget_ns: u64,
    last: Option<(std::thread::ThreadId, u64)>,
}

impl CpuMeter {
    /// Records the CPU used since the last sample; returns the total.
    pub(crate) fn sample(&mut self) -> u64 {
        let now = thread_cpu_ns();
        let me = std::thread::current().id();
        if let Some((thread, before)) = self.last
            && thread == me
        {
            self.used_ns += now.saturating_sub(before);
        }
        self.last = Some((me, now));
        self.used_ns
    }

    /// The guest stops running (a host call that waits): the next sample starts afresh.
    fn pause(&mut self) {
        self.sample();
        self.last = None;
    }
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes a timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The data of one plugin instance's store.
pub struct HostState {
    wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: StoreLimits,
    /// `name@version`, for errors and the trajectory.
    pub(crate) plugin: String,
    granted: BTreeSet<Capability>,
    /// A grader's sandbox reads are its own, never the agent's (see `HttpRequest::grader`).
    pub(crate) grader: bool,
    pub(crate) run: Arc<RolloutContext>,
    pub(crate) meter: CpuMeter,
    pub(crate) stdout: MemoryOutputPipe,
    pub(crate) stderr: MemoryOutputPipe,
    /// Keeps the epoch advancing while this store lives.
    _ticking: crate::ticker::Ticking,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl HostState {
    pub(crate) fn new(
        plugin: String,
        grader: bool,
        granted: BTreeSet<Capability>,
        run: Arc<RolloutContext>,
        limits: StoreLimits,
        cpu_budget: std::time::Duration,
        ticking: crate::ticker::Ticking,
    ) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPTURE);
        // Deny by default: no preopened directories, no sockets, no environment, no arguments.
        // Output goes to bounded in-memory pipes that end up in the trajectory.
        let wasi = WasiCtx::builder().stdout(stdout.clone()).stderr(stderr.clone()).build();
        HostState {
            wasi,
            table: ResourceTable::new(),
            limits,
            plugin,
            grader,
            granted,
            run,
            meter: CpuMeter { used_ns: 0, budget_ns: cpu_budget.as_nanos() as u64, last: None },
            stdout,
            stderr,
            _ticking: ticking,
        }
    }

    /// Refuses an import whose capability was not granted to this plugin.
    pub(crate) fn require(&self, capability: Capability) -> Result<(), WitError> {
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
    pub(crate) async fn waiting<F: std::future::Future>(&mut self, f: F) -> F::Output {
        self.meter.pause();
        f.await
    }

    /// Milliseconds since the rollout began.
    pub(crate) fn at_ms(&self) -> u64 {
        self.run.started.elapsed().as_millis() as u64
    }
}

/// Maps an agent error to the contract's error variant.
pub(crate) fn agent_error(e: orchard_agent_client::AgentClientError) -> WitError {
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
