//! `model`: the run's model endpoint. Every call is recorded, request and answer.

use super::HostState;
use crate::bindings::harness::orchard::plugin::model::{Completion, Host, Sampling};
use crate::bindings::{Message, ToolSpec, WitError};
use crate::convert;
use crate::manifest::Capability;
use crate::trajectory::Step;

impl Host for HostState {
    async fn complete(
        &mut self,
        messages: Vec<Message>,
        tools: Vec<ToolSpec>,
        sampling: Sampling,
    ) -> Result<Completion, WitError> {
        self.require(Capability::Model)?;
        let client = self.run.current_model().ok_or_else(|| {
            WitError::Unavailable("no model endpoint is configured for this run (orchard eval --model URL)".into())
        })?;
        let request: Vec<orchard_model::Message> = messages.iter().map(convert::message_to_model).collect();
        let specs: Vec<orchard_model::ToolSpec> = tools.iter().map(convert::spec_to_model).collect();
        let sampling = convert::sampling_to_model(&sampling).map_err(WitError::InvalidInput)?;
        let started = self.at_ms();
        let result = self.waiting(client.complete(&request, &specs, &sampling)).await;
        let duration_ms = self.at_ms() - started;
        match result {
            Ok(c) => {
                self.run.record_model_call(&self.plugin, (request, specs), &sampling, &c, (started, duration_ms));
                Ok(Completion {
                    message: convert::message_from_model(&c.message),
                    finish_reason: convert::finish_from_model(c.finish_reason),
                    usage: convert::usage_from_model(c.usage),
                    model: c.model,
                })
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
