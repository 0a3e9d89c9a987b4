//! Plugin manifests: who a plugin is and what it asks for.
//!
//! A manifest is TOML, beside the component (`shell.wasm` + `shell.toml`) or inside it, in a
//! custom section named `orchard-manifest`:
//!
//! ```toml
//! name = "shell"
//! version = "0.1.0"
//! kind = "tool-adapter"        # harness | tool-adapter | browser-driver | desktop-driver | grader
//! capabilities = ["sandbox", "log"]
//! description = "..."
//! ```
//!
//! A capability is granted only when the manifest asks for it *and* the operator allows it; a
//! call into an import that was not granted is refused with `denied`.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub const MANIFEST_SECTION: &str = "orchard-manifest";

/// A version of the `orchard:plugin` contract (`wit/<version>/`). The host speaks all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Contract {
    /// Frozen.
    #[serde(rename = "0.1.0")]
    V0_1,
    /// Frozen: most shipped plugins build against it.
    #[serde(rename = "0.2.0")]
    V0_2,
    /// The current version: a harness may import `sandbox` (the `program` harness).
    #[serde(rename = "0.3.0")]
    V0_3,
}

impl Contract {
    /// Every contract version this host loads.
    pub const ALL: [Contract; 3] = [Contract::V0_1, Contract::V0_2, Contract::V0_3];
    /// The newest.
    pub const CURRENT: Contract = Contract::V0_3;

    /// The version as written (`0.2.0`).
    pub fn as_str(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
            Contract::V0_3 => "0.3.0",
        }
    }

    /// The version a component speaks, from its `orchard:plugin` exports; `Err` names what is
    /// wrong (none, an unknown version, or several).
    pub fn of_exports(exports: &[String]) -> Result<Contract, String> {
        let mut found: Vec<&str> = exports
            .iter()
            .filter_map(|e| e.strip_prefix("orchard:plugin/"))
            .filter_map(|e| e.split_once('@').map(|(_, v)| v))
            .collect();
        found.sort_unstable();
        found.dedup();
        let known = Contract::ALL.map(|c| c.as_str());
        // "0.1.0, 0.2.0 and 0.3.0"
        let (last, rest) = known.split_last().expect("at least one version");
        let known = if rest.is_empty() { last.to_string() } else { format!("{} and {last}", rest.join(", ")) };
        match found.as_slice() {
            [] => Err(format!("it exports no orchard:plugin interface (this host speaks {known})")),
            [one] => Contract::ALL
                .into_iter()
                .find(|c| c.as_str() == *one)
                .ok_or_else(|| format!("it speaks orchard:plugin@{one}; this host speaks {known}")),
            many => Err(format!("it exports orchard:plugin interfaces of several versions ({})", many.join(", "))),
        }
    }
}

impl std::fmt::Display for Contract {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
/// What a plugin is.
pub enum PluginKind {
    /// Drives a rollout: calls the model and the tools.
    Harness,
    /// Offers tools to harnesses.
    ToolAdapter,
    /// Drives a browser for tools.
    BrowserDriver,
    /// Drives the rollout's X desktop for tools (contract 0.3.0 on).
    DesktopDriver,
    /// Grades a rollout.
    Grader,
}

impl PluginKind {
    /// Every kind.
    pub const ALL: [PluginKind; 5] = [
        PluginKind::Harness,
        PluginKind::ToolAdapter,
        PluginKind::BrowserDriver,
        PluginKind::DesktopDriver,
        PluginKind::Grader,
    ];

    /// Whether the world exports `tools` (a tool adapter, a browser driver or a desktop driver):
    /// all three serve a run's tools.
    pub fn serves_tools(self) -> bool {
        matches!(self, PluginKind::ToolAdapter | PluginKind::BrowserDriver | PluginKind::DesktopDriver)
    }

    /// The WIT world a plugin of this kind implements.
    pub fn world(self) -> &'static str {
        match self {
            PluginKind::Harness => "harness",
            PluginKind::ToolAdapter => "tool-adapter",
            PluginKind::BrowserDriver => "browser-driver",
            PluginKind::DesktopDriver => "desktop-driver",
            PluginKind::Grader => "grader",
        }
    }

    /// The world's fully qualified name in contract version `c`.
    pub fn world_id(self, c: Contract) -> String {
        format!("orchard:plugin/{}@{c}", self.world())
    }

    /// The interface the world exports in contract version `c`.
    pub fn export(self, c: Contract) -> String {
        let iface = match self {
            PluginKind::Harness => "agent",
            PluginKind::ToolAdapter | PluginKind::BrowserDriver | PluginKind::DesktopDriver => "tools",
            PluginKind::Grader => "grading",
        };
        format!("orchard:plugin/{iface}@{c}")
    }

    /// The capabilities (imports) the world offers in its newest version (a harness's `sandbox`
    /// only from 0.3.0 on: see [`PluginKind::importable`]).
    pub fn offers(self) -> &'static [Capability] {
        match self {
            PluginKind::Harness => {
                &[Capability::Model, Capability::Tools, Capability::Sandbox, Capability::Log, Capability::Solution]
            }
            PluginKind::ToolAdapter => &[Capability::Sandbox, Capability::Log],
            PluginKind::BrowserDriver => &[Capability::Browser, Capability::Sandbox, Capability::Log],
            PluginKind::DesktopDriver => &[Capability::Desktop, Capability::Sandbox, Capability::Log],
            PluginKind::Grader => &[Capability::Sandbox, Capability::Model, Capability::Log],
        }
    }

    /// The `orchard:plugin` interfaces a component of this world may import in version `c`.
    pub fn importable(self, c: Contract) -> Vec<String> {
        let mut names: Vec<&str> = vec!["types"];
        names.extend(
            self.offers()
                .iter()
                // 0.3.0: a harness may import the sandbox (a program harness).
                .filter(|cap| !(self == PluginKind::Harness && **cap == Capability::Sandbox && c < Contract::V0_3))
                .filter_map(|c| c.interface()),
        );
        // 0.2.0 on: tool adapters and browser drivers read their own configuration (no
        // capability: it is theirs).
        if c >= Contract::V0_2 && self.serves_tools() {
            names.push("config");
        }
        names.into_iter().map(|n| format!("orchard:plugin/{n}@{c}")).collect()
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.world())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
/// What a plugin may import or be given.
pub enum Capability {
    /// The run's sandbox (`sandbox` import).
    Sandbox,
    /// The run's model endpoint (`model` import).
    Model,
    /// The run's tools (`tools` import, harnesses).
    Tools,
    /// A browser (`browser` import).
    Browser,
    /// The rollout's X desktop (`desktop` import, 0.3.0 on).
    Desktop,
    /// Structured events (`log` import).
    Log,
    /// The task's reference solution is placed at `/solution` before the harness runs
    /// (the oracle harness). Never granted unless the operator says so.
    Solution,
}

impl Capability {
    fn interface(self) -> Option<&'static str> {
        match self {
            Capability::Sandbox => Some("sandbox"),
            Capability::Model => Some("model"),
            Capability::Tools => Some("tools"),
            Capability::Browser => Some("browser"),
            Capability::Desktop => Some("desktop"),
            Capability::Log => Some("log"),
            Capability::Solution => None,
        }
    }

    /// Reads a capability's name (`sandbox`, `model`, ...).
    pub fn parse(s: &str) -> Result<Capability, String> {
        match s {
            "sandbox" => Ok(Capability::Sandbox),
            "model" => Ok(Capability::Model),
            "tools" => Ok(Capability::Tools),
            "browser" => Ok(Capability::Browser),
            "desktop" => Ok(Capability::Desktop),
            "log" => Ok(Capability::Log),
            "solution" => Ok(Capability::Solution),
            other => {
                Err(format!("unknown capability {other:?} (sandbox, model, tools, browser, desktop, log, solution)"))
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
/// A plugin's manifest (`orchard.toml`).
pub struct Manifest {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it is.
    pub kind: PluginKind,
    /// The world's fully qualified name; defaults to the kind's world in this contract version.
    #[serde(default)]
    pub world: Option<String>,
    #[serde(default)]
    /// What it asks for.
    pub capabilities: BTreeSet<Capability>,
    #[serde(default)]
    /// What it does, in a sentence.
    pub description: String,
    /// For a port of a real program: the release it follows (`mini-swe-agent 2.4.6`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<String>,
    /// Graders: where they grade unless the task says otherwise, and what they leave out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verifier: Option<GraderDefaults>,
}

/// A grader's defaults for its verifier environment (`[verifier]` in its manifest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraderDefaults {
    /// `separate` (a clean sandbox carrying only what the task declares) or `in-place`; a task's
    /// `[verifier] environment_mode` overrides it.
    #[serde(default)]
    pub environment: Option<String>,
    /// Drop changes to tests and test machinery from a carried repository change (unless the
    /// task's gold patch touches them).
    #[serde(default)]
    pub drop_test_changes: bool,
}

impl Manifest {
    /// Reads a manifest; errors name `origin` and the field.
    pub fn parse(text: &str, origin: &str) -> Result<Manifest, String> {
        let m: Manifest = toml::from_str(text).map_err(|e| format!("manifest {origin}: {e}"))?;
        m.validate().map_err(|e| format!("manifest {origin}: {e}"))?;
        Ok(m)
    }

    fn validate(&self) -> Result<(), String> {
        let ok = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
        if self.name.is_empty() || self.name.len() > 64 || !self.name.chars().all(ok) {
            return Err(format!("name {:?}: use 1-64 characters of a-z, 0-9, '-' and '_'", self.name));
        }
        if self.version.is_empty() {
            return Err("version: must not be empty".into());
        }
        if let Some(world) = &self.world {
            let short = self.kind.world();
            if world != short && !Contract::ALL.iter().any(|c| *world == self.kind.world_id(*c)) {
                return Err(format!(
                    "world {world:?} does not match kind {short} (expected {short} or {})",
                    self.kind.world_id(Contract::CURRENT)
                ));
            }
        }
        if let Some(v) = &self.verifier {
            if self.kind != PluginKind::Grader {
                return Err(format!("verifier: only a grader has verifier settings, not a {}", self.kind));
            }
            if let Some(env) = &v.environment
                && !matches!(env.as_str(), "separate" | "in-place")
            {
                return Err(format!("verifier.environment {env:?}: use \"separate\" or \"in-place\""));
            }
        }
        for c in &self.capabilities {
            if !self.kind.offers().contains(c) {
                return Err(format!("capability {c:?}: the {} world does not offer it", self.kind));
            }
        }
        Ok(())
    }

    /// The manifest beside `component` (`x.wasm` → `x.toml`), if there is one.
    pub fn beside(component: &Path) -> Result<Option<Manifest>, String> {
        let path = component.with_extension("toml");
        match std::fs::read_to_string(&path) {
            Ok(text) => Manifest::parse(&text, &path.display().to_string()).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    /// The manifest inside a component's `orchard-manifest` custom section (at any depth: a
    /// core module's section is kept inside the component).
    pub fn embedded(bytes: &[u8]) -> Result<Option<Manifest>, String> {
        use wasmtime::wasmparser::{Parser, Payload};
        for payload in Parser::new(0).parse_all(bytes) {
            let Ok(payload) = payload else { break };
            if let Payload::CustomSection(section) = payload
                && section.name() == MANIFEST_SECTION
            {
                let text =
                    std::str::from_utf8(section.data()).map_err(|_| "embedded manifest is not UTF-8".to_string())?;
                return Manifest::parse(text, "(embedded)").map(Some);
            }
        }
        Ok(None)
    }

    /// `name@version`.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_parse_and_are_checked_against_their_world() {
        let m = Manifest::parse(
            "name = \"shell\"\nversion = \"0.1.0\"\nkind = \"tool-adapter\"\ncapabilities = [\"sandbox\"]\n",
            "t",
        )
        .unwrap();
        assert_eq!(m.kind, PluginKind::ToolAdapter);
        let err = Manifest::parse(
            "name = \"x\"\nversion = \"1\"\nkind = \"tool-adapter\"\ncapabilities = [\"model\"]\n",
            "t",
        )
        .unwrap_err();
        assert!(err.contains("the tool-adapter world does not offer it"), "{err}");
        let err = Manifest::parse("name = \"x y\"\nversion = \"1\"\nkind = \"grader\"\n", "t").unwrap_err();
        assert!(err.contains("name"), "{err}");
        let err = Manifest::parse("name = \"x\"\nversion = \"1\"\nkind = \"grader\"\nworld = \"harness\"\n", "t")
            .unwrap_err();
        assert!(err.contains("does not match kind grader"), "{err}");
        let err = Manifest::parse("name = \"x\"\nversion = \"1\"\nkind = \"grader\"\nbogus = 1\n", "t").unwrap_err();
        assert!(err.contains("bogus"), "{err}");
    }
}
