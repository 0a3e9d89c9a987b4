//! What Orchard can honour of a `task.toml`: every field it cannot give is named with why, so
//! that the task is refused instead of run as something other than it asks for.

use crate::{Artifact, NetworkMode, TaskConfig, TaskOs};

/// Most `[[steps]]` a task may have (each is a harness run and a grading).
pub const MAX_STEPS: usize = 64;

/// Most MCP servers a task may declare (each is asked for its tools at every rollout).
pub const MAX_MCP_SERVERS: usize = 16;

/// A field Orchard cannot honour.
#[derive(Debug, Clone, PartialEq)]
pub struct Unsupported {
    /// The key's path (`environment.gpus`).
    pub field: String,
    /// Why, and what to do instead.
    pub reason: String,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

impl TaskConfig {
    /// Every field set to something a local or Kubernetes sandbox cannot give (empty: the
    /// task can run as written).
    pub fn unsupported(&self) -> Vec<Unsupported> {
        let mut out = Vec::new();
        let mut no = |field: &str, reason: &str| out.push(Unsupported { field: field.into(), reason: reason.into() });
        let env = &self.environment;
        if env.os == Some(TaskOs::Windows) {
            no("environment.os", "Orchard's sandboxes run Linux");
        }
        if env.gpus.is_some_and(|g| g > 0) || env.gpu_types.as_ref().is_some_and(|t| !t.is_empty()) {
            no("environment.gpus", "Orchard's sandboxes have no GPUs");
        }
        if env.tpu.is_some() {
            no("environment.tpu", "Orchard's sandboxes have no TPUs");
        }
        if env.mcp_servers.len() > MAX_MCP_SERVERS {
            no("environment.mcp_servers", &format!("at most {MAX_MCP_SERVERS} MCP servers"));
        }
        let mut server_names = std::collections::BTreeSet::new();
        for (i, server) in env.mcp_servers.iter().enumerate() {
            let at = |key: &str| format!("environment.mcp_servers[{i}].{key}");
            let name_ok = !server.name.is_empty()
                && !server.name.contains("__")
                && server.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !name_ok {
                no(&at("name"), "letters, digits, '_' and '-' (no \"__\"): it prefixes the server's tool names");
            } else if !server_names.insert(server.name.as_str()) {
                no(&at("name"), "two MCP servers have this name");
            }
            match server.transport.as_deref().unwrap_or("sse") {
                "stdio" if server.command.as_deref().is_none_or(str::is_empty) => {
                    no(&at("command"), "a stdio server needs its command");
                }
                "streamable-http" if server.url.as_deref().is_none_or(str::is_empty) => {
                    no(&at("url"), "an HTTP server needs its url");
                }
                "stdio" | "streamable-http" => {}
                "sse" => {
                    no(&at("transport"), "the legacy sse transport is not supported: use streamable-http or stdio")
                }
                other => no(&at("transport"), &format!("{other:?}: use stdio or streamable-http")),
            }
        }
        if env.skills_dir.is_some() {
            no("environment.skills_dir", "agent skills are not installed into sandboxes");
        }
        if env.memory.is_some() && env.memory_mb.is_some() {
            no("environment.memory", "give memory or memory_mb, not both");
        }
        if let (Some(a), Some(b)) = (&env.docker_image, &env.image)
            && a != b
        {
            no("environment.image", "give docker_image or image, not two different images");
        }
        match (env.network_mode, env.allow_internet) {
            (Some(NetworkMode::NoNetwork), Some(true)) | (Some(NetworkMode::Public), Some(false)) => {
                no("environment.allow_internet", "contradicts environment.network_mode");
            }
            _ => {}
        }
        let allowlist = env.network_mode == Some(NetworkMode::Allowlist);
        if allowlist && env.allowed_hosts.as_ref().is_none_or(|h| h.is_empty()) {
            no("environment.allowed_hosts", "network_mode = \"allowlist\" needs at least one host");
        }
        if !allowlist && env.allowed_hosts.as_ref().is_some_and(|h| !h.is_empty()) {
            no("environment.allowed_hosts", "only read with network_mode = \"allowlist\"");
        }
        // A sandbox's network is set when it starts: a phase may not ask for another.
        let phases = [
            ("agent", &self.agent.network_mode, &self.agent.allowed_hosts),
            ("verifier", &self.verifier.network_mode, &self.verifier.allowed_hosts),
        ];
        for (phase, mode, hosts) in phases {
            let mode_differs = mode.is_some_and(|m| Some(m) != env.network_mode);
            let hosts_differ = hosts.as_ref().is_some_and(|h| Some(h) != env.allowed_hosts.as_ref());
            if mode_differs || hosts_differ {
                no(
                    &format!("{phase}.network_mode"),
                    "a sandbox's network is fixed when it starts: set it once, under [environment]",
                );
            }
        }
        for (field, user) in [("agent.user", &self.agent.user), ("verifier.user", &self.verifier.user)] {
            if user.as_ref().is_some_and(|u| !u.is_root()) {
                no(field, "commands in Orchard's sandboxes run as root (the sandbox is the boundary)");
            }
        }
        if !self.verifier.collect.is_empty() {
            no("verifier.collect", "collect commands run in compose services, which Orchard does not start");
        }
        if self.verifier.environment.is_some() {
            no("verifier.environment", "a separate verifier runs on the task's own environment");
        }
        if let Some(mode) = &self.verifier.environment_mode
            && !matches!(mode.as_str(), "shared" | "separate" | "in-place" | "in_place" | "inplace")
        {
            no("verifier.environment_mode", "use \"shared\" or \"separate\"");
        }
        if let Some(steps) = &self.steps {
            let separate = |mode: &Option<String>| mode.as_deref() == Some("separate");
            if steps.is_empty() {
                no("steps", "give at least one [[steps]], or none");
            }
            if steps.len() > MAX_STEPS {
                no("steps", &format!("at most {MAX_STEPS} steps"));
            }
            if separate(&self.verifier.environment_mode) {
                no("verifier.environment_mode", "a multi-step task is graded in the agent's sandbox, step by step");
            }
            let mut names = std::collections::BTreeSet::new();
            for (i, step) in steps.iter().enumerate() {
                let at = |key: &str| format!("steps[{i}].{key}");
                if !valid_step_name(&step.name) {
                    no(&at("name"), "a directory name under steps/: letters, digits, '.', '_' and '-'");
                } else if !names.insert(step.name.as_str()) {
                    no(&at("name"), "two steps have this name");
                }
                if separate(&step.verifier.environment_mode) {
                    no(&at("verifier.environment_mode"), "a multi-step task is graded in the agent's sandbox");
                }
                for (key, user) in [("agent.user", &step.agent.user), ("verifier.user", &step.verifier.user)] {
                    if user.as_ref().is_some_and(|u| !u.is_root()) {
                        no(&at(key), "commands in Orchard's sandboxes run as root");
                    }
                }
                if step.agent.network_mode.is_some() || step.verifier.network_mode.is_some() {
                    no(&at("network_mode"), "a sandbox's network is fixed when it starts: set it under [environment]");
                }
                if step.verifier.environment.is_some() || !step.verifier.collect.is_empty() {
                    no(&at("verifier"), "a step's verifier runs in the agent's sandbox, without compose services");
                }
                if !step.artifacts.is_empty() {
                    no(&at("artifacts"), "a step's artifacts are not collected");
                }
                if step.agent.tools.is_some() || step.verifier.grader.is_some() {
                    no(&at("agent.tools"), "a task's tools and grader are the same for every step");
                }
            }
        } else if self.multi_step_reward_strategy.is_some() {
            no("multi_step_reward_strategy", "only read with [[steps]]");
        }
        let envs =
            [("environment.env", &env.env), ("verifier.env", &self.verifier.env), ("solution.env", &self.solution.env)];
        for (table, vars) in envs {
            for name in vars.keys().filter(|k| !valid_env_name(k)) {
                no(
                    &format!("{table}.{name}"),
                    "not a variable name (letters, digits and _, not starting with a digit)",
                );
            }
        }
        for (i, artifact) in self.artifacts.iter().enumerate() {
            if let Some(reason) = artifact_problem(artifact) {
                no(&format!("artifacts[{i}]"), &reason);
            }
        }
        out
    }
}

fn valid_step_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn valid_env_name(name: &str) -> bool {
    name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn artifact_problem(artifact: &Artifact) -> Option<String> {
    let source = artifact.source();
    if !source.starts_with('/') || source.split('/').any(|c| c == "..") {
        return Some(format!("{source:?}: an absolute path without '..'"));
    }
    match artifact {
        Artifact::Detailed(a) if a.service.as_deref().is_some_and(|s| s != "main") => {
            Some("compose services other than main are not started".into())
        }
        Artifact::Detailed(a) if a.destination.is_some() || !a.exclude.is_empty() => {
            Some("destination and exclude are not honoured: name the path alone".into())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::TaskConfig;

    fn fields(text: &str) -> Vec<String> {
        TaskConfig::parse(text).unwrap().unsupported().into_iter().map(|u| u.field).collect()
    }

    #[test]
    fn what_a_sandbox_cannot_give_is_named() {
        assert_eq!(fields("[environment]\ngpus = 1\nos = \"windows\"\n"), ["environment.os", "environment.gpus"]);
        assert_eq!(fields("[agent]\nuser = \"agent\"\n"), ["agent.user"]);
        assert!(fields("[agent]\nuser = 0\n").is_empty());
        // Without a transport, Harbor's default: sse, refused.
        assert_eq!(
            fields("[[environment.mcp_servers]]\nname = \"fs\"\ncommand = \"mcp-fs\"\n"),
            ["environment.mcp_servers[0].transport"]
        );
        assert!(
            fields("[[environment.mcp_servers]]\nname = \"fs\"\ntransport = \"stdio\"\ncommand = \"x\"\n").is_empty()
        );
        assert_eq!(
            fields("[[environment.mcp_servers]]\nname = \"a__b\"\ntransport = \"streamable-http\"\n"),
            ["environment.mcp_servers[0].name", "environment.mcp_servers[0].url"]
        );
        assert_eq!(fields("[environment]\nnetwork_mode = \"allowlist\"\n"), ["environment.allowed_hosts"]);
        assert_eq!(
            fields("[environment]\nnetwork_mode = \"public\"\n[agent]\nnetwork_mode = \"no-network\"\n"),
            ["agent.network_mode"]
        );
        assert_eq!(fields("artifacts = [\"relative/path\"]\n"), ["artifacts[0]"]);
        assert_eq!(fields("[verifier.env]\n\"A-B\" = \"x\"\n"), ["verifier.env.A-B"]);
        assert_eq!(
            fields("[[steps]]\nname = \"../x\"\n[[steps]]\nname = \"b\"\n[[steps]]\nname = \"b\"\n"),
            ["steps[0].name", "steps[2].name"]
        );
        assert_eq!(
            fields("[[steps]]\nname = \"a\"\n[steps.verifier]\nenvironment_mode = \"separate\"\n"),
            ["steps[0].verifier.environment_mode"]
        );
        assert_eq!(fields("multi_step_reward_strategy = \"final\"\n"), ["multi_step_reward_strategy"]);
        let many_steps: String = (0..=super::MAX_STEPS).map(|i| format!("[[steps]]\nname = \"s{i}\"\n")).collect();
        assert_eq!(fields(&many_steps), ["steps"]);
        let many_servers: String = (0..=super::MAX_MCP_SERVERS)
            .map(|i| format!("[[environment.mcp_servers]]\nname = \"m{i}\"\ntransport = \"stdio\"\ncommand = \"x\"\n"))
            .collect();
        assert_eq!(fields(&many_servers), ["environment.mcp_servers"]);
    }

    #[test]
    fn what_it_can_give_passes() {
        assert!(
            fields(
                "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"10.0.0.0/8\", \"pypi.org\"]\n\
                 cpus = 2\nmemory_mb = 2048\nstorage_mb = 4096\n[environment.healthcheck]\ncommand = \"curl -f localhost\"\n\
                 [verifier]\nenvironment_mode = \"separate\"\nenv = { K = \"v\" }\n[solution]\nenv = { S = \"1\" }\n"
            )
            .is_empty()
        );
    }
}
