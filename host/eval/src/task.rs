//! Harbor-style task folders.
//!
//! ```text
//! my-task/
//!   task.toml          timeouts, resources, image, internet, env (all optional)
//!   instruction.md     what the agent is asked (required)
//!   tests/test.sh      the verifier; writes /logs/verifier/reward.txt or reward.json
//!   solution/solve.sh  the reference solution (for the oracle harness)
//!   environment/       Dockerfile: WORKDIR, ENV and COPY/ADD of local files are honoured;
//!                      it is not built (RUN is ignored; FROM is replaced by the eval's image)
//! ```
//!
//! `task.toml` is read by `orchard-task-config` (Harbor's schema 1.4 plus Orchard's keys, every
//! key known, what a sandbox cannot give refused by name); this module turns it, the Dockerfile and
//! the folder into a [`Task`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use orchard_task_config::{NetworkMode, TaskConfig};

use crate::healthcheck::Healthcheck;
use orchard_task_files::{FileError, TaskFiles};
use serde_json::{Value, json};

#[derive(Debug, thiserror::Error)]
#[error("task {path}: {reason}")]
/// Why a task could not be read.
pub struct TaskError {
    /// The task folder.
    pub path: String,
    /// What is wrong in it.
    pub reason: String,
}

#[derive(Debug, Clone)]
/// A task, read from its folder.
pub struct Task {
    /// Its id (the folder's name, or `[task] name`).
    pub id: String,
    /// The domain the task belongs to, for summaries: its `[metadata] domain`, else the name
    /// of the folder of tasks it was loaded from (`examples/assistant/x` → `assistant`).
    pub domain: String,
    /// Where the task was read from, as errors and listings name it (relative to what the
    /// caller named: never a server's own path).
    pub location: String,
    /// What the agent is asked.
    pub instruction: String,
    /// The agent's time limit, in seconds.
    pub agent_timeout_sec: f64,
    /// `[agent] tools`: the tool adapters the task names, used instead of the run's.
    pub tools: Option<Vec<String>>,
    /// `[[environment.mcp_servers]]` were declared: the `mcp` adapter joins the task's tools,
    /// configured with them (`[metadata.tool_config.mcp]`).
    pub mcp: bool,
    /// `[verifier] grader`: the grader the task names, used instead of the run's.
    pub grader: Option<String>,
    /// The verifier's time limit, in seconds.
    pub verifier_timeout_sec: f64,
    /// A prebuilt image the task names; `None` when it only has a Dockerfile (or nothing).
    pub image: Option<String>,
    /// CPU, in cores.
    pub cpus: Option<f64>,
    /// Memory, in bytes.
    pub memory_bytes: Option<u64>,
    /// Writable disk, in bytes (`storage_mb`).
    pub disk_bytes: Option<u64>,
    /// Whether the sandbox may reach the internet.
    pub allow_internet: bool,
    /// With the network open: the only hosts, IPs and CIDRs it may reach (`allowlist`).
    pub network_allow: Vec<String>,
    /// The working directory.
    pub workdir: Option<String>,
    /// The sandbox's environment.
    pub env: BTreeMap<String, String>,
    /// Files the Dockerfile copies in: (file or directory in the build context, destination).
    pub copies: Vec<(PathBuf, String)>,
    /// The build context (`environment/`), its own root: what COPY and ADD read.
    pub context: Option<TaskFiles>,
    /// The Dockerfile's ENTRYPOINT/CMD: started in the background once the files are in place
    /// (a service the task serves, e.g. a web app on the sandbox's loopback).
    pub start: Option<Vec<String>>,
    /// `[environment.healthcheck]`, else the Dockerfile's HEALTHCHECK CMD: the rollout waits
    /// until it succeeds.
    pub healthcheck: Option<Healthcheck>,
    /// `[environment.desktop]`: an X desktop started in the sandbox before the agent.
    pub desktop: Option<orchard_desktop_client::DesktopSpec>,
    /// Local tar archives (`.tar`, `.tar.gz`, `.tgz`) the Dockerfile ADDs: unpacked at the
    /// destination, as Docker does (how a task ships a repository with its git history).
    pub archives: Vec<(PathBuf, String)>,
    /// Whether the folder has `tests/` (copied into the grading sandbox) and `solution/` (shown
    /// to a harness granted it).
    pub has_tests: bool,
    /// Whether it has `solution/`.
    pub has_solution: bool,
    /// The task folder itself: every read of it goes through here.
    pub files: TaskFiles,
    /// `[[steps]]`: a multi-step task's steps, in order (empty: one step, the task itself).
    pub steps: Vec<crate::steps::TaskStep>,
    /// How a multi-step task's reward comes from its steps' (`mean` unless `final`).
    pub step_reward: orchard_task_config::RewardStrategy,
    /// task.toml as JSON (all of it), plus what the verifier needs.
    pub metadata: Value,
    /// `[verifier] environment_mode`: where the task is graded (the grader's default if absent).
    pub verifier_mode: Option<orchard_verifier::Mode>,
    /// `[verifier] artifacts`: paths carried into a separate verifier environment as they are.
    pub verifier_artifacts: Vec<String>,
    /// The repository whose change a separate verifier carries: `[verifier] repo_dir`, else
    /// `[metadata] repo_dir`, else the working directory when the task names a `base_commit`.
    pub verifier_repo_dir: Option<String>,
    /// Files the gold patch touches (`[metadata] patch`, `tests/gold.patch`, or diffs in
    /// `solution/`): their changes are never dropped as test machinery.
    pub gold_files: std::collections::BTreeSet<String>,
}

/// Most bytes of a task's text files the host reads (task.toml, instruction.md, the
/// Dockerfile): an instruction is not a gigabyte.
pub const MAX_TEXT_BYTES: u64 = 1 << 20;
/// Most bytes of a patch or recorded solution read for what it touches or does.
pub const MAX_PATCH_BYTES: u64 = 16 << 20;
/// Most bytes of file content copied from a task folder into a sandbox in one go (tests/,
/// solution/, a COPY).
pub const MAX_COPY_BYTES: u64 = 512 << 20;

/// A task folder, or a folder of task folders (sorted by name), on the operator's machine:
/// what the folder's tasks read stays beneath the folder given (beneath its parent when it is a
/// task folder itself, so that it may share a sibling's `environment/`); errors name paths as
/// given.
pub fn load_tasks(path: &Path) -> Result<Vec<Task>, TaskError> {
    let label = path.display().to_string();
    let err = |reason: String| TaskError { path: label.clone(), reason };
    if !path.is_dir() {
        return Err(err("not a directory".into()));
    }
    let is_task = path.join("instruction.md").is_file() || path.join("task.toml").is_file();
    if is_task {
        let canonical = path.canonicalize().map_err(|e| err(e.to_string()))?;
        let (Some(parent), Some(name)) = (canonical.parent(), canonical.file_name()) else {
            return Err(err("a task folder needs a parent folder".into()));
        };
        let parent_label = path.parent().map(|p| p.display().to_string()).unwrap_or_default();
        let root = TaskFiles::open(parent, parent_label).map_err(|e| err(e.to_string()))?;
        let files = root.at(Path::new(name)).map_err(|e| err(e.to_string()))?;
        let mut task = load_task(&files)?;
        if task.metadata.pointer("/metadata/domain").is_none()
            && let Some(folder) = parent.file_name()
        {
            task.domain = folder.to_string_lossy().into_owned();
        }
        return Ok(vec![task]);
    }
    let domain = path
        .canonicalize()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "tasks".into());
    let root = TaskFiles::open(path, label.clone()).map_err(|e| err(e.to_string()))?;
    load_root(&root, &domain)
}

/// The tasks of a folder someone else gave (an upload, a dataset the server serves): `root` is
/// the boundary of every read, errors name paths beneath it after `label` alone (never where
/// it lies on the server), and tasks without a `[metadata] domain` take `domain`.
pub fn load_tasks_in(root: &Path, label: &str, domain: &str) -> Result<Vec<Task>, TaskError> {
    let files = TaskFiles::open(root, label)
        .map_err(|_| TaskError { path: label.to_string(), reason: "the task folders cannot be opened".into() })?;
    if is_task(&files) {
        return Ok(vec![load_task(&files)?]);
    }
    load_root(&files, domain)
}

fn is_task(files: &TaskFiles) -> bool {
    files.is_file(Path::new("instruction.md")) || files.is_file(Path::new("task.toml"))
}

/// Every task folder directly in `root`, sorted by name.
fn load_root(root: &TaskFiles, domain: &str) -> Result<Vec<Task>, TaskError> {
    let err = |reason: String| TaskError { path: root.display(Path::new("")), reason };
    let mut tasks = Vec::new();
    for name in root.folders().map_err(|e| err(e.to_string()))? {
        let files = root.at(Path::new(&name)).map_err(|e| err(e.to_string()))?;
        if !is_task(&files) {
            continue;
        }
        let mut task = load_task(&files)?;
        if task.metadata.pointer("/metadata/domain").is_none() {
            task.domain = domain.to_string();
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(err("holds no task (a task folder has an instruction.md)".into()));
    }
    Ok(tasks)
}

/// One task folder, read through `files` (based at the folder).
pub fn load_task(files: &TaskFiles) -> Result<Task, TaskError> {
    let location = files.display(Path::new(""));
    let err = |reason: String| TaskError { path: location.clone(), reason };
    let file_err = |e: FileError| TaskError { path: location.clone(), reason: e.to_string() };
    let id = files.name().ok_or_else(|| err("no folder name".into()))?;
    let instruction = files
        .read_string(Path::new("instruction.md"), MAX_TEXT_BYTES)
        .map_err(file_err)?
        .ok_or_else(|| err("instruction.md: no such file".into()))?;
    let text = files.read_string(Path::new("task.toml"), MAX_TEXT_BYTES).map_err(file_err)?.unwrap_or_default();
    let (config, table) = TaskConfig::parse_with_table(&text).map_err(|e| err(format!("task.toml: {e}")))?;
    let refused = config.unsupported();
    if !refused.is_empty() {
        let list: Vec<String> = refused.iter().map(|u| u.to_string()).collect();
        return Err(err(format!("task.toml asks for what Orchard cannot give: {}", list.join("; "))));
    }
    let environment = &config.environment;
    let memory_bytes = match (&environment.memory, environment.memory_mb) {
        (Some(s), _) => {
            Some(parse_size(s).ok_or_else(|| err(format!("environment.memory: {s:?} is not a size like 2G or 512M")))?)
        }
        (_, Some(mb)) => Some(mb << 20),
        _ => None,
    };
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    let mut workdir = None;
    let mut copies = Vec::new();
    let mut archives = Vec::new();
    let (mut start, mut healthcheck) = (None, None);
    let mut context = None;
    let dockerfile = Path::new("environment/Dockerfile");
    if let Some(text) = files.read_string(dockerfile, MAX_TEXT_BYTES).map_err(file_err)? {
        let parsed = parse_dockerfile(&text);
        start = start_command(&parsed);
        healthcheck = parsed.healthcheck.clone();
        workdir = parsed.workdir;
        env.extend(parsed.env);
        // The build context is its own root: a COPY reads nothing outside environment/.
        let build = files.confine(Path::new("environment")).map_err(file_err)?;
        let in_context = |src: &str| {
            let rel = PathBuf::from(src.trim_start_matches('/'));
            build
                .exists(&rel)
                .then_some(rel)
                .ok_or_else(|| err(format!("environment/Dockerfile: COPY {src}: no such file in environment/")))
        };
        for (src, dest) in parsed.copies {
            copies.push((in_context(&src)?, dest));
        }
        for (src, dest) in parsed.archives {
            archives.push((in_context(&src)?, dest));
        }
        context = Some(build);
    }
    env.extend(environment.env.clone());
    if environment.desktop.is_some() {
        // Every command the agent runs finds the desktop, as a terminal on it would.
        let display = orchard_protocol::DESKTOP_DISPLAY;
        env.entry("DISPLAY".into()).or_insert_with(|| format!(":{display}"));
        env.entry("DBUS_SESSION_BUS_ADDRESS".into()).or_insert_with(|| orchard_protocol::desktop_bus_address(display));
        env.entry("XAUTHORITY".into()).or_insert_with(|| orchard_protocol::desktop_xauthority(display));
        // GTK apps' settings in memory: no dconf service to start (and wait for) per sandbox.
        env.entry("GSETTINGS_BACKEND".into()).or_insert_with(|| "memory".into());
    }
    if let Some(w) = &environment.workdir {
        workdir = Some(w.clone());
    }
    // [environment.healthcheck] (a shell command, with Docker's timing) over the Dockerfile's.
    let healthcheck = match &environment.healthcheck {
        Some(h) => Some(Healthcheck::from_config(h)),
        None => healthcheck.map(Healthcheck::from_dockerfile),
    };
    let desktop = match &environment.desktop {
        Some(d) => {
            d.check().map_err(|e| err(format!("task.toml: {e}")))?;
            Some(orchard_desktop_client::DesktopSpec::from_config(d))
        }
        None => None,
    };
    let image = config.image().map(str::to_string);
    let agent_timeout_sec = config.agent.timeout_sec.unwrap_or(600.0);
    let tools = match &config.agent.tools {
        Some(names) if names.iter().any(|n| n.trim().is_empty()) => {
            return Err(err("task.toml: agent.tools: a plugin name is empty".into()));
        }
        other => other.clone(),
    };
    let verifier_timeout_sec = config.verifier.timeout_sec.unwrap_or(600.0);
    let (allow_internet, network_allow) = match environment.network_mode {
        Some(NetworkMode::Public) => (true, Vec::new()),
        Some(NetworkMode::Allowlist) => (true, environment.allowed_hosts.clone().unwrap_or_default()),
        Some(NetworkMode::NoNetwork) => (false, Vec::new()),
        None => (environment.allow_internet.unwrap_or(false), Vec::new()),
    };
    let mut metadata = serde_json::to_value(&table).unwrap_or(json!({}));
    let mcp = !environment.mcp_servers.is_empty();
    if mcp {
        // The `mcp` adapter's configuration, where every adapter's per-task one is read.
        let declared = table.get("environment").and_then(|e| e.get("mcp_servers"));
        let servers = declared.and_then(|s| serde_json::to_value(s).ok()).unwrap_or(json!([]));
        if let Some(root) = metadata.as_object_mut() {
            let meta = root.entry("metadata").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                let tool_config = meta.entry("tool_config").or_insert_with(|| json!({}));
                if let Some(tool_config) = tool_config.as_object_mut() {
                    tool_config.insert("mcp".into(), json!({ "servers": servers }));
                }
            }
        }
    }
    if let Value::Object(m) = &mut metadata {
        m.insert("verifier_timeout_sec".into(), verifier_timeout_sec.into());
        m.insert("agent_timeout_sec".into(), agent_timeout_sec.into());
        if let Some(w) = &workdir {
            m.insert("workdir".into(), w.clone().into());
        }
    }
    let verifier_mode = match &config.verifier.environment_mode {
        None => None,
        Some(m) => Some(orchard_verifier::Mode::parse(m).map_err(|e| err(format!("task.toml: verifier.{e}")))?),
    };
    // Orchard's [verifier] artifacts and Harbor's top-level ones: both are carried into a
    // separate verifier.
    let mut verifier_artifacts = Vec::new();
    for path in config.verifier.artifacts.iter().map(String::as_str).chain(config.artifacts.iter().map(|a| a.source()))
    {
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            return Err(err(format!("task.toml: verifier.artifacts: {path:?} is not an absolute path without '..'")));
        }
        let path = path.trim_end_matches('/').to_string();
        if !verifier_artifacts.contains(&path) {
            verifier_artifacts.push(path);
        }
    }
    let meta_str = |k: &str| config.metadata.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let verifier_repo_dir = config
        .verifier
        .repo_dir
        .clone()
        .or_else(|| meta_str("repo_dir"))
        .or_else(|| meta_str("base_commit").and(meta_str("workdir").or_else(|| workdir.clone())));
    let mut gold_files = std::collections::BTreeSet::new();
    if let Some(patch) = meta_str("patch") {
        gold_files.extend(orchard_verifier::patched_files(&patch));
    }
    if let Ok(Some(text)) = files.read_string(Path::new("tests/gold.patch"), MAX_PATCH_BYTES) {
        gold_files.extend(orchard_verifier::patched_files(&text));
    }
    let has_solution = files.is_dir(Path::new("solution"));
    if has_solution {
        for name in files.files_in(Path::new("solution")) {
            if let Ok(Some(text)) = files.read_string(&Path::new("solution").join(name), MAX_PATCH_BYTES) {
                gold_files.extend(orchard_verifier::patched_files(&text));
            }
        }
    }
    let domain = meta_str("domain").unwrap_or_else(|| "tasks".into());
    let steps = match &config.steps {
        Some(steps) => crate::steps::load_steps(files, steps, agent_timeout_sec, verifier_timeout_sec)
            .map_err(|e| err(format!("task.toml: {e}")))?,
        None => Vec::new(),
    };
    Ok(Task {
        id,
        domain,
        location: location.clone(),
        instruction,
        agent_timeout_sec,
        tools,
        mcp,
        grader: match &config.verifier.grader {
            Some(g) if g.trim().is_empty() => return Err(err("task.toml: verifier.grader: the name is empty".into())),
            other => other.clone(),
        },
        verifier_timeout_sec,
        image,
        cpus: environment.cpus,
        memory_bytes,
        disk_bytes: environment.storage_mb.map(|mb| mb << 20),
        allow_internet,
        network_allow,
        workdir,
        env,
        copies,
        archives,
        context,
        start,
        healthcheck,
        desktop,
        has_tests: files.is_dir(Path::new("tests")),
        has_solution,
        files: files.clone(),
        steps,
        step_reward: config.multi_step_reward_strategy.unwrap_or(orchard_task_config::RewardStrategy::Mean),
        metadata,
        verifier_mode,
        verifier_artifacts,
        verifier_repo_dir,
        gold_files,
    })
}

/// `2G`, `512M`, `1024k`, `3000000`.
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    let factor = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" | "ki" | "kib" => 1024.0,
        "m" | "mb" | "mi" | "mib" => 1024.0 * 1024.0,
        "g" | "gb" | "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * factor) as u64)
}

struct Dockerfile {
    /// ENTRYPOINT and CMD, each as argv (a shell form is `/bin/sh -c TEXT`).
    entrypoint: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    /// HEALTHCHECK CMD, as argv.
    healthcheck: Option<Vec<String>>,
    workdir: Option<String>,
    env: Vec<(String, String)>,
    /// (source in the build context, absolute destination).
    copies: Vec<(String, String)>,
    /// ADDed local tar archives: unpacked at the destination.
    archives: Vec<(String, String)>,
}

/// What we honour of a Dockerfile: WORKDIR, ENV (`K=V ...` and `K V`), and COPY/ADD of local
/// files (not `--from`, not URLs). Destinations are resolved against the WORKDIR of their line.
fn parse_dockerfile(text: &str) -> Dockerfile {
    let mut d = Dockerfile {
        entrypoint: None,
        cmd: None,
        healthcheck: None,
        workdir: None,
        env: Vec::new(),
        copies: Vec::new(),
        archives: Vec::new(),
    };
    // Continuation lines joined first.
    let joined = text.replace("\\\n", " ");
    for line in joined.lines().map(str::trim) {
        let mut parts = line.splitn(2, char::is_whitespace);
        let (word, rest) = (parts.next().unwrap_or("").to_ascii_uppercase(), parts.next().unwrap_or("").trim());
        match word.as_str() {
            "WORKDIR" if !rest.is_empty() => {
                let w = rest.trim_matches('"').to_string();
                d.workdir = Some(resolve(d.workdir.as_deref(), &w));
            }
            "ENV" if rest.contains('=') => {
                for pair in split_words(rest) {
                    if let Some((k, v)) = pair.split_once('=') {
                        d.env.push((k.to_string(), v.trim_matches('"').to_string()));
                    }
                }
            }
            "ENV" => {
                let mut kv = rest.splitn(2, char::is_whitespace);
                if let (Some(k), Some(v)) = (kv.next(), kv.next()) {
                    d.env.push((k.to_string(), v.trim().trim_matches('"').to_string()));
                }
            }
            "ENTRYPOINT" if !rest.is_empty() => d.entrypoint = Some(command_form(rest)),
            "CMD" if !rest.is_empty() => d.cmd = Some(command_form(rest)),
            "HEALTHCHECK" => {
                // Options (`--interval=…`) first, then `CMD …` or `NONE`.
                let words: Vec<&str> = rest.split_whitespace().collect();
                let at = words.iter().position(|w| !w.starts_with("--"));
                d.healthcheck = match at.map(|i| words[i].to_ascii_uppercase()) {
                    Some(w) if w == "CMD" => {
                        let after = rest.trim_start();
                        let skip = after.to_ascii_uppercase().find("CMD").map(|i| i + 3).unwrap_or(0);
                        Some(command_form(after[skip..].trim()))
                    }
                    _ => None,
                };
            }
            "COPY" | "ADD" => {
                let words: Vec<String> = split_words(rest).into_iter().filter(|w| !w.starts_with("--")).collect();
                if rest.contains("--from") || words.len() < 2 {
                    continue;
                }
                let (dest, sources) = words.split_last().expect("two words at least");
                // A destination ending in '/' (or shared by several sources) is a directory; the
                // upload also treats an existing directory as one.
                let as_dir = dest.ends_with('/') || dest == "." || sources.len() > 1;
                let mut target = resolve(d.workdir.as_deref(), dest.trim_matches('"'));
                if as_dir && !target.ends_with('/') {
                    target.push('/');
                }
                for src in sources.iter().filter(|s| !s.contains("://")) {
                    let src = src.trim_matches('"').to_string();
                    let archive = [".tar", ".tar.gz", ".tgz"].iter().any(|ext| src.ends_with(ext));
                    if word == "ADD" && archive {
                        d.archives.push((src, target.trim_end_matches('/').to_string()));
                    } else {
                        d.copies.push((src, target.clone()));
                    }
                }
            }
            _ => {}
        }
    }
    d
}

/// A Dockerfile command as argv: the exec form (a JSON array) as it is, the shell form through
/// `/bin/sh -c`.
fn command_form(rest: &str) -> Vec<String> {
    if rest.starts_with('[')
        && let Ok(argv) = serde_json::from_str::<Vec<String>>(rest)
    {
        return argv;
    }
    vec!["/bin/sh".into(), "-c".into(), rest.to_string()]
}

/// What the container runs: ENTRYPOINT with CMD as its arguments (a shell-form ENTRYPOINT takes
/// none), or CMD alone.
fn start_command(d: &Dockerfile) -> Option<Vec<String>> {
    match (&d.entrypoint, &d.cmd) {
        (Some(e), _)
            if e.first().map(String::as_str) == Some("/bin/sh") && e.get(1).map(String::as_str) == Some("-c") =>
        {
            Some(e.clone())
        }
        (Some(e), Some(c)) => Some(e.iter().chain(c).cloned().collect()),
        (Some(e), None) => Some(e.clone()),
        (None, Some(c)) => Some(c.clone()),
        (None, None) => None,
    }
}

/// A path against a working directory (`/` when none).
fn resolve(workdir: Option<&str>, path: &str) -> String {
    if path.starts_with('/') {
        return path.to_string();
    }
    let base = workdir.unwrap_or("/").trim_end_matches('/');
    let path = path.trim_start_matches("./");
    if path.is_empty() || path == "." {
        if base.is_empty() { "/".into() } else { base.to_string() }
    } else {
        format!("{base}/{path}")
    }
}

/// Splits on spaces outside double quotes.
fn split_words(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_example_and_fixture_task_reads_under_the_strict_schema() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut seen = 0;
        for dir in ["examples", "tests/fixtures", "examples/training"] {
            for folder in std::fs::read_dir(root.join(dir)).unwrap() {
                let folder = folder.unwrap().path();
                let has_tasks = std::fs::read_dir(&folder)
                    .map(|entries| entries.flatten().any(|e| e.path().join("task.toml").is_file()))
                    .unwrap_or(false);
                if has_tasks {
                    seen += load_tasks(&folder).unwrap_or_else(|e| panic!("{}: {e}", folder.display())).len();
                }
            }
        }
        // Every task shipped (34 at depth one, 8 of them desktops; 6 under examples/training).
        assert_eq!(seen, 40, "tasks found");
    }

    #[test]
    fn harbors_own_fields_are_honoured_or_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let task = |toml: &str| {
            let t = dir.path().join("t");
            let _ = std::fs::remove_dir_all(&t);
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("instruction.md"), "x").unwrap();
            std::fs::write(t.join("task.toml"), toml).unwrap();
            load_tasks(&t).map(|mut v| v.remove(0)).map_err(|e| e.to_string())
        };
        let t = task(
            "schema_version = \"1.4\"\nartifacts = [\"/app/out.txt\"]\n[environment]\nnetwork_mode = \"allowlist\"\n\
             allowed_hosts = [\"10.1.2.0/24\"]\nstorage_mb = 512\nmemory_mb = 256\n\
             [environment.healthcheck]\ncommand = \"test -f /ready\"\nretries = 2\n",
        )
        .unwrap();
        assert!(t.allow_internet);
        assert_eq!(t.network_allow, ["10.1.2.0/24"]);
        assert_eq!((t.disk_bytes, t.memory_bytes), (Some(512 << 20), Some(256 << 20)));
        assert_eq!(t.healthcheck.as_ref().unwrap().argv[2], "test -f /ready");
        assert_eq!(t.verifier_artifacts, ["/app/out.txt"]);
        // Harbor's default network is public; a task that says nothing gets Orchard's closed one.
        assert!(!task("").unwrap().allow_internet);
        assert!(task("[environment]\nnetwork_mode = \"public\"\n").unwrap().allow_internet);
        let e = task("[agent]\nservices = [\"crm\"]\n").unwrap_err();
        assert!(e.contains("agent.services: unknown field `services`"), "{e}");
        let e = task("[environment]\ngpus = 2\n").unwrap_err();
        assert!(e.contains("environment.gpus: Orchard's sandboxes have no GPUs"), "{e}");
    }

    #[test]
    fn dockerfile_workdir_and_env_are_read() {
        let d = parse_dockerfile(
            "FROM python:3.12\nWORKDIR /app\nCOPY data.txt .\nWORKDIR src\nENV A=1 B=\"two words\"\nENV C three\nRUN echo hi \\\n  there\nCOPY a.py b.py lib/\nCOPY --from=builder /x /y\nADD conf /etc/conf\nADD repo.tar.gz /work\nCOPY keep.tar /k/\n",
        );
        assert_eq!(d.workdir.as_deref(), Some("/app/src"));
        assert_eq!(
            d.env,
            vec![("A".into(), "1".into()), ("B".into(), "two words".into()), ("C".into(), "three".into())]
        );
        let copies: Vec<(&str, &str)> = d.copies.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
        assert_eq!(
            copies,
            [
                ("data.txt", "/app/"),
                ("a.py", "/app/src/lib/"),
                ("b.py", "/app/src/lib/"),
                ("conf", "/etc/conf"),
                ("keep.tar", "/k/")
            ]
        );
        // ADD unpacks a local archive (COPY does not).
        assert_eq!(d.archives, vec![("repo.tar.gz".to_string(), "/work".to_string())]);
    }

    #[test]
    fn entrypoint_cmd_and_healthcheck_are_read_in_both_forms() {
        let d = parse_dockerfile(
            "FROM x\nENTRYPOINT [\"python3\", \"/app/shop.py\"]\nCMD [\"--port\", \"8080\"]\n\
             HEALTHCHECK --interval=1s --retries=3 CMD curl -f http://127.0.0.1:8080/health\n",
        );
        assert_eq!(start_command(&d).unwrap(), ["python3", "/app/shop.py", "--port", "8080"]);
        assert_eq!(d.healthcheck.unwrap(), ["/bin/sh", "-c", "curl -f http://127.0.0.1:8080/health"]);
        let d = parse_dockerfile("FROM x\nCMD python3 -m http.server 8080\nHEALTHCHECK NONE\n");
        assert_eq!(start_command(&d).unwrap(), ["/bin/sh", "-c", "python3 -m http.server 8080"]);
        assert_eq!(d.healthcheck, None);
        // A shell-form ENTRYPOINT takes no arguments from CMD, as Docker has it.
        let d = parse_dockerfile("FROM x\nENTRYPOINT serve --quiet\nCMD [\"ignored\"]\n");
        assert_eq!(start_command(&d).unwrap(), ["/bin/sh", "-c", "serve --quiet"]);
        assert_eq!(start_command(&parse_dockerfile("FROM x\n")), None);
    }

    #[test]
    fn a_task_folder_is_read_with_its_settings() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("hello");
        std::fs::create_dir_all(t.join("tests")).unwrap();
        std::fs::create_dir_all(t.join("environment")).unwrap();
        std::fs::write(t.join("instruction.md"), "Say hi").unwrap();
        std::fs::write(t.join("environment/Dockerfile"), "FROM x\nWORKDIR /w\nENV K=v\n").unwrap();
        std::fs::write(
            t.join("task.toml"),
            "version = \"1.0\"\n[agent]\ntimeout_sec = 30\n[verifier]\ntimeout_sec = 12.5\n[environment]\nmemory = \"1G\"\ncpus = 2\nallow_internet = true\n[metadata]\ndifficulty = \"easy\"\n",
        )
        .unwrap();
        let tasks = load_tasks(dir.path()).unwrap();
        assert_eq!(tasks.len(), 1);
        let task = &tasks[0];
        assert_eq!(task.id, "hello");
        assert_eq!(task.agent_timeout_sec, 30.0);
        assert_eq!(task.memory_bytes, Some(1 << 30));
        assert_eq!(task.workdir.as_deref(), Some("/w"));
        assert_eq!(task.env.get("K").map(String::as_str), Some("v"));
        assert!(task.allow_internet && task.has_tests && !task.has_solution);
        assert_eq!(task.metadata["verifier_timeout_sec"], 12.5);
        assert_eq!(task.metadata["metadata"]["difficulty"], "easy");
        let bad = dir.path().join("bad");
        std::fs::create_dir_all(&bad).unwrap();
        std::fs::write(bad.join("task.toml"), "[agent\n").unwrap();
        assert!(load_tasks(&bad).unwrap_err().to_string().contains("instruction.md"));
    }

    #[test]
    fn a_broken_task_toml_is_named_by_line_without_quoting_it() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t1");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("instruction.md"), "x").unwrap();
        std::fs::write(t.join("task.toml"), "[agent]\nroot:$6$secrethash:19000:0:99999:7:::\n").unwrap();
        let err = load_tasks_in(dir.path(), "", "tasks").unwrap_err().to_string();
        assert!(err.contains("task.toml: line 2"), "{err}");
        assert!(!err.contains("secrethash"), "quotes the file: {err}");
        assert!(!err.contains(&dir.path().display().to_string()), "names the server's path: {err}");
    }

    #[test]
    fn a_task_reads_nothing_above_its_root_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("upload");
        let t = root.join("t1");
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(dir.path().join("outside.md"), "the host's words").unwrap();
        std::os::unix::fs::symlink("..", t.join("up")).unwrap();
        std::os::unix::fs::symlink("up/t1/up/../outside.md", t.join("instruction.md")).unwrap();
        // The link text alone stays inside; the chain does not. Not a task, or an error — never
        // the outside file as an instruction.
        match load_tasks_in(&root, "", "tasks") {
            Ok(tasks) => assert!(tasks.iter().all(|t| !t.instruction.contains("host's words"))),
            Err(e) => assert!(!e.to_string().contains("host's words"), "{e}"),
        }
    }
}
