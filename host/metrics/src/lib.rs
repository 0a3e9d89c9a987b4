//! The process's Prometheus metrics, in one registry every layer records into (the model client,
//! the runner, the HTTP server) and `/metrics` encodes. Labels never carry a tenant or a job id:
//! their number stays bounded however many jobs run.

#![warn(missing_docs)]

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The labels of `orchard_rollouts`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RolloutLabels {
    /// graded | unknown | error
    pub status: String,
    /// The harness and grader by name (versions come and go; names are bounded).
    pub harness: String,
    /// The grader, by name.
    pub grader: String,
}

/// The label of the per-plugin histograms.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabel {
    /// The plugin, by name.
    pub plugin: String,
}

/// The label of `orchard_model_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabel {
    /// ok | retried | failed
    pub outcome: String,
}

/// The labels of `orchard_http_responses`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The request's method.
    pub method: String,
    /// 2xx, 4xx, 5xx ...
    pub code: String,
}

/// This process's metrics, served at `/metrics` in Prometheus's text format (prefix `orchard_`;
/// counters' samples end in `_total`).
pub struct Metrics {
    registry: Registry,
    /// `orchard_rollouts`: rollouts finished, by status, harness and grader.
    pub rollouts: Family<RolloutLabels, Counter>,
    /// `orchard_rollout_duration_seconds`: a rollout's wall time, by harness.
    pub rollout_seconds: Family<PluginLabel, Histogram>,
    /// `orchard_grade_duration_seconds`: a grader's time, by grader.
    pub grade_seconds: Family<PluginLabel, Histogram>,
    /// `orchard_rollouts_running`: rollouts running in this process.
    pub rollouts_running: Gauge,
    /// `orchard_sandboxes_live`: sandboxes this process's backend holds.
    pub sandboxes_live: Gauge,
    /// `orchard_queue_depth`: rollouts queued in the database (every replica's).
    pub queue_depth: Gauge,
    /// `orchard_model_request_duration_seconds`: model requests, by outcome.
    pub model_request_seconds: Family<OutcomeLabel, Histogram>,
    /// `orchard_model_retries`: model requests retried.
    pub model_retries: Counter,
    /// `orchard_http_responses`: the API's and UI's answers, by method and status class.
    pub http_responses: Family<HttpLabels, Counter>,
}

fn seconds_histogram() -> Histogram {
    // 10 ms to ~45 min.
    Histogram::new(exponential_buckets(0.01, 2.0, 18))
}

static METRICS: LazyLock<Metrics> = LazyLock::new(|| {
    let mut registry = Registry::with_prefix("orchard");
    let rollouts = Family::<RolloutLabels, Counter>::default();
    registry.register("rollouts", "Rollouts finished by this process, by status, harness and grader", rollouts.clone());
    let rollout_seconds =
        Family::<PluginLabel, Histogram>::new_with_constructor(seconds_histogram as fn() -> Histogram);
    registry.register(
        "rollout_duration_seconds",
        "Wall time of a rollout (sandbox, agent and grade), by harness",
        rollout_seconds.clone(),
    );
    let grade_seconds = Family::<PluginLabel, Histogram>::new_with_constructor(seconds_histogram as fn() -> Histogram);
    registry.register("grade_duration_seconds", "Time a grader took, by grader", grade_seconds.clone());
    let rollouts_running = Gauge::default();
    registry.register("rollouts_running", "Rollouts running in this process", rollouts_running.clone());
    let sandboxes_live = Gauge::default();
    registry.register("sandboxes_live", "Sandboxes this process's backend holds", sandboxes_live.clone());
    let queue_depth = Gauge::default();
    registry.register("queue_depth", "Rollouts queued in the database (every replica's)", queue_depth.clone());
    let model_request_seconds =
        Family::<OutcomeLabel, Histogram>::new_with_constructor(seconds_histogram as fn() -> Histogram);
    registry.register(
        "model_request_duration_seconds",
        "Model endpoint requests, by outcome",
        model_request_seconds.clone(),
    );
    let model_retries = Counter::default();
    registry.register("model_retries", "Model requests retried (429, 5xx, connection errors)", model_retries.clone());
    let http_responses = Family::<HttpLabels, Counter>::default();
    registry.register(
        "http_responses",
        "HTTP answers of the API and UI, by method and status class",
        http_responses.clone(),
    );
    Metrics {
        registry,
        rollouts,
        rollout_seconds,
        grade_seconds,
        rollouts_running,
        sandboxes_live,
        queue_depth,
        model_request_seconds,
        model_retries,
        http_responses,
    }
});

/// The process's metrics.
pub fn metrics() -> &'static Metrics {
    &METRICS
}

/// A plugin id (`name@version`) by name.
fn name(id: &str) -> String {
    id.split('@').next().unwrap_or(id).to_string()
}

impl Metrics {
    /// A finished rollout.
    pub fn rollout_finished(&self, status: &str, harness: &str, grader: &str, total: Duration, grade: Duration) {
        let labels = RolloutLabels { status: status.to_string(), harness: name(harness), grader: name(grader) };
        self.rollouts.get_or_create(&labels).inc();
        self.rollout_seconds.get_or_create(&PluginLabel { plugin: name(harness) }).observe(total.as_secs_f64());
        if !grade.is_zero() {
            self.grade_seconds.get_or_create(&PluginLabel { plugin: name(grader) }).observe(grade.as_secs_f64());
        }
    }

    /// One request to a model endpoint (one attempt).
    pub fn model_request(&self, outcome: &str, took: Duration) {
        self.model_request_seconds
            .get_or_create(&OutcomeLabel { outcome: outcome.to_string() })
            .observe(took.as_secs_f64());
        if outcome == "retried" {
            self.model_retries.inc();
        }
    }

    /// Counts one HTTP answer by its method and status class (`2xx`, `4xx`, …).
    pub fn http_response(&self, method: &str, status: u16) {
        let labels = HttpLabels { method: method.to_string(), code: format!("{}xx", status / 100) };
        self.http_responses.get_or_create(&labels).inc();
    }

    /// The OpenMetrics text of everything.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// The content type of [`Metrics::encode`].
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_show_up_in_the_text() {
        let m = metrics();
        m.rollout_finished(
            "graded",
            "oracle@0.1.0",
            "script@0.1.0",
            Duration::from_millis(300),
            Duration::from_millis(40),
        );
        m.model_request("retried", Duration::from_millis(5));
        let text = m.encode();
        assert!(
            text.contains(r#"orchard_rollouts_total{status="graded",harness="oracle",grader="script"} 1"#),
            "{text}"
        );
        assert!(text.contains("orchard_rollout_duration_seconds_count{plugin=\"oracle\"} 1"), "{text}");
        assert!(text.contains("orchard_model_retries_total 1"), "{text}");
        assert!(text.ends_with("# EOF\n"));
    }
}
