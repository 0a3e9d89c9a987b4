//! Two contract versions side by side: components built against the frozen
//! `orchard:plugin@0.1.0` keep loading and running beside the shipped plugins, which speak
//! `0.2.0`; `orchard plugin check` says which version a component speaks.

use orchard_tests::evals::{eval, read_json};
use orchard_tests::{orchard, plugin_dir, test_plugin_dir};

fn examples() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/tasks").display().to_string()
}

#[test]
fn plugin_check_says_which_version_a_component_speaks() {
    let shipped = plugin_dir().join("script.wasm").display().to_string();
    let (code, stdout, stderr) = orchard(&["plugin", "check", &shipped]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("contract:     orchard:plugin@0.2.0"), "{stdout}");
    assert!(stdout.contains("world:        orchard:plugin/grader@0.2.0"), "{stdout}");
    let frozen = test_plugin_dir().join("test-grader-v01.wasm").display().to_string();
    let (code, stdout, stderr) = orchard(&["plugin", "check", &frozen]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("contract:     orchard:plugin@0.1.0"), "{stdout}");
    let (_, listing, _) = orchard(&["plugin", "list", &plugin_dir().display().to_string()]);
    let header = listing.lines().next().unwrap();
    assert!(header.contains("CONTRACT"), "{listing}");
    // Every shipped plugin speaks 0.2.0 but the two 0.3.0 needs: the program harness (a harness
    // that imports the sandbox) and the desktop driver (a world new in 0.3.0).
    for line in listing.lines().skip(1) {
        let version = if line.starts_with("program ") || line.starts_with("desktop ") { " 0.3.0 " } else { " 0.2.0 " };
        assert!(line.contains(version), "{version}: {line}");
    }
    let desktop = plugin_dir().join("desktop.wasm").display().to_string();
    let (code, stdout, stderr) = orchard(&["plugin", "check", &desktop]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("world:        orchard:plugin/desktop-driver@0.3.0"), "{stdout}");
    assert!(stdout.contains("orchard:plugin/desktop@0.3.0"), "it imports the desktop: {stdout}");
    let program = plugin_dir().join("program.wasm").display().to_string();
    let (code, stdout, stderr) = orchard(&["plugin", "check", &program]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("world:        orchard:plugin/harness@0.3.0"), "{stdout}");
    assert!(stdout.contains("orchard:plugin/sandbox@0.3.0"), "it imports the sandbox: {stdout}");
}

#[test]
fn a_0_1_0_grader_grades_beside_0_2_0_harnesses_and_tools() {
    let frozen = test_plugin_dir().join("test-grader-v01.wasm").display().to_string();
    let tasks = examples();
    let args = ["--harness", "oracle", "--tools", "shell", "--grant", "solution"];
    let (old, old_out, _) = eval(&[&[tasks.as_str(), "--grader", &frozen][..], &args[..]].concat());
    let (new, _, _) = eval(&[&[tasks.as_str(), "--grader", "script"][..], &args[..]].concat());
    assert_eq!(old["rollouts"], new["rollouts"], "{old:#}\n{new:#}");
    assert_eq!(old["passed"], new["passed"], "{old:#}\n{new:#}");
    assert!(old["passed"].as_u64().unwrap() > 0, "{old:#}");
    let any = std::fs::read_dir(old_out.path().join("rollouts")).unwrap().next().unwrap().unwrap().path();
    let r = read_json(&any);
    assert_eq!(r["grader"], "test-grader-v01@0.1.0", "{r:#}");
    assert!(r["verdict"]["explanation"].as_str().unwrap_or_default().contains("a 0.1.0 grader"), "{r:#}");
}
