//! `browser`: tabs of the rollout's own Chromium (`orchard-browser`), started in the sandbox's
//! network at the first `session.open`. A run with no browser configured (a backend that cannot
//! place one in the sandbox's network) answers `unavailable`.

use std::sync::Arc;

use serde_json::json;
use wasmtime::component::Resource;

use super::HostState;
use crate::contract::v0_1::WitError;
use crate::manifest::Capability;
use crate::trajectory::Step;

/// A plugin's tab.
pub struct Session {
    tab: Arc<orchard_browser::Tab>,
}

/// The contract's error for a browser's.
pub(crate) fn error(e: orchard_browser::BrowserError) -> WitError {
    use orchard_browser::BrowserError as B;
    let message = e.to_string();
    match e {
        B::Refused(_) => WitError::Denied(message),
        B::Timeout { .. } => WitError::Timeout(message),
        B::Gone(_) | B::Crashed(_) | B::Launch(_) | B::Unconfigured(_) => WitError::Unavailable(message),
        B::TooLarge { .. } => WitError::InvalidInput(message),
        B::Protocol { .. } => WitError::Other(message),
    }
}

impl HostState {
    /// A browser that could not start or is gone ends the rollout, with how it ended.
    pub(crate) fn browser_failed(&self, op: &str, e: &orchard_browser::BrowserError) {
        use orchard_browser::BrowserError as B;
        if let B::Gone(_) | B::Crashed(_) | B::Launch(_) = e {
            let how = self.run.browser_exit().map(|r| format!(" (chromium {r})")).unwrap_or_default();
            self.run.set_fatal(crate::failure::PluginFailure {
                plugin: self.plugin.clone(),
                call: format!("browser.session.{op}"),
                kind: crate::failure::FailureKind::Browser,
                message: format!("{e}{how}"),
            });
        }
    }

    pub(crate) fn record_browser(&self, op: &str, detail: serde_json::Value, started: u64) {
        let step = Step::Sandbox {
            plugin: self.plugin.clone(),
            op: format!("browser-{op}"),
            detail,
            at_ms: started,
            duration_ms: self.at_ms() - started,
        };
        self.run.record(step);
    }

    pub(crate) async fn browser_open(&mut self) -> Result<Resource<Session>, WitError> {
        self.require(Capability::Browser)?;
        let started = self.at_ms();
        let run = self.run.clone();
        let opened = self.waiting(run.open_tab()).await;
        self.record_browser("open", json!({"ok": opened.is_ok()}), started);
        if let Err(e) = &opened {
            self.browser_failed("open", e);
        }
        let tab = opened.map_err(error)?;
        self.table.push(Session { tab }).map_err(|e| WitError::Other(e.to_string()))
    }

    pub(crate) fn tab(&self, session: &Resource<Session>) -> Result<Arc<orchard_browser::Tab>, WitError> {
        self.table.get(session).map(|s| s.tab.clone()).map_err(|e| WitError::InvalidInput(e.to_string()))
    }

    pub(crate) async fn browser_cdp(
        &mut self,
        session: &Resource<Session>,
        method: String,
        params: String,
    ) -> Result<String, WitError> {
        self.require(Capability::Browser)?;
        let tab = self.tab(session)?;
        let params: serde_json::Value = if params.trim().is_empty() {
            json!({})
        } else {
            serde_json::from_str(&params)
                .map_err(|e| WitError::InvalidInput(format!("cdp params are not JSON: {e}")))?
        };
        let started = self.at_ms();
        let answer = self.waiting(tab.cdp(&method, params)).await;
        self.record_browser("cdp", json!({"method": method, "ok": answer.is_ok()}), started);
        if let Err(e) = &answer {
            self.browser_failed("cdp", e);
        }
        answer.map(|v| v.to_string()).map_err(error)
    }

    /// The page's unasked events since the last call; each lands in the trajectory.
    pub(crate) fn browser_events(&mut self, session: &Resource<Session>) -> Vec<orchard_browser::PageEvent> {
        let Ok(tab) = self.tab(session) else { return Vec::new() };
        let events = tab.take_events();
        if !events.is_empty() {
            let started = self.at_ms();
            let said: Vec<String> = events.iter().map(|e| format!("{e:?}")).collect();
            self.record_browser("events", json!({"events": said}), started);
        }
        events
    }

    pub(crate) async fn browser_screenshot(&mut self, session: &Resource<Session>) -> Result<Vec<u8>, WitError> {
        self.require(Capability::Browser)?;
        let tab = self.tab(session)?;
        let started = self.at_ms();
        let shot = self.waiting(tab.screenshot()).await;
        self.record_browser(
            "screenshot",
            json!({"ok": shot.is_ok(), "bytes": shot.as_ref().map(Vec::len).unwrap_or(0)}),
            started,
        );
        if let Err(e) = &shot {
            self.browser_failed("screenshot", e);
        }
        shot.map_err(error)
    }
}

/// The `browser` interface of contract version `$v`.
macro_rules! browser_host {
    ($v:ident $(, $extra:item)*) => {
        impl crate::contract::$v::browser_driver::orchard::plugin::browser::Host for HostState {}

        impl crate::contract::$v::browser_driver::orchard::plugin::browser::HostSession for HostState {
            async fn open(
                &mut self,
            ) -> wasmtime::Result<
                Result<Resource<Session>, crate::contract::$v::tool_adapter::orchard::plugin::types::Error>,
            > {
                Ok(self.browser_open().await.map_err(Into::into))
            }

            async fn cdp(
                &mut self,
                session: Resource<Session>,
                method: String,
                params: String,
            ) -> wasmtime::Result<Result<String, crate::contract::$v::tool_adapter::orchard::plugin::types::Error>>
            {
                Ok(self.browser_cdp(&session, method, params).await.map_err(Into::into))
            }

            async fn screenshot(
                &mut self,
                session: Resource<Session>,
            ) -> wasmtime::Result<Result<Vec<u8>, crate::contract::$v::tool_adapter::orchard::plugin::types::Error>>
            {
                Ok(self.browser_screenshot(&session).await.map_err(Into::into))
            }

            async fn drop(&mut self, session: Resource<Session>) -> wasmtime::Result<()> {
                let _ = self.table.delete(session);
                Ok(())
            }

            $($extra)*
        }
    };
}
