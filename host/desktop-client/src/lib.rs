//! The host's side of a sandbox's desktop: starting `orchard-agent desktop` inside the sandbox
//! and calling it.
//!
//! Invariants:
//! - Every call goes through the sandbox's own agent (`POST /http` to the service's port on the
//!   sandbox's loopback): the host never opens a connection into the sandbox's network itself,
//!   and what the desktop answers is bounded by the agent's response limit.
//! - Every call has a deadline; a desktop that does not answer is a [`DesktopError::Timeout`],
//!   one that is gone (its X server crashed, its service killed) is
//!   [`DesktopError::Unavailable`] naming what the service said last.

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use orchard_agent_client::SandboxAgent;
use orchard_protocol::{DesktopInput, DesktopInputs, DesktopStart, DesktopWindow, ErrorKind, HttpRequest};
use serde::de::DeserializeOwned;

/// How long a started desktop has to answer its first request.
pub const START_WAIT: Duration = Duration::from_secs(30);
/// How long one call may take (a long `type-text` included).
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

/// Why a desktop call failed.
#[derive(Debug, thiserror::Error)]
pub enum DesktopError {
    /// The request was refused as malformed (an unknown key name, a bad size).
    #[error("{0}")]
    Invalid(String),
    /// The desktop is not there: never started, or its service or X server is gone.
    #[error("{0}")]
    Unavailable(String),
    /// No answer in time.
    #[error("{0}")]
    Timeout(String),
    /// Anything else the service said.
    #[error("{0}")]
    Other(String),
}

type Result<T> = std::result::Result<T, DesktopError>;

/// The desktop a task asks for (`[environment.desktop]`).
#[derive(Debug, Clone, PartialEq)]
pub struct DesktopSpec {
    /// Pixels.
    pub width: u32,
    /// Pixels.
    pub height: u32,
    /// Bits per pixel: 16 or 24.
    pub depth: u32,
    /// The service's port on the sandbox's loopback.
    pub port: u16,
    /// The window manager (`none` for none; `openbox` by default).
    pub window_manager: Option<String>,
    /// A window title (a part of it) to wait for before the agent starts.
    pub wait_for_window: Option<String>,
}

impl DesktopSpec {
    /// The desktop a task's (or an API request's) `[environment.desktop]` asks for.
    pub fn from_config(c: &orchard_task_config::DesktopConfig) -> DesktopSpec {
        DesktopSpec {
            width: c.width,
            height: c.height,
            depth: c.depth,
            port: c.port,
            window_manager: c.window_manager.clone(),
            wait_for_window: c.wait_for_window.clone(),
        }
    }
}

/// A sandbox's running desktop.
#[derive(Clone)]
pub struct Desktop {
    agent: Arc<dyn SandboxAgent>,
    port: u16,
}

impl std::fmt::Debug for Desktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Desktop").field("port", &self.port).finish()
    }
}

/// A screenshot as sent.
#[derive(Debug, Clone)]
pub struct Shot {
    /// `image/png` or `image/jpeg`.
    pub media_type: String,
    /// The encoded image.
    pub data: Vec<u8>,
}

impl Desktop {
    /// The desktop already serving on `port` in the sandbox behind `agent`.
    pub fn at(agent: Arc<dyn SandboxAgent>, port: u16) -> Desktop {
        Desktop { agent, port }
    }

    /// Starts a desktop in the sandbox behind `agent` and waits until it answers (at most
    /// [`START_WAIT`]); a desktop that does not come up is an error carrying the end of its
    /// output.
    pub async fn start(agent: &dyn SandboxAgent, spec: &DesktopSpec) -> Result<()> {
        let start = DesktopStart {
            port: spec.port,
            width: spec.width,
            height: spec.height,
            depth: spec.depth,
            display: orchard_protocol::DESKTOP_DISPLAY,
            window_manager: spec.window_manager.clone(),
        };
        let process = agent
            .start_desktop(&start)
            .await
            .map_err(|e| DesktopError::Unavailable(format!("starting the desktop: {e}")))?;
        let started = Instant::now();
        loop {
            if request(agent, spec.port, "GET", "/screen_size", Vec::new(), false).await.is_ok() {
                return Ok(());
            }
            let info = agent.process(&process.id).await.ok();
            let ended = info.as_ref().is_some_and(|i| i.state != orchard_protocol::ProcessState::Running);
            if ended || started.elapsed() > START_WAIT {
                let log = agent.process_log(&process.id, 0, None).await.map(|l| l.data).unwrap_or_default();
                let tail: String = log.chars().rev().take(1500).collect::<Vec<_>>().into_iter().rev().collect();
                let why = if ended { "exited" } else { "did not answer within 30 s" };
                return Err(DesktopError::Unavailable(format!("the desktop {why}; its output ends with:\n{tail}")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until a window whose title contains `title` is open (at most `timeout`); the error
    /// names the windows there are.
    pub async fn wait_for_window(agent: &dyn SandboxAgent, port: u16, title: &str, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let bytes = request(agent, port, "GET", "/orchard/windows", Vec::new(), false).await?;
            let windows: Vec<DesktopWindow> =
                serde_json::from_slice(&bytes).map_err(|e| DesktopError::Other(format!("the window list: {e}")))?;
            if windows.iter().any(|w| w.title.contains(title)) {
                return Ok(());
            }
            if started.elapsed() > timeout {
                let open: Vec<&str> = windows.iter().map(|w| w.title.as_str()).collect();
                return Err(DesktopError::Timeout(format!(
                    "no window titled like {title:?} opened within {timeout:?} (open: {open:?})"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A live view of the desktop serving on `port`: the desktop service starts its VNC server
    /// (watch-only unless `control`), and the answer is a WebSocket carrying one VNC (RFB)
    /// connection to it through the agent's tunnel.
    pub async fn open_vnc(
        agent: &dyn SandboxAgent,
        port: u16,
        control: bool,
    ) -> Result<tokio_tungstenite::WebSocketStream<orchard_agent_client::AgentStream>> {
        #[derive(serde::Deserialize)]
        struct Vnc {
            port: u16,
        }
        let body = serde_json::json!({"control": control}).to_string().into_bytes();
        let bytes = request(agent, port, "POST", "/orchard/vnc", body, true).await?;
        let vnc: Vnc = serde_json::from_slice(&bytes)
            .map_err(|e| DesktopError::Other(format!("the desktop's answer to /orchard/vnc: {e}")))?;
        agent
            .connect_tunnel(vnc.port)
            .await
            .map_err(|e| DesktopError::Unavailable(format!("the desktop's VNC server: {e}")))
    }

    async fn request(&self, method: &str, path: &str, body: Vec<u8>, json: bool) -> Result<Vec<u8>> {
        request(&*self.agent, self.port, method, path, body, json).await
    }

    async fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let bytes = self.request("GET", path, Vec::new(), false).await?;
        serde_json::from_slice(&bytes).map_err(|e| DesktopError::Other(format!("the desktop's answer to {path}: {e}")))
    }

    /// The screen's width and height.
    pub async fn size(&self) -> Result<(u32, u32)> {
        #[derive(serde::Deserialize)]
        struct Size {
            width: u32,
            height: u32,
        }
        let s: Size = self.get_json("/screen_size").await?;
        Ok((s.width, s.height))
    }

    /// The screen, scaled to `max_width` and as JPEG of `jpeg_quality` when asked.
    pub async fn screenshot(&self, max_width: Option<u32>, jpeg_quality: Option<u8>) -> Result<Shot> {
        let mut query = Vec::new();
        if let Some(w) = max_width {
            query.push(format!("max_width={w}"));
        }
        if let Some(q) = jpeg_quality {
            query.push(format!("jpeg_quality={q}"));
        }
        let path =
            if query.is_empty() { "/orchard/shot".to_string() } else { format!("/orchard/shot?{}", query.join("&")) };
        let data = self.request("GET", &path, Vec::new(), false).await?;
        let media_type = if jpeg_quality.is_some() { "image/jpeg" } else { "image/png" };
        Ok(Shot { media_type: media_type.into(), data })
    }

    /// Where the pointer is.
    pub async fn pointer(&self) -> Result<(i32, i32)> {
        let (x, y): (i32, i32) = self.get_json("/cursor_position").await?;
        Ok((x, y))
    }

    /// Sends input events in order.
    pub async fn act(&self, events: Vec<DesktopInput>) -> Result<()> {
        let body = serde_json::to_vec(&DesktopInputs { events }).map_err(|e| DesktopError::Other(e.to_string()))?;
        self.request("POST", "/orchard/input", body, true).await.map(drop)
    }

    /// The accessibility tree of what is on screen (OSWorld's XML), at most `max_nodes` nodes.
    pub async fn accessibility(&self, max_nodes: u32) -> Result<String> {
        let v: serde_json::Value = self.get_json(&format!("/accessibility?max_nodes={max_nodes}&showing=true")).await?;
        v["AT"].as_str().map(str::to_string).ok_or_else(|| DesktopError::Other("the desktop sent no tree".into()))
    }

    /// The top-level windows, bottom first.
    pub async fn windows(&self) -> Result<Vec<DesktopWindow>> {
        self.get_json("/orchard/windows").await
    }

    /// The clipboard's text.
    pub async fn clipboard(&self) -> Result<String> {
        let bytes = self.request("GET", "/orchard/clipboard", Vec::new(), false).await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Runs Python code on the display; its exit code and its output (stdout then stderr).
    pub async fn run_python(&self, code: &str) -> Result<(i32, String)> {
        let body =
            serde_json::to_vec(&serde_json::json!({"code": code})).map_err(|e| DesktopError::Other(e.to_string()))?;
        let bytes = self.request("POST", "/run_python", body, true).await?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| DesktopError::Other(e.to_string()))?;
        let code = v["return_code"].as_i64().unwrap_or(-1) as i32;
        let output = format!("{}{}", v["output"].as_str().unwrap_or_default(), v["error"].as_str().unwrap_or_default());
        Ok((code, output))
    }
}

/// One request to the desktop service on `port`, through the sandbox's agent.
async fn request(
    agent: &dyn SandboxAgent,
    port: u16,
    method: &str,
    path: &str,
    body: Vec<u8>,
    json: bool,
) -> Result<Vec<u8>> {
    let mut headers = Vec::new();
    if json {
        headers.push(("content-type".to_string(), "application/json".to_string()));
    }
    let req = HttpRequest {
        port,
        method: method.into(),
        path: path.into(),
        headers,
        body_base64: B64.encode(&body),
        timeout_ms: Some(CALL_TIMEOUT.as_millis() as u64),
        grader: false,
    };
    let answer = match agent.http(&req).await {
        Ok(answer) => answer,
        Err(e) if e.kind() == ErrorKind::Timeout => {
            return Err(DesktopError::Timeout(format!("the desktop did not answer {path}: {e}")));
        }
        Err(e) if e.kind() == ErrorKind::NotFound => {
            return Err(DesktopError::Unavailable(match why_gone(agent, port).await {
                Some(why) => why,
                None => format!("no desktop is running in this sandbox ({e})"),
            }));
        }
        Err(e) => return Err(DesktopError::Unavailable(format!("the desktop: {e}"))),
    };
    let bytes = B64.decode(answer.body_base64.as_bytes()).map_err(|e| DesktopError::Other(e.to_string()))?;
    if (200..300).contains(&answer.status) {
        return Ok(bytes);
    }
    let message = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&bytes).chars().take(500).collect());
    Err(match answer.status {
        400 | 413 | 422 => DesktopError::Invalid(message),
        _ => DesktopError::Other(format!("the desktop answered {} to {path}: {message}", answer.status)),
    })
}

/// Why the desktop started on `port` no longer answers, when its service has ended: its exit and
/// the end of its output (which names a crashed X server), so that the rollout's error says so.
async fn why_gone(agent: &dyn SandboxAgent, port: u16) -> Option<String> {
    let listen = format!(" desktop --listen 127.0.0.1:{port} ");
    let processes = agent.list_processes().await.ok()?;
    let service = processes.iter().rev().find(|p| format!("{} ", p.command).contains(&listen))?;
    if service.state == orchard_protocol::ProcessState::Running {
        return None;
    }
    let log = agent.process_log(&service.id, 0, None).await.map(|l| l.data).unwrap_or_default();
    let tail: String =
        log.trim_end().lines().rev().take(3).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
    let code = service.exit_code.map_or_else(|| "a signal".to_string(), |c| format!("code {c}"));
    Some(format!("the desktop on port {port} is gone: its service exited ({code}); its output ends with:\n{tail}"))
}
