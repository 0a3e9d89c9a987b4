//! `orchard plugin check|list`, and finding the plugins the build ships.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Subcommand;
use orchard_runtime::{PluginInfo, Registry, Runtime, RuntimeConfig};

#[derive(Subcommand, Debug)]
pub enum PluginCommand {
    /// Check a component: its kind, world, version, imports and exports.
    Check { file: PathBuf },
    /// List the plugins in a directory [default: the ones the build ships].
    List { dir: Option<PathBuf> },
}

/// `ORCHARD_PLUGIN_DIR`, else `plugins/` beside this executable or in a target directory above it.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("ORCHARD_PLUGIN_DIR") {
        return Some(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().ok()?;
    exe.parent()?.ancestors().take(4).map(|a| a.join("plugins")).find(|p| p.is_dir())
}

/// The runtime, with compiled components cached in `ORCHARD_PLUGIN_CACHE` or the state directory.
pub fn runtime(state_dir: &Path) -> anyhow::Result<Arc<Runtime>> {
    let cache =
        std::env::var_os("ORCHARD_PLUGIN_CACHE").map(PathBuf::from).unwrap_or_else(|| state_dir.join("plugin-cache"));
    let config = RuntimeConfig { cache_dir: Some(cache), ..Default::default() };
    Ok(Arc::new(Runtime::new(config).map_err(anyhow::Error::msg)?))
}

/// A registry that knows the shipped plugins (or those of `dir`) by name and compiles them
/// when a job first asks for one (`orchard eval`: only what the run uses is compiled) or in the
/// background (`orchard serve`).
pub fn deferred_registry(runtime: Arc<Runtime>, dir: Option<&Path>) -> anyhow::Result<Registry> {
    let registry = Registry::new(runtime);
    if let Some(dir) = dir.map(Path::to_path_buf).or_else(default_dir) {
        registry.defer_dir(&dir).map_err(anyhow::Error::msg)?;
    }
    Ok(registry)
}

pub fn run(command: PluginCommand) -> anyhow::Result<i32> {
    let state = crate::agent_bin::default_state_dir();
    let rt = runtime(&state)?;
    match command {
        PluginCommand::Check { file } => match rt.load_file(&file) {
            Ok(plugin) => {
                print_info(&plugin.info);
                Ok(0)
            }
            Err(e) => {
                eprintln!("orchard: {e}");
                Ok(1)
            }
        },
        PluginCommand::List { dir } => {
            let dir = dir
                .or_else(default_dir)
                .ok_or_else(|| anyhow::anyhow!("no plugin directory: give one, or set ORCHARD_PLUGIN_DIR"))?;
            let registry = Registry::new(rt);
            let failed = registry.load_dir(&dir).map_err(anyhow::Error::msg)?;
            println!(
                "{:<16} {:<10} {:<15} {:<9} {:<32} {:>9}",
                "NAME", "VERSION", "KIND", "CONTRACT", "CAPABILITIES", "SIZE"
            );
            for p in registry.list() {
                let caps: Vec<String> = p.capabilities.iter().map(|c| format!("{c:?}").to_lowercase()).collect();
                println!(
                    "{:<16} {:<10} {:<15} {:<9} {:<32} {:>8}K",
                    p.name,
                    p.version,
                    p.kind.to_string(),
                    p.contract.to_string(),
                    caps.join(","),
                    p.size / 1024
                );
            }
            for (path, e) in &failed {
                eprintln!("not loaded: {path}: {e}");
            }
            Ok(if failed.is_empty() { 0 } else { 1 })
        }
    }
}

fn print_info(p: &PluginInfo) {
    println!("name:         {}", p.name);
    println!("version:      {}", p.version);
    println!("kind:         {}", p.kind);
    println!("world:        {}", p.world);
    println!("contract:     orchard:plugin@{}", p.contract);
    println!("manifest:     {}", p.manifest);
    let caps: Vec<String> = p.capabilities.iter().map(|c| format!("{c:?}").to_lowercase()).collect();
    println!("capabilities: {}", caps.join(", "));
    if !p.description.is_empty() {
        println!("description:  {}", p.description);
    }
    println!("size:         {} bytes (sha256 {})", p.size, p.sha256);
    println!("imports:");
    for i in &p.imports {
        println!("  {i}");
    }
    println!("exports:");
    for e in &p.exports {
        println!("  {e}");
    }
}
