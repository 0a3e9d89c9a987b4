//! `orchard:plugin@0.1.0` (`wit/0.1.0`, frozen): harness, tool-adapter, browser-driver and
//! grader worlds, with `types`, `log`, `sandbox`, `model`, `tools` and `browser`. The host's tool
//! router speaks these types; the host's own errors are made as this version's.

use wasmtime::component::Resource;

use crate::host::browser::Session;

worlds!("../../wit/0.1.0");
conversions!(v0_1);
common_calls!();

/// The types the host's tool router and trajectory speak.
pub use tool_adapter::orchard::plugin::types::{ContentPart, Error as WitError, ToolCall, ToolOutput, ToolSpec};

impl tool_adapter::orchard::plugin::types::Host for HostState {}
log_host!(v0_1);
model_host!(v0_1);
sandbox_host!(v0_1);
tools_host!(v0_1);
browser_host!(v0_1);
