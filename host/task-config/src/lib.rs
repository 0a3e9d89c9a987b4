//! `task.toml`, typed: Harbor's task schema (up to `schema_version = "1.4"`, as Harbor 0.26's
//! `TaskConfig` accepts it) plus Orchard's own keys.
//!
//! Invariants:
//! - every key is known: a key in the wrong place (`services` under `[agent]`) or misspelt is
//!   refused with its path (`agent.services: unknown field …`), never dropped — only
//!   `[metadata]` is free-form (it is the plugins' and graders');
//! - what parses is a faithful reading of the file; whether Orchard can *honour* it is a second,
//!   separate question answered by [`TaskConfig::unsupported`], which names each field a local or
//!   Kubernetes sandbox cannot give (GPUs, Windows, compose services, …) so that the loader
//!   refuses the task rather than run something else than it asks for;
//! - defaults are Harbor's where Harbor has one, except the network: a task that says nothing
//!   gets Orchard's closed network (Harbor's default is public), one that says
//!   `network_mode = "public"` gets it open.

mod support;

use std::collections::BTreeMap;

use serde::Deserialize;

pub use support::{MAX_MCP_SERVERS, MAX_STEPS, Unsupported};

/// The schema versions this reader knows (Harbor's `schema_version`).
pub const SCHEMA_VERSIONS: &[&str] = &["1.0", "1.1", "1.2", "1.3", "1.4"];

/// Why a `task.toml` could not be read.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    /// Not TOML; the message has the line and column.
    #[error("{0}")]
    Syntax(String),
    /// TOML, but a key is unknown, misplaced or of the wrong type; the message names its path.
    #[error("{0}")]
    Field(String),
}

/// A whole `task.toml`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TaskConfig {
    /// Harbor's schema version (`"1.4"`); one of [`SCHEMA_VERSIONS`].
    pub schema_version: Option<String>,
    /// The older Harbor files' version key (`"1.0"`), kept as written.
    pub version: Option<String>,
    /// `[task]`: package information.
    pub task: Option<PackageInfo>,
    /// `[metadata]`: free-form, handed to plugins and graders.
    #[serde(default)]
    pub metadata: toml::Table,
    /// `[agent]`.
    #[serde(default)]
    pub agent: AgentConfig,
    /// `[verifier]`.
    #[serde(default)]
    pub verifier: VerifierConfig,
    /// `[environment]`.
    #[serde(default)]
    pub environment: EnvironmentConfig,
    /// `[solution]`.
    #[serde(default)]
    pub solution: SolutionConfig,
    /// Where the task came from (a dataset's name).
    pub source: Option<String>,
    /// How a multi-step task's reward comes from its steps' (default `mean`).
    pub multi_step_reward_strategy: Option<RewardStrategy>,
    /// `[[steps]]`: a multi-step task's steps, in order.
    pub steps: Option<Vec<StepConfig>>,
    /// Paths collected after verification (and carried into a separate verifier).
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

/// `[task]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PackageInfo {
    /// `org/name`.
    pub name: String,
    /// A version string.
    pub version: Option<String>,
    /// What the task is.
    #[serde(default)]
    pub description: String,
    /// Who wrote it.
    #[serde(default)]
    pub authors: Vec<Author>,
    /// Search keywords.
    #[serde(default)]
    pub keywords: Vec<String>,
}

/// One author.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Author {
    /// Their name.
    pub name: String,
    /// Their email address.
    pub email: Option<String>,
}

/// How much network a phase may use.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
pub enum NetworkMode {
    /// Loopback only.
    #[serde(rename = "no-network")]
    NoNetwork,
    /// The internet (never the host).
    #[serde(rename = "public")]
    Public,
    /// Only `allowed_hosts`.
    #[serde(rename = "allowlist")]
    Allowlist,
}

/// `[agent]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Wall-clock seconds for the harness (Orchard's default: 600).
    pub timeout_sec: Option<f64>,
    /// The user the agent runs as.
    pub user: Option<User>,
    /// The agent phase's own network mode.
    pub network_mode: Option<NetworkMode>,
    /// The agent phase's own allowlist.
    pub allowed_hosts: Option<Vec<String>>,
    /// Orchard: the tool adapters this task needs, instead of the run's.
    pub tools: Option<Vec<String>>,
}

/// A user, by name or uid.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum User {
    /// A user name.
    Name(String),
    /// A uid.
    Id(i64),
}

impl User {
    /// Root, by name or uid.
    pub fn is_root(&self) -> bool {
        matches!(self, User::Name(n) if n == "root" || n == "0") || matches!(self, User::Id(0))
    }
}

/// Where the verifier runs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EnvironmentMode {
    /// In the agent's sandbox.
    Shared,
    /// In a fresh sandbox with only what the task declares carried over.
    Separate,
}

/// `[verifier]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct VerifierConfig {
    /// Seconds for grading (default 600).
    pub timeout_sec: Option<f64>,
    /// Environment variables of the verifier's commands.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The user the verifier runs as.
    pub user: Option<User>,
    /// Shared or separate (Orchard also reads `in-place`).
    pub environment_mode: Option<String>,
    /// A separate verifier's own environment.
    pub environment: Option<Box<EnvironmentConfig>>,
    /// Commands run in compose services before verification.
    #[serde(default)]
    pub collect: Vec<CollectConfig>,
    /// The verifier phase's own network mode.
    pub network_mode: Option<NetworkMode>,
    /// The verifier phase's own allowlist.
    pub allowed_hosts: Option<Vec<String>>,
    /// Orchard: the grader this task needs, instead of the run's.
    pub grader: Option<String>,
    /// Orchard: paths carried into a separate verifier besides the repository's diff.
    #[serde(default)]
    pub artifacts: Vec<String>,
    /// Orchard: the repository whose diff a separate verifier carries.
    pub repo_dir: Option<String>,
}

/// `[[verifier.collect]]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CollectConfig {
    /// The shell command.
    pub command: String,
    /// The compose service it runs in.
    pub service: Option<String>,
    /// Its time limit.
    pub timeout_sec: Option<f64>,
    /// The user it runs as.
    pub user: Option<User>,
}

/// The operating system a task's container runs.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum TaskOs {
    /// Linux.
    Linux,
    /// Windows.
    Windows,
}

/// `[environment]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentConfig {
    /// The sandbox's network.
    pub network_mode: Option<NetworkMode>,
    /// Hosts, IPs and CIDRs reachable under `allowlist`.
    pub allowed_hosts: Option<Vec<String>>,
    /// Seconds an image build may take (Orchard builds none: kept for Harbor).
    pub build_timeout_sec: Option<f64>,
    /// A prebuilt image.
    pub docker_image: Option<String>,
    /// Orchard's older name for `docker_image`.
    pub image: Option<String>,
    /// `linux` (the only one Orchard runs) or `windows`.
    pub os: Option<TaskOs>,
    /// CPU, in cores.
    pub cpus: Option<f64>,
    /// Memory, in MiB.
    pub memory_mb: Option<u64>,
    /// Orchard: memory as a size (`"2G"`).
    pub memory: Option<String>,
    /// Writable disk, in MiB.
    pub storage_mb: Option<u64>,
    /// GPUs.
    pub gpus: Option<u32>,
    /// Acceptable GPU types.
    pub gpu_types: Option<Vec<String>>,
    /// A TPU.
    pub tpu: Option<toml::Table>,
    /// MCP servers offered to the agent.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    /// Environment variables.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A directory of agent skills.
    pub skills_dir: Option<String>,
    /// Waited for before the agent starts.
    pub healthcheck: Option<Healthcheck>,
    /// The working directory.
    pub workdir: Option<String>,
    /// Harbor's older switch for `network_mode = "public"`.
    pub allow_internet: Option<bool>,
    /// Orchard: an X desktop started in the sandbox before the agent (`orchard-agent desktop`).
    pub desktop: Option<DesktopConfig>,
}

/// `[environment.desktop]`: the X desktop the task's apps run on.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DesktopConfig {
    /// Pixels, 64 to 8192 (1280 if not said).
    #[serde(default = "DesktopConfig::default_width")]
    pub width: u32,
    /// Pixels, 64 to 8192 (800 if not said).
    #[serde(default = "DesktopConfig::default_height")]
    pub height: u32,
    /// Bits per pixel, 16 or 24 (24 if not said).
    #[serde(default = "DesktopConfig::default_depth")]
    pub depth: u32,
    /// The desktop service's port on the sandbox's loopback (5000, OSWorld's, if not said).
    #[serde(default = "DesktopConfig::default_port")]
    pub port: u16,
    /// The window manager program, or `none` (`openbox` if not said).
    pub window_manager: Option<String>,
    /// The agent starts once a window whose title contains this is open (the app the task's
    /// command starts), waited for up to 60 s.
    pub wait_for_window: Option<String>,
}

impl DesktopConfig {
    fn default_width() -> u32 {
        1280
    }
    fn default_height() -> u32 {
        800
    }
    fn default_depth() -> u32 {
        24
    }
    fn default_port() -> u16 {
        5000
    }

    /// Refuses sizes Xvfb cannot make, naming the field.
    pub fn check(&self) -> Result<(), String> {
        for (name, v) in [("width", self.width), ("height", self.height)] {
            if !(64..=8192).contains(&v) {
                return Err(format!("[environment.desktop] {name} = {v}: expected 64 to 8192"));
            }
        }
        if ![16, 24].contains(&self.depth) {
            return Err(format!("[environment.desktop] depth = {}: expected 16 or 24", self.depth));
        }
        if self.port == 0 {
            return Err("[environment.desktop] port = 0: expected a port number".into());
        }
        if let Some(wm) = &self.window_manager
            && (wm.is_empty() || wm.contains('/') && !wm.starts_with('/'))
        {
            return Err(format!("[environment.desktop] window_manager = {wm:?}: a program name or absolute path"));
        }
        Ok(())
    }
}

/// `[[environment.mcp_servers]]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    /// Its name.
    pub name: String,
    /// `stdio`, `sse` or `streamable-http` (default `sse`).
    pub transport: Option<String>,
    /// Where an HTTP server is.
    pub url: Option<String>,
    /// A stdio server's command.
    pub command: Option<String>,
    /// A stdio server's arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// HTTP headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `[environment.healthcheck]`: Docker's HEALTHCHECK, as a shell command.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Healthcheck {
    /// Exit 0 means healthy.
    pub command: String,
    /// Seconds between checks after the start period (default 5).
    #[serde(default = "five")]
    pub interval_sec: f64,
    /// Seconds one check may take (default 30).
    #[serde(default = "thirty")]
    pub timeout_sec: f64,
    /// Seconds during which failures do not count (default 0).
    #[serde(default)]
    pub start_period_sec: f64,
    /// Seconds between checks in the start period (default 5).
    #[serde(default = "five")]
    pub start_interval_sec: f64,
    /// Failures after the start period before giving up (default 3).
    #[serde(default = "three")]
    pub retries: u32,
}

fn five() -> f64 {
    5.0
}
fn thirty() -> f64 {
    30.0
}
fn three() -> u32 {
    3
}

/// `[solution]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SolutionConfig {
    /// Environment variables of the reference solution.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

/// How a multi-step task's reward comes from its steps'.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum RewardStrategy {
    /// The mean of the steps' rewards.
    Mean,
    /// The last step's.
    Final,
}

/// `[[steps]]`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StepConfig {
    /// Its directory under `steps/`.
    pub name: String,
    /// The step's agent settings.
    #[serde(default)]
    pub agent: AgentConfig,
    /// The step's verifier settings.
    #[serde(default)]
    pub verifier: VerifierConfig,
    /// Stop the remaining steps when this step's reward is below.
    pub min_reward: Option<MinReward>,
    /// Waited for before the step's agent starts.
    pub healthcheck: Option<Healthcheck>,
    /// Paths collected after the step's verification.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
}

/// A step's gate: on `reward`, or on each named reward.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum MinReward {
    /// On `reward`.
    Reward(f64),
    /// On each key.
    Keys(BTreeMap<String, f64>),
}

/// An artifact: a path, or a path with options.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Artifact {
    /// A path in the sandbox.
    Path(String),
    /// A path with options.
    Detailed(ArtifactConfig),
}

/// `{ source = …, destination = …, exclude = […], service = … }`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArtifactConfig {
    /// The path in the sandbox.
    pub source: String,
    /// Where it lands among the results.
    pub destination: Option<String>,
    /// Patterns left out of a directory.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The compose service it is collected from.
    pub service: Option<String>,
}

impl Artifact {
    /// The path in the sandbox.
    pub fn source(&self) -> &str {
        match self {
            Artifact::Path(p) => p,
            Artifact::Detailed(a) => &a.source,
        }
    }
}

impl TaskConfig {
    /// Reads a `task.toml`. Errors name the line (syntax) or the key's path (anything else).
    pub fn parse(text: &str) -> Result<TaskConfig, ConfigError> {
        Self::parse_with_table(text).map(|(config, _)| config)
    }

    /// [`TaskConfig::parse`], and the file as a TOML table too (what plugins get as the task's
    /// metadata), read once.
    pub fn parse_with_table(text: &str) -> Result<(TaskConfig, toml::Table), ConfigError> {
        let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Syntax(syntax_error(text, &e)))?;
        let config: TaskConfig = serde_path_to_error::deserialize(toml::Value::Table(table.clone())).map_err(|e| {
            let path = e.path().to_string();
            // toml's own message ends with where it was (`\nin `agent``): the path says that.
            let inner = e.inner().to_string();
            let message = inner.split("\nin `").next().unwrap_or(&inner).trim_end().to_string();
            ConfigError::Field(if path == "." { message } else { format!("{path}: {message}") })
        })?;
        if let Some(v) = &config.schema_version
            && !SCHEMA_VERSIONS.contains(&v.as_str())
        {
            return Err(ConfigError::Field(format!(
                "schema_version: {v:?} is not one this reader knows ({})",
                SCHEMA_VERSIONS.join(", ")
            )));
        }
        Ok((config, table))
    }

    /// The image the task names (`docker_image`, or Orchard's `image`).
    pub fn image(&self) -> Option<&str> {
        self.environment.docker_image.as_deref().or(self.environment.image.as_deref()).filter(|s| !s.is_empty())
    }
}

fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map(|i| i + 1).unwrap_or(0) + 1;
            format!("line {line}, column {column}: {}", e.message())
        }
        None => e.message().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn harbors_template_reads_as_written() {
        let c = TaskConfig::parse(
            "schema_version = \"1.4\"\nartifacts = []\n[task]\nname = \"orchard/hello\"\nversion = \"1.0.0\"\n\
             description = \"\"\nauthors = []\nkeywords = []\n[metadata]\n[verifier]\ntimeout_sec = 600.0\n\
             environment_mode = \"shared\"\ncollect = []\n[verifier.env]\n[agent]\ntimeout_sec = 600.0\n\
             [environment]\nnetwork_mode = \"public\"\nbuild_timeout_sec = 600.0\nos = \"linux\"\n\
             mcp_servers = []\n[environment.env]\n[solution.env]\n",
        )
        .unwrap();
        assert_eq!(c.task.unwrap().name, "orchard/hello");
        assert_eq!(c.environment.network_mode, Some(NetworkMode::Public));
        assert_eq!(c.agent.timeout_sec, Some(600.0));
    }

    #[test]
    fn a_misplaced_key_is_refused_by_its_path() {
        let e = TaskConfig::parse("[agent]\nservices = [\"crm\"]\n").unwrap_err();
        assert!(e.to_string().starts_with("agent.services: unknown field `services`"), "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
        let e = TaskConfig::parse("[environment]\ncpu = 2\n").unwrap_err();
        assert!(e.to_string().contains("environment.cpu: unknown field `cpu`"), "{e}");
        let e = TaskConfig::parse("[environment.healthcheck]\ncommand = \"true\"\nretry = 3\n").unwrap_err();
        assert!(e.to_string().contains("environment.healthcheck.retry: unknown field `retry`"), "{e}");
        // [metadata] is free-form.
        TaskConfig::parse("[metadata]\nanything = { goes = 1 }\n").unwrap();
    }

    #[test]
    fn wrong_types_and_versions_name_the_key() {
        let e = TaskConfig::parse("[agent]\ntimeout_sec = \"soon\"\n").unwrap_err();
        assert!(e.to_string().starts_with("agent.timeout_sec:"), "{e}");
        let e = TaskConfig::parse("[environment]\nnetwork_mode = \"open\"\n").unwrap_err();
        assert!(e.to_string().contains("environment.network_mode"), "{e}");
        let e = TaskConfig::parse("schema_version = \"2.0\"\n").unwrap_err();
        assert!(e.to_string().contains("schema_version"), "{e}");
        let e = TaskConfig::parse("[agent\n").unwrap_err();
        assert!(matches!(e, ConfigError::Syntax(m) if m.starts_with("line 1")));
    }

    #[test]
    fn steps_and_artifacts_in_both_forms() {
        let c = TaskConfig::parse(
            "multi_step_reward_strategy = \"final\"\nartifacts = [\"/app/out\", { source = \"/logs/x\", exclude = [\"*.tmp\"] }]\n\
             [[steps]]\nname = \"one\"\nmin_reward = 1.0\n[[steps]]\nname = \"two\"\nmin_reward = { reward = 0.5 }\n",
        )
        .unwrap();
        let steps = c.steps.unwrap();
        assert_eq!(steps[0].min_reward, Some(MinReward::Reward(1.0)));
        assert!(matches!(&steps[1].min_reward, Some(MinReward::Keys(k)) if k["reward"] == 0.5));
        assert_eq!(c.artifacts[1].source(), "/logs/x");
    }
}
