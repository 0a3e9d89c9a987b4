//! `config` (0.2.0): a tool adapter's or browser driver's own configuration, as JSON.

use super::HostState;

impl HostState {
    pub(crate) fn config_json(&self) -> String {
        // `name@version`: configuration is chosen by name, whatever the version.
        let name = self.plugin.split('@').next().unwrap_or(&self.plugin);
        self.run.tool_config(name).to_string()
    }
}
