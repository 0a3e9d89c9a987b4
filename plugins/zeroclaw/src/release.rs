//! ZeroClaw 0.8.2's tool specs, as the release sends them (`release/tools.json`, recorded from
//! the real program; MIT, see `release/LICENSE-MIT`).

use std::sync::OnceLock;

use orchard_harness_kit::ToolSpec;
use serde_json::Value;

fn specs() -> &'static Vec<Value> {
    static SPECS: OnceLock<Vec<Value>> = OnceLock::new();
    SPECS.get_or_init(|| serde_json::from_str(include_str!("../release/tools.json")).expect("release/tools.json"))
}

/// The release's spec of `name`.
pub fn spec(name: &str) -> ToolSpec {
    let spec = specs().iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("{name} is in tools.json"));
    ToolSpec {
        name: name.into(),
        description: spec["description"].as_str().unwrap_or_default().into(),
        parameters: spec["parameters"].to_string(),
    }
}

/// `delegate`'s spec, naming the agents it can reach as ZeroClaw names them.
pub fn delegate(agents: &[&str]) -> ToolSpec {
    let mut spec = spec("delegate");
    let available = if agents.is_empty() { "(none configured)".to_string() } else { agents.join(", ") };
    let mut parameters: Value = serde_json::from_str(&spec.parameters).expect("JSON");
    parameters["properties"]["agent"]["description"] =
        Value::String(format!("Name of the agent to delegate to. Available: {available}"));
    spec.parameters = parameters.to_string();
    spec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_specs_load_and_delegate_names_its_agents() {
        for name in crate::workspace::TOOLS.iter().chain(&["memory_store", "memory_recall", "memory_forget"]) {
            assert_eq!(spec(name).name, *name);
        }
        let d = delegate(&["reader", "writer"]);
        assert!(d.parameters.contains("Available: reader, writer"), "{}", d.parameters);
    }
}
