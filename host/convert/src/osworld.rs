//! OSWorld-format tasks (its `evaluation_examples/examples/<domain>/<id>.json`: an instruction,
//! `config` steps that set the machine up, an `evaluator` of getters and metrics) into Harbor task
//! folders with a desktop (`[environment.desktop]`) that set themselves up and are graded by
//! OSWorld's own code, in their own sandbox:
//!
//! - the task's command runs the config steps with OSWorld's `SetupController` against the
//!   sandbox's desktop service (`assets/osworld/setup.py`), and its healthcheck holds the agent
//!   back until they are done (a failed setup fails the rollout, naming the step);
//! - its verifier (`tests/test.sh`, the `script` grader) runs OSWorld's `DesktopEnv.evaluate`
//!   there (`assets/osworld/evaluate.py`): the getters read the desktop after the agent, the
//!   metrics score, the score is the reward.
//!
//! The agent's sandbox holds only the config steps (`/osworld/task.json`): the evaluator, with
//! its expected answers, is in `tests/`, which the agent never sees.
//!
//! Files a task downloads (its inputs, and the expected files its `cloud_file` getters fetch)
//! are taken from a local mirror when one is given (`--files`: by the URL's file name, or under
//! the task's id as OSWorld's cache keeps them) and carried into the task, which then needs no
//! network; otherwise the task is allowed to reach the hosts it downloads from.
//!
//! Skipped, each with why (also in `OUT/skipped.json`): infeasible tasks (OSWorld grades them by the agent's last action,
//! which a verifier does not see), tasks through OSWorld's proxy, tasks for apps the desktop
//! image lacks or that start from a VM snapshot it cannot reproduce, setup steps and getters
//! that need Chrome's DevTools, VLC, Google Drive or a live site.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::{ConvertError, Report};

const SETUP: &str = include_str!("../assets/osworld/setup.py");
const EVALUATE: &str = include_str!("../assets/osworld/evaluate.py");
const TEST: &str = include_str!("../assets/osworld/test.sh");
/// The same module Orchard's Python client loads OSWorld with (one file, two users).
const IMPORTS: &str = include_str!("../../sdk-python/src/orchard_client/_osworld_imports.py");

/// The apps (OSWorld's `related_apps` and `snapshot` names) the desktop image has.
const APPS: &[&str] = &[
    "init_state",
    "os",
    "terminal",
    "libreoffice_calc",
    "libreoffice_writer",
    "libreoffice_impress",
    "mousepad",
    "text_editor",
    "file_manager",
];

/// Config steps the desktop service and OSWorld's SetupController carry out here.
const STEPS: &[&str] =
    &["download", "upload_file", "open", "launch", "execute", "command", "sleep", "activate_window", "close_window"];

/// Getters that read only what the desktop service serves (files, commands, the tree, the
/// screen) or the task itself.
const GETTERS: &[&str] = &[
    "vm_file",
    "cloud_file",
    "cache_file",
    "content_from_vm_file",
    "vm_command_line",
    "vm_command_error",
    "rule",
    "rule_relativeTime",
    "time_diff_range",
    "accessibility_tree",
    "list_directory",
    "vm_screen_size",
    "vm_window_size",
    "audio_in_slide",
    "background_image_in_slide",
    "conference_city_in_order",
];

#[derive(Debug, Clone)]
/// How OSWorld tasks are converted.
pub struct Options {
    /// The image the tasks' Dockerfiles start from (one with the apps and `desktop_env`).
    pub image: String,
    /// A local mirror of the files the tasks download.
    pub files: Option<PathBuf>,
    /// The screen's size (OSWorld's default: 1920x1080).
    pub width: u32,
    /// The screen's height.
    pub height: u32,
    /// The agent's time limit per task, in seconds.
    pub agent_timeout_sec: f64,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            image: "orchard-desktop:bookworm".into(),
            files: None,
            width: 1920,
            height: 1080,
            agent_timeout_sec: 900.0,
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ConvertError + '_ {
    move |source| ConvertError::Io { path: path.display().to_string(), source }
}

/// The task JSONs under `dir` (or `dir` itself), sorted; at most 8 levels down.
fn task_files(dir: &Path) -> Result<Vec<PathBuf>, ConvertError> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let mut found = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&d).map_err(io(&d))?.flatten() {
            let path = entry.path();
            let kind = entry.file_type().map_err(io(&path))?;
            if kind.is_dir() && depth < 8 {
                stack.push((path, depth + 1));
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "json") {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn normalise(app: &str) -> String {
    app.trim().to_lowercase().replace([' ', '-'], "_")
}

/// Why the task cannot run on an Orchard desktop, if it cannot.
fn unsupported(task: &Value) -> Option<String> {
    let evaluator = &task["evaluator"];
    if evaluator["func"] == "infeasible" {
        return Some(
            "infeasible task: OSWorld grades it by the agent's last action being FAIL, which a verifier does not see"
                .into(),
        );
    }
    if task["proxy"] == true {
        return Some("reaches live sites through OSWorld's proxy".into());
    }
    for app in task["related_apps"].as_array().into_iter().flatten().filter_map(Value::as_str) {
        if !APPS.contains(&normalise(app).as_str()) {
            return Some(format!("app {app:?} is not in the desktop image"));
        }
    }
    if let Some(snapshot) = task["snapshot"].as_str()
        && !APPS.contains(&normalise(snapshot).as_str())
    {
        return Some(format!("starts from the VM snapshot {snapshot:?}, which the desktop image does not reproduce"));
    }
    let steps =
        task["config"].as_array().into_iter().flatten().chain(evaluator["postconfig"].as_array().into_iter().flatten());
    for step in steps {
        let kind = step["type"].as_str().unwrap_or_default();
        if !STEPS.contains(&kind) {
            return Some(format!(
                "setup step {kind:?} (Chrome, Google Drive, logins and proxies are not carried here)"
            ));
        }
    }
    for getter in getters(evaluator) {
        let kind = getter["type"].as_str().unwrap_or_default();
        if !GETTERS.contains(&kind) {
            return Some(format!(
                "getter {kind:?} reads what this desktop does not have (Chrome, VLC, GIMP, a live site)"
            ));
        }
    }
    None
}

/// The evaluator's getter configs (`result` and `expected`, one or a list each).
fn getters(evaluator: &Value) -> Vec<&Value> {
    ["result", "expected"]
        .iter()
        .flat_map(|k| match &evaluator[*k] {
            Value::Array(items) => items.iter().collect::<Vec<_>>(),
            Value::Object(_) => vec![&evaluator[*k]],
            _ => Vec::new(),
        })
        .filter(|g| g.is_object())
        .collect()
}

/// A URL's host and file name.
fn url_parts(url: &str) -> Option<(String, String)> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let host = rest.split(['/', '?', '#']).next()?.split(':').next()?.to_string();
    let name = rest.split(['?', '#']).next()?.rsplit('/').next()?.to_string();
    Some((host, name))
}

/// Where the mirror keeps a URL's file (by its name, or under the task's id), if it does.
fn mirrored(files: Option<&Path>, id: &str, url: &str) -> Option<PathBuf> {
    let (_, name) = url_parts(url)?;
    if name.is_empty() || name.contains("..") || name.contains('/') {
        return None;
    }
    let files = files?;
    // The task's id names a folder of the mirror only when it is one plain name.
    let under_id = (!id.is_empty() && !id.contains('/') && id != ".." && id != ".").then(|| files.join(id).join(&name));
    std::iter::once(files.join(&name)).chain(under_id).find(|p| p.is_file())
}

/// One task folder's contents, made from an OSWorld task.
struct Converted {
    /// The config steps, mirrored downloads turned into uploads of the carried files.
    config: Vec<Value>,
    /// (file in the mirror, its name in the environment's `osworld/files`)
    inputs: Vec<(PathBuf, String)>,
    /// (file in the mirror, the name a `cloud_file` getter caches it under)
    expected: Vec<(PathBuf, String)>,
    /// Hosts the setup downloads from (not mirrored).
    setup_hosts: BTreeSet<String>,
    /// Hosts the verifier downloads from (not mirrored).
    verifier_hosts: BTreeSet<String>,
}

fn carry(task: &Value, files: Option<&Path>) -> Converted {
    let id = task["id"].as_str().unwrap_or_default();
    let mut out = Converted {
        config: Vec::new(),
        inputs: Vec::new(),
        expected: Vec::new(),
        setup_hosts: BTreeSet::new(),
        verifier_hosts: BTreeSet::new(),
    };
    for step in task["config"].as_array().into_iter().flatten() {
        if step["type"] != "download" {
            out.config.push(step.clone());
            continue;
        }
        let (mut uploads, mut downloads) = (Vec::new(), Vec::new());
        for file in step["parameters"]["files"].as_array().into_iter().flatten() {
            let url = file["url"].as_str().unwrap_or_default();
            match mirrored(files, id, url) {
                Some(local) => {
                    let name = format!("{}-{}", out.inputs.len(), url_parts(url).map(|p| p.1).unwrap_or_default());
                    uploads.push(json!({"local_path": format!("/osworld/files/{name}"), "path": file["path"]}));
                    out.inputs.push((local, name));
                }
                None => {
                    if let Some((host, _)) = url_parts(url) {
                        out.setup_hosts.insert(host);
                    }
                    downloads.push(file.clone());
                }
            }
        }
        if !uploads.is_empty() {
            out.config.push(json!({"type": "upload_file", "parameters": {"files": uploads}}));
        }
        if !downloads.is_empty() {
            out.config.push(json!({"type": "download", "parameters": {"files": downloads}}));
        }
    }
    for getter in getters(&task["evaluator"]).into_iter().filter(|g| g["type"] == "cloud_file") {
        let list = |v: &Value| match v {
            Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_string).collect(),
            Value::String(s) => vec![s.clone()],
            _ => Vec::new(),
        };
        for (url, dest) in list(&getter["path"]).into_iter().zip(list(&getter["dest"])) {
            match mirrored(files, id, &url) {
                Some(local) if !dest.contains('/') && !dest.contains("..") => out.expected.push((local, dest)),
                _ => {
                    if let Some((host, _)) = url_parts(&url) {
                        out.verifier_hosts.insert(host);
                    }
                }
            }
        }
    }
    out
}

fn toml_string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml_list(items: impl IntoIterator<Item = String>) -> String {
    format!("[{}]", items.into_iter().map(|s| toml_string(&s)).collect::<Vec<_>>().join(", "))
}

/// Converts the OSWorld task JSONs under `dir` into task folders under `out`.
pub fn convert(dir: &Path, out: &Path, options: &Options) -> Result<Report, ConvertError> {
    let files = task_files(dir)?;
    if files.is_empty() {
        return Err(ConvertError::Input {
            path: dir.display().to_string(),
            reason: "no .json files here (OSWorld's tasks are evaluation_examples/examples/<domain>/<id>.json)".into(),
        });
    }
    let mut report = Report::default();
    for path in files {
        let shown = path.strip_prefix(dir).unwrap_or(&path).display().to_string();
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let task: Value = match serde_json::from_str(&text) {
            Ok(v) => v,
            Err(e) => {
                report.skipped.push((shown, format!("not JSON: {e}")));
                continue;
            }
        };
        let (Some(id), Some(instruction)) = (task["id"].as_str(), task["instruction"].as_str()) else {
            report.skipped.push((shown, "not an OSWorld task (no id, instruction and evaluator)".into()));
            continue;
        };
        if !task["evaluator"].is_object() {
            report.skipped.push((shown, "not an OSWorld task (no id, instruction and evaluator)".into()));
            continue;
        }
        let safe: String =
            id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' }).collect();
        let label = format!("{id} ({shown})");
        if let Some(why) = unsupported(&task) {
            report.skipped.push((label, why));
            continue;
        }
        let domain = path.parent().and_then(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned());
        let name = format!("osworld.{safe}");
        write_task(&out.join(&name), &task, instruction, domain.as_deref(), options)?;
        report.converted.push(name);
    }
    let skipped: Vec<Value> = report.skipped.iter().map(|(task, why)| json!({"task": task, "reason": why})).collect();
    std::fs::create_dir_all(out).map_err(io(out))?;
    let listed = out.join("skipped.json");
    std::fs::write(&listed, serde_json::to_string_pretty(&skipped).expect("JSON")).map_err(io(&listed))?;
    Ok(report)
}

fn write_task(
    dir: &Path,
    task: &Value,
    instruction: &str,
    domain: Option<&str>,
    options: &Options,
) -> Result<(), ConvertError> {
    let carried = carry(task, options.files.as_deref());
    let _ = std::fs::remove_dir_all(dir);
    let setup_dir = dir.join("environment/osworld");
    std::fs::create_dir_all(setup_dir.join("files")).map_err(io(dir))?;
    std::fs::create_dir_all(dir.join("tests/cache")).map_err(io(dir))?;
    let write = |path: PathBuf, text: &str| std::fs::write(&path, text).map_err(io(&path));
    // What the agent's sandbox holds: the config steps only, never the evaluator.
    let setup_task = json!({"id": task["id"], "config": carried.config});
    write(setup_dir.join("task.json"), &serde_json::to_string_pretty(&setup_task).expect("JSON"))?;
    write(setup_dir.join("setup.py"), SETUP)?;
    write(setup_dir.join("_osworld_imports.py"), IMPORTS)?;
    for (local, name) in &carried.inputs {
        let to = setup_dir.join("files").join(name);
        std::fs::copy(local, &to).map_err(io(&to))?;
    }
    write(
        dir.join("environment/Dockerfile"),
        &format!(
            "FROM {}\nCOPY osworld /osworld\nENV OSWORLD_WIDTH={} OSWORLD_HEIGHT={}\nCMD [\"python3\", \"/osworld/setup.py\"]\n",
            options.image, options.width, options.height
        ),
    )?;
    write(dir.join("tests/test.sh"), TEST)?;
    write(dir.join("tests/evaluate.py"), EVALUATE)?;
    write(dir.join("tests/_osworld_imports.py"), IMPORTS)?;
    write(dir.join("tests/osworld_task.json"), &serde_json::to_string_pretty(task).expect("JSON"))?;
    for (local, dest) in &carried.expected {
        let to = dir.join("tests/cache").join(dest);
        std::fs::copy(local, &to).map_err(io(&to))?;
    }
    write(dir.join("instruction.md"), &format!("{}\n", instruction.trim_end()))?;

    let mut toml = format!(
        "version = \"1.0\"\n\n[agent]\ntimeout_sec = {}\n\n[verifier]\ntimeout_sec = 600\n",
        options.agent_timeout_sec
    );
    if !carried.verifier_hosts.is_empty() {
        toml += &format!(
            "network_mode = \"allowlist\"\nallowed_hosts = {}\n",
            toml_list(carried.verifier_hosts.iter().cloned())
        );
    }
    if !carried.setup_hosts.is_empty() {
        toml += &format!(
            "\n[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = {}\n",
            toml_list(carried.setup_hosts.iter().cloned())
        );
    }
    toml += &format!(
        "\n[environment.desktop]\nwidth = {}\nheight = {}\n\n\
         [environment.healthcheck]\n# The config steps (setup.py, the task's command) are done: the agent starts.\n\
         command = \"python3 /osworld/setup.py --wait\"\ntimeout_sec = 610\nretries = 1\nstart_period_sec = 0\n\n\
         [metadata]\nsource = \"osworld\"\nosworld_id = {}\n",
        options.width,
        options.height,
        toml_string(task["id"].as_str().unwrap_or_default()),
    );
    if let Some(domain) = domain {
        toml += &format!("domain = {}\n", toml_string(domain));
    }
    if let Some(snapshot) = task["snapshot"].as_str() {
        toml += &format!("snapshot = {}\n", toml_string(snapshot));
    }
    let apps = task["related_apps"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string);
    toml += &format!("related_apps = {}\n", toml_list(apps));
    let metric = &task["evaluator"]["func"];
    toml += &format!("metric = {}\n", toml_string(&metric.as_str().map_or_else(|| metric.to_string(), str::to_string)));
    write(dir.join("task.toml"), &toml)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(extra: Value) -> Value {
        let mut t = json!({
            "id": "abc-1", "snapshot": "libreoffice_calc", "instruction": "Do it.",
            "related_apps": ["libreoffice_calc"],
            "config": [{"type": "download", "parameters": {"files": [
                {"url": "https://files.example.org/d/in.xlsx", "path": "/root/in.xlsx"},
                {"url": "https://other.example.org/x.txt", "path": "/root/x.txt"}]}},
                {"type": "open", "parameters": {"path": "/root/in.xlsx"}}],
            "evaluator": {"func": "compare_table",
                "result": {"type": "vm_file", "path": "/root/in.xlsx", "dest": "in.xlsx"},
                "expected": {"type": "cloud_file", "path": "https://files.example.org/d/gold.xlsx", "dest": "gold.xlsx"}}
        });
        for (k, v) in extra.as_object().unwrap() {
            t[k] = v.clone();
        }
        t
    }

    #[test]
    fn a_task_id_does_not_lead_the_mirror_lookup_out_of_the_mirror() {
        let dir = tempfile::tempdir().unwrap();
        let mirror = dir.path().join("mirror");
        std::fs::create_dir_all(mirror.join("abc")).unwrap();
        std::fs::write(mirror.join("abc/in.txt"), "x").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "s").unwrap();
        let url = "https://files.example.org/in.txt";
        assert_eq!(mirrored(Some(&mirror), "abc", url), Some(mirror.join("abc/in.txt")));
        assert_eq!(mirrored(Some(&mirror), "..", "https://files.example.org/secret.txt"), None);
        assert_eq!(mirrored(Some(&mirror), "x/../..", "https://files.example.org/secret.txt"), None);
    }

    #[test]
    fn tasks_are_converted_or_skipped_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let tasks = dir.path().join("examples");
        std::fs::create_dir_all(tasks.join("libreoffice_calc")).unwrap();
        std::fs::create_dir_all(tasks.join("chrome")).unwrap();
        let put = |p: &str, v: Value| std::fs::write(tasks.join(p), v.to_string()).unwrap();
        put("libreoffice_calc/abc-1.json", task(json!({})));
        put("libreoffice_calc/inf.json", task(json!({"id": "inf", "evaluator": {"func": "infeasible"}})));
        put("chrome/c.json", task(json!({"id": "c", "related_apps": ["chrome"], "snapshot": "chrome"})));
        put(
            "libreoffice_calc/tabs.json",
            task(json!({"id": "tabs", "config": [{"type": "chrome_open_tabs", "parameters": {}}]})),
        );
        put(
            "libreoffice_calc/web.json",
            task(json!({"id": "web", "evaluator": {"func": "x", "result": {"type": "info_from_website"}}})),
        );
        put("libreoffice_calc/snap.json", task(json!({"id": "snap", "related_apps": [], "snapshot": "thunderbird"})));
        std::fs::write(tasks.join("test_all.json"), r#"{"chrome": ["c"]}"#).unwrap();
        let mirror = dir.path().join("files");
        std::fs::create_dir_all(&mirror).unwrap();
        std::fs::write(mirror.join("in.xlsx"), "IN").unwrap();
        std::fs::write(mirror.join("gold.xlsx"), "GOLD").unwrap();

        let out = dir.path().join("out");
        let options = Options { files: Some(mirror), ..Default::default() };
        let report = convert(&tasks, &out, &options).unwrap();
        assert_eq!(report.converted, ["osworld.abc-1"]);
        let why: Vec<String> = report.skipped.iter().map(|(t, w)| format!("{t}: {w}")).collect();
        let said = why.join("\n");
        for expected in [
            "c (chrome/c.json): app \"chrome\" is not in the desktop image",
            "inf (libreoffice_calc/inf.json): infeasible task",
            "tabs (libreoffice_calc/tabs.json): setup step \"chrome_open_tabs\"",
            "web (libreoffice_calc/web.json): getter \"info_from_website\"",
            "snap (libreoffice_calc/snap.json): starts from the VM snapshot \"thunderbird\"",
            "test_all.json: not an OSWorld task",
        ] {
            assert!(said.contains(expected), "{expected:?} not in:\n{said}");
        }

        let t = out.join("osworld.abc-1");
        // The mirrored input is carried and uploaded; the other still downloads, its host allowed.
        let setup: Value =
            serde_json::from_str(&std::fs::read_to_string(t.join("environment/osworld/task.json")).unwrap()).unwrap();
        assert_eq!(setup["config"][0]["type"], "upload_file", "{setup}");
        assert_eq!(setup["config"][0]["parameters"]["files"][0]["local_path"], "/osworld/files/0-in.xlsx");
        assert_eq!(setup["config"][1]["type"], "download");
        assert_eq!(setup["config"][2]["type"], "open");
        assert!(setup.get("evaluator").is_none(), "the agent's sandbox must not hold the evaluator");
        assert_eq!(std::fs::read_to_string(t.join("environment/osworld/files/0-in.xlsx")).unwrap(), "IN");
        assert_eq!(std::fs::read_to_string(t.join("tests/cache/gold.xlsx")).unwrap(), "GOLD");
        let toml: toml::Value = toml::from_str(&std::fs::read_to_string(t.join("task.toml")).unwrap()).unwrap();
        assert_eq!(toml["environment"]["allowed_hosts"].as_array().unwrap(), &[toml::Value::from("other.example.org")]);
        assert!(toml["verifier"].get("allowed_hosts").is_none(), "the expected file is mirrored: {toml}");
        assert_eq!(toml["environment"]["desktop"]["width"].as_integer(), Some(1920));
        assert_eq!(toml["metadata"]["osworld_id"].as_str(), Some("abc-1"));
        assert_eq!(toml["metadata"]["domain"].as_str(), Some("libreoffice_calc"));
        assert!(
            std::fs::read_to_string(t.join("environment/Dockerfile"))
                .unwrap()
                .starts_with("FROM orchard-desktop:bookworm\n")
        );
        assert!(convert(&dir.path().join("nothing"), &out, &options).is_err());
    }
}
