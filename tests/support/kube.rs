//! A Kubernetes API server double (kmock, see tests/k8s/apiserver.py) and a fake kubelet that
//! runs the real `orchard-agent` for each sandbox pod, on its own loopback address.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

pub const NAMESPACE: &str = "orchard-sandboxes";

/// The API server double, on a random loopback port; killed on drop.
pub struct ApiServer {
    child: tokio::process::Child,
    pub url: String,
    pub kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
}

impl ApiServer {
    pub async fn start() -> ApiServer {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("k8s/apiserver.py");
        let mut child = tokio::process::Command::new("python3")
            .arg(&script)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("python3 tests/k8s/apiserver.py (pip install kmock)");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the API server double did not start within 60 s")
            .expect("read")
            .expect("the API server double exited: is kmock installed (pip install kmock)?");
        let url = line.strip_prefix("URL ").expect("URL line").trim_end_matches('/').to_string();
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: double\n  cluster:\n    server: {url}\n\
                 contexts:\n- name: double\n  context:\n    cluster: double\n    user: test\n    namespace: {NAMESPACE}\n\
                 current-context: double\nusers:\n- name: test\n  user: {{}}\n"
            ),
        )
        .expect("kubeconfig");
        ApiServer { child, url, kubeconfig, _dir: dir }
    }

    pub fn client(&self) -> Client {
        let config = kube::Config::new(self.url.parse().expect("url"));
        Client::try_from(config).expect("kube client")
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client(), NAMESPACE)
    }

    /// Every request the double has answered: (method, path).
    pub async fn requests(&self) -> Vec<(String, String)> {
        let seen: Vec<Value> = crate::http_client()
            .get(format!("{}/_test/requests", self.url))
            .send()
            .await
            .expect("requests")
            .json()
            .await
            .expect("json");
        seen.iter()
            .map(|r| (r["method"].as_str().unwrap_or("").to_string(), r["path"].as_str().unwrap_or("").to_string()))
            .collect()
    }

    /// The next `count` requests of `method` to a path ending in `suffix` fail with `status`.
    pub async fn inject_faults(&self, method: &str, suffix: &str, status: u16, count: u32) {
        crate::http_client()
            .post(format!("{}/_test/faults", self.url))
            .json(&json!({"method": method, "path_suffix": suffix, "status": status, "count": count}))
            .send()
            .await
            .expect("faults");
    }

    /// `--backend kubernetes` and its flags against this double, for `orchard serve` and `eval`.
    pub fn backend_args(&self, key_file: &Path, host_id: &str, agent_port: u16) -> Vec<String> {
        [
            "--backend",
            "kubernetes",
            "--kube-namespace",
            NAMESPACE,
            "--agent-image",
            "registry.test/orchard-agent:test",
            "--agent-port",
            &agent_port.to_string(),
            "--token-key-file",
            &key_file.display().to_string(),
            "--host-id",
            host_id,
            "--reap-interval",
            "0.5",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// (pod, container command) of every pod a kubelet started.
pub type StartedPods = Arc<Mutex<Vec<(String, Vec<String>)>>>;

/// Plays the kubelet: watches pods; for each new one, by its image, runs the real agent (on a
/// fresh 127.x address, checking requests against the token hash the pod carries) and reports it Running
/// and Ready, or reports it unschedulable, failing to pull, or exited.
pub struct FakeKubelet {
    task: tokio::task::JoinHandle<()>,
    pub agents: Arc<Mutex<HashMap<String, RunningAgent>>>,
    /// Every container command this kubelet started, by pod.
    pub started: StartedPods,
}

pub struct RunningAgent {
    pub ip: String,
    /// The SHA-256 of the agent's token, as the pod gave it (`--token-sha256`).
    pub token_hash: String,
    pub command: Vec<String>,
    _child: tokio::process::Child,
    _dir: tempfile::TempDir,
}

static NEXT_IP: AtomicU32 = AtomicU32::new(0);

fn next_ip() -> String {
    let n = NEXT_IP.fetch_add(1, Ordering::Relaxed) + std::process::id() % 100 * 1000;
    format!("127.{}.{}.{}", 100 + n / 62500 % 100, n / 250 % 250, n % 250 + 2)
}

impl FakeKubelet {
    pub fn start(client: Client, agent_port: u16) -> FakeKubelet {
        let agents: Arc<Mutex<HashMap<String, RunningAgent>>> = Arc::default();
        let running = agents.clone();
        let started: StartedPods = Arc::default();
        let history = started.clone();
        let task = tokio::spawn(async move {
            let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
            let mut events = watcher::watcher(pods.clone(), watcher::Config::default()).boxed();
            let mut handled = std::collections::HashSet::new();
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::Apply(pod)) | Ok(Event::InitApply(pod)) => {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        let key = (name.clone(), pod.metadata.uid.clone());
                        if pod.status.is_some() || !handled.insert(key) {
                            continue;
                        }
                        let status = match start_pod(&pod, agent_port).await {
                            Ok(Some(agent)) => {
                                let status = running_status(&agent.ip);
                                history.lock().unwrap().push((name.clone(), agent.command.clone()));
                                running.lock().unwrap().insert(name.clone(), agent);
                                status
                            }
                            Ok(None) => not_running_status(&pod),
                            Err(e) => panic!("fake kubelet: pod {name}: {e}"),
                        };
                        let patch = Patch::Merge(json!({"status": status}));
                        if let Err(e) = pods.patch_status(&name, &PatchParams::default(), &patch).await {
                            eprintln!("fake kubelet: status of {name}: {e}");
                        }
                    }
                    Ok(Event::Delete(pod)) => {
                        running.lock().unwrap().remove(&pod.metadata.name.clone().unwrap_or_default());
                    }
                    _ => {}
                }
            }
        });
        FakeKubelet { task, agents, started }
    }

    pub fn agent(&self, pod: &str) -> Option<(String, String, Vec<String>)> {
        self.agents.lock().unwrap().get(pod).map(|a| (a.ip.clone(), a.token_hash.clone(), a.command.clone()))
    }
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn image_of(pod: &Pod) -> String {
    pod.spec.as_ref().and_then(|s| s.containers.first()).and_then(|c| c.image.clone()).unwrap_or_default()
}

/// Runs the agent as the pod's command says, with the kubelet's part done by hand: the agent
/// binary the init container would have installed, and the pod's own IP.
async fn start_pod(pod: &Pod, agent_port: u16) -> Result<Option<RunningAgent>, String> {
    let image = image_of(pod);
    if ["unschedulable", "no-such-image", "exits"].iter().any(|k| image.contains(k)) {
        return Ok(None);
    }
    let spec = pod.spec.as_ref().ok_or("no spec")?;
    let init = spec.init_containers.as_ref().and_then(|c| c.first()).ok_or("no init container")?;
    let install_to = init.command.clone().unwrap_or_default().last().cloned().ok_or("init has no command")?;
    let command = spec.containers[0].command.clone().ok_or("no command")?;
    if command.first() != Some(&install_to) {
        return Err(format!(
            "the container runs {:?}, not the agent the init container installs ({install_to})",
            command.first()
        ));
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    // The pod carries only its token's hash, which the agent checks requests against.
    let token_hash = command
        .windows(2)
        .find(|w| w[0] == "--token-sha256")
        .map(|w| w[1].clone())
        .ok_or("the agent's command has no --token-sha256")?;
    let ip = next_ip();
    let mut args: Vec<String> = vec!["--scratch-dir".into(), dir.path().join("scratch").display().to_string()];
    let mut rest = command[1..].iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--listen" => {
                let listen = rest.next().ok_or("--listen without a value")?;
                if *listen != format!("tcp:0.0.0.0:{agent_port}") {
                    return Err(format!("agent listens on {listen}, expected port {agent_port} on all addresses"));
                }
                args.extend(["--listen".into(), format!("tcp:{ip}:{agent_port}")]);
            }
            other => args.push(other.to_string()),
        }
    }
    // The container: its own root (the host's /usr and /etc read-only, as an image would bring
    // them; empty /workspace, /logs, /tests, /solution), the agent where the init container puts
    // it, the pod's environment and working directory, its own pid namespace; the host's network,
    // so that the agent listens on the pod's address. /tmp is shared, as
    // between the containers of one node's pods.
    let env = spec.containers[0].env.iter().flatten().map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()));
    let workdir = spec.containers[0].working_dir.clone().unwrap_or_else(|| "/".into());
    let agent = crate::agent_bin().display().to_string();
    let mut bwrap: Vec<String> = ["--die-with-parent", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for dir in ["/bin", "/lib", "/lib64", "/sbin"] {
        match std::fs::read_link(dir) {
            Ok(target) => bwrap.extend(["--symlink".into(), target.display().to_string(), dir.into()]),
            Err(_) if Path::new(dir).is_dir() => bwrap.extend(["--ro-bind".into(), dir.into(), dir.into()]),
            Err(_) => {}
        }
    }
    // A pid namespace of its own, as a container has: what the agent started (a desktop, a
    // browser) dies with the pod instead of outliving it on the host.
    bwrap.extend(["--unshare-pid", "--dev", "/dev", "--proc", "/proc", "--bind", "/tmp", "/tmp"].map(String::from));
    for dir in ["/workspace", "/logs", "/tests", "/solution", workdir.as_str()] {
        bwrap.extend(["--dir".into(), dir.into()]);
    }
    bwrap.extend(["--ro-bind".into(), agent, install_to.clone(), "--chdir".into(), workdir.clone(), "--".into()]);
    bwrap.push(install_to.clone());
    let child = tokio::process::Command::new("bwrap")
        .args(&bwrap)
        .args(&args)
        .envs(env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("starting the agent: {e}"))?;
    let addr = format!("{ip}:{agent_port}");
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(&addr).await.is_ok() {
            return Ok(Some(RunningAgent { ip, token_hash, command, _child: child, _dir: dir }));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(format!("the agent did not listen on {addr}"))
}

fn running_status(ip: &str) -> Value {
    json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        "initContainerStatuses": [{"name": "orchard-agent", "image": "registry.test/orchard-agent:test", "imageID": "",
            "ready": true, "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
        "containerStatuses": [{"name": "sandbox", "image": "", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}}}]
    })
}

fn not_running_status(pod: &Pod) -> Value {
    let image = image_of(pod);
    if image.contains("unschedulable") {
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient cpu."}]})
    } else if image.contains("no-such-image") {
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "sandbox", "image": image, "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ErrImagePull", "message": "manifest unknown"}}}]})
    } else {
        json!({"phase": "Failed", "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "sandbox", "image": image, "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
    }
}
