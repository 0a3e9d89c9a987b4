//! How a plugin fails a rollout: the kind (a trap, its CPU or memory budget, its wall clock,
//! its own error, its configuration), the plugin and the call, and a message a person can read
//! (the root cause of a wasmtime error, what the guest printed before it trapped).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use wasmtime::Store;

use crate::host::HostState;
use crate::plugin::Plugin;

/// What the CPU-budget check raises, to tell it apart from other traps.
pub(crate) const CPU_EXCEEDED: &str = "orchard: CPU budget exceeded";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// What limit or fault ended a plugin call.
pub enum FailureKind {
    /// The guest trapped (a panic, an unreachable, a bad memory access).
    Trap,
    /// It spent its CPU budget (fuel).
    CpuBudget,
    /// It reached its memory limit.
    Memory,
    /// It ran past its wall-clock limit.
    WallClock,
    /// The plugin returned an error from its export.
    Error,
    /// The run was set up wrongly (a harness given as a tool adapter, clashing tool names...).
    Config,
    /// The rollout's browser could not start, or died (crashed, or killed at the sandbox's
    /// memory limit).
    Browser,
}

/// A plugin failure that ends a rollout; names the plugin and the call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, thiserror::Error)]
#[error("plugin {plugin} failed in {call}: {message}")]
pub struct PluginFailure {
    /// The plugin.
    pub plugin: String,
    /// The export called.
    pub call: String,
    /// What ended it.
    pub kind: FailureKind,
    /// What happened, in words.
    pub message: String,
}

impl PluginFailure {
    pub(crate) fn from_error(plugin: &Plugin, call: &str, e: wasmtime::Error, store: &Store<HostState>) -> Self {
        let text = format!("{e:?}");
        // The whole error chain, for whoever runs with RUST_LOG=orchard_runtime=debug.
        tracing::debug!(plugin = %plugin.id(), call, "plugin failure: {text}");
        let (kind, message) = if text.contains(CPU_EXCEEDED) {
            let budget = Duration::from_nanos(store.data().meter.budget_ns);
            (FailureKind::CpuBudget, format!("used more than its CPU budget of {budget:?}"))
        } else if text.contains("forcing trap when growing memory") {
            (FailureKind::Memory, format!("ran out of memory: {}", cause(&text)))
        } else {
            let said = guest_said(&String::from_utf8_lossy(&store.data().stderr.contents()))
                .map(|l| format!("; it said: {l}"))
                .unwrap_or_default();
            (FailureKind::Trap, format!("{}{said}", cause(&text)))
        };
        PluginFailure { plugin: plugin.id(), call: call.into(), kind, message }
    }

    /// The plugin's own `error` result from `call`.
    pub(crate) fn returned(plugin: &Plugin, call: &str, message: String) -> Self {
        PluginFailure { plugin: plugin.id(), call: call.into(), kind: FailureKind::Error, message }
    }

    pub(crate) fn config(plugin: &Plugin, message: String) -> Self {
        PluginFailure { plugin: plugin.id(), call: "setup".into(), kind: FailureKind::Config, message }
    }
}

/// Runs a plugin's call, failing it with `WallClock` if it outlasts `wall`.
pub(crate) async fn within_wall_clock<T>(
    plugin: &Plugin,
    call: &str,
    wall: Duration,
    work: impl std::future::Future<Output = Result<T, PluginFailure>>,
) -> Result<T, PluginFailure> {
    tokio::time::timeout(wall, work).await.unwrap_or_else(|_| {
        Err(PluginFailure {
            plugin: plugin.id(),
            call: call.into(),
            kind: FailureKind::WallClock,
            message: format!("did not finish within {wall:?}"),
        })
    })
}

fn first_line(text: &str) -> String {
    text.lines().next().unwrap_or_default().to_string()
}

/// What a guest printed before it trapped: a Rust panic's message, or its last line.
fn guest_said(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    if let Some(i) = lines.iter().rposition(|l| l.contains("panicked at")) {
        return lines.get(i + 1).map(|l| l.to_string());
    }
    lines.iter().rev().find(|l| !l.starts_with("note: run with")).map(|l| l.to_string())
}

/// The root cause in a wasmtime error's report (the line after the last `Caused by:`).
fn cause(text: &str) -> String {
    let mut lines = text.lines().map(str::trim);
    let mut found = None;
    while let Some(line) = lines.next() {
        if line == "Caused by:" {
            found =
                lines.next().map(|l| l.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':').trim().to_string());
        }
    }
    found.unwrap_or_else(|| first_line(text))
}
