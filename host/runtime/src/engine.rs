//! The runtime: one engine, a linker per world, an on-disk cache of compiled components, and the
//! thread that ticks epochs for CPU limits (see `ticker`).
//!
//! With a cache, components are compiled on a second engine of the same settings and run from
//! the cached file, mapped, on the first; the compiling engine is dropped as soon as no compile
//! holds it ([`Runtime::hold_compiler`]). Why: wasmtime keeps its compiler's working memory (a
//! context per compiling thread, as large as the largest function it ever compiled) for its
//! engine's whole life; compiling the shipped plugins left ~120 MB of it in an idle server.
//! With a compile command as well (`RuntimeConfig::compile_command`, see `compile_child`), the
//! compile runs in a child process and that engine is only the fallback.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::compile_child::ChildCompileError;

use crate::host::HostState;
use crate::manifest::{Contract, PluginKind};

#[derive(Debug, Clone)]
/// How the WebAssembly engine is set up.
pub struct RuntimeConfig {
    /// Where compiled components are kept (`None`: compile every time).
    pub cache_dir: Option<PathBuf>,
    /// Try the pooling allocator (falls back to on-demand when the machine refuses it).
    pub pooling: bool,
    /// Pool size: plugin instances alive at once.
    pub max_instances: u32,
    /// Largest linear memory one plugin may grow to.
    pub max_memory_bytes: u64,
    /// A program that compiles a component outside this process (`orchard compile-component`:
    /// the component on its stdin, `--out PATH` added; see [`precompile`](crate::precompile)),
    /// used with a cache: no compiler memory is ever this process's. `None`, or a child that
    /// fails: compiles run here, on an engine of their own.
    pub compile_command: Option<Vec<std::ffi::OsString>>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: None,
            pooling: true,
            max_instances: 1000,
            max_memory_bytes: 1 << 30,
            compile_command: None,
        }
    }
}

/// The wasmtime engine plugins are compiled and run on, with its limits.
pub struct Runtime {
    pub(crate) engine: Engine,
    /// One per world and contract version, in `PluginKind::ALL` × `Contract::ALL` order.
    linkers: Vec<Linker<HostState>>,
    cache_dir: Option<PathBuf>,
    /// See [`RuntimeConfig::compile_command`].
    compile_command: Option<Vec<std::ffi::OsString>>,
    compat: String,
    pub(crate) ticker: crate::ticker::Ticker,
    pooling: bool,
    /// The engine compiles run on, while one is held; `None` in the record when compiles run on
    /// `engine` itself (no cache, or the two would not share compiled code).
    compiler: Option<Mutex<Compiler>>,
}

/// The compiling engine and how many hold it.
struct Compiler {
    engine: Option<Engine>,
    holds: usize,
}

/// Keeps the compiling engine (and its warm working memory) between compiles; the last hold
/// dropped drops the engine. See [`Runtime::hold_compiler`].
pub struct CompilerHold<'a>(&'a Runtime);

impl Drop for CompilerHold<'_> {
    fn drop(&mut self) {
        if let Some(compiler) = &self.0.compiler {
            let released = {
                let mut c = compiler.lock().unwrap_or_else(|p| p.into_inner());
                c.holds -= 1;
                if c.holds == 0 { c.engine.take() } else { None }
            };
            drop(released);
        }
    }
}

pub(crate) fn engine_config(pool: Option<&RuntimeConfig>) -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    if let Some(rc) = pool {
        let n = rc.max_instances.max(1);
        let mut p = PoolingAllocationConfig::default();
        p.total_component_instances(n);
        p.total_core_instances(n * 8);
        p.total_memories(n * 2);
        p.total_tables(n * 8);
        p.total_stacks(n);
        p.max_memory_size(rc.max_memory_bytes as usize);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(p));
    }
    c
}

impl Runtime {
    /// An engine set up as `config` says.
    pub fn new(config: RuntimeConfig) -> Result<Runtime, String> {
        let (engine, pooling) = match config.pooling.then(|| Engine::new(&engine_config(Some(&config)))) {
            Some(Ok(engine)) => (engine, true),
            other => {
                if let Some(Err(e)) = other {
                    tracing::info!("pooling allocator unavailable ({e}); using on-demand allocation");
                }
                (Engine::new(&engine_config(None)).map_err(|e| format!("wasmtime engine: {e}"))?, false)
            }
        };
        let mut linkers = Vec::new();
        for kind in PluginKind::ALL {
            for contract in Contract::ALL {
                linkers.push(
                    linker_for(&engine, kind, contract).map_err(|e| format!("linker for {kind}@{contract}: {e}"))?,
                );
            }
        }
        let compat = compatibility(&engine);
        if let Some(dir) = &config.cache_dir {
            std::fs::create_dir_all(dir).map_err(|e| format!("cache {}: {e}", dir.display()))?;
        }
        let ticker = crate::ticker::Ticker::start(engine.clone())?;
        // A second engine's compiled code runs on this one only if their settings hash alike
        // (the pooling allocator is not among them); otherwise compiles run here.
        let compiler = (config.cache_dir.is_some()
            && Engine::new(&engine_config(None)).is_ok_and(|c| compatibility(&c) == compat))
        .then(|| Mutex::new(Compiler { engine: None, holds: 0 }));
        Ok(Runtime {
            engine,
            linkers,
            cache_dir: config.cache_dir,
            compat,
            ticker,
            pooling,
            compiler,
            compile_command: config.compile_command,
        })
    }

    /// Keeps the compiling engine alive until the hold is dropped: a batch of compiles holds it
    /// once, so that its working memory is reused across the batch and handed back after it.
    pub fn hold_compiler(&self) -> CompilerHold<'_> {
        if let Some(compiler) = &self.compiler {
            compiler.lock().unwrap_or_else(|p| p.into_inner()).holds += 1;
        }
        CompilerHold(self)
    }

    /// The compiling engine, made if none is held (with the hold that keeps it).
    fn compiling_engine(&self) -> Result<Option<(Engine, CompilerHold<'_>)>, String> {
        let Some(compiler) = &self.compiler else { return Ok(None) };
        let hold = self.hold_compiler();
        let mut c = compiler.lock().unwrap_or_else(|p| p.into_inner());
        let engine = match &c.engine {
            Some(engine) => engine.clone(),
            None => {
                let engine = Engine::new(&engine_config(None)).map_err(|e| format!("wasmtime engine: {e}"))?;
                c.engine = Some(engine.clone());
                engine
            }
        };
        drop(c);
        Ok(Some((engine, hold)))
    }

    /// Whether compiles run on an engine of their own (a cache, and settings whose compiled
    /// code the two engines share).
    pub fn compiles_apart(&self) -> bool {
        self.compiler.is_some()
    }

    /// Whether a compiling engine is alive (for tests of its release).
    pub fn compiler_alive(&self) -> bool {
        self.compiler.as_ref().is_some_and(|c| c.lock().unwrap_or_else(|p| p.into_inner()).engine.is_some())
    }

    /// Whether instances come from a pooling allocator.
    pub fn pooling(&self) -> bool {
        self.pooling
    }

    pub(crate) fn linker(&self, kind: PluginKind, contract: Contract) -> &Linker<HostState> {
        let k = PluginKind::ALL.iter().position(|k| *k == kind).expect("all kinds");
        let c = Contract::ALL.iter().position(|c| *c == contract).expect("all contracts");
        &self.linkers[k * Contract::ALL.len() + c]
    }

    /// Compiles a component, or loads it from the cache. The cache key is the component's hash
    /// and the engine's compatibility hash, so a new wasmtime or new settings recompile.
    pub fn compile(&self, bytes: &[u8]) -> Result<Component, String> {
        let Some(dir) = &self.cache_dir else {
            return Component::new(&self.engine, bytes).map_err(|e| compile_error(&e));
        };
        let path = dir.join(format!("{}-{}.cwasm", hex::encode(Sha256::digest(bytes)), self.compat));
        if path.is_file() {
            // SAFETY: the file was written by `serialize` of this same engine configuration
            // (the compatibility hash is in its name) into a directory only we write to.
            match unsafe { Component::deserialize_file(&self.engine, &path) } {
                Ok(c) => return Ok(c),
                Err(e) => tracing::warn!("cached component {} unusable ({e}); recompiling", path.display()),
            }
        }
        if let Some(component) = self.compile_outside(bytes, &path)? {
            return Ok(component);
        }
        // On the compiling engine when there is one (held until this compile is done), else here.
        let compiling = self.compiling_engine()?;
        let engine = compiling.as_ref().map_or(&self.engine, |(engine, _hold)| engine);
        let serialized = Component::new(engine, bytes).and_then(|c| c.serialize()).map_err(|e| compile_error(&e))?;
        if let Some(mapped) = self.cache_and_map(&path, &serialized) {
            return Ok(mapped);
        }
        // The cache could not be written: the compiled bytes, loaded from memory.
        // SAFETY: serialized just above by this engine or one whose compatibility hash is its.
        unsafe { Component::deserialize(&self.engine, &serialized) }.map_err(|e| compile_error(&e))
    }

    /// Compiles in a child process into the cache at `path` and loads it mapped, when this
    /// runtime has a compile command and its code runs here (`Ok(None)`: compile in process).
    /// An invalid component is the child's error; a child that could not do the work is
    /// logged and the compile runs here instead.
    fn compile_outside(&self, bytes: &[u8], path: &std::path::Path) -> Result<Option<Component>, String> {
        let (Some(command), true) = (&self.compile_command, self.compiles_apart()) else { return Ok(None) };
        let tmp = temporary_beside(path);
        let outcome = crate::compile_child::compile_in_child(command, bytes, &tmp);
        let loaded = outcome.and_then(|()| {
            std::fs::rename(&tmp, path).map_err(|e| ChildCompileError::Failed(format!("caching: {e}")))?;
            // SAFETY: written by the child, this same binary, with this engine's settings (a
            // mismatch is refused here: the artifact carries its compatibility hash).
            unsafe { Component::deserialize_file(&self.engine, path) }.map_err(|e| {
                let _ = std::fs::remove_file(path);
                ChildCompileError::Failed(format!("loading what it compiled: {e}"))
            })
        });
        match loaded {
            Ok(component) => Ok(Some(component)),
            Err(ChildCompileError::Invalid(reason)) => Err(reason),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                tracing::warn!("{e}; compiling in this process instead");
                Ok(None)
            }
        }
    }

    /// Writes `serialized` to the cache at `path` and loads it back mapped: a server holding many
    /// plugins keeps only the pages it runs resident.
    fn cache_and_map(&self, path: &std::path::Path, serialized: &[u8]) -> Option<Component> {
        let tmp = temporary_beside(path);
        if std::fs::write(&tmp, serialized).is_err() || std::fs::rename(&tmp, path).is_err() {
            let _ = std::fs::remove_file(&tmp);
            return None;
        }
        // SAFETY: written just above, by an engine whose compatibility hash is this one's.
        unsafe { Component::deserialize_file(&self.engine, path) }.ok()
    }
}

/// A file name beside `path` no other compile uses (this process's compiles of one component may
/// run at once: a shared name would let one write into the file another just mapped).
fn temporary_beside(path: &std::path::Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    path.with_extension(format!("tmp{}-{n}", std::process::id()))
}

/// What a failed compile says: the error and its causes, never a backtrace. The text reaches a
/// tenant whose upload did not compile, and with `RUST_BACKTRACE` set the `Debug` form carried
/// one, naming the server's source paths.
pub(crate) fn compile_error(e: &wasmtime::Error) -> String {
    format!("{e:#}")
}

/// What an engine's compiled code is compatible with (part of a cached file's name).
fn compatibility(engine: &Engine) -> String {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    format!("{:016x}", h.finish())
}

fn linker_for(engine: &Engine, kind: PluginKind, contract: Contract) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::<HostState>::new(engine);
    // WASI for guests whose toolchains need it (every non-Rust one): no preopened directories,
    // no sockets, no environment, no arguments. `HostState` builds the context that way.
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    crate::contract::link(&mut linker, kind, contract)?;
    Ok(linker)
}
