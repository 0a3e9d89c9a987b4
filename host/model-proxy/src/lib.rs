//! The recording proxy: an OpenAI-compatible endpoint per session, for harnesses that run
//! outside Orchard (a trainer's own agent loop, a CLI agent). A client opens a session naming the
//! policy's endpoint (`POST /v1/proxy`), points its OpenAI base URL at `/v1/proxy/{id}`, and
//! every chat completion it makes is forwarded with token ids and logprobs asked for, the
//! trainer's sampling fixed and its policy version recorded; `GET /v1/proxy/{id}` gives the calls
//! and their token-faithful segments, exactly as an in-Orchard rollout's trajectory would.
//!
//! Sessions live in this replica's memory (a client talks to one replica for a session), are
//! the tenant's own (another tenant's id answers 404), and are forgotten after an hour idle.

#![warn(missing_docs)]

mod http;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orchard_model::{Completion, ModelClient};
use orchard_spec::ModelSpec;
use serde::Serialize;
use serde_json::Value;

pub use http::{openapi_paths, routes};

/// Sessions idle this long are forgotten.
pub const IDLE: Duration = Duration::from_secs(3600);
/// Most open sessions per tenant.
pub const MAX_SESSIONS: usize = 1000;

/// The recording proxy: sessions and what they recorded.
pub struct ProxyService {
    /// Where the tenants' secrets are (a session's `api_key_secret`).
    store: orchard_store::Store,
    /// Where a session's endpoint may point.
    egress: orchard_egress::Policy,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
}

/// One recording session of one harness run.
pub struct Session {
    /// Its id (part of its base URL).
    pub id: String,
    /// The tenant that opened it.
    pub tenant: String,
    /// The model it forwards to.
    pub spec: ModelSpec,
    client: ModelClient,
    started: Instant,
    calls: Mutex<Vec<ProxiedCall>>,
    last_used: Mutex<Instant>,
}

/// One forwarded call.
#[derive(Debug, Clone, Serialize)]
pub struct ProxiedCall {
    /// When the call started, in milliseconds since the session opened.
    pub at_ms: u64,
    /// How long it took.
    pub duration_ms: u64,
    /// How many messages the client sent.
    pub request_messages: usize,
    /// The model's message.
    pub response: orchard_model::Message,
    /// Why it stopped.
    pub finish_reason: orchard_model::FinishReason,
    /// Tokens used.
    pub usage: orchard_model::Usage,
    /// The token ids the endpoint saw, when it gave them.
    pub prompt_ids: Option<Vec<u32>>,
    /// The token ids it sampled, when it gave them.
    pub completion_ids: Option<Vec<u32>>,
    /// Log-probabilities of the sampled tokens.
    pub logprobs: Vec<f32>,
    /// The policy version the endpoint said it served.
    pub policy_version: Option<String>,
}

#[derive(Debug, thiserror::Error)]
/// Why a proxy call was refused.
pub enum ProxyError {
    #[error("{0}")]
    /// The request was wrong; the message names what.
    Invalid(String),
    #[error("{0}")]
    /// No such session of this tenant.
    NotFound(String),
    /// The policy's endpoint failed (after the client's retries).
    #[error("{0}")]
    Upstream(String),
}

impl ProxyService {
    /// A proxy recording into `store`, forwarding only where `egress` allows.
    pub fn new(store: orchard_store::Store, egress: orchard_egress::Policy) -> Arc<ProxyService> {
        Arc::new(ProxyService { store, egress, sessions: Mutex::new(HashMap::new()) })
    }

    /// Opens a session forwarding to `spec`'s endpoint.
    pub async fn open(&self, tenant: &str, spec: ModelSpec) -> Result<Arc<Session>, ProxyError> {
        if spec.sampling.as_ref().is_some_and(|s| !s.is_object()) {
            return Err(ProxyError::Invalid("model.sampling: expected a JSON object".into()));
        }
        let api_key = match &spec.api_key_secret {
            Some(name) => {
                self.store.secret(tenant, name).await.map_err(|e| ProxyError::Invalid(format!("model: {e}")))?
            }
            None => None,
        };
        let mut config = spec.client_config("model", &self.egress, api_key).await.map_err(ProxyError::Invalid)?;
        config.logprobs = true;
        let client = ModelClient::new(config).map_err(|e| ProxyError::Invalid(e.to_string()))?;
        let id = format!("px-{}", uuid::Uuid::new_v4().simple());
        let session = Arc::new(Session {
            id: id.clone(),
            tenant: tenant.to_string(),
            spec,
            client,
            started: Instant::now(),
            calls: Mutex::new(Vec::new()),
            last_used: Mutex::new(Instant::now()),
        });
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|_, s| s.idle() < IDLE);
        if sessions.values().filter(|s| s.tenant == tenant).count() >= MAX_SESSIONS {
            return Err(ProxyError::Invalid(format!(
                "too many open proxy sessions ({MAX_SESSIONS}): close some (DELETE /v1/proxy/{{id}})"
            )));
        }
        sessions.insert(id, session.clone());
        Ok(session)
    }

    /// The tenant's session, or not found (another tenant's too).
    pub fn session(&self, tenant: &str, id: &str) -> Result<Arc<Session>, ProxyError> {
        let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        match sessions.get(id) {
            Some(s) if s.tenant == tenant => Ok(s.clone()),
            _ => Err(ProxyError::NotFound(format!("proxy session {id} not found"))),
        }
    }

    /// Ends a session and hands back what it recorded.
    pub fn close(&self, tenant: &str, id: &str) -> Result<Arc<Session>, ProxyError> {
        let session = self.session(tenant, id)?;
        self.sessions.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        Ok(session)
    }
}

impl Session {
    fn idle(&self) -> Duration {
        self.last_used.lock().unwrap_or_else(|p| p.into_inner()).elapsed()
    }

    /// Forwards one chat completion and records it; the endpoint's answer comes back as sent.
    pub async fn complete(&self, body: Value) -> Result<(Completion, Value), ProxyError> {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let request_messages = body["messages"].as_array().map(Vec::len).unwrap_or(0);
        if body.get("messages").and_then(Value::as_array).is_none() {
            return Err(ProxyError::Invalid("messages: expected an array".into()));
        }
        let at = self.started.elapsed();
        let (completion, raw) =
            self.client.complete_raw(body).await.map_err(|e| ProxyError::Upstream(e.to_string()))?;
        let logprobs = completion
            .logprobs
            .as_ref()
            .and_then(|l| l["content"].as_array())
            .map(|c| c.iter().map(|t| t["logprob"].as_f64().unwrap_or(0.0) as f32).collect())
            .unwrap_or_default();
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).push(ProxiedCall {
            at_ms: at.as_millis() as u64,
            duration_ms: (self.started.elapsed() - at).as_millis() as u64,
            request_messages,
            response: completion.message.clone(),
            finish_reason: completion.finish_reason,
            usage: completion.usage,
            prompt_ids: completion.prompt_token_ids.clone(),
            completion_ids: completion.token_ids.clone(),
            logprobs,
            policy_version: completion.policy_version.clone(),
        });
        Ok((completion, raw))
    }

    /// The record: every call and the segments built from their ids.
    pub fn record(&self) -> Value {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let token_calls: Vec<orchard_segments::TokenCall> = calls
            .iter()
            .filter_map(|c| {
                Some(orchard_segments::TokenCall {
                    prompt_ids: c.prompt_ids.clone()?,
                    completion_ids: c.completion_ids.clone()?,
                    logprobs: c.logprobs.clone(),
                    finish_reason: format!("{:?}", c.finish_reason).to_lowercase(),
                    policy_version: c.policy_version.clone(),
                })
            })
            .collect();
        serde_json::json!({
            "id": self.id,
            "model": self.spec.name,
            "policy_version": self.spec.policy_version,
            "calls": calls,
            "segments": orchard_segments::segments(&token_calls),
        })
    }
}
