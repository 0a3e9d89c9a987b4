//! `model`: the run's model endpoint. Every call is recorded, request and answer.

use super::HostState;
use crate::contract::v0_1::WitError;
use crate::manifest::Capability;
use crate::trajectory::Step;

impl HostState {
    /// Sends a request (already in the model client's types) and records it; errors are 0.1.0's.
    pub(crate) async fn complete_model(
        &mut self,
        request: Vec<orchard_model::Message>,
        specs: Vec<orchard_model::ToolSpec>,
        sampling: orchard_model::Sampling,
    ) -> Result<orchard_model::Completion, WitError> {
        self.require(Capability::Model)?;
        let client = self.run.current_model().ok_or_else(|| {
            WitError::Unavailable("no model endpoint is configured for this run (orchard eval --model URL)".into())
        })?;
        let started = self.at_ms();
        let result = self.waiting(client.complete(&request, &specs, &sampling)).await;
        let duration_ms = self.at_ms() - started;
        match result {
            Ok(c) => {
                self.run.record_model_call(&self.plugin, (request, specs), &sampling, &c, (started, duration_ms));
                Ok(c)
            }
            Err(e) => {
                self.run.record(Step::ModelError {
                    plugin: self.plugin.clone(),
                    error: e.to_string(),
                    at_ms: started,
                    duration_ms,
                });
                Err(match e {
                    orchard_model::ModelError::Unavailable(m) => WitError::Unavailable(m),
                    orchard_model::ModelError::Rejected(m) => WitError::InvalidInput(m),
                    orchard_model::ModelError::Timeout(d) => {
                        WitError::Timeout(format!("the model did not answer within {d:?}"))
                    }
                    orchard_model::ModelError::Protocol(m) => WitError::Other(m),
                })
            }
        }
    }
}

/// The `model` interface of contract version `$v`.
macro_rules! model_host {
    ($v:ident) => {
        impl crate::contract::$v::harness::orchard::plugin::model::Host for HostState {
            async fn complete(
                &mut self,
                messages: Vec<crate::contract::$v::tool_adapter::orchard::plugin::types::Message>,
                tools: Vec<crate::contract::$v::tool_adapter::orchard::plugin::types::ToolSpec>,
                sampling: crate::contract::$v::harness::orchard::plugin::model::Sampling,
            ) -> Result<
                crate::contract::$v::harness::orchard::plugin::model::Completion,
                crate::contract::$v::tool_adapter::orchard::plugin::types::Error,
            > {
                use crate::contract::$v::convert;
                use crate::contract::$v::harness::orchard::plugin::model::Completion;
                use crate::contract::$v::tool_adapter::orchard::plugin::types::Error;
                let request = messages.iter().map(convert::message_to_model).collect();
                let specs = tools.iter().map(convert::spec_to_model).collect();
                let sampling = convert::sampling_to_model(&sampling).map_err(Error::InvalidInput)?;
                let c = self.complete_model(request, specs, sampling).await?;
                Ok(Completion {
                    message: convert::message_from_model(&c.message),
                    finish_reason: convert::finish_from_model(c.finish_reason),
                    usage: convert::usage_from_model(c.usage),
                    model: c.model,
                })
            }
        }
    };
}
