//! The plugin registry: plugins by name, loaded from directories or uploaded, replaceable at
//! runtime. A rollout holds the `Arc<Plugin>` it started with, so replacing a plugin never
//! disturbs rollouts already running on the old version.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::engine::Runtime;
use crate::manifest::Manifest;
use crate::plugin::{Plugin, PluginError, PluginInfo};

pub struct Registry {
    runtime: Arc<Runtime>,
    plugins: RwLock<BTreeMap<String, Arc<Plugin>>>,
    /// Every version loaded since start, by content hash (jobs may pin one).
    versions: RwLock<std::collections::HashMap<String, Arc<Plugin>>>,
}

impl Registry {
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Registry { runtime, plugins: RwLock::new(BTreeMap::new()), versions: RwLock::new(Default::default()) }
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Loads every `*.wasm` in `dir`. Returns what failed (path, reason); the rest is loaded.
    pub fn load_dir(&self, dir: &Path) -> Result<Vec<(String, PluginError)>, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("plugin directory {}: {e}", dir.display()))?;
        let mut paths: Vec<_> =
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "wasm")).collect();
        paths.sort();
        let mut failed = Vec::new();
        for path in paths {
            match self.runtime.load_file(&path) {
                Ok(plugin) => self.put(plugin),
                Err(e) => failed.push((path.display().to_string(), e)),
            }
        }
        Ok(failed)
    }

    fn put(&self, plugin: Arc<Plugin>) {
        self.versions.write().unwrap_or_else(|p| p.into_inner()).insert(plugin.info.sha256.clone(), plugin.clone());
        self.plugins.write().unwrap_or_else(|p| p.into_inner()).insert(plugin.manifest.name.clone(), plugin);
    }

    /// Validates a component and, only if it is valid, swaps it in under its name.
    pub fn install(&self, bytes: &[u8], manifest: Option<Manifest>, origin: &str) -> Result<PluginInfo, PluginError> {
        let plugin = self.runtime.load(bytes, manifest, origin)?;
        let info = plugin.info.clone();
        self.put(plugin);
        Ok(info)
    }

    /// A version loaded since start, by its sha256 (with or without a `sha256:` prefix).
    pub fn by_hash(&self, hash: &str) -> Option<Arc<Plugin>> {
        let hash = hash.strip_prefix("sha256:").unwrap_or(hash);
        self.versions.read().unwrap_or_else(|p| p.into_inner()).get(hash).cloned()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    pub fn list(&self) -> Vec<PluginInfo> {
        self.plugins.read().unwrap_or_else(|p| p.into_inner()).values().map(|p| p.info.clone()).collect()
    }

    /// A plugin argument: a path to a `.wasm`, or the name of a loaded plugin.
    pub fn resolve(&self, arg: &str) -> Result<Arc<Plugin>, String> {
        let path = Path::new(arg);
        if arg.ends_with(".wasm") || path.is_file() {
            return self.runtime.load_file(path).map_err(|e| e.to_string());
        }
        self.get(arg).ok_or_else(|| {
            let names: Vec<String> = self.list().into_iter().map(|p| p.name).collect();
            format!(
                "no plugin named {arg:?} (known: {}; or give a path to a .wasm)",
                if names.is_empty() { "none".into() } else { names.join(", ") }
            )
        })
    }
}
