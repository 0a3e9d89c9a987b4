//! The fake sandbox's agent: [`SandboxAgent`] answered from memory.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Method, Response};
use orchard_agent_client::{AgentClientError, AgentStream, Body, FrameStream, Result, SandboxAgent, full};
use orchard_protocol::{
    ErrorKind, ExecFrame, ExecRequest, ExecResult, FileEntry, Health, HttpRequest, HttpResponse, Listing, LogChunk,
    ProcessInfo, ProcessStart, ProcessState, SessionContinue, SessionInfo, SessionStart, WriteResult,
};

use crate::exec::ExecCall;
use crate::fs::{FsError, Node, normalise};
use crate::sandbox::Sandbox;

/// The agent of one fake sandbox. Once the sandbox is deleted every call fails as an
/// unreachable agent does.
pub struct FakeAgent {
    pub(crate) sandbox: Arc<Sandbox>,
}

fn agent_error(kind: ErrorKind, message: impl Into<String>) -> AgentClientError {
    AgentClientError::Agent { status: kind.http_status(), kind, message: message.into() }
}

impl From<FsError> for AgentClientError {
    fn from(e: FsError) -> Self {
        agent_error(e.kind, e.message)
    }
}

fn unsupported(what: &str) -> AgentClientError {
    agent_error(ErrorKind::Unavailable, format!("the fake backend has no {what}"))
}

async fn collect(body: Body) -> Result<Bytes> {
    body.collect().await.map(|c| c.to_bytes()).map_err(|e| AgentClientError::Protocol(format!("reading a body: {e}")))
}

fn json_response(value: &impl serde::Serialize) -> Result<Response<Body>> {
    let bytes = serde_json::to_vec(value).map_err(|e| AgentClientError::Protocol(e.to_string()))?;
    Ok(Response::builder().header("content-type", "application/json").body(full(bytes)).expect("static response"))
}

fn query(path_and_query: &str) -> (String, BTreeMap<String, String>) {
    let (path, q) = path_and_query.split_once('?').unwrap_or((path_and_query, ""));
    let params = q
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            (orchard_agent_client::decode(k), orchard_agent_client::decode(v))
        })
        .collect();
    (path.to_string(), params)
}

impl FakeAgent {
    fn live(&self) -> Result<&Sandbox> {
        if self.sandbox.deleted.load(Ordering::SeqCst) {
            return Err(AgentClientError::Unreachable {
                addr: format!("memory:{}", self.sandbox.id),
                reason: "the sandbox was deleted".into(),
            });
        }
        self.sandbox.touch();
        Ok(&self.sandbox)
    }

    fn run(&self, req: &ExecRequest, cwd: Option<String>) -> Result<ExecResult> {
        let sandbox = self.live()?;
        sandbox.commands.lock().unwrap_or_else(|p| p.into_inner()).push(req.clone());
        let (default_cwd, default_env) = sandbox.defaults.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut env = sandbox.spec.env.clone();
        env.extend(default_env);
        env.extend(req.env.clone());
        let cwd = req
            .cwd
            .clone()
            .or(cwd)
            .or(default_cwd)
            .or_else(|| sandbox.spec.workdir.clone())
            .unwrap_or_else(|| "/".into());
        let mut fs = sandbox.fs.lock().unwrap_or_else(|p| p.into_inner());
        let mut call = ExecCall { sandbox: &sandbox.id, request: req, env, cwd: normalise(&cwd, "/"), fs: &mut fs };
        Ok((sandbox.handler)(&mut call))
    }

    fn tar_of(&self, path: &str) -> Result<Vec<u8>> {
        let fs = self.live()?.fs.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let root = normalise(path, "/");
        if !matches!(fs.node(&root), Some(Node::Dir { .. })) {
            return Err(agent_error(ErrorKind::NotFound, format!("{root}: no such directory")));
        }
        let mut builder = tar::Builder::new(Vec::new());
        for p in fs.walk(&root).into_iter().filter(|p| *p != root) {
            let rel = p[root.len()..].trim_start_matches('/').to_string();
            let mut header = tar::Header::new_gnu();
            let appended = match fs.node(&p) {
                Some(Node::File { data, mode, .. }) => {
                    header.set_size(data.len() as u64);
                    header.set_mode(*mode);
                    header.set_entry_type(tar::EntryType::Regular);
                    builder.append_data(&mut header, &rel, &data[..])
                }
                Some(Node::Dir { mode, .. }) => {
                    header.set_size(0);
                    header.set_mode(*mode);
                    header.set_entry_type(tar::EntryType::Directory);
                    builder.append_data(&mut header, &rel, std::io::empty())
                }
                None => continue,
            };
            appended.map_err(|e| AgentClientError::Protocol(format!("tar of {p}: {e}")))?;
        }
        builder.into_inner().map_err(|e| AgentClientError::Protocol(format!("tar of {root}: {e}")))
    }
}

#[async_trait::async_trait]
impl SandboxAgent for FakeAgent {
    fn describe(&self) -> String {
        format!("memory:{}", self.sandbox.id)
    }

    async fn send(&self, method: Method, path_and_query: &str, body: Body) -> Result<Response<Body>> {
        let (path, q) = query(path_and_query);
        let file = || q.get("path").cloned().ok_or_else(|| agent_error(ErrorKind::InvalidInput, "missing `path`"));
        let flag = |k: &str| q.get(k).is_some_and(|v| v == "true");
        match (method, path.as_str()) {
            (Method::GET, "/health") => json_response(&self.health().await?),
            (Method::POST, "/exec") => {
                let req: ExecRequest = serde_json::from_slice(&collect(body).await?)
                    .map_err(|e| agent_error(ErrorKind::InvalidInput, format!("exec request: {e}")))?;
                json_response(&self.exec(&req).await?)
            }
            (Method::GET, "/files") => Ok(Response::new(full(self.read_file(&file()?).await?))),
            (Method::PUT, "/files") => {
                let mode = match q.get("mode") {
                    Some(m) => Some(
                        u32::from_str_radix(m, 8)
                            .map_err(|_| agent_error(ErrorKind::InvalidInput, format!("mode {m:?}: not octal")))?,
                    ),
                    None => None,
                };
                json_response(&self.write_file(&file()?, body, mode, flag("create_parents")).await?)
            }
            (Method::DELETE, "/files") => {
                self.remove(&file()?, flag("recursive")).await?;
                Ok(Response::new(full(Bytes::new())))
            }
            (Method::GET, "/files/list") => json_response(&self.list(&file()?).await?),
            (Method::GET, "/files/stat") => json_response(&self.stat(&file()?).await?),
            (Method::GET, "/tar") => self.tar_download(&file()?).await,
            (Method::PUT, "/tar") => json_response(&self.tar_upload(&file()?, body).await?),
            (method, path) => Err(agent_error(ErrorKind::NotFound, format!("the fake backend has no {method} {path}"))),
        }
    }

    async fn health(&self) -> Result<Health> {
        self.live()?;
        Ok(Health { status: "ok".into(), version: env!("CARGO_PKG_VERSION").into(), pid: 1 })
    }

    async fn exec(&self, req: &ExecRequest) -> Result<ExecResult> {
        self.run(req, None)
    }

    async fn set_defaults(&self, cwd: Option<&str>, env: &BTreeMap<String, String>) -> Result<()> {
        let sandbox = self.live()?;
        if let Some(dir) = cwd {
            sandbox.fs.lock().unwrap_or_else(|p| p.into_inner()).mkdir_all(dir)?;
        }
        *sandbox.defaults.lock().unwrap_or_else(|p| p.into_inner()) = (cwd.map(str::to_string), env.clone());
        Ok(())
    }

    async fn exec_stream(&self, req: &ExecRequest) -> Result<FrameStream> {
        let result = self.run(req, None)?;
        let mut frames = Vec::new();
        if !result.stdout.text.is_empty() {
            frames.push(Ok(ExecFrame::Stdout { data: result.stdout.text.clone() }));
        }
        if !result.stderr.text.is_empty() {
            frames.push(Ok(ExecFrame::Stderr { data: result.stderr.text.clone() }));
        }
        frames.push(Ok(ExecFrame::Exit { result }));
        Ok(Box::pin(futures::stream::iter(frames)))
    }

    async fn start_desktop(&self, _req: &orchard_protocol::DesktopStart) -> Result<ProcessInfo> {
        Err(unsupported("desktop"))
    }

    async fn start_process(&self, req: &ProcessStart) -> Result<ProcessInfo> {
        // It runs to its end at once: the fake has no time of its own.
        let mut exec = ExecRequest::new(req.command.clone());
        exec.cwd = req.cwd.clone();
        exec.env = req.env.clone();
        let result = self.run(&exec, None)?;
        let mut processes = self.sandbox.processes.lock().unwrap_or_else(|p| p.into_inner());
        let id = format!("p{}", processes.len() + 1);
        let info = ProcessInfo {
            id: id.clone(),
            pid: 100 + processes.len() as i32,
            command: req.command.display(),
            state: ProcessState::Exited,
            exit_code: Some(result.exit_code),
            log_path: format!("/tmp/.orchard/processes/{id}.log"),
            started_at: crate::now(),
        };
        processes.push((info.clone(), format!("{}{}", result.stdout.text, result.stderr.text)));
        Ok(info)
    }

    async fn list_processes(&self) -> Result<Vec<ProcessInfo>> {
        self.live()?;
        Ok(self.sandbox.processes.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(i, _)| i.clone()).collect())
    }

    async fn process(&self, id: &str) -> Result<ProcessInfo> {
        self.list_processes()
            .await?
            .into_iter()
            .find(|p| p.id == id)
            .ok_or_else(|| agent_error(ErrorKind::NotFound, format!("process {id}: not found")))
    }

    async fn signal_process(&self, id: &str, _signal: &str) -> Result<ProcessInfo> {
        self.process(id).await
    }

    async fn process_log(&self, id: &str, offset: u64, limit: Option<u64>) -> Result<LogChunk> {
        self.process(id).await?;
        let processes = self.sandbox.processes.lock().unwrap_or_else(|p| p.into_inner());
        let log = processes.iter().find(|(i, _)| i.id == id).map(|(_, l)| l.as_bytes()).unwrap_or_default();
        let start = (offset as usize).min(log.len());
        let end = limit.map_or(log.len(), |l| (start + l as usize).min(log.len()));
        let data = String::from_utf8_lossy(&log[start..end]).into_owned();
        Ok(LogChunk { data, offset: start as u64, next_offset: end as u64, eof: end == log.len() })
    }

    async fn start_session(&self, req: &SessionStart) -> Result<SessionInfo> {
        let sandbox = self.live()?;
        let mut sessions = sandbox.sessions.lock().unwrap_or_else(|p| p.into_inner());
        let id = format!("s{}", sessions.len() + 1);
        let default_cwd = sandbox.defaults.lock().unwrap_or_else(|p| p.into_inner()).0.clone();
        let cwd =
            req.cwd.clone().or(default_cwd).or_else(|| sandbox.spec.workdir.clone()).unwrap_or_else(|| "/".into());
        sessions.insert(id.clone(), cwd);
        Ok(SessionInfo { id, pid: 200 + sessions.len() as i32, shell: "fake".into(), alive: true })
    }

    async fn list_sessions(&self) -> Result<Vec<SessionInfo>> {
        let sandbox = self.live()?;
        let sessions = sandbox.sessions.lock().unwrap_or_else(|p| p.into_inner());
        Ok(sessions
            .keys()
            .enumerate()
            .map(|(n, id)| SessionInfo { id: id.clone(), pid: 201 + n as i32, shell: "fake".into(), alive: true })
            .collect())
    }

    async fn session_exec(&self, id: &str, req: &ExecRequest) -> Result<ExecResult> {
        let cwd = self.live()?.sessions.lock().unwrap_or_else(|p| p.into_inner()).get(id).cloned();
        let cwd = cwd.ok_or_else(|| agent_error(ErrorKind::NotFound, format!("session {id}: not found")))?;
        self.run(req, Some(cwd))
    }

    async fn session_continue(&self, id: &str, _req: &SessionContinue) -> Result<ExecResult> {
        // Nothing is ever left running in a fake session.
        Err(agent_error(ErrorKind::InvalidInput, format!("session {id}: no command is running")))
    }

    async fn close_session(&self, id: &str) -> Result<()> {
        let removed = self.live()?.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        removed.map(|_| ()).ok_or_else(|| agent_error(ErrorKind::NotFound, format!("session {id}: not found")))
    }

    async fn read_file(&self, path: &str) -> Result<Bytes> {
        Ok(self.live()?.fs.lock().unwrap_or_else(|p| p.into_inner()).read(path)?)
    }

    async fn write_file(&self, path: &str, body: Body, mode: Option<u32>, create_parents: bool) -> Result<WriteResult> {
        self.live()?;
        let data = collect(body).await?;
        let mut fs = self.sandbox.fs.lock().unwrap_or_else(|p| p.into_inner());
        let size = fs.write(path, data, mode, create_parents)?;
        Ok(WriteResult { path: normalise(path, "/"), size, entries: 0 })
    }

    async fn list(&self, path: &str) -> Result<Listing> {
        let entries = self.live()?.fs.lock().unwrap_or_else(|p| p.into_inner()).list(path)?;
        Ok(Listing { path: normalise(path, "/"), entries })
    }

    async fn stat(&self, path: &str) -> Result<FileEntry> {
        Ok(self.live()?.fs.lock().unwrap_or_else(|p| p.into_inner()).stat(path)?)
    }

    async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        Ok(self.live()?.fs.lock().unwrap_or_else(|p| p.into_inner()).remove(path, recursive)?)
    }

    async fn tar_download(&self, path: &str) -> Result<Response<Body>> {
        let bytes = self.tar_of(path)?;
        Ok(Response::builder().header("content-type", "application/x-tar").body(full(bytes)).expect("static response"))
    }

    async fn tar_upload(&self, path: &str, body: Body) -> Result<WriteResult> {
        self.live()?;
        let bytes = collect(body).await?;
        let root = normalise(path, "/");
        let mut fs = self.sandbox.fs.lock().unwrap_or_else(|p| p.into_inner());
        fs.mkdir_all(&root)?;
        let mut archive = tar::Archive::new(&bytes[..]);
        let bad = |e: std::io::Error| agent_error(ErrorKind::InvalidInput, format!("tar into {root}: {e}"));
        let mut entries = 0;
        for entry in archive.entries().map_err(bad)? {
            let mut entry = entry.map_err(bad)?;
            let rel = entry.path().map_err(bad)?.to_string_lossy().into_owned();
            // `..` in a member resolves beneath the target, never above it.
            let target = normalise(&format!("{root}/{}", normalise(&rel, "/")), "/");
            match entry.header().entry_type() {
                tar::EntryType::Directory => fs.mkdir_all(&target)?,
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let mut data = Vec::new();
                    std::io::Read::read_to_end(&mut entry, &mut data).map_err(bad)?;
                    let mode = entry.header().mode().ok();
                    fs.write(&target, data.into(), mode, true)?;
                }
                other => {
                    return Err(agent_error(
                        ErrorKind::InvalidInput,
                        format!(
                            "tar into {root}: {rel}: the fake backend keeps only files and directories ({other:?})"
                        ),
                    ));
                }
            }
            entries += 1;
        }
        Ok(WriteResult { path: root, size: bytes.len() as u64, entries })
    }

    async fn http(&self, _req: &HttpRequest) -> Result<HttpResponse> {
        self.live()?;
        Err(unsupported("services to reach over HTTP"))
    }

    async fn connect_pty(&self) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>> {
        self.live()?;
        Err(unsupported("terminal"))
    }

    async fn connect_tunnel(&self, _port: u16) -> Result<tokio_tungstenite::WebSocketStream<AgentStream>> {
        self.live()?;
        Err(unsupported("tunnels to services"))
    }

    async fn open_browser(&self, _argv: &[String]) -> Result<tokio::io::DuplexStream> {
        self.live()?;
        Err(unsupported("browser"))
    }
}
