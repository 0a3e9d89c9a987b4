//! `tools` for harnesses: the host merges the tool lists of the run's adapters and routes each
//! call by name to the adapter that offered it (each adapter in a store of its own).

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::Store;

use super::HostState;
use crate::contract::BoundTools;
use crate::contract::v0_1::{ToolCall, ToolOutput, ToolSpec, WitError};
use crate::engine::Runtime;
use crate::failure::PluginFailure;
use crate::manifest::Capability;
use crate::plugin::Plugin;
use crate::rollout::{Grants, Limits, RolloutContext};

struct Adapter {
    plugin: Arc<Plugin>,
    store: tokio::sync::Mutex<Store<HostState>>,
    bindings: BoundTools,
}

pub(crate) struct ToolRouter {
    adapters: Vec<Adapter>,
    routes: HashMap<String, usize>,
    pub(crate) specs: Vec<ToolSpec>,
}

impl ToolRouter {
    /// Instantiates every adapter for the rollout and collects their tools.
    pub(crate) async fn build(
        rt: &Runtime,
        ctx: &Arc<RolloutContext>,
        plugins: &[Arc<Plugin>],
        limits: &Limits,
        grants: &Grants,
    ) -> Result<ToolRouter, PluginFailure> {
        let mut router = ToolRouter { adapters: Vec::new(), routes: HashMap::new(), specs: Vec::new() };
        for plugin in plugins {
            let mut store = rt.new_store(plugin, ctx, limits, grants);
            let fail = |call: &str, e: wasmtime::Error, store: &Store<HostState>| {
                PluginFailure::from_error(plugin, call, e, store)
            };
            let bound = plugin.pre.bind_tools(&mut store).await.map_err(|(call, e)| fail(call, e, &store))?;
            let Some((bindings, specs)) = bound else {
                return Err(PluginFailure::config(
                    plugin,
                    format!("{} is a {}, not a tool adapter", plugin.id(), plugin.kind()),
                ));
            };
            let index = router.adapters.len();
            for spec in specs {
                if let Some(other) = router.routes.get(&spec.name) {
                    return Err(PluginFailure::config(
                        plugin,
                        format!(
                            "tool {:?} is offered by both {} and {}",
                            spec.name,
                            router.adapters[*other].plugin.id(),
                            plugin.id()
                        ),
                    ));
                }
                router.routes.insert(spec.name.clone(), index);
                router.specs.push(spec);
            }
            router.adapters.push(Adapter { plugin: plugin.clone(), store: tokio::sync::Mutex::new(store), bindings });
        }
        Ok(router)
    }

    /// Calls a tool. The outer error is the adapter failing (a trap, a limit): fatal to the
    /// rollout. The inner one is the tool's own answer to a bad call.
    pub(crate) async fn call(&self, call: &ToolCall) -> Result<(String, Result<ToolOutput, WitError>), PluginFailure> {
        let Some(&index) = self.routes.get(&call.name) else {
            let known: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
            return Ok((
                String::new(),
                Err(WitError::NotFound(format!("no tool named {:?} (tools: {})", call.name, known.join(", ")))),
            ));
        };
        let adapter = &self.adapters[index];
        let mut store = adapter.store.lock().await;
        let result = adapter.bindings.call(&mut store, call).await;
        let result = result.map_err(|e| {
            PluginFailure::from_error(&adapter.plugin, &format!("tools.call({})", call.name), e, &store)
        })?;
        Ok((adapter.plugin.id(), result))
    }

    /// What the adapters printed, for the trajectory.
    pub(crate) async fn drain_output(&self) {
        for adapter in &self.adapters {
            let store = adapter.store.lock().await;
            store.data().run.record_output(store.data());
        }
    }
}

impl HostState {
    pub(crate) fn tool_specs(&self) -> Vec<ToolSpec> {
        if self.require(Capability::Tools).is_err() {
            return Vec::new();
        }
        self.run.tools.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|r| r.specs.clone()).unwrap_or_default()
    }

    pub(crate) async fn call_tool(&mut self, call: ToolCall) -> Result<ToolOutput, WitError> {
        self.require(Capability::Tools)?;
        let router = self
            .run
            .tools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| WitError::Unavailable("this run has no tools".into()))?;
        let started = self.at_ms();
        let outcome = self.waiting(router.call(&call)).await;
        let duration_ms = self.at_ms() - started;
        match outcome {
            Ok((adapter, result)) => {
                self.run.record_tool_call(&self.plugin, &adapter, &call, &result, started, duration_ms);
                result
            }
            Err(failure) => {
                let message = failure.to_string();
                self.run.set_fatal(failure);
                Err(WitError::Other(message))
            }
        }
    }
}

/// The `tools` interface (harnesses) of contract version `$v`; the router speaks 0.1.0's types.
macro_rules! tools_host {
    ($v:ident) => {
        impl crate::contract::$v::harness::orchard::plugin::tools::Host for HostState {
            async fn list(&mut self) -> Vec<crate::contract::$v::tool_adapter::orchard::plugin::types::ToolSpec> {
                self.tool_specs().into_iter().map(crate::contract::$v::convert::tool_spec_from_v1).collect()
            }

            async fn call(
                &mut self,
                call: crate::contract::$v::tool_adapter::orchard::plugin::types::ToolCall,
            ) -> Result<
                crate::contract::$v::tool_adapter::orchard::plugin::types::ToolOutput,
                crate::contract::$v::tool_adapter::orchard::plugin::types::Error,
            > {
                let result = self.call_tool(crate::contract::$v::convert::tool_call_to_v1(call)).await;
                result.map(crate::contract::$v::convert::tool_output_from_v1).map_err(Into::into)
            }
        }
    };
}
