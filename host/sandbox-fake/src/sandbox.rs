//! One fake sandbox: its spec, its state, its files and what was run in it.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;

use orchard_protocol::{ExecRequest, ProcessInfo};
use orchard_sandbox::{SandboxInfo, SandboxSpec};

use crate::exec::ExecHandler;
use crate::fs::MemFs;

pub(crate) struct Sandbox {
    pub(crate) id: String,
    pub(crate) spec: SandboxSpec,
    pub(crate) info: Mutex<SandboxInfo>,
    pub(crate) fs: Mutex<MemFs>,
    pub(crate) handler: ExecHandler,
    /// Every command run, in order (exec, sessions and background processes).
    pub(crate) commands: Mutex<Vec<ExecRequest>>,
    /// Background processes and their combined output.
    pub(crate) processes: Mutex<Vec<(ProcessInfo, String)>>,
    /// Open sessions and their working directories.
    pub(crate) sessions: Mutex<BTreeMap<String, String>>,
    /// Set on delete: the agent answers as an unreachable one from then on.
    pub(crate) deleted: AtomicBool,
    /// The working directory and environment set after creation (`set_defaults`), over the
    /// spec's.
    pub(crate) defaults: Mutex<(Option<String>, BTreeMap<String, String>)>,
}

impl Sandbox {
    /// Counts as activity for idle expiry.
    pub(crate) fn touch(&self) {
        self.info.lock().unwrap_or_else(|p| p.into_inner()).last_active = crate::now();
    }

    pub(crate) fn info(&self) -> SandboxInfo {
        self.info.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
