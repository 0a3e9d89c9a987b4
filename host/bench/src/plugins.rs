//! The plugin runtime's numbers, each beside a bare-wasmtime reference measured in the same run.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use orchard_runtime::{Grants, Limits, RolloutContext, Runtime, RuntimeConfig, TaskInput};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};

use crate::Row;
use crate::stats::Samples;

/// The smallest component there is: a header and nothing else.
const EMPTY_COMPONENT: &[u8] = &[0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

pub fn dirs(bin: &Path) -> (PathBuf, PathBuf) {
    let target = bin.parent().and_then(Path::parent).expect("target dir");
    (target.join("plugins"), target.join("test-plugins"))
}

struct Bare {
    wasi: wasmtime_wasi::WasiCtx,
    table: wasmtime::component::ResourceTable,
}

impl wasmtime_wasi::WasiView for Bare {
    fn ctx(&mut self) -> wasmtime_wasi::WasiCtxView<'_> {
        wasmtime_wasi::WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

fn bare() -> Bare {
    Bare { wasi: wasmtime_wasi::WasiCtx::builder().build(), table: wasmtime::component::ResourceTable::new() }
}

pub async fn run(bin: &Path, iterations: u32) -> anyhow::Result<Vec<Row>> {
    let (shipped, fixtures) = dirs(bin);
    let mut rows = Vec::new();

    // Bare wasmtime: an empty component, instantiated in a fresh store each time.
    let engine = Engine::default();
    let empty = Component::new(&engine, EMPTY_COMPONENT).map_err(|e| anyhow::anyhow!("{e}"))?;
    let linker: Linker<()> = Linker::new(&engine);
    let pre = linker.instantiate_pre(&empty).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut bare_inst = Samples::default();
    for _ in 0..iterations {
        let t = Instant::now();
        let mut store = Store::new(&engine, ());
        pre.instantiate(&mut store).map_err(|e| anyhow::anyhow!("{e}"))?;
        bare_inst.push(t.elapsed());
    }

    // Ours: harness + tool adapter + grader, fresh stores with limits, as a rollout does.
    let cache = tempfile::tempdir()?;
    let rt = Arc::new(
        Runtime::new(RuntimeConfig { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() })
            .map_err(anyhow::Error::msg)?,
    );
    let load = |p: PathBuf| rt.load_file(&p).map_err(|e| anyhow::anyhow!("{e}"));
    let (oracle, shell, script) =
        (load(shipped.join("oracle.wasm"))?, load(shipped.join("shell.wasm"))?, load(shipped.join("script.wasm"))?);
    let plugins = [oracle.clone(), shell.clone(), script.clone()];
    let mut ours = Samples::default();
    for _ in 0..iterations {
        let ctx = RolloutContext::new("bench", None, None);
        let t = Instant::now();
        rt.instantiate_rollout(&ctx, &plugins, &Limits::default(), &Grants::default()).await?;
        ours.push(t.elapsed());
    }
    rows.push(Row {
        what: "instantiate harness + tools + grader, p50".into(),
        ours: format!("{:.1} µs", ours.pct(50.0).as_secs_f64() * 1e6),
        reference: format!("{:.1} µs bare wasmtime, empty component", bare_inst.pct(50.0).as_secs_f64() * 1e6),
        target: "≤ 200 µs".into(),
        met: Some(ours.pct(50.0) <= Duration::from_micros(200)),
    });
    rows.push(Row {
        what: "  allocator".into(),
        ours: if rt.pooling() { "pooling".into() } else { "on-demand (pooling refused)".into() },
        reference: "—".into(),
        target: "—".into(),
        met: None,
    });

    // host→guest: `tools.list` on a tool adapter, beside a bare call of `hello() -> string`.
    let browser = load(fixtures.join("test-browser.wasm"))?;
    let call = rt.time_tools_list(&browser, iterations * 10).await?;
    let nothing =
        Component::from_file(&engine, fixtures.join("test-no-world.wasm")).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut wasi_linker: Linker<Bare> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_sync(&mut wasi_linker).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut store = Store::new(&engine, bare());
    let instance = wasi_linker.instantiate(&mut store, &nothing).map_err(|e| anyhow::anyhow!("{e}"))?;
    let hello = instance.get_typed_func::<(), (String,)>(&mut store, "hello").map_err(|e| anyhow::anyhow!("{e}"))?;
    let n = iterations * 10;
    let started = Instant::now();
    for _ in 0..n {
        hello.call(&mut store, ()).map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let bare_call = started.elapsed() / n;
    rows.push(Row {
        what: "host→guest call (tools.list, one tool)".into(),
        ours: format!("{:.2} µs", call.as_secs_f64() * 1e6),
        reference: format!("{:.2} µs bare typed call returning a string", bare_call.as_secs_f64() * 1e6),
        target: "≤ 2 µs".into(),
        met: Some(call <= Duration::from_micros(2)),
    });

    // guest→host: `log.event` in a loop inside one harness run.
    let harness = load(fixtures.join("test-harness.wasm"))?;
    let task = TaskInput { id: "bench".into(), instruction: String::new(), metadata: serde_json::json!({}) };
    let per_run = |count: u64| {
        let (rt, harness, task) = (rt.clone(), harness.clone(), task.clone());
        async move {
            let ctx = RolloutContext::new("bench", None, None);
            let t = Instant::now();
            rt.run_harness(
                &ctx,
                &harness,
                &[],
                &task,
                &serde_json::json!({"mode": "log", "count": count}),
                &Limits::default(),
                &Grants::default(),
            )
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
            anyhow::Ok(t.elapsed())
        }
    };
    let count = 200_000u64;
    let baseline = per_run(0).await?;
    let with_calls = per_run(count).await?;
    let guest_to_host = with_calls.saturating_sub(baseline) / count as u32;
    rows.push(Row {
        what: "guest→host call (log.event, recorded)".into(),
        ours: format!("{:.2} µs", guest_to_host.as_secs_f64() * 1e6),
        reference: "—".into(),
        target: "≤ 2 µs".into(),
        met: Some(guest_to_host <= Duration::from_micros(2)),
    });
    Ok(rows)
}

/// `orchard eval TASKS` with the oracle, shell tools and `grader`; its results in `out`.
pub fn oracle_eval(
    bin: &Path,
    tasks: &Path,
    grader: &str,
    attempts: u32,
    concurrency: usize,
    out: &Path,
    tools: &[&str],
) -> anyhow::Result<()> {
    let (shipped, _) = dirs(bin);
    let state = tempfile::tempdir()?;
    let status = std::process::Command::new(bin)
        .args(["eval"])
        .arg(tasks)
        .args(["--harness", "oracle", "--grader", grader, "--grant", "solution"])
        .args(tools)
        .args(["--attempts", &attempts.to_string(), "--concurrency", &concurrency.to_string(), "--out"])
        .arg(out)
        .arg("--state-dir")
        .arg(state.path())
        .env("ORCHARD_PLUGIN_DIR", &shipped)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "orchard eval failed");
    Ok(())
}

/// 1,000 oracle rollouts of one example task, end to end, through `orchard eval`.
pub fn rollouts(bin: &Path, examples: &Path, n: u32) -> anyhow::Result<Vec<Row>> {
    let out = tempfile::tempdir()?;
    let started = Instant::now();
    oracle_eval(bin, &examples.join("hello-file"), "script", n, 16, out.path(), &["--tools", "shell"])?;
    let elapsed = started.elapsed();
    let summary: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("summary.json"))?)?;
    let passed = summary["passed"].as_u64().unwrap_or(0);
    Ok(vec![Row {
        what: format!("{n} oracle rollouts (hello-file), end to end"),
        ours: format!(
            "{passed}/{n} passed in {:.1} s: {:.0} rollouts/s",
            elapsed.as_secs_f64(),
            n as f64 / elapsed.as_secs_f64()
        ),
        reference: "each: sandbox create, 3 plugins, exec, grade, delete".into(),
        target: "report".into(),
        met: Some(passed == n as u64),
    }])
}
