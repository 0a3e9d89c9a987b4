//! Orchard's plugin runtime.
//!
//! Plugins are WebAssembly components implementing one world of a contract version,
//! `orchard:plugin@0.1.0` or `@0.2.0` (`wit/`, one module of `contract` each): `harness`,
//! `tool-adapter`, `browser-driver` or `grader`. The runtime compiles
//! each once (cached on disk, keyed by the engine's compatibility hash), checks it against its
//! world, pre-instantiates it, and runs rollouts: a fresh store per plugin instance per rollout,
//! with memory, CPU and wall-clock limits, WASI denied by default, every crossing recorded.

#![warn(missing_docs)]

#[macro_use]
pub mod host;
mod compile_child;
mod context;
mod contract;
mod engine;
mod failure;
mod manifest;
mod plugin;
mod registry;
mod rollout;
mod session;
mod ticker;
mod trajectory;

pub use compile_child::{
    INVALID as COMPILE_INVALID, MEMORY_LIMIT as COMPILE_MEMORY_LIMIT, PrecompileError, precompile,
};
pub use contract::v0_1::ToolSpec;
pub use engine::{Runtime, RuntimeConfig};
pub use failure::{FailureKind, PluginFailure};
pub use manifest::{Capability, Contract, Manifest, PluginKind};
pub use orchard_browser::BrowserOptions;
pub use plugin::{Plugin, PluginError, PluginInfo};
pub use registry::{Owner, Registry, VisiblePlugin};
pub use rollout::{GradingEnvironment, Grants, Limits, RolloutContext, RunOutcome, Status, TaskInput, Verdict};
pub use session::{ToolAnswer, ToolSession};
pub use trajectory::{Step, Trajectory};
