//! `browser`: not wired to a browser yet. Every session open answers `unavailable`, so browser
//! drivers load, validate and fail cleanly until a browser backend is configured.

use wasmtime::component::Resource;

use super::HostState;

/// A browser tab (none can be opened yet).
pub struct Session;

/// The `browser` interface of contract version `$v`.
macro_rules! browser_host {
    ($v:ident) => {
        impl crate::bindings::$v::browser_driver::orchard::plugin::browser::Host for HostState {}

        impl crate::bindings::$v::browser_driver::orchard::plugin::browser::HostSession for HostState {
            async fn open(
                &mut self,
            ) -> wasmtime::Result<
                Result<Resource<Session>, crate::bindings::$v::tool_adapter::orchard::plugin::types::Error>,
            > {
                use crate::bindings::$v::tool_adapter::orchard::plugin::types::Error;
                if let Err(e) = self.require(crate::manifest::Capability::Browser) {
                    return Ok(Err(Error::from(e)));
                }
                Ok(Err(Error::Unavailable("no browser is configured for this run".into())))
            }

            async fn cdp(
                &mut self,
                _: Resource<Session>,
                _: String,
                _: String,
            ) -> wasmtime::Result<Result<String, crate::bindings::$v::tool_adapter::orchard::plugin::types::Error>>
            {
                use crate::bindings::$v::tool_adapter::orchard::plugin::types::Error;
                Ok(Err(Error::Unavailable("no browser is configured for this run".into())))
            }

            async fn screenshot(
                &mut self,
                _: Resource<Session>,
            ) -> wasmtime::Result<Result<Vec<u8>, crate::bindings::$v::tool_adapter::orchard::plugin::types::Error>>
            {
                use crate::bindings::$v::tool_adapter::orchard::plugin::types::Error;
                Ok(Err(Error::Unavailable("no browser is configured for this run".into())))
            }

            async fn drop(&mut self, _: Resource<Session>) -> wasmtime::Result<()> {
                Ok(())
            }
        }
    };
}

browser_host!(v0_1);
browser_host!(v0_2);
