//! `desktop` (0.3.0 on): the rollout's X desktop, served inside the sandbox by
//! `orchard-agent desktop` and reached through the sandbox's agent (`orchard-desktop-client`).
//! A run whose task has no desktop answers `unavailable`. Every call lands in the trajectory as
//! a sandbox step (`desktop-act`, `desktop-screenshot`, ...), with what it sent.

use orchard_desktop_client::{Desktop, DesktopError};
use orchard_protocol::DesktopInput;
use serde_json::{Value, json};

use super::HostState;
use crate::contract::v0_1::WitError;
use crate::manifest::Capability;
use crate::trajectory::Step;

/// The most events one `act` sends.
const MAX_EVENTS: usize = 1000;

fn error(e: DesktopError) -> WitError {
    match e {
        DesktopError::Invalid(m) => WitError::InvalidInput(m),
        DesktopError::Unavailable(m) => WitError::Unavailable(m),
        DesktopError::Timeout(m) => WitError::Timeout(m),
        DesktopError::Other(m) => WitError::Other(m),
    }
}

impl HostState {
    fn desktop(&self) -> Result<Desktop, WitError> {
        self.require(Capability::Desktop)?;
        self.run.desktop().ok_or_else(|| {
            WitError::Unavailable("this task has no desktop (a task asks for one with [environment.desktop])".into())
        })
    }

    /// Runs one desktop call, waiting off the plugin's CPU bill, and records it.
    async fn desktop_call<T>(
        &mut self,
        op: &str,
        detail: Value,
        call: impl AsyncFnOnce(Desktop) -> Result<T, DesktopError>,
    ) -> Result<T, WitError> {
        let desktop = self.desktop()?;
        let started = self.at_ms();
        let answer = self.waiting(call(desktop)).await;
        let mut detail = detail;
        if let (Value::Object(m), Err(e)) = (&mut detail, &answer) {
            m.insert("error".into(), e.to_string().into());
        }
        self.run.record(Step::Sandbox {
            plugin: self.plugin.clone(),
            op: format!("desktop-{op}"),
            detail,
            at_ms: started,
            duration_ms: self.at_ms() - started,
        });
        answer.map_err(error)
    }

    pub(crate) async fn desktop_size(&mut self) -> Result<(u32, u32), WitError> {
        self.desktop_call("size", json!({}), async |d| d.size().await).await
    }

    pub(crate) async fn desktop_screenshot(
        &mut self,
        max_width: Option<u32>,
        jpeg_quality: Option<u8>,
    ) -> Result<orchard_desktop_client::Shot, WitError> {
        if jpeg_quality.is_some_and(|q| !(1..=100).contains(&q)) {
            return Err(WitError::InvalidInput("jpeg-quality is 1 to 100".into()));
        }
        let detail = json!({"max_width": max_width, "jpeg_quality": jpeg_quality});
        self.desktop_call("screenshot", detail, async |d| d.screenshot(max_width, jpeg_quality).await).await
    }

    pub(crate) async fn desktop_pointer(&mut self) -> Result<(i32, i32), WitError> {
        self.desktop_call("pointer", json!({}), async |d| d.pointer().await).await
    }

    pub(crate) async fn desktop_act(&mut self, events: Vec<DesktopInput>) -> Result<(), WitError> {
        if events.len() > MAX_EVENTS {
            return Err(WitError::InvalidInput(format!("{} events: at most {MAX_EVENTS} at once", events.len())));
        }
        let detail = json!({"events": events});
        self.desktop_call("act", detail, async |d| d.act(events).await).await
    }

    pub(crate) async fn desktop_accessibility(&mut self, max_nodes: u32) -> Result<String, WitError> {
        let detail = json!({"max_nodes": max_nodes});
        self.desktop_call("accessibility", detail, async |d| d.accessibility(max_nodes).await).await
    }

    pub(crate) async fn desktop_windows(&mut self) -> Result<Vec<orchard_protocol::DesktopWindow>, WitError> {
        self.desktop_call("windows", json!({}), async |d| d.windows().await).await
    }

    pub(crate) async fn desktop_clipboard(&mut self) -> Result<String, WitError> {
        self.desktop_call("clipboard", json!({}), async |d| d.clipboard().await).await
    }

    pub(crate) async fn desktop_run_python(
        &mut self,
        code: String,
        timeout_ms: Option<u64>,
    ) -> Result<(i32, String), WitError> {
        let detail = json!({"code": code.chars().take(4000).collect::<String>(), "timeout_ms": timeout_ms});
        let timeout = std::time::Duration::from_millis(timeout_ms.unwrap_or(60_000).clamp(1, 85_000));
        self.desktop_call("run-python", detail, async move |d| {
            match tokio::time::timeout(timeout, d.run_python(&code)).await {
                Ok(answer) => answer,
                Err(_) => Err(DesktopError::Timeout(format!("the Python code did not finish within {timeout:?}"))),
            }
        })
        .await
    }
}

/// The `desktop` interface of contract version `$v` (0.3.0 on).
macro_rules! desktop_host {
    ($v:ident) => {
        mod desktop_host {
            use super::desktop_driver::orchard::plugin::desktop::{
                Host, Input, Point, PointerButton, Screen, Shot, Window,
            };
            use super::tool_adapter::orchard::plugin::types::{Error, Image};
            use crate::host::HostState;
            use orchard_protocol::{DesktopInput as I, PointerButton as B};

            fn button(b: PointerButton) -> B {
                match b {
                    PointerButton::Left => B::Left,
                    PointerButton::Middle => B::Middle,
                    PointerButton::Right => B::Right,
                }
            }

            fn input(i: Input) -> I {
                match i {
                    Input::MoveTo(p) => I::MoveTo { x: p.x, y: p.y },
                    Input::ButtonDown(b) => I::ButtonDown { button: button(b) },
                    Input::ButtonUp(b) => I::ButtonUp { button: button(b) },
                    Input::Click((b, count)) => I::Click { button: button(b), count },
                    Input::Scroll(p) => I::Scroll { x: p.x, y: p.y },
                    Input::TypeText(text) => I::TypeText { text },
                    Input::KeyDown(key) => I::KeyDown { key },
                    Input::KeyUp(key) => I::KeyUp { key },
                    Input::Press(keys) => I::Press { keys },
                }
            }

            impl Host for HostState {
                async fn size(&mut self) -> Result<Screen, Error> {
                    let (width, height) = self.desktop_size().await?;
                    Ok(Screen { width, height })
                }

                async fn screenshot(&mut self, how: Shot) -> Result<Image, Error> {
                    let shot = self.desktop_screenshot(how.max_width, how.jpeg_quality).await?;
                    Ok(Image { media_type: shot.media_type, data: shot.data })
                }

                async fn pointer(&mut self) -> Result<Point, Error> {
                    let (x, y) = self.desktop_pointer().await?;
                    Ok(Point { x, y })
                }

                async fn act(&mut self, events: Vec<Input>) -> Result<(), Error> {
                    Ok(self.desktop_act(events.into_iter().map(input).collect()).await?)
                }

                async fn accessibility(&mut self, max_nodes: u32) -> Result<String, Error> {
                    Ok(self.desktop_accessibility(max_nodes).await?)
                }

                async fn windows(&mut self) -> Result<Vec<Window>, Error> {
                    let list = self.desktop_windows().await?;
                    Ok(list
                        .into_iter()
                        .map(|w| Window { title: w.title, class: w.class, focused: w.focused })
                        .collect())
                }

                async fn clipboard(&mut self) -> Result<String, Error> {
                    Ok(self.desktop_clipboard().await?)
                }

                async fn run_python(&mut self, code: String, timeout_ms: Option<u64>) -> Result<(i32, String), Error> {
                    Ok(self.desktop_run_python(code, timeout_ms).await?)
                }
            }
        }
    };
}
