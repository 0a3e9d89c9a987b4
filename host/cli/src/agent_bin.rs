//! Finding the static `orchard-agent` binary that goes into every sandbox.

use std::path::{Path, PathBuf};

const TARGET: &str = "x86_64-unknown-linux-musl";

/// `--agent-bin` / `ORCHARD_AGENT_BIN`, else next to this executable (an installed layout), else
/// the musl build in a cargo target directory above this executable (a source checkout).
pub fn find(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        anyhow::ensure!(path.is_file(), "agent binary {} does not exist", path.display());
        return Ok(path);
    }
    let exe = std::env::current_exe()?;
    let mut tried = Vec::new();
    if let Some(dir) = exe.parent() {
        let installed = dir.join("orchard-agent.musl");
        if installed.is_file() {
            return Ok(installed);
        }
        tried.push(installed);
        for ancestor in dir.ancestors().take(4) {
            for profile in ["agent", "release"] {
                let candidate = ancestor.join(TARGET).join(profile).join("orchard-agent");
                if candidate.is_file() {
                    return Ok(candidate);
                }
                tried.push(candidate);
            }
        }
    }
    anyhow::bail!(
        "cannot find the static orchard-agent binary (tried {}). Build it with `cargo xtask agent` \
         or point ORCHARD_AGENT_BIN at it",
        tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    )
}

/// The default state directory: /var/lib/orchard for root, ~/.local/state/orchard otherwise.
pub fn default_state_dir() -> PathBuf {
    if nix::unistd::geteuid().is_root() {
        return PathBuf::from("/var/lib/orchard");
    }
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("orchard")
}

/// Where rollouts' browsers run, from the operator's environment: `ORCHARD_BROWSER_IN_SANDBOX`
/// (set: inside the sandbox, by its agent), `ORCHARD_CHROMIUM` (the host's binary) and
/// `ORCHARD_BROWSER_CALL_TIMEOUT_MS`, over the defaults.
pub fn browser_placement() -> orchard_eval::BrowserPlacement {
    let default = orchard_eval::BrowserPlacement::default();
    orchard_eval::BrowserPlacement {
        in_sandbox: std::env::var_os("ORCHARD_BROWSER_IN_SANDBOX").is_some(),
        chromium: std::env::var_os("ORCHARD_CHROMIUM").map(Into::into).unwrap_or(default.chromium),
        call_timeout: std::env::var("ORCHARD_BROWSER_CALL_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .map(std::time::Duration::from_millis)
            .unwrap_or(default.call_timeout),
    }
}
