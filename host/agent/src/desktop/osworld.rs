//! OSWorld's controller protocol, as `desktop_env`'s `PythonController` speaks it: the routes
//! and answers its client reads. Commands run on the desktop's display (`DISPLAY`), each bounded
//! in time; files and trees are read with limits.
//!
//! `/accessibility` walks the AT-SPI tree with the image's `python3` and `pyatspi`
//! (`accessibility.py`); the `/setup/…` routes are in `setup`. Not served (answered 501, naming
//! the route): `/terminal`, recording, and any route OSWorld's client has that this does not.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Form, Json, Router};
use serde::Deserialize;
use serde_json::{Value, json};

use super::screen;

/// The largest request body (a script, a command).
const MAX_BODY: usize = 4 * 1024 * 1024;
/// The largest file `/file` sends.
const MAX_FILE: u64 = 256 * 1024 * 1024;
/// `/execute` and `/run_python`'s time (the client waits 90 s).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(85);
/// The most `/run_bash_script` may ask for.
const MAX_SCRIPT_TIMEOUT: u64 = 3600;
/// The most entries `/list_directory` walks.
const MAX_TREE_ENTRIES: usize = 10_000;

pub struct Service {
    /// `:N`.
    pub display: String,
    pub width: u32,
    pub height: u32,
    /// What commands on the desktop are given (`DISPLAY`, the session bus).
    pub env: Vec<(String, String)>,
    /// The XTEST connection, opened at the first input and kept.
    pub keyboard: std::sync::Mutex<Option<super::input::Keyboard>>,
    /// The VNC servers started for live views, by whether they take input.
    pub vnc: tokio::sync::Mutex<std::collections::HashMap<bool, super::vnc::Vnc>>,
}

pub(super) type Shared = Arc<Service>;

pub fn router(service: Shared) -> Router {
    Router::new()
        .route("/screenshot", get(screenshot))
        .route("/screen_size", post(screen_size).get(screen_size))
        .route("/cursor_position", get(cursor_position))
        .route("/platform", get(platform))
        .route("/execute", post(execute))
        .route("/setup/execute", post(execute))
        .route("/run_python", post(run_python))
        .route("/run_bash_script", post(run_bash_script))
        .route("/file", post(file))
        .route("/list_directory", post(list_directory))
        .route("/desktop_path", post(desktop_path))
        .route("/accessibility", get(accessibility))
        .route("/terminal", get(not_yet))
        .merge(super::own::routes())
        .merge(super::setup::routes())
        .fallback(not_yet)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(service)
}

pub(super) fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"status": "error", "message": message.into(), "error": ""}))).into_response()
}

async fn not_yet(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_IMPLEMENTED, format!("{} is not served by this desktop yet", uri.path()))
}

async fn screenshot(State(s): State<Shared>) -> Response {
    let display = s.display.clone();
    match tokio::task::spawn_blocking(move || screen::screenshot_png(&display)).await {
        Ok(Ok(png)) => ([(header::CONTENT_TYPE, "image/png")], png).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("screenshot: {e:#}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("screenshot: {e}")),
    }
}

async fn screen_size(State(s): State<Shared>) -> Json<Value> {
    Json(json!({"width": s.width, "height": s.height}))
}

async fn cursor_position(State(s): State<Shared>) -> Response {
    let display = s.display.clone();
    match tokio::task::spawn_blocking(move || screen::pointer(&display)).await {
        Ok(Ok((x, y))) => Json(json!([x, y])).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cursor_position: {e:#}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("cursor_position: {e}")),
    }
}

/// The most nodes `/accessibility` writes unless asked for fewer.
const MAX_TREE_NODES: u32 = 100_000;
/// How long walking the tree may take.
const TREE_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Deserialize)]
struct TreeQuery {
    max_nodes: Option<u32>,
    /// Only what is on screen (Orchard's; OSWorld's client asks for the whole tree).
    #[serde(default)]
    showing: bool,
}

/// `{"AT": xml}`: the accessibility tree as OSWorld's XML.
async fn accessibility(State(s): State<Shared>, axum::extract::Query(q): axum::extract::Query<TreeQuery>) -> Response {
    let max = q.max_nodes.unwrap_or(MAX_TREE_NODES).clamp(1, MAX_TREE_NODES);
    let script = include_str!("accessibility.py");
    // The distribution's Python, where pyatspi is packaged (python3-pyatspi), before any other
    // on the PATH.
    let python = if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let mut argv = vec![python.to_string(), "-c".into(), script.into(), max.to_string()];
    if q.showing {
        argv.push("showing".into());
    }
    match run(&s, &argv, None, TREE_TIMEOUT).await {
        Ok(ran) if ran.timed_out => {
            error(StatusCode::GATEWAY_TIMEOUT, format!("the tree was not read within {TREE_TIMEOUT:?}"))
        }
        Ok(ran) if ran.code == Some(0) => Json(json!({"AT": ran.stdout})).into_response(),
        Ok(ran) if ran.code == Some(3) => error(StatusCode::NOT_IMPLEMENTED, ran.stderr.trim().to_string()),
        Ok(ran) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("reading the tree failed: {}", ran.stderr.trim())),
        Err(e) => error(StatusCode::NOT_IMPLEMENTED, format!("reading the tree needs python3: {e}")),
    }
}

async fn platform() -> &'static str {
    "Linux"
}

/// What a command did.
pub(super) struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

/// Runs `argv` on the display, in `cwd`, for at most `timeout`.
pub(super) async fn run(s: &Service, argv: &[String], cwd: Option<&str>, timeout: Duration) -> Result<Ran, String> {
    let (program, args) = argv.split_first().ok_or("the command is empty")?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .envs(s.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0);
    if let Some(dir) = cwd {
        command.current_dir(dir);
    }
    let child = command.spawn().map_err(|e| format!("{program}: {e}"))?;
    match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(Ok(out)) => Ok(Ran {
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            timed_out: false,
        }),
        Ok(Err(e)) => Err(format!("{program}: {e}")),
        Err(_) => Ok(Ran { code: None, stdout: String::new(), stderr: String::new(), timed_out: true }),
    }
}

#[derive(Deserialize)]
struct ExecuteBody {
    command: Value,
    #[serde(default)]
    shell: bool,
}

/// OSWorld's `{command, shell}`: a list of words or a string, through `/bin/sh -c` when `shell`.
pub(super) fn argv_of(command: &Value, shell: bool) -> Result<Vec<String>, &'static str> {
    let bad = || "command: a list of strings, or a string";
    Ok(match (command, shell) {
        (Value::String(text), true) => vec!["/bin/sh".into(), "-c".into(), text.clone()],
        (Value::String(text), false) => text.split_whitespace().map(str::to_string).collect(),
        (Value::Array(items), shell) => {
            let words: Vec<String> =
                items.iter().map(|v| v.as_str().map(str::to_string)).collect::<Option<_>>().ok_or_else(bad)?;
            if shell { vec!["/bin/sh".into(), "-c".into(), words.join(" ")] } else { words }
        }
        _ => return Err(bad()),
    })
}

/// `{command: [argv] | "string", shell}` → `{status, output, error, returncode}`.
async fn execute(State(s): State<Shared>, Json(body): Json<ExecuteBody>) -> Response {
    let argv = match argv_of(&body.command, body.shell) {
        Ok(argv) => argv,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    // OSWorld's commands name `python`; images often have only `python3`.
    let argv = with_python3(argv);
    match run(&s, &argv, None, COMMAND_TIMEOUT).await {
        Ok(ran) if ran.timed_out => {
            error(StatusCode::INTERNAL_SERVER_ERROR, format!("the command timed out after {COMMAND_TIMEOUT:?}"))
        }
        Ok(ran) => Json(json!({"status": "success", "output": ran.stdout, "error": ran.stderr,
                               "returncode": ran.code.unwrap_or(-1)}))
        .into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

/// `python` as the first word, where the image has no `python` but has `python3`.
pub(super) fn with_python3(mut argv: Vec<String>) -> Vec<String> {
    if argv.first().is_some_and(|p| p == "python") && which("python").is_none() && which("python3").is_some() {
        argv[0] = "python3".into();
    }
    argv
}

fn which(program: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
}

#[derive(Deserialize)]
struct PythonBody {
    code: String,
}

/// `{code}` → `{status, message, output, error, return_code}`.
async fn run_python(State(s): State<Shared>, Json(body): Json<PythonBody>) -> Response {
    let argv = with_python3(vec!["python".into(), "-c".into(), body.code]);
    match run(&s, &argv, None, COMMAND_TIMEOUT).await {
        Ok(ran) if ran.timed_out => error(StatusCode::INTERNAL_SERVER_ERROR, "the script timed out"),
        Ok(ran) => {
            let ok = ran.code == Some(0);
            Json(json!({"status": if ok { "success" } else { "error" },
                        "message": if ok { "the script ran" } else { "the script failed" },
                        "output": ran.stdout, "error": ran.stderr, "return_code": ran.code.unwrap_or(-1)}))
            .into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e),
    }
}

#[derive(Deserialize)]
struct BashBody {
    script: String,
    #[serde(default)]
    timeout: Option<u64>,
    #[serde(default)]
    working_dir: Option<String>,
}

/// `{script, timeout, working_dir}` → `{status, output, error, returncode}` (stdout and stderr
/// together in `output`, as a terminal shows them).
async fn run_bash_script(State(s): State<Shared>, Json(body): Json<BashBody>) -> Response {
    let seconds = body.timeout.unwrap_or(30).clamp(1, MAX_SCRIPT_TIMEOUT);
    let argv = vec!["/bin/bash".into(), "-c".into(), format!("exec 2>&1\n{}", body.script)];
    match run(&s, &argv, body.working_dir.as_deref(), Duration::from_secs(seconds)).await {
        Ok(ran) if ran.timed_out => Json(json!({"status": "error", "output": "",
            "error": format!("Script execution timed out after {seconds} seconds"), "returncode": -1}))
        .into_response(),
        Ok(ran) => {
            let code = ran.code.unwrap_or(-1);
            Json(json!({"status": if code == 0 { "success" } else { "error" }, "output": ran.stdout,
                        "error": ran.stderr, "returncode": code}))
            .into_response()
        }
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

#[derive(Deserialize)]
struct FileForm {
    file_path: String,
}

/// `file_path` (a form field) → the file's bytes.
async fn file(Form(form): Form<FileForm>) -> Response {
    let path = expand_home(&form.file_path);
    let meta = match tokio::fs::metadata(&path).await {
        Ok(m) if m.is_file() => m,
        Ok(_) => return error(StatusCode::BAD_REQUEST, format!("{}: not a file", form.file_path)),
        Err(e) => return error(StatusCode::NOT_FOUND, format!("{}: {e}", form.file_path)),
    };
    if meta.len() > MAX_FILE {
        return error(StatusCode::PAYLOAD_TOO_LARGE, format!("{}: larger than {MAX_FILE} bytes", form.file_path));
    }
    match tokio::fs::File::open(&path).await {
        Ok(f) => (
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::from_stream(tokio_util::io::ReaderStream::new(f)),
        )
            .into_response(),
        Err(e) => error(StatusCode::NOT_FOUND, format!("{}: {e}", form.file_path)),
    }
}

/// `~` at the start of a path, as OSWorld's tasks write them.
pub(super) fn expand_home(path: &str) -> String {
    match (path.strip_prefix('~'), std::env::var("HOME")) {
        (Some(rest), Ok(home)) if rest.is_empty() || rest.starts_with('/') => format!("{home}{rest}"),
        _ => path.to_string(),
    }
}

#[derive(Deserialize)]
struct PathBody {
    path: String,
}

/// `{path}` → `{directory_tree: {name, type, children}}`, at most `MAX_TREE_ENTRIES` entries.
async fn list_directory(Json(body): Json<PathBody>) -> Response {
    let root = expand_home(&body.path);
    let tree = tokio::task::spawn_blocking(move || {
        let mut budget = MAX_TREE_ENTRIES;
        tree(Path::new(&root), &mut budget)
    })
    .await;
    match tree {
        Ok(Ok(tree)) => Json(json!({"directory_tree": tree})).into_response(),
        Ok(Err(e)) => error(StatusCode::NOT_FOUND, format!("{}: {e}", body.path)),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

fn tree(path: &Path, budget: &mut usize) -> std::io::Result<Value> {
    let name = path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    let meta = std::fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return Ok(json!({"name": name, "type": "file"}));
    }
    let mut entries: Vec<_> = std::fs::read_dir(path)?.flatten().map(|e| e.path()).collect();
    entries.sort();
    let mut children = Vec::new();
    for entry in entries {
        if *budget == 0 {
            break;
        }
        *budget -= 1;
        if let Ok(child) = tree(&entry, budget) {
            children.push(child);
        }
    }
    Ok(json!({"name": name, "type": "directory", "children": children}))
}

async fn desktop_path() -> Json<Value> {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    Json(json!({"desktop_path": format!("{home}/Desktop")}))
}
