//! `orchard:plugin@0.2.0` (`wit/0.2.0`, frozen): what 0.1.0 has, and
//! - `grading.grade` is told its environment (a separate verifier or in place; what was carried
//!   and dropped);
//! - tool adapters and browser drivers read their own configuration (`config.get`);
//! - browser sessions report page events (dialogs, popups, downloads).

use wasmtime::component::Resource;

use crate::host::browser::Session;

worlds!("../../wit/0.2.0");
conversions!(v0_2);
common_calls!(grading_environment);

impl tool_adapter::orchard::plugin::types::Host for HostState {}
log_host!(v0_2);
model_host!(v0_2);
sandbox_host!(v0_2);
tools_host!(v0_2);
browser_host!(
    v0_2,
    async fn events(
        &mut self,
        session: Resource<Session>,
    ) -> wasmtime::Result<Vec<browser_driver::orchard::plugin::browser::PageEvent>> {
        use browser_driver::orchard::plugin::browser::PageEvent as E;
        let events = self.browser_events(&session);
        Ok(events
            .into_iter()
            .map(|e| match e {
                orchard_browser::PageEvent::Dialog(m) => E::Dialog(m),
                orchard_browser::PageEvent::Popup(u) => E::Popup(u),
                orchard_browser::PageEvent::Download(u) => E::Download(u),
            })
            .collect())
    }
);

impl tool_adapter::orchard::plugin::config::Host for HostState {
    async fn get(&mut self) -> String {
        self.config_json()
    }
}

impl browser_driver::orchard::plugin::config::Host for HostState {
    async fn get(&mut self) -> wasmtime::Result<String> {
        Ok(self.config_json())
    }
}

/// The host's own errors are made as 0.1.0 errors; a 0.2.0 plugin gets the same error.
impl From<super::v0_1::WitError> for tool_adapter::orchard::plugin::types::Error {
    fn from(e: super::v0_1::WitError) -> Self {
        use super::v0_1::WitError as A;
        match e {
            A::InvalidInput(m) => Self::InvalidInput(m),
            A::NotFound(m) => Self::NotFound(m),
            A::Timeout(m) => Self::Timeout(m),
            A::Denied(m) => Self::Denied(m),
            A::Unavailable(m) => Self::Unavailable(m),
            A::Other(m) => Self::Other(m),
        }
    }
}

// `grading.environment` (new in 0.2.0): where the grader works and what was carried there.
grading_environment_fn!();
