//! `browser`: not wired to a browser yet. Every session open answers `unavailable`, so browser
//! drivers load, validate and fail cleanly until a browser backend is configured.

use wasmtime::component::Resource;

use super::HostState;
use crate::bindings::WitError;
use crate::bindings::browser_driver::orchard::plugin::browser::{Host, HostSession};

/// A browser tab (none can be opened yet).
pub struct Session;

impl Host for HostState {}

impl HostSession for HostState {
    async fn open(&mut self) -> wasmtime::Result<Result<Resource<Session>, WitError>> {
        if let Err(e) = self.require(crate::manifest::Capability::Browser) {
            return Ok(Err(e));
        }
        Ok(Err(WitError::Unavailable("no browser is configured for this run".into())))
    }

    async fn cdp(&mut self, _: Resource<Session>, _: String, _: String) -> wasmtime::Result<Result<String, WitError>> {
        Ok(Err(WitError::Unavailable("no browser is configured for this run".into())))
    }

    async fn screenshot(&mut self, _: Resource<Session>) -> wasmtime::Result<Result<Vec<u8>, WitError>> {
        Ok(Err(WitError::Unavailable("no browser is configured for this run".into())))
    }

    async fn drop(&mut self, _: Resource<Session>) -> wasmtime::Result<()> {
        Ok(())
    }
}
