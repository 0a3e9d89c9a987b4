//! OSWorld's setup routes (`/setup/…`), as `desktop_env`'s `SetupController` calls them to put
//! a task's desktop in its starting state: files uploaded, apps launched, files opened (and
//! their window awaited), windows raised or closed.
//!
//! Every wait is bounded ([`OPEN_WAIT`]), every upload too ([`MAX_UPLOAD`]); launched apps are
//! this service's children and end with the sandbox. What a bare X desktop cannot do (a GNOME
//! wallpaper) is answered 501 naming it, never pretended.

use std::process::Stdio;
use std::time::{Duration, Instant};

use axum::extract::{DefaultBodyLimit, Multipart, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;

use super::osworld::{Shared, argv_of, error, expand_home, with_python3};
use super::windows::{self, Pick, Request};

/// The largest file `/setup/upload` takes.
const MAX_UPLOAD: usize = 256 * 1024 * 1024;
/// How long `/setup/open_file` waits for the file's window.
const OPEN_WAIT: Duration = Duration::from_secs(120);
/// How long an app may take to show the file's window before it is asked to open it again.
const REOPEN_AFTER: Duration = Duration::from_secs(30);
/// How many times `/setup/open_file` runs the opener at most.
const OPEN_TRIES: usize = 3;
/// How much of an opener's output a failed open reports (its last bytes).
const OPENER_OUTPUT: usize = 2048;

pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/setup/upload", post(upload).layer(DefaultBodyLimit::max(MAX_UPLOAD)))
        .route("/setup/launch", post(launch))
        .route("/setup/open_file", post(open_file))
        .route("/setup/activate_window", post(activate_window))
        .route("/setup/close_window", post(close_window))
        .route("/setup/change_wallpaper", post(change_wallpaper))
}

/// A multipart form of `file_path` (where) and `file_data` (the bytes) → the file written, its
/// directories made.
async fn upload(mut form: Multipart) -> Response {
    let (mut path, mut data) = (None, None);
    loop {
        match form.next_field().await {
            Ok(Some(field)) => {
                let name = field.name().unwrap_or_default().to_string();
                let bytes = match field.bytes().await {
                    Ok(b) => b,
                    Err(e) => return error(StatusCode::BAD_REQUEST, format!("upload: field {name}: {e}")),
                };
                match name.as_str() {
                    "file_path" => path = Some(String::from_utf8_lossy(&bytes).into_owned()),
                    "file_data" => data = Some(bytes),
                    other => return error(StatusCode::BAD_REQUEST, format!("upload: unknown field {other:?}")),
                }
            }
            Ok(None) => break,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("upload: {e}")),
        }
    }
    let (Some(path), Some(data)) = (path, data) else {
        return error(StatusCode::BAD_REQUEST, "upload: the form needs file_path and file_data");
    };
    let target = std::path::PathBuf::from(expand_home(&path));
    if let Some(parent) = target.parent()
        && let Err(e) = tokio::fs::create_dir_all(parent).await
    {
        return error(StatusCode::INTERNAL_SERVER_ERROR, format!("upload: {}: {e}", parent.display()));
    }
    match tokio::fs::write(&target, &data).await {
        Ok(()) => "File uploaded successfully".into_response(),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("upload: {path}: {e}")),
    }
}

#[derive(Deserialize)]
struct LaunchBody {
    command: Value,
    #[serde(default)]
    shell: bool,
}

/// `{command, shell}` → the program started on the display, not awaited.
async fn launch(State(s): State<Shared>, Json(body): Json<LaunchBody>) -> Response {
    let argv = match argv_of(&body.command, body.shell) {
        Ok(argv) => argv,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let argv = with_python3(argv);
    match spawn(&s, &argv) {
        Ok(()) => format!("{} launched successfully", argv.join(" ")).into_response(),
        Err(e) => error(StatusCode::BAD_REQUEST, e),
    }
}

/// Starts `argv` on the display in its own process group; a task reaps it.
fn spawn(s: &super::osworld::Service, argv: &[String]) -> Result<(), String> {
    let mut child =
        command(s, argv)?.stdout(Stdio::null()).stderr(Stdio::null()).spawn().map_err(|e| spawn_error(argv, e))?;
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    Ok(())
}

/// `argv` as a command on the display, in its own process group, reading nothing.
fn command(s: &super::osworld::Service, argv: &[String]) -> Result<tokio::process::Command, String> {
    let (program, args) = argv.split_first().ok_or("the command is empty")?;
    let mut command = tokio::process::Command::new(program);
    command.args(args).envs(s.env.iter().map(|(k, v)| (k, v))).stdin(Stdio::null()).process_group(0);
    Ok(command)
}

fn spawn_error(argv: &[String], e: std::io::Error) -> String {
    format!("{}: {e}", argv.first().map(String::as_str).unwrap_or_default())
}

/// One run of the opener (`xdg-open FILE`, which waits for the app it starts): how it ended,
/// and the tail of what it and the app printed — what a failed open is explained by.
#[derive(Default)]
struct OpenerRun {
    exit: Option<std::process::ExitStatus>,
    output: Vec<u8>,
}

/// An opener's run, shared between the tasks that record it and the route that reads it.
type SharedRun = std::sync::Arc<std::sync::Mutex<OpenerRun>>;

fn locked(run: &SharedRun) -> std::sync::MutexGuard<'_, OpenerRun> {
    run.lock().unwrap_or_else(|p| p.into_inner())
}

/// Starts the opener on `path`, its output (both streams, the last [`OPENER_OUTPUT`] bytes)
/// and its end recorded in the returned run; tasks drain and reap it.
fn open_with_default_app(s: &super::osworld::Service, path: &std::path::Path) -> Result<SharedRun, String> {
    let argv = ["xdg-open".to_string(), path.display().to_string()];
    let mut child =
        command(s, &argv)?.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().map_err(|e| spawn_error(&argv, e))?;
    let run = SharedRun::default();
    if let Some(out) = child.stdout.take() {
        tokio::spawn(keep_tail(out, run.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(keep_tail(err, run.clone()));
    }
    let ended = run.clone();
    tokio::spawn(async move {
        let status = child.wait().await.ok();
        locked(&ended).exit = status;
    });
    Ok(run)
}

/// Reads `stream` to its end (the app must never block on a full pipe), keeping the last
/// [`OPENER_OUTPUT`] bytes in `run`.
async fn keep_tail(mut stream: impl tokio::io::AsyncRead + Unpin, run: SharedRun) {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 4096];
    while let Ok(n @ 1..) = stream.read(&mut buf).await {
        let mut run = locked(&run);
        run.output.extend_from_slice(&buf[..n]);
        let excess = run.output.len().saturating_sub(OPENER_OUTPUT);
        run.output.drain(..excess);
    }
}

#[derive(Deserialize)]
struct OpenBody {
    path: String,
}

/// `{path}` → the file opened with its default app (`xdg-open`), answered once a window whose
/// title names the file shows (at most [`OPEN_WAIT`]). An app that shows no window within
/// [`REOPEN_AFTER`] is asked again (a running instance takes the file over; one that died on
/// a slow first start is started anew), at most [`OPEN_TRIES`] times; a failure says what
/// each opener printed and how it ended, and which windows were open.
async fn open_file(State(s): State<Shared>, Json(body): Json<OpenBody>) -> Response {
    let path = std::path::PathBuf::from(expand_home(&body.path));
    if !path.exists() {
        return error(StatusCode::NOT_FOUND, format!("File not found: {}", body.path));
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = path.file_stem().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let started = Instant::now();
    let mut runs = Vec::new();
    let mut last_try = started;
    loop {
        let failed = |run: &SharedRun| locked(run).exit.is_some_and(|status| !status.success());
        let last_failed = runs.last().is_some_and(failed);
        if runs.is_empty() || ((last_failed || last_try.elapsed() > REOPEN_AFTER) && runs.len() < OPEN_TRIES) {
            match open_with_default_app(&s, &path) {
                Ok(run) => runs.push(run),
                Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("opening {}: {e}", body.path)),
            }
            last_try = Instant::now();
        }
        let display = s.display.clone();
        let open = tokio::task::spawn_blocking(move || windows::list(&display)).await;
        let titles: Vec<String> = match open {
            Ok(Ok(list)) => list.into_iter().map(|w| w.title).collect(),
            _ => Vec::new(),
        };
        if titles.iter().any(|t| t.contains(&name) || (!stem.is_empty() && t.contains(&stem))) {
            return "File opened and window activated successfully".into_response();
        }
        // Out of time, or out of tries with the last opener failed: nothing more will open it.
        if started.elapsed() > OPEN_WAIT || (runs.len() >= OPEN_TRIES && runs.last().is_some_and(failed)) {
            return error(StatusCode::INTERNAL_SERVER_ERROR, open_failure(&name, started, &titles, &runs));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Why no window for `name` showed: how long was waited, which windows were open, and how
/// each opener ended and what it printed.
fn open_failure(name: &str, started: Instant, titles: &[String], runs: &[SharedRun]) -> String {
    let mut why = format!("no window for {name} opened in {:.1?} (open: {titles:?})", started.elapsed());
    for (i, run) in runs.iter().enumerate() {
        let run = locked(run);
        let ended = run.exit.map_or("still running".to_string(), |status| status.to_string());
        let said = String::from_utf8_lossy(&run.output);
        why.push_str(&format!("; xdg-open try {}: {ended}, printed {:?}", i + 1, said.trim()));
    }
    why
}

#[derive(Deserialize)]
struct WindowBody {
    window_name: String,
    #[serde(default)]
    strict: bool,
    #[serde(default)]
    by_class: bool,
}

async fn activate_window(State(s): State<Shared>, Json(body): Json<WindowBody>) -> Response {
    window(s, body, Request::Activate, "activated").await
}

async fn close_window(State(s): State<Shared>, Json(body): Json<WindowBody>) -> Response {
    window(s, body, Request::Close, "closed").await
}

async fn window(s: Shared, body: WindowBody, request: Request, done: &str) -> Response {
    let pick = Pick { strict: body.strict, by_class: body.by_class };
    let display = s.display.clone();
    let name = body.window_name.clone();
    match tokio::task::spawn_blocking(move || windows::request(&display, &name, pick, request)).await {
        Ok(Ok(true)) => format!("Window {done} successfully").into_response(),
        Ok(Ok(false)) => error(StatusCode::NOT_FOUND, format!("Window {} not found.", body.window_name)),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

async fn change_wallpaper() -> Response {
    error(
        StatusCode::NOT_IMPLEMENTED,
        "change_wallpaper: this desktop has no wallpaper setter (OSWorld's sets GNOME's)",
    )
}
