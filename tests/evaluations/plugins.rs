//! The plugin runtime: worlds, limits, isolation, swaps, capabilities.

use std::sync::Arc;
use std::time::Duration;

use orchard_runtime::{
    FailureKind, Grants, Limits, Manifest, Plugin, PluginFailure, PluginKind, Registry, RolloutContext, RunOutcome,
    Runtime, RuntimeConfig, Status, TaskInput,
};
use orchard_tests::{plugin_dir, test_plugin_dir};
use serde_json::json;

fn runtime() -> Arc<Runtime> {
    let cache = tempfile::tempdir().unwrap().keep();
    Arc::new(Runtime::new(RuntimeConfig { cache_dir: Some(cache), ..Default::default() }).unwrap())
}

fn manifest(name: &str, version: &str, kind: PluginKind, caps: &[&str]) -> Manifest {
    let caps: Vec<String> = caps.iter().map(|c| format!("{c:?}")).collect();
    Manifest::parse(
        &format!("name = {name:?}\nversion = {version:?}\nkind = \"{kind}\"\ncapabilities = [{}]\n", caps.join(",")),
        "test",
    )
    .unwrap()
}

/// The test harness has the test browser driver open a page; with no browser configured the
/// driver answers `unavailable`, and the harness says so in its answer.
async fn open_a_page(rt: &Runtime, harness: &Arc<Plugin>, browser: &Arc<Plugin>) -> Result<RunOutcome, PluginFailure> {
    let tools = std::slice::from_ref(browser);
    let config = json!({"mode": "tool", "tool": "open"});
    rt.run_harness(
        &RolloutContext::new("t", None, None),
        harness,
        tools,
        &task(),
        &config,
        &limits(),
        &Grants::default(),
    )
    .await
}

fn task() -> TaskInput {
    TaskInput { id: "t".into(), instruction: "do it".into(), metadata: json!({}) }
}

fn limits() -> Limits {
    Limits { memory_bytes: 64 << 20, cpu: Duration::from_secs(2), wall: Duration::from_secs(30) }
}

#[test]
fn every_world_has_a_plugin_that_loads_and_one_that_is_refused() {
    let rt = runtime();
    let (shipped, fixtures) = (plugin_dir(), test_plugin_dir());
    for (file, kind) in [
        (shipped.join("oracle.wasm"), PluginKind::Harness),
        (shipped.join("react.wasm"), PluginKind::Harness),
        (shipped.join("program.wasm"), PluginKind::Harness),
        (shipped.join("shell.wasm"), PluginKind::ToolAdapter),
        (fixtures.join("test-browser.wasm"), PluginKind::BrowserDriver),
        (shipped.join("script.wasm"), PluginKind::Grader),
    ] {
        let plugin = rt.load_file(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        assert_eq!(plugin.kind(), kind, "{}", file.display());
    }
    let bad_tools = std::fs::read(fixtures.join("test-bad-tools.wasm")).unwrap();
    let oracle = std::fs::read(shipped.join("oracle.wasm")).unwrap();
    let refused = [
        (
            &bad_tools,
            PluginKind::Harness,
            "does not export orchard:plugin/agent@0.1.0, which the harness world requires",
        ),
        (
            &bad_tools,
            PluginKind::ToolAdapter,
            "imports orchard:plugin/model@0.1.0, which the tool-adapter world does not provide",
        ),
        (
            &bad_tools,
            PluginKind::BrowserDriver,
            "imports orchard:plugin/model@0.1.0, which the browser-driver world does not provide",
        ),
        (&oracle, PluginKind::Grader, "does not export orchard:plugin/grading@0.2.0, which the grader world requires"),
    ];
    for (bytes, kind, expected) in refused {
        let err = rt.load(bytes, Some(manifest("x", "1", kind, &[])), "x.wasm").unwrap_err().to_string();
        assert!(err.contains(expected), "{kind}: {err}");
    }
    // Without a manifest the world is inferred from the exports, or there is none.
    let err = rt.load_file(&fixtures.join("test-no-world.wasm")).unwrap_err().to_string();
    assert!(
        err.contains(
            "fits no orchard:plugin world: it exports no orchard:plugin interface (this host speaks 0.1.0, 0.2.0 and 0.3.0)"
        ) && err.contains("its exports: hello"),
        "{err}"
    );
    let inferred = rt.load_file(&fixtures.join("test-bad-tools.wasm")).unwrap_err().to_string();
    assert!(inferred.contains("does not provide"), "{inferred}");
    let err = rt.load(b"not wasm at all", None, "junk.wasm").unwrap_err().to_string();
    assert!(err.contains("junk.wasm: not a loadable WebAssembly component"), "{err}");
}

#[tokio::test]
async fn plugins_cannot_open_host_files_or_sockets() {
    let rt = runtime();
    let harness = rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted =
        tokio::spawn(async move { tokio::time::timeout(Duration::from_secs(2), listener.accept()).await.is_ok() });
    for config in [json!({"mode": "read-host-file", "path": "/etc/passwd"}), json!({"mode": "socket", "addr": addr})] {
        let ctx = RolloutContext::new("t", None, None);
        let out = rt.run_harness(&ctx, &harness, &[], &task(), &config, &limits(), &Grants::default()).await.unwrap();
        let answer = out.answer.unwrap();
        assert!(answer.starts_with("DENIED"), "{config}: {answer}");
    }
    assert!(!accepted.await.unwrap(), "the plugin reached a host socket");
}

#[tokio::test]
async fn a_runaway_plugin_fails_its_rollout_and_no_other() {
    let rt = runtime();
    let harness = rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
    let mut runs = Vec::new();
    for i in 0..53 {
        let config = match i {
            0 => json!({"mode": "loop"}),
            1 => json!({"mode": "alloc"}),
            2 => json!({"mode": "trap"}),
            _ => json!({"mode": "answer", "answer": format!("ok {i}")}),
        };
        let (rt, harness) = (rt.clone(), harness.clone());
        runs.push(tokio::spawn(async move {
            let ctx = RolloutContext::new("t", None, None);
            rt.run_harness(&ctx, &harness, &[], &task(), &config, &limits(), &Grants::default()).await
        }));
    }
    let mut results = Vec::new();
    for r in runs {
        results.push(r.await.unwrap());
    }
    let failure = |i: usize| results[i].as_ref().unwrap_err().clone();
    let cpu = failure(0);
    assert_eq!(
        (cpu.kind, cpu.plugin.as_str(), cpu.call.as_str()),
        (FailureKind::CpuBudget, "test-harness@0.1.0", "agent.run")
    );
    assert!(
        cpu.to_string().contains("plugin test-harness@0.1.0 failed in agent.run: used more than its CPU budget"),
        "{cpu}"
    );
    let memory = failure(1);
    assert_eq!(memory.kind, FailureKind::Memory, "{memory}");
    assert!(memory.message.contains("forcing trap when growing memory"), "{memory}");
    let trap = failure(2);
    assert_eq!(trap.kind, FailureKind::Trap);
    assert!(trap.message.contains("wasm `unreachable` instruction executed"), "{trap}");
    for (i, r) in results.iter().enumerate().skip(3) {
        let out = r.as_ref().unwrap_or_else(|e| panic!("rollout {i}: {e}"));
        assert_eq!(out.answer.as_deref(), Some(format!("ok {i}").as_str()));
    }
}

#[tokio::test]
async fn a_plugin_swapped_under_load_leaves_running_rollouts_on_the_old_version() {
    let rt = runtime();
    let registry = Arc::new(Registry::new(rt.clone()));
    let bytes = std::fs::read(test_plugin_dir().join("test-harness.wasm")).unwrap();
    let caps = ["model", "tools", "log"];
    registry.install(&bytes, Some(manifest("fixture", "1.0.0", PluginKind::Harness, &caps)), "v1").unwrap();
    let start = |n: usize| {
        (0..n)
            .map(|_| {
                let (rt, registry) = (rt.clone(), registry.clone());
                tokio::spawn(async move {
                    // What a rollout does: take the current plugin once, then run on it.
                    let plugin = registry.get("fixture").unwrap();
                    let ctx = RolloutContext::new("t", None, None);
                    let config = json!({"mode": "sleep", "ms": 400, "answer": "done"});
                    let out = rt.run_harness(&ctx, &plugin, &[], &task(), &config, &limits(), &Grants::default()).await;
                    (plugin.id(), out)
                })
            })
            .collect::<Vec<_>>()
    };
    let early = start(20);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let info = registry.install(&bytes, Some(manifest("fixture", "2.0.0", PluginKind::Harness, &caps)), "v2").unwrap();
    assert_eq!(info.version, "2.0.0");
    let late = start(20);
    for (runs, version) in [(early, "fixture@1.0.0"), (late, "fixture@2.0.0")] {
        for run in runs {
            let (id, out) = run.await.unwrap();
            assert_eq!(id, version);
            assert_eq!(out.unwrap().answer.as_deref(), Some("done"));
        }
    }
    // A bad upload changes nothing.
    let bad = std::fs::read(test_plugin_dir().join("test-no-world.wasm")).unwrap();
    assert!(registry.install(&bad, Some(manifest("fixture", "3.0.0", PluginKind::Harness, &caps)), "v3").is_err());
    assert_eq!(registry.get("fixture").unwrap().id(), "fixture@2.0.0");
}

#[tokio::test]
async fn capabilities_need_the_manifest_and_the_operator() {
    let rt = runtime();
    let bytes = std::fs::read(test_plugin_dir().join("test-harness.wasm")).unwrap();
    // The manifest does not ask for the model: the call is denied even though the run allows it.
    let no_model = rt.load(&bytes, Some(manifest("nm", "1", PluginKind::Harness, &["tools", "log"])), "nm").unwrap();
    let ctx = RolloutContext::new("t", None, None);
    let err = rt
        .run_harness(&ctx, &no_model, &[], &task(), &json!({"mode": "model"}), &limits(), &Grants::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind, FailureKind::Error);
    assert!(err.message.contains("may not use the Model capability"), "{err}");
    // Asked for, and the operator allows it: no endpoint configured, a clear `unavailable`.
    let with_model = rt.load(&bytes, Some(manifest("wm", "1", PluginKind::Harness, &["model"])), "wm").unwrap();
    let err = rt
        .run_harness(&ctx, &with_model, &[], &task(), &json!({"mode": "model"}), &limits(), &Grants::default())
        .await
        .unwrap_err();
    assert!(err.message.contains("unavailable: no model endpoint"), "{err}");
    // A browser driver loads, and its browser answers `unavailable` (none configured).
    let browser = rt.load_file(&test_plugin_dir().join("test-browser.wasm")).unwrap();
    let harness = rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
    let out = open_a_page(&rt, &harness, &browser).await.unwrap();
    assert!(out.answer.unwrap().contains("no browser is configured"));
    assert_eq!(out.status, Status::Completed);
}

#[tokio::test]
async fn compiled_components_are_cached_on_disk() {
    let cache = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() }).unwrap();
    rt.load_file(&plugin_dir().join("react.wasm")).unwrap();
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].ends_with(".cwasm"));
    // A second runtime (a restarted host) loads from the cache.
    let rt2 =
        Runtime::new(RuntimeConfig { cache_dir: Some(cache.path().to_path_buf()), ..Default::default() }).unwrap();
    assert_eq!(rt2.load_file(&plugin_dir().join("react.wasm")).unwrap().info.name, "react");
}

#[tokio::test]
async fn finished_rollouts_give_their_instances_back() {
    // A pool of 10 instance slots: if a rollout's instances outlived it, the 6th would fail.
    let cache = tempfile::tempdir().unwrap().keep();
    let rt = Runtime::new(RuntimeConfig { cache_dir: Some(cache), max_instances: 10, ..Default::default() }).unwrap();
    assert!(rt.pooling(), "this test needs the pooling allocator");
    let harness = rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
    let browser = rt.load_file(&test_plugin_dir().join("test-browser.wasm")).unwrap();
    for i in 0..30 {
        let out = open_a_page(&rt, &harness, &browser).await.unwrap_or_else(|e| panic!("rollout {i}: {e}"));
        assert!(out.answer.unwrap().contains("no browser"));
    }
}

/// Plugins compile on an engine of their own whose working memory is handed back once no compile
/// holds it (a batch holds it across its compiles), and run on the pooled engine from the cache.
#[tokio::test]
async fn plugins_compile_apart_and_the_compiler_is_dropped_after() {
    let cache = tempfile::tempdir().unwrap();
    let rt = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        max_instances: 10,
        ..Default::default()
    })
    .unwrap();
    assert!(rt.pooling(), "this test needs the pooling allocator");
    assert!(rt.compiles_apart(), "the compiling engine's code must run on the pooled engine");
    let harness = {
        let _batch = rt.hold_compiler();
        assert!(!rt.compiler_alive(), "no compiling engine before the first compile");
        let harness = rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
        assert!(rt.compiler_alive(), "a batch keeps its compiling engine between compiles");
        harness
    };
    assert!(!rt.compiler_alive(), "the batch's end drops the compiling engine");
    let browser = rt.load_file(&test_plugin_dir().join("test-browser.wasm")).unwrap();
    assert!(!rt.compiler_alive(), "a compile alone drops it at once");
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 2, "both compiled into the cache");
    let out = open_a_page(&rt, &harness, &browser).await.unwrap();
    assert!(out.answer.unwrap().contains("no browser"), "plugins compiled apart run on the pooled engine");
}

/// With a compile command (`orchard compile-component`, as `orchard serve` and `eval` set it),
/// plugins compile in a child process — none of the compiler's memory is the server's — and run
/// here from the cache, each child with a bound on its memory. A component that does not compile
/// is the child's error, named; a child that cannot do the work leaves the compile to this
/// process.
#[tokio::test]
async fn plugins_compile_in_a_child_process_and_run_here() {
    let cache = tempfile::tempdir().unwrap();
    let calls = cache.path().join("calls.log");
    // The real subcommand, behind a wrapper that counts its runs and notes its memory limit.
    let script = format!(
        "ulimit -d >> '{}'; RUST_BACKTRACE=1 exec '{}' compile-component \"$@\"",
        calls.display(),
        orchard_tests::orchard_bin().display()
    );
    let command = ["sh", "-c", &script, "sh"].map(std::ffi::OsString::from).to_vec();
    let runtime = |dir: &std::path::Path, command: Vec<std::ffi::OsString>| {
        Runtime::new(RuntimeConfig {
            cache_dir: Some(dir.to_path_buf()),
            max_instances: 10,
            compile_command: Some(command),
            ..Default::default()
        })
        .unwrap()
    };
    let runs = || std::fs::read_to_string(&calls).unwrap_or_default().lines().count();
    let rt = runtime(&cache.path().join("cache"), command);
    let (harness, browser) = {
        let _batch = rt.hold_compiler();
        let harness = rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
        let browser = rt.load_file(&test_plugin_dir().join("test-browser.wasm")).unwrap();
        assert!(!rt.compiler_alive(), "no compiling engine in this process: the child compiled");
        (harness, browser)
    };
    assert_eq!(runs(), 2, "one child per plugin");
    let limits = std::fs::read_to_string(&calls).unwrap();
    let kib = (orchard_runtime::COMPILE_MEMORY_LIMIT / 1024).to_string();
    assert!(limits.lines().all(|l| l == kib), "each child may write {kib} KiB: {limits}");
    assert_eq!(std::fs::read_dir(cache.path().join("cache")).unwrap().count(), 2, "both in the cache");
    let out = open_a_page(&rt, &harness, &browser).await.unwrap();
    assert!(out.answer.unwrap().contains("no browser"), "what the child compiled runs here");
    // Loaded again: from the cache, no child.
    rt.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
    assert_eq!(runs(), 2);

    // Not a component: the child's own words, and no compile here after it.
    let err = rt.compile(b"\0asm not really").map(|_| ()).unwrap_err();
    assert_eq!(runs(), 3);
    assert!(!rt.compiler_alive());
    assert!(err.contains("magic header") || err.contains("failed to parse"), "{err}");
    // What the tenant whose upload it was reads: no backtrace, no path of the server's sources
    // (the child runs with RUST_BACKTRACE=1 here).
    assert!(!err.contains("backtrace") && !err.contains(".rs:"), "{err}");

    // A compile command that cannot do the work: compiled here instead.
    let elsewhere = runtime(&cache.path().join("other"), vec!["false".into()]);
    let harness = elsewhere.load_file(&test_plugin_dir().join("test-harness.wasm")).unwrap();
    assert_eq!(harness.info.kind, PluginKind::Harness);
    assert_eq!(std::fs::read_dir(cache.path().join("other")).unwrap().count(), 1, "cached all the same");

    // A compiler that dies on a component: refused, not tried again in this process.
    let dies = runtime(&cache.path().join("dies"), ["sh", "-c", "kill -9 $$", "sh"].map(Into::into).to_vec());
    let err = dies.load_file(&test_plugin_dir().join("test-browser.wasm")).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("the compiler died on this component (signal 9)"), "{err}");
    assert_eq!(std::fs::read_dir(cache.path().join("dies")).unwrap().count(), 0, "nothing compiled here instead");
}

/// `orchard plugin tools` shows a tool adapter's tools as the model sees them (what the book's
/// catalog is generated from), and says plainly when a plugin has none to show.
#[test]
fn a_tool_adapters_tools_are_listed_from_the_plugin_itself() {
    let (code, out, err) = orchard_tests::orchard(&["plugin", "tools", "shell", "--json"]);
    assert_eq!(code, 0, "{err}");
    let tools: serde_json::Value = serde_json::from_str(&out).unwrap();
    let bash = tools.as_array().unwrap().iter().find(|t| t["name"] == "bash").unwrap_or_else(|| panic!("{out}"));
    assert_eq!(bash["parameters"]["required"], serde_json::json!(["command"]), "{bash}");
    let (code, out, _) = orchard_tests::orchard(&["plugin", "tools", "browser", "--config", r#"{"mode": "marks"}"#]);
    assert_eq!(code, 0);
    assert!(out.contains("| `click` |"), "{out}");
    let (code, _, err) = orchard_tests::orchard(&["plugin", "tools", "script"]);
    assert_ne!(code, 0);
    assert!(err.contains("not a tool adapter"), "{err}");
}
