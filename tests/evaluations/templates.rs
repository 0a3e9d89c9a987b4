//! The grader templates in `examples/graders/`, taken from an empty folder to a component that
//! `orchard plugin check` accepts and `orchard eval` uses, as the guide there says.

use std::path::{Path, PathBuf};
use std::process::Command;

use orchard_tests::evals::{eval, read_json};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// A fresh folder holding the template's files and the contract, as step 1 of the guide.
fn start(language: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let template = workspace().join("examples/graders").join(language);
    assert!(
        Command::new("cp")
            .arg("-r")
            .arg(format!("{}/.", template.display()))
            .arg(dir.path())
            .status()
            .unwrap()
            .success()
    );
    assert!(
        Command::new("cp")
            .arg("-r")
            .arg(workspace().join("wit/0.2.0"))
            .arg(dir.path().join("wit"))
            .status()
            .unwrap()
            .success()
    );
    dir
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Steps 4 and 5: check it, then grade two answers with it.
fn check_and_use(component: &Path, language: &str) {
    let (code, stdout, stderr) = orchard_tests::orchard(&["plugin", "check", component.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("kind:         grader") && stdout.contains(&format!("({language} template)")), "{stdout}");
    let tasks = tempfile::tempdir().unwrap();
    for (name, expected) in [("hit", "42"), ("miss", "43")] {
        let dir = tasks.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("instruction.md"), "What is six times seven?").unwrap();
        std::fs::write(dir.join("task.toml"), format!("[metadata]\nexpected = \"{expected}\"\n")).unwrap();
    }
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let root = tasks.path().display().to_string();
    let (summary, out, _) = eval(&[
        &root,
        "--harness",
        &harness,
        "--grader",
        component.to_str().unwrap(),
        "--config",
        r#"{"mode": "answer", "answer": "the answer is 42"}"#,
    ]);
    assert_eq!((summary["passed"].as_u64(), summary["graded"].as_u64()), (Some(1), Some(2)), "{summary:#}");
    let hit = read_json(&out.path().join("rollouts/hit__test-harness__1.json"));
    assert_eq!(hit["verdict"]["explanation"], "answer contains \"42\"");
}

#[test]
fn the_rust_template() {
    let dir = start("rust");
    // One target directory for every run of this test: the dependencies build once.
    let target = workspace().join("target/template-rust");
    run(Command::new("cargo")
        .args(["build", "--quiet", "--offline", "--release", "--target", "wasm32-wasip2"])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(dir.path()));
    let component = dir.path().join("contains.wasm");
    std::fs::copy(target.join("wasm32-wasip2/release/contains_grader.wasm"), &component).unwrap();
    check_and_use(&component, "Rust");
}

#[test]
fn the_python_template() {
    let dir = start("python");
    // Where `cargo xtask setup` installed it (a pip scripts folder may be off PATH).
    let program = std::env::var_os("COMPONENTIZE_PY").unwrap_or_else(|| "componentize-py".into());
    run(Command::new(program)
        .args(["-d", "wit", "-w", "grader", "componentize", "app", "-o", "contains.wasm"])
        .current_dir(dir.path()));
    check_and_use(&dir.path().join("contains.wasm"), "Python");
}

#[test]
fn the_javascript_template() {
    let dir = start("javascript");
    // `npm install` of the guide, from the copy the project's build already installed.
    std::os::unix::fs::symlink(workspace().join("graders/keywords-js/node_modules"), dir.path().join("node_modules"))
        .unwrap();
    run(Command::new("npm").args(["run", "--silent", "build"]).current_dir(dir.path()));
    check_and_use(&dir.path().join("contains.wasm"), "JavaScript");
}
