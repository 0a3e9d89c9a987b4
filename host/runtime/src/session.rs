//! [`ToolSession`]: a rollout's tools called by a client outside the sandboxed plugins (an
//! OpenEnv client driving an episode), routed and recorded as a harness's calls are.

use std::sync::Arc;

use crate::context::RolloutContext;
use crate::contract::v0_1::{ContentPart, ToolCall, ToolSpec};
use crate::engine::Runtime;
use crate::failure::PluginFailure;
use crate::host::ToolRouter;
use crate::plugin::Plugin;
use crate::rollout::{Grants, Limits};

/// The tools of one rollout, open for calls: each adapter instantiated once, in its own store.
/// Dropping it closes them.
pub struct ToolSession {
    router: Arc<ToolRouter>,
    ctx: Arc<RolloutContext>,
    caller: String,
    calls: std::sync::atomic::AtomicU64,
}

/// A tool's answer, as a client outside the plugins sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolAnswer {
    /// The text parts, joined (images are noted by size).
    pub text: String,
    /// The tool said the call failed (a bad argument, a command that failed).
    pub is_error: bool,
}

impl Runtime {
    /// Instantiates `adapters` for the rollout of `ctx`; their calls are recorded as `caller`'s.
    pub async fn open_tools(
        &self,
        ctx: &Arc<RolloutContext>,
        adapters: &[Arc<Plugin>],
        limits: &Limits,
        grants: &Grants,
        caller: &str,
    ) -> Result<ToolSession, PluginFailure> {
        let router = Arc::new(ToolRouter::build(self, ctx, adapters, limits, grants).await?);
        Ok(ToolSession { router, ctx: ctx.clone(), caller: caller.to_string(), calls: Default::default() })
    }
}

impl ToolSession {
    /// The tools offered: name, description, JSON Schema of the arguments.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.router.specs.clone()
    }

    /// Calls a tool with `arguments` (a JSON object). An unknown tool or a tool's refusal is an
    /// answer with `is_error`; `Err` is an adapter failing (a trap, a limit), after which the
    /// session should end.
    pub async fn call(&self, name: &str, arguments: &serde_json::Value) -> Result<ToolAnswer, PluginFailure> {
        let n = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let call = ToolCall { id: format!("call-{n}"), name: name.to_string(), arguments: arguments.to_string() };
        let started = self.ctx.at_ms();
        let (adapter, result) = self.router.call(&call).await?;
        self.ctx.record_tool_call(&self.caller, &adapter, &call, &result, started, self.ctx.at_ms() - started);
        self.router.drain_output().await;
        Ok(match result {
            Ok(out) => ToolAnswer {
                text: out
                    .content
                    .iter()
                    .map(|p| match p {
                        ContentPart::Text(t) => t.clone(),
                        ContentPart::Image(i) => format!("[image {} bytes]", i.data.len()),
                    })
                    .collect(),
                is_error: out.is_error,
            },
            Err(e) => ToolAnswer { text: crate::contract::v0_1::convert::error_text(&e), is_error: true },
        })
    }
}
