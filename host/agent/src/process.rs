//! Background processes: started, listed, signalled, their combined log read back in slices.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use orchard_protocol::{Command, LogChunk, ProcessInfo, ProcessStart, ProcessState};

use crate::error::{AgentError, AgentResult};
use crate::reaper::ExitInfo;
use crate::spawn;
use crate::state::AgentState;

const MAX_LOG_CHUNK: u64 = 1024 * 1024;

pub struct BackgroundProcess {
    id: String,
    pid: i32,
    command: String,
    log_path: PathBuf,
    started_at: f64,
    exit: Arc<Mutex<Option<ExitInfo>>>,
}

impl BackgroundProcess {
    pub fn info(&self) -> ProcessInfo {
        let exit = *self.exit.lock().unwrap_or_else(|p| p.into_inner());
        ProcessInfo {
            id: self.id.clone(),
            pid: self.pid,
            command: self.command.clone(),
            state: if exit.is_some() { ProcessState::Exited } else { ProcessState::Running },
            exit_code: exit.map(|e| e.code),
            log_path: self.log_path.display().to_string(),
            started_at: self.started_at,
        }
    }

    pub fn signal(&self, signal: &str) -> AgentResult<()> {
        let signal = spawn::parse_signal(signal)?;
        if self.exit.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
            return Err(AgentError::invalid(format!("process {} has already exited", self.id)));
        }
        spawn::kill_group(self.pid, signal);
        Ok(())
    }

    pub fn read_log(&self, offset: u64, limit: Option<u64>) -> AgentResult<LogChunk> {
        let exited = self.exit.lock().unwrap_or_else(|p| p.into_inner()).is_some();
        let limit = limit.unwrap_or(64 * 1024).min(MAX_LOG_CHUNK);
        let mut file = std::fs::File::open(&self.log_path).map_err(|e| AgentError::io("opening the log", e))?;
        let len = file.metadata().map_err(|e| AgentError::io("reading the log", e))?.len();
        let start = offset.min(len);
        file.seek(SeekFrom::Start(start)).map_err(|e| AgentError::io("reading the log", e))?;
        let mut buf = Vec::new();
        file.take(limit).read_to_end(&mut buf).map_err(|e| AgentError::io("reading the log", e))?;
        let next_offset = start + buf.len() as u64;
        Ok(LogChunk {
            data: String::from_utf8_lossy(&buf).into_owned(),
            offset: start,
            next_offset,
            eof: exited && next_offset >= len,
        })
    }
}

pub fn start(state: &AgentState, id: String, req: ProcessStart) -> AgentResult<Arc<BackgroundProcess>> {
    let (cwd, env) = state.defaults.apply(req.cwd.as_deref(), &req.env);
    let mut command = spawn::build(&state.config.shell, &req.command, cwd.as_deref(), &env, false)?;
    command.process_group(0);
    let log_path = state.scratch("processes", &format!("{id}.log"));
    if let Some(dir) = log_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| AgentError::io("creating the log directory", e))?;
    }
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| AgentError::io(&format!("opening {}", log_path.display()), e))?;
    let log2 = log.try_clone().map_err(|e| AgentError::io("opening the log", e))?;
    command.stdin(Stdio::null()).stdout(log).stderr(log2);
    let (child, exit_rx) = state.reaper.spawn(&mut command).map_err(|e| spawn::spawn_error(&req.command, e))?;
    let exit = Arc::new(Mutex::new(None));
    let exit_slot = exit.clone();
    tokio::spawn(async move {
        if let Ok(info) = exit_rx.await {
            *exit_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(info);
        }
    });
    let started_at = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0);
    Ok(Arc::new(BackgroundProcess {
        id,
        pid: child.id() as i32,
        command: req.command.display(),
        log_path,
        started_at,
        exit,
    }))
}

/// Starts the image's entrypoint (when given on the command line) as process `entrypoint`.
impl AgentState {
    pub fn start_entrypoint(&self) -> anyhow::Result<()> {
        if self.config.entrypoint.is_empty() {
            return Ok(());
        }
        let req = ProcessStart {
            command: Command::Argv(self.config.entrypoint.clone()),
            cwd: None,
            // The services it starts learn whose connections are the grader's.
            env: [(orchard_protocol::AGENT_PID_ENV.to_string(), std::process::id().to_string())].into(),
        };
        let process = start(self, "entrypoint".into(), req).map_err(|e| anyhow::anyhow!("entrypoint: {e}"))?;
        self.processes.try_lock().expect("no contention at start").insert("entrypoint".into(), process);
        Ok(())
    }
}
