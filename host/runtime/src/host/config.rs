//! `config` (0.2.0): a tool adapter's or browser driver's own configuration, as JSON.

use super::HostState;

impl HostState {
    fn config_json(&self) -> String {
        // `name@version`: configuration is chosen by name, whatever the version.
        let name = self.plugin.split('@').next().unwrap_or(&self.plugin);
        self.run.tool_config(name).to_string()
    }
}

impl crate::bindings::v0_2::tool_adapter::orchard::plugin::config::Host for HostState {
    async fn get(&mut self) -> String {
        self.config_json()
    }
}

impl crate::bindings::v0_2::browser_driver::orchard::plugin::config::Host for HostState {
    async fn get(&mut self) -> wasmtime::Result<String> {
        Ok(self.config_json())
    }
}
