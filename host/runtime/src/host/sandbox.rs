//! `sandbox`: the run's sandbox, through its agent.

use super::HostState;
use crate::contract::v0_1::WitError;
use crate::manifest::Capability;
use crate::trajectory::Step;

/// The largest file a plugin may read whole (its memory is limited below this anyway).
pub(crate) const MAX_PLUGIN_READ: u64 = 256 << 20;

impl HostState {
    pub(crate) fn agent(&self) -> Result<orchard_agent_client::SharedAgent, WitError> {
        self.require(Capability::Sandbox)?;
        self.run.current_sandbox().ok_or_else(|| WitError::Unavailable("this run has no sandbox".into()))
    }

    pub(crate) fn record_sandbox(&self, op: &str, detail: serde_json::Value, started: u64) {
        let step = Step::Sandbox {
            plugin: self.plugin.clone(),
            op: op.into(),
            detail,
            at_ms: started,
            duration_ms: self.at_ms() - started,
        };
        self.run.record(step);
    }
}

pub(crate) fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// The `sandbox` interface of contract version `$v`.
macro_rules! sandbox_host {
    ($v:ident) => {
        mod sandbox_host {
        use orchard_protocol::{Command as PCommand, ExecRequest as PExec, FileKind, OutputLimit};
        use serde_json::json;

        use crate::contract::$v::tool_adapter::orchard::plugin::sandbox::{
            Command, DirEntry, EntryKind, ExecRequest, ExecResult, Host, HttpRequest, HttpResponse, ProcessState,
            SessionAnswer, SessionInput,
        };
        use crate::contract::$v::tool_adapter::orchard::plugin::types::Error as WitError;
        use crate::host::sandbox::{MAX_PLUGIN_READ, clip};
        use crate::host::{HostState, agent_error};

        /// Records a session command's answer with `detail` (what was asked), and converts it.
        fn record_session(
            state: &HostState,
            op: &str,
            mut detail: serde_json::Value,
            result: orchard_protocol::ExecResult,
            started: u64,
        ) -> SessionAnswer {
            let running = result.running;
            let out = exec_result(result);
            detail["running"] = running.into();
            detail["exit_code"] = out.exit_code.into();
            detail["timed_out"] = out.timed_out.into();
            detail["stdout"] = clip(&out.stdout, 2048).into();
            detail["stderr"] = clip(&out.stderr, 2048).into();
            state.record_sandbox(op, detail, started);
            SessionAnswer { output: out, running }
        }

        fn exec_result(result: orchard_protocol::ExecResult) -> ExecResult {
            ExecResult {
                exit_code: result.exit_code,
                truncated: result.stdout.truncated || result.stderr.truncated,
                timed_out: result.timed_out,
                duration_ms: (result.wall_seconds * 1000.0) as u64,
                stdout: result.stdout.text,
                stderr: result.stderr.text,
            }
        }

        fn to_protocol(command: Command) -> PCommand {
            match command {
                Command::Shell(s) => PCommand::Shell(s),
                Command::Argv(a) => PCommand::Argv(a),
            }
        }

        impl Host for HostState {
            async fn session_open(&mut self, cwd: Option<String>, env: Vec<(String, String)>) -> Result<String, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let req = orchard_protocol::SessionStart { cwd: cwd.clone(), env: env.into_iter().collect() };
                let result = self.waiting(agent.start_session(&req)).await;
                self.record_sandbox("session-open", json!({"cwd": cwd, "ok": result.is_ok()}), started);
                result.map(|s| s.id).map_err(|e| WitError::from(agent_error(e)))
            }

            async fn session_exec(
                &mut self,
                session: String,
                command: String,
                timeout_ms: Option<u64>,
            ) -> Result<ExecResult, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let mut req = PExec::shell(command.clone());
                req.timeout_ms = timeout_ms;
                let result = self.waiting(agent.session_exec(&session, &req)).await.map_err(|e| WitError::from(agent_error(e)))?;
                let detail = json!({"session": session, "command": command});
                Ok(record_session(self, "session-exec", detail, result, started).output)
            }

            async fn session_run(
                &mut self,
                session: String,
                command: String,
                idle_ms: u64,
                timeout_ms: Option<u64>,
            ) -> Result<SessionAnswer, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let mut req = PExec::shell(command.clone());
                req.timeout_ms = timeout_ms;
                req.idle_timeout_ms = Some(idle_ms.max(1));
                let result = self.waiting(agent.session_exec(&session, &req)).await.map_err(|e| WitError::from(agent_error(e)))?;
                Ok(record_session(self, "session-run", json!({"session": session, "command": command}), result, started))
            }

            async fn session_continue(
                &mut self,
                session: String,
                input: SessionInput,
                idle_ms: u64,
                timeout_ms: Option<u64>,
            ) -> Result<SessionAnswer, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let (text, interrupt) = match &input {
                    SessionInput::Wait => (None, false),
                    SessionInput::Text(t) => (Some(t.clone()), false),
                    SessionInput::Interrupt => (None, true),
                };
                let req = orchard_protocol::SessionContinue {
                    input: text.clone(),
                    interrupt,
                    timeout_ms,
                    idle_timeout_ms: Some(idle_ms.max(1)),
                    output_limit: Default::default(),
                };
                let result = self.waiting(agent.session_continue(&session, &req)).await.map_err(|e| WitError::from(agent_error(e)))?;
                let detail = json!({"session": session, "input": text, "interrupt": interrupt});
                Ok(record_session(self, "session-continue", detail, result, started))
            }

            async fn session_close(&mut self, session: String) -> Result<(), WitError> {
                let agent = self.agent()?;
                self.waiting(agent.close_session(&session)).await.map_err(|e| WitError::from(agent_error(e)))
            }

            async fn process_start(&mut self, command: Command, cwd: Option<String>) -> Result<String, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let command = to_protocol(command);
                let shown = command.display();
                let req = orchard_protocol::ProcessStart { command, cwd, env: Default::default() };
                let result = self.waiting(agent.start_process(&req)).await;
                self.record_sandbox("process-start", json!({"command": shown, "ok": result.is_ok()}), started);
                result.map(|p| p.id).map_err(|e| WitError::from(agent_error(e)))
            }

            async fn process_status(&mut self, id: String) -> Result<ProcessState, WitError> {
                let agent = self.agent()?;
                let p = self.waiting(agent.process(&id)).await.map_err(|e| WitError::from(agent_error(e)))?;
                Ok(ProcessState {
                    running: p.state == orchard_protocol::ProcessState::Running,
                    exit_code: p.exit_code,
                    log_path: p.log_path,
                })
            }

            async fn process_log(&mut self, id: String, offset: u64) -> Result<(String, u64), WitError> {
                let agent = self.agent()?;
                let chunk = self.waiting(agent.process_log(&id, offset, None)).await.map_err(|e| WitError::from(agent_error(e)))?;
                Ok((chunk.data, chunk.next_offset))
            }

            async fn process_signal(&mut self, id: String, signal: String) -> Result<(), WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let result = self.waiting(agent.signal_process(&id, &signal)).await;
                self.record_sandbox("process-signal", json!({"id": id, "signal": signal, "ok": result.is_ok()}), started);
                result.map(|_| ()).map_err(|e| WitError::from(agent_error(e)))
            }

            async fn exec(&mut self, request: ExecRequest) -> Result<ExecResult, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let command = to_protocol(request.command);
                let shown = command.display();
                let exec = PExec {
                    command,
                    cwd: request.cwd,
                    env: request.env.into_iter().collect(),
                    stdin: request.stdin.map(|b| String::from_utf8_lossy(&b).into_owned()),
                    timeout_ms: request.timeout_ms,
                    idle_timeout_ms: None,
                    login_shell: false,
                    output_limit: OutputLimit::default(),
                };
                let result = self.waiting(agent.exec(&exec)).await.map_err(|e| WitError::from(agent_error(e)))?;
                let out = exec_result(result);
                self.record_sandbox(
                    "exec",
                    json!({"command": shown, "exit_code": out.exit_code, "timed_out": out.timed_out,
                           "stdout": clip(&out.stdout, 2048), "stderr": clip(&out.stderr, 2048)}),
                    started,
                );
                Ok(out)
            }

            async fn read_file(&mut self, path: String) -> Result<Vec<u8>, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                // A file larger than any plugin may hold is refused before it is read into the host.
                if let Ok(entry) = self.waiting(agent.stat(&path)).await
                    && entry.size > MAX_PLUGIN_READ
                {
                    self.record_sandbox("read-file", json!({"path": path, "ok": false, "size": entry.size}), started);
                    return Err(WitError::InvalidInput(format!(
                        "{path} is {} bytes; a plugin reads at most {MAX_PLUGIN_READ} bytes of a file",
                        entry.size
                    )));
                }
                let result = self.waiting(agent.read_file(&path)).await;
                self.record_sandbox("read-file", json!({"path": path, "ok": result.is_ok()}), started);
                result.map(|b| b.to_vec()).map_err(|e| WitError::from(agent_error(e)))
            }

            async fn write_file(&mut self, path: String, content: Vec<u8>) -> Result<(), WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let size = content.len();
                let result = self.waiting(agent.write_file(&path, orchard_agent_client::full(content), None, true)).await;
                self.record_sandbox("write-file", json!({"path": path, "size": size, "ok": result.is_ok()}), started);
                result.map(|_| ()).map_err(|e| WitError::from(agent_error(e)))
            }

            async fn list_dir(&mut self, path: String) -> Result<Vec<DirEntry>, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let result = self.waiting(agent.list(&path)).await;
                self.record_sandbox("list-dir", json!({"path": path, "ok": result.is_ok()}), started);
                let listing = result.map_err(|e| WitError::from(agent_error(e)))?;
                Ok(listing
                    .entries
                    .into_iter()
                    .map(|e| DirEntry {
                        name: e.name,
                        kind: match e.kind {
                            FileKind::File => EntryKind::File,
                            FileKind::Directory => EntryKind::Directory,
                            FileKind::Symlink => EntryKind::Symlink,
                            FileKind::Other => EntryKind::Other,
                        },
                        size: e.size,
                    })
                    .collect())
            }

            async fn http(&mut self, request: HttpRequest) -> Result<HttpResponse, WitError> {
                let agent = self.agent()?;
                let started = self.at_ms();
                let req = orchard_protocol::HttpRequest {
                    port: request.port,
                    method: request.method,
                    path: request.path,
                    headers: request.headers,
                    body_base64: base64_encode(&request.body),
                    timeout_ms: request.timeout_ms,
                    grader: self.grader,
                };
                let result = self.waiting(agent.http(&req)).await;
                self.record_sandbox(
                    "http",
                    json!({"method": req.method, "port": req.port, "path": req.path, "status": result.as_ref().ok().map(|r| r.status)}),
                    started,
                );
                let r = result.map_err(|e| WitError::from(agent_error(e)))?;
                Ok(HttpResponse { status: r.status, headers: r.headers, body: base64_decode(&r.body_base64)? })
            }
        }

        fn base64_encode(bytes: &[u8]) -> String {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(bytes)
        }

        fn base64_decode(text: &str) -> Result<Vec<u8>, WitError> {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| WitError::Other(format!("agent sent bad base64: {e}")))
        }

        }
    };
}
