//! `tools` for harnesses: the host merges the tool lists of the run's adapters and routes each
//! call by name to the adapter that offered it (each adapter in a store of its own).

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::Store;

use super::HostState;
use crate::bindings::{ToolCall, ToolOutput, ToolSpec, WitError, v0_1, v0_2};
use crate::convert;
use crate::engine::Runtime;
use crate::failure::PluginFailure;
use crate::manifest::Capability;
use crate::plugin::{Plugin, Pre};
use crate::rollout::{Grants, Limits, RolloutContext};

enum Bindings {
    Tools(v0_1::tool_adapter::ToolAdapter),
    Browser(v0_1::browser_driver::BrowserDriver),
    ToolsV2(v0_2::tool_adapter::ToolAdapter),
    BrowserV2(v0_2::browser_driver::BrowserDriver),
}

struct Adapter {
    plugin: Arc<Plugin>,
    store: tokio::sync::Mutex<Store<HostState>>,
    bindings: Bindings,
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
            macro_rules! list {
                ($pre:expr, $variant:ident, $v:ident) => {{
                    let b = $pre.instantiate_async(&mut store).await.map_err(|e| fail("instantiate", e, &store))?;
                    let specs = b
                        .orchard_plugin_tools()
                        .call_list(&mut store)
                        .await
                        .map_err(|e| fail("tools.list", e, &store))?;
                    (Bindings::$variant(b), specs.into_iter().map(convert::$v::tool_spec_to_v1).collect::<Vec<_>>())
                }};
            }
            let (bindings, specs) = match &plugin.pre {
                Pre::ToolAdapter(pre) => list!(pre, Tools, v0_1),
                Pre::BrowserDriver(pre) => list!(pre, Browser, v0_1),
                Pre::ToolAdapterV2(pre) => list!(pre, ToolsV2, v0_2),
                Pre::BrowserDriverV2(pre) => list!(pre, BrowserV2, v0_2),
                _ => {
                    return Err(PluginFailure::config(
                        plugin,
                        format!("{} is a {}, not a tool adapter", plugin.id(), plugin.kind()),
                    ));
                }
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
    async fn call(&self, call: &ToolCall) -> Result<(String, Result<ToolOutput, WitError>), PluginFailure> {
        let Some(&index) = self.routes.get(&call.name) else {
            let known: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
            return Ok((
                String::new(),
                Err(WitError::NotFound(format!("no tool named {:?} (tools: {})", call.name, known.join(", ")))),
            ));
        };
        let adapter = &self.adapters[index];
        let mut store = adapter.store.lock().await;
        macro_rules! call_v2 {
            ($b:expr) => {{
                let call = convert::v0_2::tool_call_from_v1(call.clone());
                $b.orchard_plugin_tools()
                    .call_call(&mut *store, &call)
                    .await
                    .map(|r| r.map(convert::v0_2::tool_output_to_v1).map_err(convert::v0_2::error_to_v1))
            }};
        }
        let result = match &adapter.bindings {
            Bindings::Tools(b) => b.orchard_plugin_tools().call_call(&mut *store, call).await,
            Bindings::Browser(b) => b.orchard_plugin_tools().call_call(&mut *store, call).await,
            Bindings::ToolsV2(b) => call_v2!(b),
            Bindings::BrowserV2(b) => call_v2!(b),
        };
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
    fn tool_specs(&self) -> Vec<ToolSpec> {
        if self.require(Capability::Tools).is_err() {
            return Vec::new();
        }
        self.run.tools.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|r| r.specs.clone()).unwrap_or_default()
    }

    async fn call_tool(&mut self, call: ToolCall) -> Result<ToolOutput, WitError> {
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
        impl crate::bindings::$v::harness::orchard::plugin::tools::Host for HostState {
            async fn list(&mut self) -> Vec<crate::bindings::$v::tool_adapter::orchard::plugin::types::ToolSpec> {
                self.tool_specs().into_iter().map(crate::convert::$v::tool_spec_from_v1).collect()
            }

            async fn call(
                &mut self,
                call: crate::bindings::$v::tool_adapter::orchard::plugin::types::ToolCall,
            ) -> Result<
                crate::bindings::$v::tool_adapter::orchard::plugin::types::ToolOutput,
                crate::bindings::$v::tool_adapter::orchard::plugin::types::Error,
            > {
                let result = self.call_tool(crate::convert::$v::tool_call_to_v1(call)).await;
                result.map(crate::convert::$v::tool_output_from_v1).map_err(Into::into)
            }
        }
    };
}

tools_host!(v0_1);
tools_host!(v0_2);
