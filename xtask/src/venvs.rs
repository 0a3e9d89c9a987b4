//! Python environments for the tests of Orchard against the field's own tools, one venv per
//! Python version under `target/` (cached across runs; the system Python stays untouched).
//!
//! Harbor (PyPI `harbor`) needs Python ≥ 3.12, which these machines have through pyenv; Inspect
//! (`inspect-ai`) shares the venv. The venv
//! holds the pinned tools and Orchard's own Python client (`host/sdk-python`, editable).
//!
//! Disk is finite on CI machines (one once failed setup for it, installing these very packages):
//! when too little is free, the venv is not made and `target/py312.skipped` says why — the
//! tests that need it then report that reason instead of a setup failure hiding every other
//! result. With the venv present they run, and fail like any other test.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{run, workspace_root};

/// What the Python 3.12 venv holds, pinned.
const PY312_PACKAGES: &[&str] = &["harbor==0.26.0", "inspect-ai==0.3.285"];

/// Installed without their dependencies: OpenEnv's client needs only what the packages above
/// bring (its own list drags in Gradio, hundreds of megabytes, for its server's web UI); so does
/// OSWorld's controller (`desktop-env`'s list brings its whole benchmark stack).
const PY312_NO_DEPS: &[&str] = &["openenv-core==0.3.0"];

/// The desktop image's Python packages (`deploy/images/desktop/python.txt`, one pinned per line):
/// pyautogui, OSWorld's `desktop_env` and what it loads.
const DESKTOP_PYTHON: &str = include_str!("../../deploy/images/desktop/python.txt");

/// The pinned packages of `DESKTOP_PYTHON`: (installed with their dependencies, `desktop-env`
/// installed without — its own list is OSWorld's whole benchmark stack).
pub fn desktop_python_packages() -> (Vec<&'static str>, &'static str) {
    let lines: Vec<&str> =
        DESKTOP_PYTHON.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let env = lines.iter().copied().find(|l| l.starts_with("desktop-env")).expect("python.txt pins desktop-env");
    (lines.into_iter().filter(|l| !l.starts_with("desktop-env")).collect(), env)
}

/// Least free space (bytes) to start the Python 3.12 venv: it takes ~0.5 GB, and the build after
/// setup needs the rest.
const PY312_MIN_FREE: u64 = 6 << 30;

/// The venv's directory.
pub fn py312_dir() -> PathBuf {
    workspace_root().join("target/py312")
}

/// Makes (or completes) the Python 3.12 venv.
pub fn py312() -> anyhow::Result<()> {
    let dir = py312_dir();
    let skipped = workspace_root().join("target/py312.skipped");
    let _ = std::fs::remove_file(&skipped);
    let (osworld, desktop_env) = desktop_python_packages();
    let wanted = [PY312_PACKAGES, PY312_NO_DEPS, &osworld, &[desktop_env]].concat().join("\n");
    let ready = dir.join("bin/harbor").exists()
        && std::fs::read_to_string(dir.join(".orchard-packages")).is_ok_and(|s| s == wanted);
    if ready {
        return Ok(());
    }
    let Some(python) = python312() else {
        return skip(&skipped, "no Python 3.12 (pyenv's 3.12 or python3.12 on PATH)");
    };
    std::fs::create_dir_all(workspace_root().join("target"))?;
    let free = free_bytes(&workspace_root().join("target"));
    if free.is_some_and(|f| f < PY312_MIN_FREE) {
        let gib = free.unwrap_or(0) as f64 / (1u64 << 30) as f64;
        return skip(&skipped, &format!("{gib:.1} GiB free, {} GiB wanted", PY312_MIN_FREE >> 30));
    }
    eprintln!("xtask: making {} ({})", dir.display(), PY312_PACKAGES.join(", "));
    run(Command::new(&python).args(["-m", "venv"]).arg(&dir))?;
    let pip = dir.join("bin/pip");
    // No bytecode: a third less disk, and the tests import little of it.
    run(Command::new(&pip)
        .args(["install", "--quiet", "--no-cache-dir", "--no-compile"])
        .args(PY312_PACKAGES)
        .env("PIP_NO_CACHE_DIR", "1"))?;
    run(Command::new(&pip)
        .args(["install", "--quiet", "--no-cache-dir", "--no-compile"])
        .args(&osworld)
        .env("PIP_NO_CACHE_DIR", "1"))?;
    run(Command::new(&pip)
        .args(["install", "--quiet", "--no-cache-dir", "--no-deps", "--editable"])
        .arg(workspace_root().join("host/sdk-python")))?;
    run(Command::new(&pip)
        .args(["install", "--quiet", "--no-cache-dir", "--no-compile", "--no-deps"])
        .args(PY312_NO_DEPS)
        .arg(desktop_env))?;
    std::fs::write(dir.join(".orchard-packages"), wanted)?;
    Ok(())
}

fn skip(marker: &Path, reason: &str) -> anyhow::Result<()> {
    eprintln!("xtask: WARNING: not making the Python 3.12 venv (Harbor's tests will say so): {reason}");
    std::fs::create_dir_all(marker.parent().expect("under target/"))?;
    std::fs::write(marker, reason)?;
    Ok(())
}

fn python312() -> Option<PathBuf> {
    let pyenv = Command::new("pyenv").args(["prefix", "3.12"]).output().ok().filter(|o| o.status.success());
    if let Some(out) = pyenv {
        let prefix = String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_string();
        let python = Path::new(&prefix).join("bin/python3.12");
        if python.exists() {
            return Some(python);
        }
    }
    crate::have("python3.12").then(|| PathBuf::from("python3.12"))
}

fn free_bytes(path: &Path) -> Option<u64> {
    let out = Command::new("df").args(["--output=avail", "-B1"]).arg(path).output().ok()?;
    String::from_utf8_lossy(&out.stdout).lines().nth(1)?.trim().parse().ok()
}

/// The test program cache (`orchard eval --program-cache`): real agent programs the `program`
/// harness runs inside sandboxes. mini-swe-agent is a venv of the system's Python, which is the
/// one the `host` image shows a sandbox (`/usr/bin/python3`), so the venv works at any path it is
/// bound to; Kimi-CLI brings its own Python (see `kimi_cli`).
const PROGRAMS: &[(&str, &str)] = &[("mini-swe-agent", "mini-swe-agent==2.4.6")];

/// The program cache's directory.
pub fn programs_dir() -> PathBuf {
    workspace_root().join("target/programs")
}

/// Makes (or completes) the program cache. Like the Python 3.12 venv, it is not made when the
/// disk has too little room: `target/programs.skipped` says why, and the tests that need it say
/// so instead of failing setup for every other test.
pub fn programs() -> anyhow::Result<()> {
    let python = Path::new("/usr/bin/python3");
    let skipped = workspace_root().join("target/programs.skipped");
    let _ = std::fs::remove_file(&skipped);
    for (name, requirement) in PROGRAMS {
        let dir = programs_dir().join(name);
        if std::fs::read_to_string(dir.join(".orchard-packages")).is_ok_and(|s| s == *requirement) {
            continue;
        }
        std::fs::create_dir_all(programs_dir())?;
        if let Some(reason) = too_little_room(&programs_dir()) {
            eprintln!("xtask: WARNING: not making the program cache (its tests will say so): {reason}");
            std::fs::write(&skipped, reason)?;
            return Ok(());
        }
        if !python.exists() {
            anyhow::bail!("the program cache needs the system's /usr/bin/python3 (Debian: python3-venv)");
        }
        eprintln!("xtask: making {} ({requirement})", dir.display());
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new(python).args(["-m", "venv"]).arg(&dir))?;
        run(Command::new(dir.join("bin/pip"))
            .args(["install", "--quiet", "--no-cache-dir", requirement])
            .env("PIP_NO_CACHE_DIR", "1"))?;
        std::fs::write(dir.join(".orchard-packages"), requirement)?;
    }
    kimi_cli()?;
    openhands()
}

/// Kimi-CLI 1.52 needs Python 3.13, which the `host` image does not have: pyenv's 3.13 is
/// copied into the cache (`python-3.13`, run with its `lib` on `LD_LIBRARY_PATH`: it is built
/// shared) and the package installed beside it (`kimi-cli`, on `PYTHONPATH`).
fn kimi_cli() -> anyhow::Result<()> {
    const REQUIREMENT: &str = "kimi-cli==1.52.0";
    let root = programs_dir();
    let skipped = root.join("kimi-cli.skipped");
    let _ = std::fs::remove_file(&skipped);
    let target = root.join("kimi-cli");
    if std::fs::read_to_string(target.join(".orchard-packages")).is_ok_and(|s| s == REQUIREMENT) {
        return Ok(());
    }
    let prefix = Command::new("pyenv").args(["prefix", "3.13"]).output().ok().filter(|o| o.status.success());
    let Some(prefix) =
        prefix.map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim().to_string())
    else {
        std::fs::write(&skipped, "no Python 3.13 (pyenv's)")?;
        eprintln!("xtask: WARNING: no Python 3.13 for kimi-cli in the program cache (its tests will say so)");
        return Ok(());
    };
    let python_dir = root.join("python-3.13");
    eprintln!("xtask: making {} and {} ({REQUIREMENT})", python_dir.display(), target.display());
    let _ = std::fs::remove_dir_all(&python_dir);
    let _ = std::fs::remove_dir_all(&target);
    run(Command::new("cp").arg("-a").arg(&prefix).arg(&python_dir))?;
    // The standard library's own tests are a third of it and nothing runs them.
    let _ = std::fs::remove_dir_all(python_dir.join("lib/python3.13/test"));
    pip_target(&python_dir, &target, &[REQUIREMENT])?;
    std::fs::write(target.join(".orchard-packages"), REQUIREMENT)?;
    Ok(())
}

/// OpenHands' SDK and tools (Python ≥ 3.12: the cache's 3.13, see `kimi_cli`), beside it in
/// `openhands`. It is the largest (~650 MB, a browser stack among its dependencies): skipped,
/// with the reason in `openhands.skipped`, when the disk has too little room.
fn openhands() -> anyhow::Result<()> {
    const REQUIREMENTS: [&str; 2] = ["openhands-sdk==1.58.2", "openhands-tools==1.58.2"];
    let root = programs_dir();
    let skipped = root.join("openhands.skipped");
    let _ = std::fs::remove_file(&skipped);
    let target = root.join("openhands");
    let wanted = REQUIREMENTS.join("\n");
    if std::fs::read_to_string(target.join(".orchard-packages")).is_ok_and(|s| s == wanted) {
        return Ok(());
    }
    let python_dir = root.join("python-3.13");
    if !python_dir.join("bin/python3.13").exists() {
        std::fs::write(&skipped, "no Python 3.13 in the program cache")?;
        return Ok(());
    }
    if let Some(reason) = too_little_room(&root) {
        eprintln!("xtask: WARNING: not installing OpenHands in the program cache: {reason}");
        std::fs::write(&skipped, reason)?;
        return Ok(());
    }
    eprintln!("xtask: making {} ({})", target.display(), REQUIREMENTS.join(", "));
    let _ = std::fs::remove_dir_all(&target);
    pip_target(&python_dir, &target, &REQUIREMENTS)?;
    std::fs::write(target.join(".orchard-packages"), wanted)?;
    Ok(())
}

/// Why `dir`'s disk is too full for a large install (under 6 GiB free), if it is.
fn too_little_room(dir: &Path) -> Option<String> {
    let free = free_bytes(dir)?;
    (free < PY312_MIN_FREE)
        .then(|| format!("{:.1} GiB free, {} GiB wanted", free as f64 / (1u64 << 30) as f64, PY312_MIN_FREE >> 30))
}

/// `pip install --target TARGET REQUIREMENTS` with the cache's copied Python (built shared: its
/// `lib` on `LD_LIBRARY_PATH`).
fn pip_target(python_dir: &Path, target: &Path, requirements: &[&str]) -> anyhow::Result<()> {
    run(Command::new(python_dir.join("bin/python3.13"))
        .args(["-m", "pip", "install", "--quiet", "--no-cache-dir", "--target"])
        .arg(target)
        .args(requirements)
        .env("LD_LIBRARY_PATH", python_dir.join("lib")))
}
