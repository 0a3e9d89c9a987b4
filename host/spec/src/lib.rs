//! What an evaluation asks for, as the CLI and `POST /v1/evals` both give it: tasks, harnesses,
//! tools, grader, model endpoints, attempts, grants, image, limits.
//!
//! Invariants:
//! - A spec is stored with its job as JSON and never holds a secret's value: model API keys are
//!   named ([`ModelSpec::api_key_secret`]) and looked up when rollouts run.
//! - Every field a client may send is here, and nothing else is accepted (`deny_unknown_fields`).
//! - A model endpoint reaches a client only through [`ModelSpec::client_config`], which checks
//!   its URLs against the operator's egress policy and pins them to the addresses checked.
//!
//! A crate of its own so that what only reads specs (the recording proxy) need not depend on
//! the scheduler that runs them.

#![warn(missing_docs)]

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where a job's tasks come from: an object with exactly one of its keys.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(rename_all = "snake_case", try_from = "TaskSourceFields")]
pub enum TaskSource {
    /// A `.tar.gz` of Harbor task folders uploaded to the server (`POST /v1/datasets`), by id.
    Archive(String),
    /// A dataset the operator registered on the server, by name.
    Dataset(String),
    /// A directory on this machine (`orchard eval` only).
    Dir(String),
    /// Several directories on this machine (`orchard eval A B …` only): one evaluation spanning
    /// domains, each folder's tasks reported as its own domain.
    Dirs(Vec<String>),
}

/// What `tasks` may hold, read as a struct so that a key it does not have is named (an enum's
/// own error for two keys says only "expected value").
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSourceFields {
    archive: Option<String>,
    dataset: Option<String>,
    dir: Option<String>,
    dirs: Option<Vec<String>>,
}

impl TryFrom<TaskSourceFields> for TaskSource {
    type Error = String;

    fn try_from(f: TaskSourceFields) -> Result<TaskSource, String> {
        let given = [
            f.archive.map(TaskSource::Archive),
            f.dataset.map(TaskSource::Dataset),
            f.dir.map(TaskSource::Dir),
            f.dirs.map(TaskSource::Dirs),
        ];
        let mut given = given.into_iter().flatten();
        match (given.next(), given.next()) {
            (Some(one), None) => Ok(one),
            (None, _) => Err("expected one of `archive`, `dataset`, `dir`, `dirs`".into()),
            (Some(_), Some(_)) => Err("give one of `archive`, `dataset`, `dir`, `dirs`, not several".into()),
        }
    }
}

/// A model endpoint a job (or a proxy session) names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// OpenAI-compatible base URL.
    pub url: String,
    /// The model's name, as the endpoint knows it.
    pub name: String,
    /// The name of the tenant's secret holding the API key (`/v1/secrets`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret: Option<String>,
    /// Ask for token ids and logprobs.
    #[serde(default)]
    pub logprobs: bool,
    /// Most requests in flight.
    #[serde(default = "default_model_concurrency")]
    pub concurrency: usize,
    /// Sampling fixed for every request whatever the harness asks (a JSON object merged into
    /// the request body: `temperature`, `top_p`, `max_tokens`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<serde_json::Value>,
    /// Recorded with every model call (the trainer's weights version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy_version: Option<String>,
    /// For an endpoint that answers logprobs but no token ids (llama.cpp): its tokenize URL
    /// (`http://HOST:PORT/extras/tokenize`); ids are recovered through it where they can be exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenize_url: Option<String>,
}

fn default_model_concurrency() -> usize {
    32
}

/// One evaluation: every task × harness, `attempts` times.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvalSpec {
    /// Where the tasks come from.
    pub tasks: TaskSource,
    /// The harness plugins to run, by name.
    pub harnesses: Vec<String>,
    /// The tool adapters and browser drivers every rollout is given, by name.
    #[serde(default)]
    pub tools: Vec<String>,
    /// The grader plugin, by name.
    pub grader: String,
    /// The policy the harnesses call (none for harnesses that call no model: the oracle).
    #[serde(default)]
    pub model: Option<ModelSpec>,
    /// The model a grader may call (a judge).
    #[serde(default)]
    pub grader_model: Option<ModelSpec>,
    /// Rollouts per task and harness.
    #[serde(default = "one")]
    pub attempts: u32,
    /// Rollouts of this job at once.
    #[serde(default = "four")]
    pub concurrency: usize,
    /// What a harness may read of the task beyond its instruction (`solution` for the oracle).
    #[serde(default)]
    pub grants: Vec<String>,
    /// For tasks that name no prebuilt image.
    #[serde(default = "host")]
    pub image: String,
    /// Handed to every harness. Harnesses refuse keys they do not know, so keys only one
    /// harness of a matrix reads belong in `harness_config`.
    #[serde(default = "empty_object")]
    pub config: serde_json::Value,
    /// Each harness's own configuration, by plugin name: its keys over `config`'s for that
    /// harness only.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub harness_config: BTreeMap<String, serde_json::Value>,
    /// Each tool adapter's or browser driver's own configuration, by plugin name (what its
    /// `config.get` answers, under the task's `[metadata.tool_config.NAME]`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tool_config: BTreeMap<String, serde_json::Value>,
    /// CPU seconds per plugin instance.
    #[serde(default = "default_plugin_cpu")]
    pub plugin_cpu: f64,
    /// Memory per plugin instance (`512Mi`).
    #[serde(default = "default_plugin_memory")]
    pub plugin_memory: String,
    /// Plugin name → the sha256 of the exact version to run (else the current one when each
    /// rollout starts).
    #[serde(default)]
    pub pins: BTreeMap<String, String>,
}

fn one() -> u32 {
    1
}
fn four() -> usize {
    4
}
fn host() -> String {
    "host".into()
}
fn empty_object() -> serde_json::Value {
    serde_json::json!({})
}
fn default_plugin_cpu() -> f64 {
    120.0
}
fn default_plugin_memory() -> String {
    "512Mi".into()
}

impl ModelSpec {
    /// The client configuration for this endpoint, named `field` in errors (`model`,
    /// `grader_model`): its URLs checked against `egress` and pinned to the addresses checked;
    /// `api_key` is the secret [`ModelSpec::api_key_secret`] names, looked up by the caller.
    pub async fn client_config(
        &self,
        field: &str,
        egress: &orchard_egress::Policy,
        api_key: Option<String>,
    ) -> Result<orchard_model::ModelConfig, String> {
        let mut config = orchard_model::ModelConfig::new(&self.url, &self.name);
        config.concurrency = self.concurrency.max(1);
        config.logprobs = self.logprobs;
        config.sampling = self.sampling.clone();
        config.policy_version = self.policy_version.clone();
        config.tokenizer = self.tokenize_url.clone();
        config.upstream_detail = egress.is_open();
        let checked = egress.check(&format!("{field}.url"), &self.url).await.map_err(|e| e.to_string())?;
        config.destinations.push(checked);
        if let Some(url) = &self.tokenize_url {
            let checked = egress.check(&format!("{field}.tokenize_url"), url).await.map_err(|e| e.to_string())?;
            config.destinations.push(checked);
        }
        if let Some(name) = &self.api_key_secret {
            config.api_key = Some(api_key.ok_or_else(|| format!("{field}.api_key_secret: no secret named {name:?}"))?);
        }
        Ok(config)
    }
}

impl EvalSpec {
    /// What makes two runs the same run (a resumed `orchard eval --out DIR` must match): the
    /// whole request but how fast it runs.
    pub fn fingerprint(&self) -> String {
        use sha2::Digest;
        let mut same = self.clone();
        same.concurrency = 0;
        for m in [&mut same.model, &mut same.grader_model].into_iter().flatten() {
            m.concurrency = 0;
        }
        let json = serde_json::to_string(&same).unwrap_or_default();
        hex::encode(&sha2::Sha256::digest(json.as_bytes())[..16])
    }

    /// The first field that is not acceptable, by name.
    pub fn check(&self) -> Result<(), String> {
        if self.harnesses.is_empty() {
            return Err("harnesses: give at least one".into());
        }
        if let Some((name, _)) = self.tool_config.iter().find(|(_, v)| !v.is_object()) {
            return Err(format!("tool_config.{name}: expected a JSON object"));
        }
        if !self.config.is_object() {
            return Err("config: expected a JSON object".into());
        }
        if let Some((name, _)) = self.harness_config.iter().find(|(_, v)| !v.is_object()) {
            return Err(format!("harness_config.{name}: expected a JSON object"));
        }
        if self.grader.trim().is_empty() {
            return Err("grader: missing".into());
        }
        if self.attempts == 0 || self.attempts > 1000 {
            return Err("attempts: between 1 and 1000".into());
        }
        if self.concurrency == 0 || self.concurrency > 4096 {
            return Err("concurrency: between 1 and 4096".into());
        }
        if !(self.plugin_cpu.is_finite() && self.plugin_cpu > 0.0) {
            return Err("plugin_cpu: a positive number of seconds".into());
        }
        for m in [&self.model, &self.grader_model].into_iter().flatten() {
            if !(m.url.starts_with("http://") || m.url.starts_with("https://")) {
                return Err(format!("model.url: {:?} is not an http(s) URL", m.url));
            }
            if m.sampling.as_ref().is_some_and(|s| !s.is_object()) {
                return Err("model.sampling: expected a JSON object".into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EvalSpec {
        serde_json::from_value(serde_json::json!({
            "tasks": {"dir": "/t"}, "harnesses": ["oracle"], "tools": ["shell"], "grader": "script"
        }))
        .unwrap()
    }

    #[test]
    fn defaults_and_fingerprints() {
        let s = spec();
        assert_eq!((s.attempts, s.concurrency, s.image.as_str()), (1, 4, "host"));
        let mut faster = s.clone();
        faster.concurrency = 64;
        assert_eq!(s.fingerprint(), faster.fingerprint(), "concurrency is not part of what a run is");
        let mut other = s.clone();
        other.attempts = 2;
        assert_ne!(s.fingerprint(), other.fingerprint());
        assert!(spec().check().is_ok());
        let mut bad = spec();
        bad.harnesses.clear();
        assert!(bad.check().unwrap_err().starts_with("harnesses"));
    }
}
