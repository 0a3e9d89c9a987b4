//! The context one rollout's plugins share: its sandbox, its model, its tools, its trajectory,
//! its browser. Everything a plugin does is recorded here, in the order it happened, and a
//! plugin that fails the rollout leaves its failure here for the runtime to raise.

use crate::contract::v0_1::{ContentPart, ToolCall, ToolOutput, WitError};
use crate::failure::PluginFailure;
use crate::host::{HostState, ToolRouter};
use crate::trajectory::{Step, Trajectory};
use orchard_agent_client::SharedAgent;
use orchard_model::ModelClient;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Everything one rollout's plugins share: its sandbox, its model, its tools, its trajectory.
pub struct RolloutContext {
    /// The task being run.
    pub task_id: String,
    /// The rollout's sandbox, if it has one.
    pub sandbox: Option<SharedAgent>,
    /// The model the harness calls, if any.
    pub model: Option<Arc<ModelClient>>,
    /// The run's tool adapters, while the harness runs. Their stores point back at this context,
    /// so the router must be dropped when the run ends (see `ToolsInUse`), or every rollout's
    /// instances would stay alive (and hold pool slots) for ever.
    pub(crate) tools: Mutex<Option<Arc<ToolRouter>>>,
    pub(crate) trajectory: Mutex<Trajectory>,
    pub(crate) fatal: Mutex<Option<PluginFailure>>,
    pub(crate) started: Instant,
    /// Set when the grader's turn comes: its model calls are recorded apart from the run's.
    pub(crate) grading: std::sync::atomic::AtomicBool,
    /// The grader's own endpoint (a judge model), when it differs from the run's.
    pub(crate) grader_model: std::sync::OnceLock<Arc<ModelClient>>,
    /// The clean sandbox the grader works in, when the task is verified apart from the agent's.
    pub(crate) verifier_sandbox: std::sync::OnceLock<SharedAgent>,
    /// How this rollout's browser is started (in the sandbox's network), when it may have one.
    pub(crate) browser_options: std::sync::OnceLock<orchard_browser::BrowserOptions>,
    /// The rollout's browser, started at the first tab a plugin opens; killed with the context.
    pub(crate) browser: tokio::sync::OnceCell<Result<Arc<orchard_browser::Browser>, String>>,
    /// Each tool adapter's and browser driver's configuration, by plugin name (`config.get`).
    pub(crate) tool_config: std::sync::OnceLock<std::collections::BTreeMap<String, serde_json::Value>>,
    /// The port of the desktop service running in the sandbox, when the task has a desktop.
    pub(crate) desktop_port: std::sync::OnceLock<u16>,
}

impl RolloutContext {
    /// A context for one rollout of `task_id`.
    pub fn new(task_id: &str, sandbox: Option<SharedAgent>, model: Option<Arc<ModelClient>>) -> Arc<Self> {
        Arc::new(RolloutContext {
            task_id: task_id.to_string(),
            sandbox,
            model,
            tools: Mutex::new(None),
            trajectory: Mutex::new(Trajectory::default()),
            fatal: Mutex::new(None),
            started: Instant::now(),
            grading: std::sync::atomic::AtomicBool::new(false),
            grader_model: std::sync::OnceLock::new(),
            verifier_sandbox: std::sync::OnceLock::new(),
            browser_options: std::sync::OnceLock::new(),
            browser: tokio::sync::OnceCell::new(),
            tool_config: std::sync::OnceLock::new(),
            desktop_port: std::sync::OnceLock::new(),
        })
    }

    /// Lets the rollout's plugins open browser tabs: one Chromium, started as `options` say at
    /// the first `session.open`.
    pub fn set_browser(&self, options: orchard_browser::BrowserOptions) {
        let _ = self.browser_options.set(options);
    }

    /// Lets the rollout's desktop drivers use the desktop serving on `port` in the sandbox.
    pub fn set_desktop(&self, port: u16) {
        let _ = self.desktop_port.set(port);
    }

    /// The rollout's desktop, when its task has one.
    pub(crate) fn desktop(&self) -> Option<orchard_desktop_client::Desktop> {
        let port = *self.desktop_port.get()?;
        Some(orchard_desktop_client::Desktop::at(self.sandbox.clone()?, port))
    }

    /// The configuration each plugin gets from `config.get`, by plugin name.
    pub fn set_tool_config(&self, config: std::collections::BTreeMap<String, serde_json::Value>) {
        let _ = self.tool_config.set(config);
    }

    /// `plugin`'s configuration (a JSON object; `{}` when none was chosen).
    pub(crate) fn tool_config(&self, plugin: &str) -> serde_json::Value {
        self.tool_config.get().and_then(|c| c.get(plugin)).cloned().unwrap_or_else(|| serde_json::json!({}))
    }

    /// A new tab of the rollout's browser (started now if it is not yet).
    pub(crate) async fn open_tab(&self) -> Result<Arc<orchard_browser::Tab>, orchard_browser::BrowserError> {
        let options = self.browser_options.get().ok_or_else(|| {
            orchard_browser::BrowserError::Unconfigured("no browser is configured for this run".into())
        })?;
        let browser = self
            .browser
            .get_or_init(|| async {
                if options.in_sandbox {
                    return self.browser_in_sandbox(options).await;
                }
                orchard_browser::Browser::launch(options.clone()).await.map(Arc::new).map_err(|e| e.to_string())
            })
            .await
            .as_ref()
            .map_err(|e| orchard_browser::BrowserError::Launch(e.clone()))?;
        browser.open().await.map(Arc::new)
    }

    /// A browser the sandbox's agent starts inside the sandbox, its DevTools pipe relayed over
    /// the agent's connection.
    pub(crate) async fn browser_in_sandbox(
        &self,
        options: &orchard_browser::BrowserOptions,
    ) -> Result<Arc<orchard_browser::Browser>, String> {
        let agent = self.sandbox.clone().ok_or("this run has no sandbox to start a browser in")?;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        let profile = format!("/tmp/orchard-chromium-{nanos:x}");
        let mut argv = vec![options.binary.display().to_string()];
        argv.extend(orchard_browser::command_line(options, &profile));
        let stream = agent.open_browser(&argv).await.map_err(|e| format!("starting chromium in the sandbox: {e}"))?;
        orchard_browser::Browser::over(stream, options.clone()).await.map(Arc::new).map_err(|e| e.to_string())
    }

    /// How the rollout's browser ended, if it has one and it has.
    pub(crate) fn browser_exit(&self) -> Option<String> {
        self.browser.get()?.as_ref().ok()?.exit_reason()
    }

    /// Ends the rollout's browser (if one was started), recording its memory at the end in the
    /// trajectory.
    pub fn close_browser(&self) {
        let Some(Ok(browser)) = self.browser.get() else { return };
        let detail = serde_json::json!({
            "rss_bytes": browser.rss_bytes(),
            "exit": browser.exit_reason(),
        });
        browser.kill();
        let at_ms = self.started.elapsed().as_millis() as u64;
        self.record(Step::Sandbox { plugin: "host".into(), op: "browser-close".into(), detail, at_ms, duration_ms: 0 });
    }

    /// Gives the grader a sandbox of its own (a separate verifier environment) instead of the
    /// agent's.
    pub fn set_verifier_sandbox(&self, sandbox: SharedAgent) {
        let _ = self.verifier_sandbox.set(sandbox);
    }

    /// The sandbox a `sandbox` call reaches now: the verifier's while grading, if it has one.
    pub(crate) fn current_sandbox(&self) -> Option<SharedAgent> {
        match self.verifier_sandbox.get() {
            Some(s) if self.is_grading() => Some(s.clone()),
            _ => self.sandbox.clone(),
        }
    }

    /// Gives the grader its own model endpoint (e.g. a judge), instead of the run's.
    pub fn set_grader_model(&self, model: Arc<ModelClient>) {
        let _ = self.grader_model.set(model);
    }

    pub(crate) fn is_grading(&self) -> bool {
        self.grading.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The endpoint a `model` call goes to now: the grader's own while grading, if it has one.
    pub(crate) fn current_model(&self) -> Option<Arc<ModelClient>> {
        match self.grader_model.get() {
            Some(m) if self.is_grading() => Some(m.clone()),
            _ => self.model.clone(),
        }
    }

    /// Milliseconds since the rollout started.
    pub fn at_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// What was recorded so far.
    pub fn trajectory(&self) -> Trajectory {
        self.trajectory.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records a step.
    pub fn record(&self, step: Step) {
        self.trajectory.lock().unwrap_or_else(|p| p.into_inner()).steps.push(step);
    }

    /// Records a model call; `(at_ms, duration_ms)` is when it started in the rollout and how
    /// long it took.
    pub(crate) fn record_model_call(
        &self,
        plugin: &str,
        (request, tools): (Vec<orchard_model::Message>, Vec<orchard_model::ToolSpec>),
        sampling: &orchard_model::Sampling,
        c: &orchard_model::Completion,
        (at_ms, duration_ms): (u64, u64),
    ) {
        let grading = self.is_grading();
        let mut t = self.trajectory.lock().unwrap_or_else(|p| p.into_inner());
        t.steps.push(Step::ModelCall {
            plugin: plugin.into(),
            at_ms,
            duration_ms,
            request_messages: request.len(),
            tools: tools.iter().map(|s| s.name.clone()).collect(),
            response: c.message.clone(),
            finish_reason: c.finish_reason,
            usage: c.usage,
            model: c.model.clone(),
            attempts: c.attempts,
            logprobs: c.logprobs.clone(),
            token_ids: c.token_ids.clone(),
            prompt_token_ids: c.prompt_token_ids.clone(),
            policy_version: c.policy_version.clone(),
        });
        // A judge's calls are steps of the record, but the conversation, tools, sampling and
        // usage stay the run's: they are what exports train on.
        if grading {
            return;
        }
        if t.opening.is_empty() {
            t.opening = request.iter().take_while(|m| m.role != orchard_model::Role::Assistant).cloned().collect();
        }
        t.conversation = request;
        t.conversation.push(c.message.clone());
        t.tools = tools;
        t.sampling = Some(sampling.clone());
        t.usage.prompt_tokens += c.usage.prompt_tokens;
        t.usage.completion_tokens += c.usage.completion_tokens;
        t.usage.total_tokens += c.usage.total_tokens;
        t.model_calls += 1;
    }

    pub(crate) fn record_tool_call(
        &self,
        plugin: &str,
        adapter: &str,
        call: &ToolCall,
        result: &Result<ToolOutput, WitError>,
        at_ms: u64,
        duration_ms: u64,
    ) {
        let (output, is_error) = match result {
            Ok(out) => (text_of(&out.content), out.is_error),
            Err(e) => (format!("error: {}", crate::contract::v0_1::convert::error_text(e)), true),
        };
        let mut t = self.trajectory.lock().unwrap_or_else(|p| p.into_inner());
        t.steps.push(Step::ToolCall {
            plugin: plugin.into(),
            adapter: adapter.into(),
            call: crate::contract::v0_1::convert::call_to_model(call),
            output: output.clone(),
            is_error,
            at_ms,
            duration_ms,
        });
        // The conversation keeps what the tool answered, screenshots included (judges read them).
        let mut message = match result {
            Ok(out) if out.content.iter().any(|p| matches!(p, ContentPart::Image(_))) => orchard_model::Message {
                role: orchard_model::Role::Tool,
                content: crate::contract::v0_1::convert::parts_to_model(&out.content),
                tool_calls: vec![],
                tool_call_id: None,
                reasoning: None,
            },
            _ => orchard_model::Message::text(orchard_model::Role::Tool, output),
        };
        message.tool_call_id = Some(call.id.clone());
        t.conversation.push(message);
        t.tool_calls += 1;
    }

    pub(crate) fn record_output(&self, state: &HostState) {
        for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
            let bytes = pipe.contents();
            if !bytes.is_empty() {
                self.record(Step::Output {
                    plugin: state.plugin.clone(),
                    stream: stream.into(),
                    text: String::from_utf8_lossy(&bytes).into_owned(),
                });
            }
        }
    }

    pub(crate) fn set_fatal(&self, failure: PluginFailure) {
        let mut f = self.fatal.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(failure);
        }
    }

    pub(crate) fn take_fatal(&self) -> Option<PluginFailure> {
        self.fatal.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

fn text_of(parts: &[ContentPart]) -> String {
    parts
        .iter()
        .map(|p| match p {
            ContentPart::Text(t) => t.clone(),
            ContentPart::Image(i) => format!("[image {} bytes]", i.data.len()),
        })
        .collect()
}
