//! A loaded plugin: its manifest, its compiled component, checked against its world and
//! pre-instantiated, ready for a fresh instance per rollout.

use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::engine::Runtime;
use crate::manifest::{Capability, Contract, Manifest, PluginKind};

#[derive(Debug, thiserror::Error)]
/// Why a plugin could not be loaded.
pub enum PluginError {
    /// Not a component wasmtime can compile.
    #[error("{origin}: not a loadable WebAssembly component: {reason}")]
    Compile {
        /// Where the component came from.
        origin: String,
        /// What wasmtime said.
        reason: String,
    },
    /// A component that does not fit its world.
    #[error("{origin}: {reason}")]
    World {
        /// Where the component came from.
        origin: String,
        /// What does not fit.
        reason: String,
    },
    #[error("{0}")]
    /// The manifest is wrong; the message names the field.
    Manifest(String),
}

/// What `orchard plugin check` and `GET /v1/plugins` show.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// What it is.
    pub kind: PluginKind,
    /// The world it implements, versioned.
    pub world: String,
    /// The contract version the component speaks.
    pub contract: Contract,
    /// What it asks for.
    pub capabilities: Vec<Capability>,
    /// What it does.
    pub description: String,
    /// For a port of a real program: the release it follows.
    pub release: Option<String>,
    /// Where the manifest came from: `beside`, `embedded` or `inferred`.
    pub manifest: &'static str,
    /// The interfaces it imports.
    pub imports: Vec<String>,
    /// The interfaces it exports.
    pub exports: Vec<String>,
    /// SHA-256 of the component, hex.
    pub sha256: String,
    /// The component's size in bytes.
    pub size: usize,
    /// Where it was loaded from.
    pub origin: String,
}

pub(crate) use crate::contract::Pre;

/// A compiled plugin, ready to instantiate.
pub struct Plugin {
    /// Its manifest.
    pub manifest: Manifest,
    /// What the host saw of it.
    pub info: PluginInfo,
    pub(crate) pre: Pre,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plugin({})", self.manifest.id())
    }
}

impl Plugin {
    /// `name@version`.
    pub fn id(&self) -> String {
        self.manifest.id()
    }

    /// What it is.
    pub fn kind(&self) -> PluginKind {
        self.manifest.kind
    }
}

/// The world a component's exports say it implements.
fn detect_kind(exports: &[String], c: Contract) -> Option<PluginKind> {
    let has = |kind: PluginKind| exports.iter().any(|e| *e == kind.export(c));
    if has(PluginKind::Harness) {
        Some(PluginKind::Harness)
    } else if has(PluginKind::Grader) {
        Some(PluginKind::Grader)
    } else if has(PluginKind::ToolAdapter) {
        // tool-adapter, browser-driver and desktop-driver export the same interface; importing
        // the browser or the desktop tells them apart.
        None
    } else {
        None
    }
}

impl Runtime {
    /// Compiles, checks and pre-instantiates a component. The manifest is the one given, else
    /// the one embedded in the component, else one inferred from its exports.
    pub fn load(&self, bytes: &[u8], manifest: Option<Manifest>, origin: &str) -> Result<Arc<Plugin>, PluginError> {
        let (manifest, source) = match manifest {
            Some(m) => (Some(m), "beside"),
            None => (Manifest::embedded(bytes).map_err(PluginError::Manifest)?, "embedded"),
        };
        let component = self.compile(bytes).map_err(|reason| PluginError::Compile { origin: origin.into(), reason })?;
        let ty = component.component_type();
        let imports: Vec<String> = ty.imports(&self.engine).map(|(name, _)| name.to_string()).collect();
        let exports: Vec<String> = ty.exports(&self.engine).map(|(name, _)| name.to_string()).collect();
        let world_err = |reason: String| PluginError::World { origin: origin.into(), reason };
        let contract = Contract::of_exports(&exports).map_err(|e| {
            world_err(format!("fits no orchard:plugin world: {e} (its exports: {})", list_or_none(&exports)))
        })?;
        let (manifest, source) = match manifest {
            Some(m) => (m, source),
            None => {
                let imports = |iface: &str| imports.iter().any(|i| i.starts_with(&format!("orchard:plugin/{iface}@")));
                let tools_kind = if imports("desktop") {
                    PluginKind::DesktopDriver
                } else if imports("browser") {
                    PluginKind::BrowserDriver
                } else {
                    PluginKind::ToolAdapter
                };
                let kind = detect_kind(&exports, contract)
                    .or_else(|| {
                        exports.iter().any(|e| *e == PluginKind::ToolAdapter.export(contract)).then_some(tools_kind)
                    })
                    .ok_or_else(|| {
                        world_err(format!(
                            "fits no orchard:plugin@{} world: it exports none of {} (its exports: {})",
                            contract,
                            {
                                let mut all: Vec<String> = PluginKind::ALL.iter().map(|k| k.export(contract)).collect();
                                all.dedup();
                                all.join(", ")
                            },
                            list_or_none(&exports)
                        ))
                    })?;
                let name = std::path::Path::new(origin)
                    .file_stem()
                    .map(|s| {
                        s.to_string_lossy().replace(|c: char| !(c.is_ascii_alphanumeric() || c == '-' || c == '_'), "-")
                    })
                    .unwrap_or_else(|| "plugin".into());
                let m = Manifest {
                    name,
                    version: "0.0.0".into(),
                    kind,
                    world: None,
                    capabilities: kind.offers().iter().copied().filter(|c| *c != Capability::Solution).collect(),
                    description: String::new(),
                    release: None,
                    verifier: None,
                };
                (m, "inferred")
            }
        };
        let kind = manifest.kind;
        if let Some(world) = &manifest.world
            && world.contains('@')
            && *world != kind.world_id(contract)
        {
            return Err(world_err(format!(
                "its manifest names the world {world}, but the component speaks orchard:plugin@{contract}"
            )));
        }
        if !exports.iter().any(|e| *e == kind.export(contract)) {
            return Err(world_err(format!(
                "does not export {}, which the {kind} world requires (its exports: {})",
                kind.export(contract),
                list_or_none(&exports)
            )));
        }
        let importable = kind.importable(contract);
        for import in &imports {
            if import.starts_with("wasi:") {
                continue;
            }
            if !importable.contains(import) {
                return Err(world_err(format!(
                    "imports {import}, which the {kind} world does not provide (it provides {} and WASI)",
                    importable.join(", ")
                )));
            }
        }
        let linker = self.linker(kind, contract);
        let instance_pre =
            linker.instantiate_pre(&component).map_err(|e| world_err(format!("cannot be linked: {e}")))?;
        let typed = |e: wasmtime::Error| world_err(format!("exports do not match the {kind} world: {e}"));
        let pre = Pre::new(kind, contract, instance_pre).map_err(typed)?;
        let info = PluginInfo {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            kind,
            world: kind.world_id(contract),
            contract,
            capabilities: manifest.capabilities.iter().copied().collect(),
            description: manifest.description.clone(),
            release: manifest.release.clone(),
            manifest: source,
            imports,
            exports,
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len(),
            origin: origin.to_string(),
        };
        Ok(Arc::new(Plugin { manifest, info, pre }))
    }

    /// Loads a component file, with the manifest beside it when there is one.
    pub fn load_file(&self, path: &std::path::Path) -> Result<Arc<Plugin>, PluginError> {
        let origin = path.display().to_string();
        let bytes =
            std::fs::read(path).map_err(|e| PluginError::Compile { origin: origin.clone(), reason: e.to_string() })?;
        let manifest = Manifest::beside(path).map_err(PluginError::Manifest)?;
        self.load(&bytes, manifest, &origin)
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() { "none".into() } else { items.join(", ") }
}
