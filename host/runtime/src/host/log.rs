//! `log`: structured events into the trajectory.

use super::HostState;
use crate::manifest::Capability;
use crate::trajectory::Step;

/// Events bigger than this are cut (a plugin cannot flood the trajectory).
const MAX_EVENT: usize = 64 * 1024;

impl HostState {
    pub(crate) fn log_event(&mut self, level: &'static str, name: String, data: String) {
        if self.require(Capability::Log).is_err() {
            return;
        }
        let data = if data.len() > MAX_EVENT {
            serde_json::Value::String(format!("[{} bytes, cut]", data.len()))
        } else {
            serde_json::from_str(&data).unwrap_or(serde_json::Value::String(data))
        };
        tracing::debug!(plugin = %self.plugin, level, name = %name, "plugin event");
        self.run.record(Step::Event {
            plugin: self.plugin.clone(),
            level: level.into(),
            name,
            data,
            at_ms: self.at_ms(),
        });
    }
}

/// The `log` interface of contract version `$v`.
macro_rules! log_host {
    ($v:ident) => {
        impl crate::contract::$v::tool_adapter::orchard::plugin::log::Host for HostState {
            async fn event(
                &mut self,
                level: crate::contract::$v::tool_adapter::orchard::plugin::log::Level,
                name: String,
                data: String,
            ) {
                use crate::contract::$v::tool_adapter::orchard::plugin::log::Level;
                let level = match level {
                    Level::Debug => "debug",
                    Level::Info => "info",
                    Level::Warn => "warn",
                    Level::Error => "error",
                };
                self.log_event(level, name, data);
            }
        }
    };
}
