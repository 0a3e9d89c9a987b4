//! The plugin registry: plugins by name, loaded from directories or uploaded, replaceable at
//! runtime. A rollout holds the `Arc<Plugin>` it started with, so replacing a plugin never
//! disturbs rollouts already running on the old version.
//!
//! Plugins are shared (shipped with the server, or replaced for everybody by an admin) or belong
//! to one tenant (its uploads): a tenant sees the shared ones and its own, its own shadowing a
//! shared one of the same name, and never another tenant's.
//!
//! A server starts before its shipped plugins are compiled ([`Registry::defer_dir`]): each is
//! known by name at once, compiled in the background ([`Registry::load_deferred`]), and compiled
//! on the spot when a job asks for it first — so a fresh replica answers at once and runs its
//! first rollout without waiting for the rest.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, RwLock};

use crate::engine::Runtime;
use crate::manifest::Manifest;
use crate::plugin::{Plugin, PluginError, PluginInfo};

/// Whose a plugin is: everybody's, or one tenant's.
pub type Owner = Option<String>;

/// The plugins this host knows, by name: shipped, local and uploaded.
pub struct Registry {
    runtime: Arc<Runtime>,
    /// The current version of each name, per owner.
    current: RwLock<HashMap<Owner, BTreeMap<String, Arc<Plugin>>>>,
    /// Every version loaded since start, by owner and content hash (jobs may pin one).
    versions: RwLock<HashMap<(Owner, String), Arc<Plugin>>>,
    /// Shared plugins known by name but not compiled yet: name → component file.
    deferred: std::sync::Mutex<BTreeMap<String, std::path::PathBuf>>,
    /// Held while a deferred plugin compiles: the background loader and a job asking for the
    /// same plugin never compile it twice.
    compiling: std::sync::Mutex<()>,
}

/// A plugin as one tenant sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VisiblePlugin {
    #[serde(flatten)]
    /// What the host saw of it.
    pub info: PluginInfo,
    /// `shared` (everybody's) or `tenant` (this tenant's own upload).
    pub scope: &'static str,
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(|p| p.into_inner())
}

impl Registry {
    /// An empty registry compiling on `runtime`.
    pub fn new(runtime: Arc<Runtime>) -> Self {
        Registry {
            runtime,
            current: RwLock::new(HashMap::new()),
            versions: RwLock::new(HashMap::new()),
            deferred: Default::default(),
            compiling: Default::default(),
        }
    }

    /// The engine plugins are compiled on.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// Loads every `*.wasm` in `dir` as shared plugins. Returns what failed (path, reason); the
    /// rest is loaded.
    pub fn load_dir(&self, dir: &Path) -> Result<Vec<(String, PluginError)>, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("plugin directory {}: {e}", dir.display()))?;
        let mut paths: Vec<_> =
            entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "wasm")).collect();
        paths.sort();
        let mut failed = Vec::new();
        // One compiling engine for the whole directory, handed back after it.
        let _compiler = self.runtime.hold_compiler();
        for path in paths {
            match self.runtime.load_file(&path) {
                Ok(plugin) => self.put(None, plugin),
                Err(e) => failed.push((path.display().to_string(), e)),
            }
        }
        Ok(failed)
    }

    /// Makes every `*.wasm` in `dir` known as a shared plugin by its manifest's name (the file's
    /// stem without one), compiled later: by [`Registry::load_deferred`] or when first asked for.
    pub fn defer_dir(&self, dir: &Path) -> Result<usize, String> {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("plugin directory {}: {e}", dir.display()))?;
        let mut deferred = self.deferred.lock().unwrap_or_else(|p| p.into_inner());
        for path in entries.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "wasm")) {
            let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
            let name = Manifest::beside(&path).ok().flatten().map(|m| m.name).unwrap_or(stem);
            deferred.insert(name, path);
        }
        Ok(deferred.len())
    }

    /// How many deferred plugins are still to compile.
    pub fn deferred_count(&self) -> usize {
        self.deferred.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Compiles every deferred plugin, those named in `first` first (the most used); returns
    /// what failed.
    pub fn load_deferred(&self, first: &[String]) -> Vec<(String, PluginError)> {
        let mut order: Vec<String> = first.iter().filter(|n| self.is_deferred(n)).cloned().collect();
        let rest: Vec<String> = self.deferred.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        order.extend(rest.into_iter().filter(|n| !first.contains(n)));
        let mut failed = Vec::new();
        // One compiling engine for the batch, handed back after it (before the caller trims
        // the heap).
        let _compiler = self.runtime.hold_compiler();
        for name in order {
            if let Err(e) = self.compile_deferred(&name) {
                failed.push((name, e));
            }
        }
        failed
    }

    fn is_deferred(&self, name: &str) -> bool {
        self.deferred.lock().unwrap_or_else(|p| p.into_inner()).contains_key(name)
    }

    /// Compiles the deferred plugin `name` now (a no-op when it is not deferred).
    fn compile_deferred(&self, name: &str) -> Result<(), PluginError> {
        let _one_at_a_time = self.compiling.lock().unwrap_or_else(|p| p.into_inner());
        let Some(path) = self.deferred.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned() else {
            return Ok(());
        };
        let loaded = self.runtime.load_file(&path);
        self.deferred.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        match loaded {
            Ok(plugin) => {
                // An admin's replacement uploaded meanwhile stays current.
                if !read(&self.current).get(&None).is_some_and(|m| m.contains_key(name)) {
                    self.put(None, plugin);
                }
                Ok(())
            }
            Err(e) => {
                tracing::warn!("plugin {} not loaded: {e}", path.display());
                Err(e)
            }
        }
    }

    /// Swaps in an already loaded plugin under its name for `owner`.
    pub fn put(&self, owner: Owner, plugin: Arc<Plugin>) {
        write(&self.versions).insert((owner.clone(), plugin.info.sha256.clone()), plugin.clone());
        write(&self.current).entry(owner).or_default().insert(plugin.manifest.name.clone(), plugin);
    }

    /// Validates a component and, only if it is valid, swaps it in under its name for everybody.
    pub fn install(&self, bytes: &[u8], manifest: Option<Manifest>, origin: &str) -> Result<PluginInfo, PluginError> {
        self.install_for(None, bytes, manifest, origin)
    }

    /// As [`Registry::install`], for `owner` (`None`: everybody).
    pub fn install_for(
        &self,
        owner: Owner,
        bytes: &[u8],
        manifest: Option<Manifest>,
        origin: &str,
    ) -> Result<PluginInfo, PluginError> {
        let plugin = self.runtime.load(bytes, manifest, origin)?;
        let info = plugin.info.clone();
        self.put(owner, plugin);
        Ok(info)
    }

    /// Whether `owner`'s current plugin `name` is the version with this hash.
    pub fn is_current(&self, owner: &Owner, name: &str, sha256: &str) -> bool {
        read(&self.current).get(owner).and_then(|m| m.get(name)).is_some_and(|p| p.info.sha256 == sha256)
    }

    /// A shared version loaded since start, by its sha256 (with or without a `sha256:` prefix).
    pub fn by_hash(&self, hash: &str) -> Option<Arc<Plugin>> {
        let hash = hash.strip_prefix("sha256:").unwrap_or(hash);
        read(&self.versions).get(&(None, hash.to_string())).cloned()
    }

    /// A version `tenant` may run, by its sha256: a shared one or one of its own.
    pub fn by_hash_for(&self, tenant: &str, hash: &str) -> Option<Arc<Plugin>> {
        let hash = hash.strip_prefix("sha256:").unwrap_or(hash);
        let versions = read(&self.versions);
        versions
            .get(&(Some(tenant.to_string()), hash.to_string()))
            .or_else(|| versions.get(&(None, hash.to_string())))
            .cloned()
    }

    /// The shared plugin `name` (compiled now if it was deferred).
    pub fn get(&self, name: &str) -> Option<Arc<Plugin>> {
        if let Some(plugin) = read(&self.current).get(&None).and_then(|m| m.get(name)).cloned() {
            return Some(plugin);
        }
        if self.is_deferred(name) {
            let _ = self.compile_deferred(name);
        }
        read(&self.current).get(&None).and_then(|m| m.get(name)).cloned()
    }

    /// The plugin `name` as `tenant` sees it: its own upload, else the shared one.
    pub fn get_for(&self, tenant: &str, name: &str) -> Option<Arc<Plugin>> {
        let own = read(&self.current).get(&Some(tenant.to_string())).and_then(|m| m.get(name)).cloned();
        own.or_else(|| self.get(name))
    }

    /// Whether `tenant` has an upload of its own named `name`.
    pub fn owns(&self, tenant: &str, name: &str) -> bool {
        read(&self.current).get(&Some(tenant.to_string())).is_some_and(|m| m.contains_key(name))
    }

    /// The shared plugins.
    pub fn list(&self) -> Vec<PluginInfo> {
        read(&self.current).get(&None).map(|m| m.values().map(|p| p.info.clone()).collect()).unwrap_or_default()
    }

    /// What `tenant` sees, by name: shared plugins and its own (which shadow shared ones).
    pub fn list_for(&self, tenant: &str) -> Vec<VisiblePlugin> {
        let current = read(&self.current);
        let mut seen: BTreeMap<&str, VisiblePlugin> = BTreeMap::new();
        for (owner, scope) in [(None, "shared"), (Some(tenant.to_string()), "tenant")] {
            for (name, p) in current.get(&owner).into_iter().flatten() {
                seen.insert(name, VisiblePlugin { info: p.info.clone(), scope });
            }
        }
        seen.into_values().collect()
    }

    /// A plugin argument: a path to a `.wasm`, or the name of a shared plugin.
    pub fn resolve(&self, arg: &str) -> Result<Arc<Plugin>, String> {
        let path = Path::new(arg);
        if arg.ends_with(".wasm") || path.is_file() {
            return self.runtime.load_file(path).map_err(|e| e.to_string());
        }
        self.get(arg).ok_or_else(|| {
            unknown(arg, self.list().into_iter().map(|p| p.name).collect(), "; or give a path to a .wasm")
        })
    }

    /// A plugin name as `tenant` sees it (no paths: a tenant of a server names plugins).
    pub fn resolve_for(&self, tenant: &str, name: &str) -> Result<Arc<Plugin>, String> {
        self.get_for(tenant, name).ok_or_else(|| {
            let mut names: Vec<String> = self.list_for(tenant).into_iter().map(|p| p.info.name).collect();
            names.extend(self.deferred.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned());
            names.sort();
            names.dedup();
            unknown(name, names, "")
        })
    }
}

fn unknown(arg: &str, names: Vec<String>, hint: &str) -> String {
    let known = if names.is_empty() { "none".into() } else { names.join(", ") };
    format!("no plugin named {arg:?} (known: {known}{hint})")
}
