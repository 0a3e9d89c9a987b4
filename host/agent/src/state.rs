//! What the agent holds while it runs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Mutex;

use crate::config::Config;
use crate::defaults;
use crate::files::Confinement;
use crate::process::BackgroundProcess;
use crate::reaper::Reaper;
use crate::session::Session;

pub struct AgentState {
    pub config: Config,
    pub reaper: Reaper,
    pub confinement: Confinement,
    pub processes: Mutex<HashMap<String, Arc<BackgroundProcess>>>,
    pub sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The working directory and environment of commands that name none (`PUT /defaults`).
    pub defaults: defaults::Held,
    /// The desktop services this agent started: port → pid. A grader's read of that port must
    /// reach that very process (see `http_proxy`).
    pub desktops: std::sync::Mutex<HashMap<u16, i32>>,
    next_id: AtomicU64,
}

impl AgentState {
    pub fn new(config: Config) -> anyhow::Result<Self> {
        std::fs::create_dir_all(&config.scratch_dir)?;
        let confinement = Confinement::new(&config.roots)?;
        Ok(AgentState {
            config,
            reaper: Reaper::start(),
            confinement,
            processes: Mutex::new(HashMap::new()),
            sessions: Mutex::new(HashMap::new()),
            defaults: defaults::Held::default(),
            desktops: Default::default(),
            next_id: AtomicU64::new(1),
        })
    }

    /// A fresh id, unique for the agent's lifetime: `prefix-N`.
    pub fn next_id(&self, prefix: &str) -> String {
        format!("{prefix}-{}", self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// A path in the scratch directory (spilled output, logs, session files).
    pub fn scratch(&self, sub: &str, name: &str) -> PathBuf {
        self.config.scratch_dir.join(sub).join(name)
    }
}
