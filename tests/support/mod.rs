//! Test support: a real `orchard serve` process with its own state directory, and a client.

pub mod evals;
pub mod faithful;
pub mod images;
pub mod kube;
pub mod osworld;
pub mod postgres;
pub mod tokens;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// The `orchard` binary, built by `cargo xtask test` (or `cargo build -p orchard-cli`).
pub fn orchard_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ORCHARD_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test exe");
    // target/debug/deps/<test> -> target/debug/orchard
    let candidate = exe.parent().and_then(Path::parent).map(|d| d.join("orchard")).expect("target dir");
    assert!(candidate.is_file(), "{} missing: run the tests with `cargo xtask test`", candidate.display());
    candidate
}

/// reqwest is built with `rustls-no-provider` in this workspace (oci-client asks for it): the
/// process picks its provider before any client exists.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().timeout(Duration::from_secs(120)).build().expect("client")
}

fn workspace_target(sub: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").join("target").join(sub)
}

/// The program cache the `program` harness's tests run real agent programs from (`cargo xtask
/// setup` makes it: `target/programs`), with `program` (`mini-swe-agent`, `kimi-cli`,
/// `openhands`) in it; `None`, saying why, when setup left it out for want of disk (its
/// `.skipped` note).
pub fn program_cache_with(program: &str) -> Option<PathBuf> {
    let dir = workspace_target("programs");
    let note = |path: PathBuf| std::fs::read_to_string(path).ok();
    if let Some(reason) =
        note(workspace_target("programs.skipped")).or_else(|| note(dir.join(format!("{program}.skipped"))))
    {
        eprintln!("SKIPPED: the program cache has no {program}: setup said: {reason}");
        return None;
    }
    let marker = dir.join(program).join(".orchard-packages");
    assert!(marker.exists(), "{} is missing: run `cargo xtask setup`", marker.display());
    Some(dir)
}

/// The shipped plugins (`cargo xtask plugins`).
pub fn plugin_dir() -> PathBuf {
    let dir = std::env::var_os("ORCHARD_PLUGIN_DIR").map(PathBuf::from).unwrap_or_else(|| workspace_target("plugins"));
    assert!(
        dir.join("oracle.wasm").is_file(),
        "{} has no plugins: run the tests with `cargo xtask test`",
        dir.display()
    );
    dir
}

/// The test fixture plugins (`cargo xtask plugins`).
pub fn test_plugin_dir() -> PathBuf {
    let dir = std::env::var_os("ORCHARD_TEST_PLUGIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_target("test-plugins"));
    assert!(
        dir.join("test-harness.wasm").is_file(),
        "{} has no fixtures: run the tests with `cargo xtask test`",
        dir.display()
    );
    dir
}

/// The longest any `orchard` command of the tests may run (the slowest, a real harness's eval,
/// takes a few minutes): a hang fails its test with what the command printed, instead of
/// holding the suite until CI's own limit ends it with nothing to show.
pub const ORCHARD_COMMAND_TIMEOUT: Duration = Duration::from_secs(900);

/// Runs `cmd` to completion like `Command::output`, killing it (and failing the test with what
/// it printed so far) if it runs longer than `limit`.
pub fn output_within(mut cmd: Command, limit: Duration, what: &str) -> std::process::Output {
    use std::io::Read;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("stdout")));
    let stderr = read(Box::new(child.stderr.take().expect("stderr")));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break Some(status);
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (stdout.join().unwrap_or_default(), stderr.join().unwrap_or_default());
    let Some(status) = status else {
        panic!(
            "{what} still ran after {limit:?}: killed.\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        );
    };
    std::process::Output { status, stdout, stderr }
}

/// Runs `orchard <args>` to completion; returns (exit code, stdout, stderr).
pub fn orchard(args: &[&str]) -> (i32, String, String) {
    orchard_with_env(args, &[])
}

/// `orchard <args>` ready to start, with the test build's agent and plugins.
pub fn orchard_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(orchard_bin());
    cmd.args(args)
        .env("ORCHARD_AGENT_BIN", agent_bin())
        .env("ORCHARD_PLUGIN_DIR", plugin_dir())
        // Shared by the tests: each compiles a component once, not once per run.
        .env("ORCHARD_PLUGIN_CACHE", workspace_target("test-plugin-cache"))
        .env("RUST_LOG", "warn");
    cmd
}

/// [`orchard`] with extra environment variables.
pub fn orchard_with_env(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = orchard_command(args);
    cmd.envs(env.iter().copied());
    let out = output_within(cmd, ORCHARD_COMMAND_TIMEOUT, &format!("orchard {}", args.join(" ")));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn agent_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ORCHARD_AGENT_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace");
    let p = root.join("target/x86_64-unknown-linux-musl/agent/orchard-agent");
    assert!(p.is_file(), "{} missing: run the tests with `cargo xtask test`", p.display());
    p
}

pub struct Server {
    child: Option<Child>,
    pub url: String,
    pub state_dir: PathBuf,
    _tmp: Option<tempfile::TempDir>,
    pub http: reqwest::Client,
    /// Sent as X-API-Key when set.
    pub key: Option<String>,
    log: PathBuf,
}

#[derive(Default)]
pub struct ServerOptions {
    pub api_keys: Option<String>,
    pub state_dir: Option<PathBuf>,
    pub extra_args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Server {
    pub async fn start() -> Server {
        Self::start_with(ServerOptions::default()).await
    }

    /// A server whose clients may name local images under `root` (`--image-root`).
    pub async fn with_image_root(root: &Path) -> Server {
        Self::start_with(ServerOptions {
            extra_args: vec!["--image-root".into(), root.display().to_string()],
            ..Default::default()
        })
        .await
    }

    pub async fn start_with(opts: ServerOptions) -> Server {
        let (tmp, state_dir) = match opts.state_dir {
            Some(dir) => (None, dir),
            None => {
                let tmp = tempfile::Builder::new().prefix("orchard-test-").tempdir().expect("tempdir");
                let dir = tmp.path().join("state");
                (Some(tmp), dir)
            }
        };
        std::fs::create_dir_all(&state_dir).expect("state dir");
        let log = state_dir.with_extension("log");
        let mut cmd = Command::new(orchard_bin());
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--state-dir"])
            .arg(&state_dir)
            .args(&opts.extra_args)
            .env("ORCHARD_AGENT_BIN", agent_bin())
            .env("ORCHARD_PLUGIN_DIR", plugin_dir())
            .env("ORCHARD_PLUGIN_CACHE", workspace_target("test-plugin-cache"))
            .env("RUST_LOG", "info,orchard_sandbox_local=debug,orchard_sandbox_k8s=debug")
            .env_remove("ORCHARD_API_KEYS")
            // The tests' mock models listen on loopback; a test of the allowlist sets its own.
            .env("ORCHARD_MODEL_ALLOW", "127.0.0.0/8")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(keys) = &opts.api_keys {
            cmd.env("ORCHARD_API_KEYS", keys);
        }
        cmd.envs(opts.env.iter().map(|(k, v)| (k, v)));
        let mut child = cmd.spawn().expect("start orchard serve");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = std::sync::mpsc::channel();
        let log_path = log.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(&log_path).ok();
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(f) = &mut file {
                    use std::io::Write;
                    let _ = writeln!(f, "{line}");
                }
                if !sent && let Some(rest) = line.split("serving on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(Ok(addr));
                    sent = true;
                }
            }
            if !sent {
                let _ = tx.send(Err(()));
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(addr)) => addr,
            _ => {
                let _ = child.kill();
                panic!("orchard serve did not start: {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
        };
        Server {
            child: Some(child),
            url: format!("http://{addr}"),
            state_dir,
            _tmp: tmp,
            http: http_client(),
            key: None,
            log,
        }
    }

    /// Another handle on a server that is already running (dropping it leaves the server be).
    pub fn attach(url: &str, state_dir: &Path) -> Server {
        Server {
            child: None,
            url: url.to_string(),
            state_dir: state_dir.to_path_buf(),
            _tmp: None,
            http: http_client(),
            key: None,
            log: state_dir.with_extension("log"),
        }
    }

    pub fn with_key(mut self, key: &str) -> Self {
        self.key = Some(key.to_string());
        self
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{path}", self.url));
        if let Some(k) = &self.key {
            r = r.header("X-API-Key", k);
        }
        r
    }

    /// Sends and returns (status, JSON body).
    pub async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut r = self.request(method, path);
        if let Some(b) = body {
            r = r.json(&b);
        }
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        let text = resp.text().await.expect("body");
        let value =
            if text.is_empty() { Value::Null } else { serde_json::from_str(&text).unwrap_or(Value::String(text)) };
        (status, value)
    }

    pub async fn create(&self, body: Value) -> String {
        let (status, v) = self.call(reqwest::Method::POST, "/sandboxes", Some(body)).await;
        assert_eq!(status, 200, "create failed: {v}\n{}", self.log());
        assert_eq!(v["status"], "ready", "{v}");
        v["sandbox_id"].as_str().expect("id").to_string()
    }

    pub async fn create_host(&self) -> String {
        self.create(json!({"image": "host"})).await
    }

    /// `/v1` exec: the full result.
    pub async fn exec(&self, id: &str, body: Value) -> orchard_protocol::ExecResult {
        let (status, v) = self.call(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"), Some(body)).await;
        assert_eq!(status, 200, "exec failed: {v}");
        serde_json::from_value(v).expect("exec result")
    }

    pub async fn sh(&self, id: &str, command: &str) -> orchard_protocol::ExecResult {
        self.exec(id, json!({"command": command, "timeout_seconds": 60})).await
    }

    /// The on-disk record of a sandbox.
    pub fn record(&self, id: &str) -> Value {
        let path = self.state_dir.join("run/sandboxes").join(id).join("sandbox.json");
        serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
            .expect("record")
    }

    /// Stops the server like an operator would (SIGTERM), waiting for it to finish.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }

    /// The server process's pid, while this handle owns it.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Waits for a server process that was signalled from outside to exit.
    pub fn wait(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }

    /// Kills the server without letting it clean up (a crash).
    pub fn crash(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn pid_alive(pid: i64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default().contains(") Z ")
}

/// The account `cargo xtask setup` makes for the tests of unprivileged hosts.
pub const UNPRIVILEGED_USER: &str = "orchard-test";

/// A directory that account owns, holding copies of `orchard` and the agent (`bin/orchard`,
/// `bin/agent`, which it can run wherever the build directory is) and an empty `state/`.
pub fn unprivileged_install() -> tempfile::TempDir {
    let user = UNPRIVILEGED_USER;
    let found = Command::new("id").args(["-u", user]).output().expect("id");
    assert!(found.status.success(), "user {user} missing: run `cargo xtask setup`");
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin dir");
    std::fs::copy(orchard_bin(), bin.join("orchard")).expect("copy orchard");
    std::fs::copy(agent_bin(), bin.join("agent")).expect("copy the agent");
    std::fs::create_dir(dir.path().join("state")).expect("state dir");
    Command::new("chown").args(["-R", user]).arg(dir.path()).status().expect("chown");
    Command::new("chmod").args(["755"]).arg(dir.path()).status().expect("chmod");
    dir
}

/// The Python 3.12 venv's `bin/NAME` (`cargo xtask setup` makes it, see `xtask/src/venvs.rs`), or
/// `None` with the reason printed when setup recorded why it made none.
pub fn py312_tool(name: &str) -> Option<PathBuf> {
    let bin = workspace_target("py312/bin").join(name);
    if bin.exists() {
        return Some(bin);
    }
    match std::fs::read_to_string(workspace_target("py312.skipped")) {
        Ok(reason) => {
            eprintln!("SKIPPED: no Python 3.12 venv: setup said: {reason}");
            None
        }
        Err(_) => panic!("{} is missing: run `cargo xtask setup`", bin.display()),
    }
}

/// Harbor's own `TaskConfig` (PyPI `harbor`, in the Python 3.12 venv) validates every
/// `task.toml` under `dir`; answers how many it read (`None`: no venv, see [`py312_tool`]).
pub fn harbor_validates(dir: &Path) -> Option<usize> {
    let python = py312_tool("python")?;
    let script = r#"
import pathlib, sys
from harbor.models.task.config import TaskConfig
bad, n = [], 0
for path in sorted(pathlib.Path(sys.argv[1]).rglob("task.toml")):
    n += 1
    try:
        TaskConfig.model_validate_toml(path.read_text())
    except Exception as e:
        bad.append(f"{path}: {e}")
    if not (path.parent / "instruction.md").is_file():
        bad.append(f"{path.parent}: no instruction.md")
print(n)
sys.exit("\n".join(bad) if bad else 0)
"#;
    let out = Command::new(python)
        .args(["-c", script])
        .arg(dir)
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .output()
        .expect("running the venv's python");
    assert!(out.status.success(), "Harbor's TaskConfig refused:\n{}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).trim().parse().expect("a count"))
}

/// A sandbox's instance cgroup directories (`…/orchard-<instance>`), read from its record.
pub fn instance_groups(record: &Value) -> Vec<PathBuf> {
    record["cgroups"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| Path::new(c.as_str()?).parent().map(Path::to_path_buf)).collect())
        .unwrap_or_default()
}

/// Sandboxes any live process of the host runs in, by their instance's cgroups.
pub fn running_in(groups: &[PathBuf]) -> std::collections::BTreeSet<String> {
    let group_names: std::collections::BTreeSet<String> =
        groups.iter().filter_map(|g| g.file_name().map(|n| n.to_string_lossy().into_owned())).collect();
    let mut running = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path().join("cgroup")) else { continue };
        for line in text.lines() {
            let path = line.rsplit(':').next().unwrap_or("");
            let mut parts = path.split('/').skip_while(|p| !group_names.contains(*p));
            if parts.next().is_some()
                && let Some(id) = parts.next()
            {
                running.insert(id.to_string());
            }
        }
    }
    running
}
