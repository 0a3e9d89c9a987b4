//! A browser and its tabs.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::pipe::Cdp;
use crate::{BrowserError, policy};

#[derive(Debug, Clone)]
/// How a browser is started and bounded.
pub struct BrowserOptions {
    /// The Chromium binary.
    pub binary: PathBuf,
    /// The network namespace to run in (`/run/netns/…` or `/proc/PID/ns/net`); the host's when
    /// absent (tests and tools only).
    pub netns: Option<PathBuf>,
    /// Every tab's viewport, in CSS pixels.
    pub viewport: (u32, u32),
    /// How long one DevTools call may take.
    pub call_timeout: Duration,
    /// The largest answer a plugin's `cdp` call may get.
    pub max_result: usize,
    /// Control groups the browser joins before it starts (the sandbox's memory group), so that
    /// its memory counts against the sandbox's limit and the limit's OOM killer reaches it.
    pub cgroups: Vec<PathBuf>,
    /// Started inside the sandbox by its agent and relayed (`binary` is then the image's), for
    /// backends that cannot place a host process in the sandbox's network (Kubernetes: the
    /// browser runs in the task's pod).
    pub in_sandbox: bool,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        BrowserOptions {
            binary: PathBuf::from("chromium"),
            netns: None,
            viewport: (1280, 800),
            call_timeout: Duration::from_secs(30),
            max_result: 8 << 20,
            cgroups: Vec::new(),
            in_sandbox: false,
        }
    }
}

/// One browser of one rollout, and its page.
pub struct Browser {
    cdp: Arc<Cdp>,
    /// The browser's process, when it runs here (not behind a relay).
    child: Option<Mutex<tokio::process::Child>>,
    pid: Option<u32>,
    options: BrowserOptions,
    _profile: Option<tempfile::TempDir>,
}

/// One tab, attached with its own DevTools session.
pub struct Tab {
    cdp: Arc<Cdp>,
    session: String,
    target: String,
    options: BrowserOptions,
    dialogs: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<Vec<PageEvent>>>,
    /// Set when the tab's renderer died: every call then fails with it.
    crashed: Arc<Crash>,
}

/// A tab's crash: why, and a wake-up for the calls waiting on it.
#[derive(Default)]
struct Crash {
    why: Mutex<Option<String>>,
    notify: tokio::sync::Notify,
}

impl Crash {
    fn why(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What a page did unasked, for the driver (`session.events`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageEvent {
    /// A JavaScript dialog, dismissed: `type: message`.
    Dialog(String),
    /// A new tab or window the page opened, closed by the host: its URL.
    Popup(String),
    /// A download, refused: its URL.
    Download(String),
}

/// At most this many unread events are kept per tab (a page looping `window.open`).
const MAX_EVENTS: usize = 256;

fn push(events: &Mutex<Vec<PageEvent>>, event: PageEvent) {
    let mut e = events.lock().unwrap_or_else(|p| p.into_inner());
    if e.len() < MAX_EVENTS {
        e.push(event);
    }
}

/// Follows one tab's events: dialogs would block the page, so each is dismissed and kept; a
/// window the tab opens is closed (one tab per driver; the driver may follow its URL); a download
/// was refused by the browser's behaviour and is reported.
async fn watch_tab(
    cdp: std::sync::Weak<Cdp>,
    mut incoming: tokio::sync::broadcast::Receiver<Value>,
    session: String,
    target: String,
    dialogs: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<Vec<PageEvent>>>,
    crashed: Arc<Crash>,
) {
    // Popups opened at about:blank get their URL a moment later.
    let mut blank_popups: Vec<String> = Vec::new();
    let close = |id: String| {
        let cdp = cdp.clone();
        tokio::spawn(async move {
            if let Some(cdp) = cdp.upgrade() {
                let _ = cdp.call("Target.closeTarget", json!({"targetId": id}), None, Duration::from_secs(5)).await;
            }
        });
    };
    loop {
        let event = match incoming.recv().await {
            Ok(e) => e,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(_) => break,
        };
        let p = &event["params"];
        match event["method"].as_str().unwrap_or_default() {
            "Page.javascriptDialogOpening" if event["sessionId"] == session.as_str() => {
                let said =
                    format!("{}: {}", p["type"].as_str().unwrap_or("dialog"), p["message"].as_str().unwrap_or(""));
                dialogs.lock().unwrap_or_else(|p| p.into_inner()).push(said.clone());
                push(&events, PageEvent::Dialog(said));
                let Some(cdp) = cdp.upgrade() else { break };
                let _ = cdp
                    .call(
                        "Page.handleJavaScriptDialog",
                        json!({"accept": false}),
                        Some(&session),
                        Duration::from_secs(5),
                    )
                    .await;
            }
            "Target.targetCreated" | "Target.targetInfoChanged" => {
                let info = &p["targetInfo"];
                let id = info["targetId"].as_str().unwrap_or_default().to_string();
                let url = info["url"].as_str().unwrap_or_default();
                let ours = info["openerId"] == target.as_str() || blank_popups.contains(&id);
                if !ours || info["type"] != "page" || id == target {
                    continue;
                }
                if url.is_empty() || url == "about:blank" {
                    if !blank_popups.contains(&id) {
                        blank_popups.push(id);
                    }
                    continue;
                }
                blank_popups.retain(|b| *b != id);
                push(&events, PageEvent::Popup(url.to_string()));
                close(id);
            }
            "Inspector.targetCrashed" if event["sessionId"] == session.as_str() => {
                *crashed.why.lock().unwrap_or_else(|p| p.into_inner()) = Some(
                    "the page crashed: its renderer died (killed at the sandbox's memory limit, or a crash)".into(),
                );
                crashed.notify.notify_waiters();
            }
            "Target.targetDestroyed" => {
                // A blank popup closed before it went anywhere (or one we closed): forget it.
                let id = p["targetId"].as_str().unwrap_or_default();
                blank_popups.retain(|b| b != id);
            }
            "Browser.downloadWillBegin" if p["frameId"] == target.as_str() || p["frameId"].is_null() => {
                push(&events, PageEvent::Download(p["url"].as_str().unwrap_or_default().to_string()));
            }
            _ => {}
        }
        if cdp.strong_count() == 0 {
            break;
        }
    }
}

/// Chromium's switches: headless, no DevTools port (the pipe on fds 3/4), its own profile, the
/// viewport, and nothing that phones home.
pub fn command_line(options: &BrowserOptions, profile: &str) -> Vec<String> {
    let mut args: Vec<String> = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
        "--no-first-run",
        "--no-default-browser-check",
        "--remote-debugging-pipe",
        "--hide-scrollbars",
        "--mute-audio",
    ]
    .map(String::from)
    .to_vec();
    args.push(format!("--user-data-dir={profile}"));
    args.push(format!("--window-size={},{}", options.viewport.0, options.viewport.1));
    args.push("about:blank".into());
    args
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(std::io::Error::from)
}

impl Browser {
    /// Starts Chromium with its own profile, in `options.netns`, controlled over a pipe.
    pub async fn launch(options: BrowserOptions) -> Result<Browser, BrowserError> {
        let launch = |e: std::io::Error| BrowserError::Launch(e.to_string());
        let profile = tempfile::Builder::new().prefix("orchard-chromium-").tempdir().map_err(launch)?;
        // fd 3: the browser reads commands; fd 4: it writes answers.
        let (cmd_read, cmd_write) = pipe().map_err(launch)?;
        let (ans_read, ans_write) = pipe().map_err(launch)?;
        let mut command = match &options.netns {
            Some(ns) => {
                let mut c = tokio::process::Command::new("nsenter");
                c.arg(format!("--net={}", ns.display())).arg("--").arg(&options.binary);
                c
            }
            None => tokio::process::Command::new(&options.binary),
        };
        command
            .args(command_line(&options, &profile.path().display().to_string()))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let (cr, aw) = (cmd_read.as_raw_fd(), ans_write.as_raw_fd());
        // Opened here, written in the child: joining before exec puts every process the browser
        // ever starts in the groups.
        let groups: Vec<std::fs::File> = options
            .cgroups
            .iter()
            .map(|dir| std::fs::OpenOptions::new().write(true).open(dir.join("cgroup.procs")))
            .collect::<Result<_, _>>()
            .map_err(|e| BrowserError::Launch(format!("joining the sandbox's control group: {e}")))?;
        let group_fds: Vec<i32> = groups.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            command.pre_exec(move || {
                for fd in &group_fds {
                    if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                // Its own process group, so that the renderers go with it.
                if libc::setpgid(0, 0) != 0 || libc::dup2(cr, 3) < 0 || libc::dup2(aw, 4) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn().map_err(launch)?;
        drop((cmd_read, ans_write, groups));
        let cdp = Cdp::new(cmd_write, ans_read).map_err(launch)?;
        let pid = child.id();
        let browser = Browser { cdp, child: Some(Mutex::new(child)), pid, options, _profile: Some(profile) };
        browser.ready().await
    }

    /// A browser started elsewhere (inside the sandbox, by its agent) whose DevTools pipe is
    /// relayed over `stream`. Dropping the browser closes the stream, which ends it there.
    pub async fn over(
        stream: impl tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
        options: BrowserOptions,
    ) -> Result<Browser, BrowserError> {
        let (answers, commands) = tokio::io::split(stream);
        let cdp = Cdp::over(answers, commands);
        Browser { cdp, child: None, pid: None, options, _profile: None }.ready().await
    }

    /// The first answer proves it is up; downloads are refused for the whole browser.
    async fn ready(self) -> Result<Browser, BrowserError> {
        let browser = self;
        browser
            .cdp
            .call(
                "Browser.setDownloadBehavior",
                json!({"behavior": "deny", "eventsEnabled": true}),
                None,
                Duration::from_secs(30),
            )
            .await
            .map_err(|e| BrowserError::Launch(format!("chromium did not answer on its DevTools pipe: {e}")))?;
        // New windows a page opens are seen (and closed) by its tab's watcher.
        browser.cdp.call("Target.setDiscoverTargets", json!({"discover": true}), None, Duration::from_secs(30)).await?;
        Ok(browser)
    }

    /// The browser's process id (its process group's).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// How the browser ended, once it has (`None` while it runs).
    pub fn exit_reason(&self) -> Option<String> {
        use std::os::unix::process::ExitStatusExt;
        let status = self.child.as_ref()?.lock().unwrap_or_else(|p| p.into_inner()).try_wait().ok()??;
        Some(match (status.code(), status.signal()) {
            (_, Some(9)) => "killed (SIGKILL: out of memory, or killed from outside)".to_string(),
            (_, Some(sig)) => format!("killed by signal {sig}"),
            (Some(code), _) => format!("exited with status {code}"),
            _ => status.to_string(),
        })
    }

    /// The memory of the browser's whole process group (summed PSS), in bytes.
    pub fn rss_bytes(&self) -> u64 {
        self.pid.map(|pid| group_rss(pid as i32)).unwrap_or(0)
    }

    /// A new tab at the configured viewport, JavaScript dialogs dismissed and logged.
    pub async fn open(&self) -> Result<Tab, BrowserError> {
        let t = self.options.call_timeout;
        let target = self.cdp.call("Target.createTarget", json!({"url": "about:blank"}), None, t).await?;
        let target = target["targetId"].as_str().unwrap_or_default().to_string();
        let attached =
            self.cdp.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}), None, t).await?;
        let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
        let dialogs: Arc<Mutex<Vec<String>>> = Arc::default();
        let events: Arc<Mutex<Vec<PageEvent>>> = Arc::default();
        let crashed: Arc<Crash> = Arc::default();
        // A weak handle: the listener must not keep the connection (and its own event channel)
        // alive once the browser and its tabs are gone, or it would wait for ever.
        tokio::spawn(watch_tab(
            Arc::downgrade(&self.cdp),
            self.cdp.events(),
            session.clone(),
            target.clone(),
            dialogs.clone(),
            events.clone(),
            crashed.clone(),
        ));
        let tab =
            Tab { cdp: self.cdp.clone(), session, target, options: self.options.clone(), dialogs, events, crashed };
        tab.raw("Page.enable", json!({})).await?;
        // Inspector's events say when the renderer dies.
        tab.raw("Inspector.enable", json!({})).await?;
        let (w, h) = self.options.viewport;
        tab.raw(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": w, "height": h, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await?;
        Ok(tab)
    }
}

/// The memory of the processes in process group `pgid`: their proportional set sizes summed
/// (each shared page counted once across them; summed RSS would count Chromium's shared binary
/// once per process), from `/proc/PID/smaps_rollup`, RSS where that is missing.
fn group_rss(pgid: i32) -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        // Fields after the command's closing parenthesis: state ppid pgrp ... rss is the 22nd.
        let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else { continue };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(2).and_then(|g| g.parse::<i32>().ok()) != Some(pgid) {
            continue;
        }
        total += pss_kb(&entry.path())
            .map(|kb| kb * 1024)
            .unwrap_or_else(|| fields.get(21).and_then(|r| r.parse::<u64>().ok()).unwrap_or(0) * page);
    }
    total
}

/// `Pss:` of `/proc/PID/smaps_rollup`, in KiB.
pub fn pss_kb(proc_dir: &std::path::Path) -> Option<u64> {
    let text = std::fs::read_to_string(proc_dir.join("smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("Pss:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

impl Browser {
    /// Kills the browser's whole process group: the browser and its renderers, zygote and
    /// utilities.
    pub fn kill(&self) {
        if self.child.is_none() {
            let cdp = self.cdp.clone();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move { cdp.close().await });
            }
            return;
        }
        if let Some(pid) = self.pid {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Tab {
    async fn raw(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        let crash = self.crashed.notify.notified();
        if let Some(why) = self.crashed.why() {
            return Err(BrowserError::Crashed(why));
        }
        tokio::select! {
            answer = self.cdp.call(method, params, Some(&self.session), self.options.call_timeout) => answer,
            () = crash => Err(BrowserError::Crashed(self.crashed.why().unwrap_or_default())),
        }
    }

    /// Any DevTools command a plugin may send, in this tab: refused for the domains past the
    /// tab, with the call's timeout and a cap on the answer's size.
    pub async fn cdp(&self, method: &str, params: Value) -> Result<Value, BrowserError> {
        if let Some(why) = policy::refused(method) {
            return Err(BrowserError::Refused(why));
        }
        let answer = self.raw(method, params).await?;
        let size = answer.to_string().len();
        if size > self.options.max_result {
            return Err(BrowserError::TooLarge { method: method.into(), size, limit: self.options.max_result });
        }
        Ok(answer)
    }

    /// The viewport as PNG.
    pub async fn screenshot(&self) -> Result<Vec<u8>, BrowserError> {
        let shot = self.raw("Page.captureScreenshot", json!({"format": "png"})).await?;
        base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap_or_default())
            .map_err(|e| BrowserError::Protocol { method: "Page.captureScreenshot".into(), message: e.to_string() })
    }

    /// What the page did unasked since the last call (oldest first).
    pub fn take_events(&self) -> Vec<PageEvent> {
        std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// What the tab's JavaScript dialogs said (each was dismissed).
    pub fn dialogs(&self) -> Vec<String> {
        self.dialogs.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The DevTools id of the page this session drives.
    pub fn target_id(&self) -> &str {
        &self.target
    }
}
