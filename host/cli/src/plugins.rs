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
    /// The tools a tool adapter or browser driver offers (a shipped plugin's name, or a path to a
    /// `.wasm`), as the model sees them: name, description, arguments.
    Tools {
        plugin: String,
        /// Its tool configuration, as JSON (a task's `[metadata.tool_config.NAME]`).
        #[arg(long, default_value = "{}")]
        config: String,
        /// JSON instead of a Markdown table.
        #[arg(long)]
        json: bool,
    },
    /// The catalog of every shipped tool adapter's, browser driver's and desktop driver's tools, as Markdown.
    Catalog { dir: Option<PathBuf> },
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
    // Compiles run in a child, this binary again (`compile-component`).
    let compile_command = std::env::current_exe().ok().map(|exe| vec![exe.into(), "compile-component".into()]);
    let config = RuntimeConfig { cache_dir: Some(cache), compile_command, ..Default::default() };
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
        PluginCommand::Tools { plugin, config, json } => {
            let config: serde_json::Value =
                serde_json::from_str(&config).map_err(|e| anyhow::anyhow!("--config: {e}"))?;
            let registry = deferred_registry(rt.clone(), None)?;
            let plugin = registry.resolve(&plugin).map_err(anyhow::Error::msg)?;
            let tools = block(list_tools(&rt, &plugin, config))?;
            if json {
                let specs: Vec<serde_json::Value> = tools
                    .iter()
                    .map(|t| {
                        serde_json::json!({"name": t.name, "description": t.description,
                            "parameters": serde_json::from_str::<serde_json::Value>(&t.parameters).unwrap_or_default()})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&specs)?);
            } else {
                print!("{}", tools_markdown(&plugin.info, &tools));
            }
            Ok(0)
        }
        PluginCommand::Catalog { dir } => {
            let dir = dir
                .or_else(default_dir)
                .ok_or_else(|| anyhow::anyhow!("no plugin directory: give one, or set ORCHARD_PLUGIN_DIR"))?;
            // Only tool adapters and browser drivers are compiled (their manifests say so): a
            // catalog need not wait for every grader and harness.
            let mut components: Vec<PathBuf> = std::fs::read_dir(&dir)
                .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
                .filter(|p| orchard_runtime::Manifest::beside(p).ok().flatten().is_none_or(|m| m.kind.serves_tools()))
                .collect();
            components.sort();
            let mut plugins = Vec::new();
            for path in components {
                let plugin = rt.load_file(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                if plugin.info.kind.serves_tools() {
                    plugins.push(plugin);
                }
            }
            plugins.sort_by(|a, b| a.info.name.cmp(&b.info.name));
            println!("# Tool catalog\n");
            println!(
                "Every shipped tool adapter's, browser driver's and desktop driver's tools, as the model sees them, \
                 generated from the plugins themselves (`orchard plugin catalog`; one plugin: \
                 `orchard plugin tools NAME [--config JSON] [--json]`). An argument marked `?` is \
                 optional.\n"
            );
            for plugin in plugins {
                let tools = block(list_tools(&rt, &plugin, serde_json::json!({})))?;
                print!("{}", tools_markdown(&plugin.info, &tools));
            }
            Ok(0)
        }
    }
}

/// `plugin` commands run inside the CLI's runtime: an async call is waited for in place.
fn block<F: std::future::Future>(f: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(f))
}

/// The tools of `plugin` as Markdown: a heading, then one row per tool with its arguments.
fn tools_markdown(plugin: &PluginInfo, tools: &[orchard_runtime::ToolSpec]) -> String {
    let mut out = format!("## `{}` ({} {})\n\n", plugin.name, plugin.kind, plugin.version);
    if !plugin.description.is_empty() {
        out += &format!("{}\n\n", plugin.description);
    }
    if tools.is_empty() {
        return out + "No tools without configuration: it offers those its tool configuration names.\n\n";
    }
    out += "| tool | what it does | arguments |\n|---|---|---|\n";
    for t in tools {
        let schema: serde_json::Value = serde_json::from_str(&t.parameters).unwrap_or_default();
        let required: Vec<&str> =
            schema["required"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
        let args: Vec<String> = schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(name, p)| {
                let kind = p["type"].as_str().unwrap_or("any");
                let mark = if required.contains(&name.as_str()) { "" } else { "?" };
                format!("`{name}{mark}`: {kind}")
            })
            .collect();
        let description = t.description.replace('|', "\\|").replace('\n', " ");
        out += &format!("| `{}` | {} | {} |\n", t.name, description, args.join(", "));
    }
    out + "\n"
}

async fn list_tools(
    rt: &Arc<Runtime>,
    plugin: &Arc<orchard_runtime::Plugin>,
    config: serde_json::Value,
) -> anyhow::Result<Vec<orchard_runtime::ToolSpec>> {
    rt.list_tools(plugin, config).await.map_err(|e| anyhow::anyhow!("{e}"))
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

/// `orchard compile-component --out PATH`: the component on stdin, its precompiled artifact to
/// `PATH` (see `orchard_runtime::precompile`).
#[derive(clap::Args)]
pub struct CompileArgs {
    /// Where the artifact goes.
    #[arg(long)]
    out: PathBuf,
}

/// Runs `compile-component`; its exit code: 0, `COMPILE_INVALID` for a component that does not
/// compile, 1 for anything else (each with its reason on stderr).
pub fn compile_component(args: &CompileArgs) -> i32 {
    use std::io::Read;
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("reading the component: {e}");
        return 1;
    }
    let compiled = match orchard_runtime::precompile(&bytes) {
        Ok(compiled) => compiled,
        Err(e) => {
            eprintln!("{e}");
            return match e {
                orchard_runtime::PrecompileError::Invalid(_) => orchard_runtime::COMPILE_INVALID,
                orchard_runtime::PrecompileError::Engine(_) => 1,
            };
        }
    };
    match std::fs::write(&args.out, compiled) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("writing {}: {e}", args.out.display());
            1
        }
    }
}
