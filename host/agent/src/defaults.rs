//! The sandbox's working directory and environment for commands that name none, set after the
//! agent started: a sandbox claimed from a warm pool was started before anyone asked for them.
//!
//! Invariants: a request's own `cwd` and variables win over the defaults; the working directory
//! is absolute and made when set; at most `MAX_VARS` variables of at most `MAX_BYTES` in all.

use std::collections::BTreeMap;
use std::sync::RwLock;

use serde::Deserialize;

use crate::error::{AgentError, AgentResult};

const MAX_VARS: usize = 4096;
const MAX_BYTES: usize = 1 << 20;

/// What `PUT /defaults` sets.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(default)]
    pub cwd: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Default)]
pub struct Held(RwLock<Defaults>);

impl Held {
    /// Replaces the defaults, checked; the working directory is made.
    pub fn set(&self, new: Defaults) -> AgentResult<()> {
        if new.env.len() > MAX_VARS || new.env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() > MAX_BYTES {
            return Err(AgentError::invalid(format!("env: at most {MAX_VARS} variables and {MAX_BYTES} bytes")));
        }
        if let Some(key) = new.env.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
            return Err(AgentError::invalid(format!("env: {key:?} is not a valid variable name")));
        }
        if let Some(cwd) = &new.cwd {
            if !cwd.starts_with('/') {
                return Err(AgentError::invalid(format!("cwd: {cwd:?} is not an absolute path")));
            }
            std::fs::create_dir_all(cwd).map_err(|e| AgentError::io(&format!("cwd: {cwd}"), e))?;
        }
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = new;
        Ok(())
    }

    /// A request's working directory and environment with the defaults under them.
    pub fn apply(
        &self,
        cwd: Option<&str>,
        env: &BTreeMap<String, String>,
    ) -> (Option<String>, BTreeMap<String, String>) {
        let held = self.0.read().unwrap_or_else(|p| p.into_inner());
        let mut merged = held.env.clone();
        merged.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        (cwd.map(str::to_string).or_else(|| held.cwd.clone()), merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_own_values_win_and_bad_defaults_are_refused() {
        let held = Held::default();
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("app").display().to_string();
        let env: BTreeMap<String, String> = [("A".into(), "1".into()), ("B".into(), "2".into())].into();
        held.set(Defaults { cwd: Some(work.clone()), env }).unwrap();
        assert!(std::path::Path::new(&work).is_dir(), "the working directory is made");
        let (cwd, env) = held.apply(None, &[("B".to_string(), "mine".to_string())].into());
        assert_eq!(cwd.as_deref(), Some(work.as_str()));
        assert_eq!((env["A"].as_str(), env["B"].as_str()), ("1", "mine"));
        assert_eq!(held.apply(Some("/tmp"), &BTreeMap::new()).0.as_deref(), Some("/tmp"));
        assert!(held.set(Defaults { cwd: Some("relative".into()), env: BTreeMap::new() }).is_err());
        assert!(held.set(Defaults { cwd: None, env: [("A=B".to_string(), String::new())].into() }).is_err());
    }
}
