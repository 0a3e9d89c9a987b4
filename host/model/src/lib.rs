//! An OpenAI-compatible `/v1/chat/completions` client.
//!
//! Tools (function calling), reasoning content (`reasoning_content`), images as data URLs,
//! retries with exponential backoff on 429, 5xx and connection errors (honouring
//! `Retry-After`), a timeout per request, a cap on concurrent requests per client (per job),
//! token usage, and the endpoint's token ids and logprobs when it returns them.

#![warn(missing_docs)]

pub mod tokenizer;
mod wire;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
/// Who says a message.
pub enum Role {
    /// Instructions.
    System,
    /// The user (or the task).
    User,
    /// The model.
    Assistant,
    /// A tool's answer.
    Tool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
/// One part of a message's content.
pub enum Part {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// Its type (`image/png`).
        media_type: String,
        /// Its bytes, base64.
        data_base64: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A tool call the model made.
pub struct ToolCall {
    /// Its id, which the tool's answer names.
    pub id: String,
    /// The tool.
    pub name: String,
    /// JSON text.
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// One chat message.
pub struct Message {
    /// Who says it.
    pub role: Role,
    /// What it says.
    pub content: Vec<Part>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    /// Tools the model called.
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The call a tool message answers.
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The model's reasoning, where the endpoint gives it.
    pub reasoning: Option<String>,
}

impl Message {
    /// A message of one text part.
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Message {
            role,
            content: vec![Part::Text { text: text.into() }],
            tool_calls: vec![],
            tool_call_id: None,
            reasoning: None,
        }
    }

    /// The text parts joined.
    pub fn text_content(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                Part::Image { .. } => None,
            })
            .collect()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A tool offered to the model.
pub struct ToolSpec {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// JSON Schema text.
    pub parameters: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
/// How the model samples.
pub struct Sampling {
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Nucleus sampling's probability mass.
    pub top_p: Option<f32>,
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    #[serde(default)]
    /// Where to stop.
    pub stop: Vec<String>,
    /// The sampler's seed.
    pub seed: Option<u64>,
    /// A JSON object merged into the request body.
    pub extra: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
/// Why the model stopped.
pub enum FinishReason {
    /// It finished.
    Stop,
    /// It reached its token limit.
    Length,
    /// It called tools.
    ToolCalls,
    /// A filter stopped it.
    ContentFilter,
    /// Anything else the endpoint said.
    Other,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
/// Tokens used by a call.
pub struct Usage {
    /// In the prompt.
    pub prompt_tokens: u32,
    /// Generated.
    pub completion_tokens: u32,
    /// Both.
    pub total_tokens: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
/// A chat completion.
pub struct Completion {
    /// The model's message.
    pub message: Message,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Tokens used.
    pub usage: Usage,
    /// The model that answered.
    pub model: String,
    /// `choices[0].logprobs` as the endpoint returned it (token strings, ids, logprobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<serde_json::Value>,
    /// Token ids of the completion, when the endpoint returns them (vLLM, SGLang).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    /// Token ids of the prompt as the endpoint rendered it, when it returns them (vLLM's
    /// `prompt_token_ids`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    /// How many attempts the request took (retries + 1).
    pub attempts: u32,
    /// The policy version the trainer named for this endpoint when the call was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
}

#[derive(Debug, thiserror::Error)]
/// Why a model call failed.
pub enum ModelError {
    /// The endpoint is down, rate limiting past our retries, or not configured.
    #[error("model unavailable: {0}")]
    Unavailable(String),
    /// The endpoint refused the request (4xx other than 429).
    #[error("model refused the request: {0}")]
    Rejected(String),
    #[error("model request timed out after {0:?}")]
    /// No answer within the time limit.
    Timeout(Duration),
    /// The endpoint answered something that is not a chat completion.
    #[error("model answered nonsense: {0}")]
    Protocol(String),
}

#[derive(Debug, Clone)]
/// How to reach an OpenAI-compatible endpoint.
pub struct ModelConfig {
    /// e.g. `http://localhost:8000/v1` (the client appends `/chat/completions`).
    pub base_url: String,
    /// The bearer token.
    pub api_key: Option<String>,
    /// The model name sent.
    pub model: String,
    /// How long one request may take.
    pub timeout: Duration,
    /// Retries after a transient failure (429, 5xx, a dropped connection).
    pub max_retries: u32,
    /// Most requests in flight at once through this client.
    pub concurrency: usize,
    /// Ask for logprobs (kept in the trajectory).
    pub logprobs: bool,
    /// Sampling the caller (a trainer) fixes for every request, whatever the harness asks: a
    /// JSON object merged into the body last (`temperature`, `top_p`, `max_tokens`, ...).
    pub sampling: Option<serde_json::Value>,
    /// Recorded with every call (the weights that sampled it).
    pub policy_version: Option<String>,
    /// A llama.cpp-style tokenize endpoint (`…/extras/tokenize`), for an endpoint that returns
    /// logprobs but no token ids: the ids are then recovered where they can be exactly (see
    /// [`tokenizer`]).
    pub tokenizer: Option<String>,
    /// The endpoint (and tokenizer) as the server's egress policy checked them: the client
    /// connects to their checked addresses only and follows no redirect. Empty on the
    /// operator's own machine.
    pub destinations: Vec<orchard_egress::Destination>,
    /// Whether errors may quote what the endpoint answered. A server's tenants get a status and
    /// a message of ours instead (the body goes to the server's log): a URL they named must not
    /// become a way to read what answers there.
    pub upstream_detail: bool,
}

impl ModelConfig {
    /// A configuration with the defaults.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ModelConfig {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            timeout: Duration::from_secs(600),
            max_retries: 6,
            concurrency: 64,
            logprobs: false,
            sampling: None,
            policy_version: None,
            tokenizer: None,
            destinations: Vec::new(),
            upstream_detail: true,
        }
    }
}

/// A client of one OpenAI-compatible endpoint: retries, a concurrency limit, token ids and logprobs where asked.
pub struct ModelClient {
    config: ModelConfig,
    http: reqwest::Client,
    slots: Arc<Semaphore>,
    /// First backoff; doubled on each retry.
    backoff: Duration,
}

impl ModelClient {
    /// A client as `config` says.
    pub fn new(config: ModelConfig) -> Result<Self, ModelError> {
        // reqwest is built without a default TLS provider in this workspace: pick ring.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = reqwest::Client::builder().timeout(config.timeout);
        for destination in &config.destinations {
            builder = destination.pin(builder);
        }
        let http = builder.build().map_err(|e| ModelError::Unavailable(format!("HTTP client: {e}")))?;
        let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
        Ok(ModelClient { config, http, slots, backoff: Duration::from_millis(500) })
    }

    /// Shortens the first retry pause (tests).
    pub fn with_backoff(mut self, first: Duration) -> Self {
        self.backoff = first;
        self
    }

    /// Its configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// One chat completion.
    pub async fn complete(
        &self,
        messages: &[Message],
        tools: &[ToolSpec],
        sampling: &Sampling,
    ) -> Result<Completion, ModelError> {
        let body = wire::request_body(&self.config, messages, tools, sampling);
        self.send(&body).await.map(|(completion, _)| completion)
    }

    /// A chat-completion body as a client wrote it (a harness outside Orchard, through the
    /// recording proxy): this endpoint's model name, token-id and sampling settings are applied,
    /// and the answer comes back parsed and as the endpoint sent it.
    pub async fn complete_raw(&self, body: serde_json::Value) -> Result<(Completion, serde_json::Value), ModelError> {
        let serde_json::Value::Object(mut body) = body else {
            return Err(ModelError::Rejected("the request body is not a JSON object".into()));
        };
        wire::apply_config(&self.config, &mut body);
        self.send(&serde_json::Value::Object(body)).await
    }

    /// A protocol error as a tenant may see it: without the endpoint's words.
    fn redacted(&self, e: ModelError) -> ModelError {
        match e {
            ModelError::Protocol(detail) if !self.config.upstream_detail => {
                tracing::warn!("model endpoint answered nonsense: {detail}");
                ModelError::Protocol("the answer is not an OpenAI chat completion".into())
            }
            other => other,
        }
    }

    async fn send(&self, body: &serde_json::Value) -> Result<(Completion, serde_json::Value), ModelError> {
        let url = format!("{}/chat/completions", self.config.base_url.trim_end_matches('/'));
        let _slot = self.slots.acquire().await.map_err(|_| ModelError::Unavailable("client closed".into()))?;
        let mut pause = self.backoff;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut request = self.http.post(&url).json(body);
            if let Some(key) = &self.config.api_key {
                request = request.bearer_auth(key);
            }
            let sent = std::time::Instant::now();
            let failure = match request.send().await {
                Ok(response) => {
                    let status = response.status();
                    let retry_after = response
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .map(Duration::from_secs_f64);
                    let text = response.text().await.unwrap_or_default();
                    if status.is_success() {
                        orchard_metrics::metrics().model_request("ok", sent.elapsed());
                        let mut completion = wire::parse_response(&text).map_err(|e| self.redacted(e))?;
                        completion.attempts = attempt;
                        completion.policy_version = self.config.policy_version.clone();
                        if let (true, None, Some(url)) =
                            (self.config.logprobs, &completion.token_ids, &self.config.tokenizer)
                            && let Err(why) = tokenizer::fill(&self.http, url, body, &mut completion).await
                        {
                            tracing::warn!("no token ids for this call: {why}");
                        }
                        let raw = serde_json::from_str(&text).unwrap_or_default();
                        return Ok((completion, raw));
                    }
                    let message = if self.config.upstream_detail {
                        format!("HTTP {status}: {}", text.chars().take(500).collect::<String>())
                    } else {
                        tracing::warn!(%status, body = %text.chars().take(2000).collect::<String>(), "model endpoint refused a request");
                        format!("HTTP {} from the model endpoint", status.as_u16())
                    };
                    if status.as_u16() == 429 || status.is_server_error() {
                        (ModelError::Unavailable(message), retry_after)
                    } else {
                        return Err(ModelError::Rejected(message));
                    }
                }
                Err(e) if e.is_timeout() => (ModelError::Timeout(self.config.timeout), None),
                Err(e) if self.config.upstream_detail => (ModelError::Unavailable(format!("{url}: {e}")), None),
                Err(e) => {
                    tracing::warn!("model endpoint {url}: {e}");
                    (ModelError::Unavailable("the model endpoint did not answer".into()), None)
                }
            };
            if attempt > self.config.max_retries {
                orchard_metrics::metrics().model_request("failed", sent.elapsed());
                return Err(failure.0);
            }
            orchard_metrics::metrics().model_request("retried", sent.elapsed());
            let wait = failure.1.unwrap_or(pause).min(Duration::from_secs(60));
            tracing::debug!(attempt, ?wait, "model request failed, retrying: {}", failure.0);
            tokio::time::sleep(wait).await;
            pause = (pause * 2).min(Duration::from_secs(30));
        }
    }
}
