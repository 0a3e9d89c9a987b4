//! Plays the nodes: each pod created runs the real `orchard-agent`, as the pod's command says,
//! on a loopback address of its own, and is reported Running and Ready by a status write.
//!
//! What a node would add is left out on purpose, so that 10,000 pods fit one small machine:
//! no container (the agent runs as a plain process of the host; the bench only runs `echo`),
//! no image pull. A pod whose agent does not listen within 10 s is reported Failed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::State;
use crate::store::Key;

pub struct Kubelet {
    agent_bin: PathBuf,
    agent_port: u16,
    scratch: PathBuf,
    starting: tokio::sync::Semaphore,
    next_ip: AtomicU32,
    agents: Mutex<HashMap<Key, tokio::process::Child>>,
}

impl Kubelet {
    /// Runs `agent_bin` for each pod, listening on `agent_port`, with its scratch directory
    /// under `scratch`.
    pub fn new(agent_bin: PathBuf, agent_port: u16, scratch: PathBuf) -> Kubelet {
        Kubelet {
            agent_bin,
            agent_port,
            scratch,
            starting: tokio::sync::Semaphore::new(32),
            next_ip: AtomicU32::new(0),
            agents: Mutex::default(),
        }
    }

    pub fn running(&self) -> usize {
        self.agents.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub(crate) fn stop(&self, key: &Key) {
        // Dropping the child kills it (kill_on_drop).
        self.agents.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }

    pub(crate) fn stop_all(&self) {
        self.agents.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// 127.64.0.2 onwards: a /10 of loopback addresses, 250 per /24.
    fn ip(&self) -> String {
        let n = self.next_ip.fetch_add(1, Ordering::Relaxed);
        format!("127.{}.{}.{}", 64 + n / 62_500 % 64, n / 250 % 250, n % 250 + 2)
    }

    pub(crate) fn start(self: Arc<Self>, state: Arc<State>, key: Key, pod: &Value) {
        let command: Vec<String> = pod["spec"]["containers"][0]["command"]
            .as_array()
            .map(|c| c.iter().filter_map(|a| a.as_str().map(String::from)).collect())
            .unwrap_or_default();
        tokio::spawn(async move {
            let Ok(_permit) = self.starting.acquire().await else { return };
            let status = match self.run(&key, &command).await {
                Ok(ip) => running(&ip),
                Err(why) => failed(&why),
            };
            let wrote = state.store.lock().unwrap_or_else(|p| p.into_inner()).patch(
                key.clone(),
                &json!({"status": status}),
                true,
            );
            if wrote.is_err() {
                // Deleted while starting.
                self.stop(&key);
            }
        });
    }

    /// Starts the pod's agent; its address.
    async fn run(&self, key: &Key, command: &[String]) -> Result<String, String> {
        let ip = self.ip();
        let scratch = self.scratch.join(format!("{}-{}", key.1, key.2));
        let mut args = vec!["--scratch-dir".to_string(), scratch.display().to_string()];
        let mut rest = command.iter().skip(1);
        while let Some(arg) = rest.next() {
            if arg == "--listen" {
                let listen = rest.next().ok_or("--listen without a value")?;
                if *listen != format!("tcp:0.0.0.0:{}", self.agent_port) {
                    return Err(format!("the agent listens on {listen}, not port {}", self.agent_port));
                }
                args.extend(["--listen".into(), format!("tcp:{ip}:{}", self.agent_port)]);
            } else {
                args.push(arg.clone());
            }
        }
        let child = tokio::process::Command::new(&self.agent_bin)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.agent_bin.display()))?;
        self.agents.lock().unwrap_or_else(|p| p.into_inner()).insert(key.clone(), child);
        let addr = format!("{ip}:{}", self.agent_port);
        // The agent is spawned (posix_spawn: the bench's process is large, and a fork of it per
        // pod would copy its page tables), then polled for until it listens.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        tokio::time::sleep(Duration::from_millis(3)).await;
        while tokio::time::Instant::now() < deadline {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                return Ok(ip);
            }
            // Not sooner: a process starts in a few milliseconds, and every try costs a connect.
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.stop(key);
        Err(format!("the agent did not listen on {addr} within 10 s"))
    }
}

fn running(ip: &str) -> Value {
    json!({
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "sandbox", "image": "", "imageID": "", "ready": true, "restartCount": 0,
            "state": {"running": {}}}]
    })
}

fn failed(why: &str) -> Value {
    json!({"phase": "Failed", "message": why, "conditions": [{"type": "PodScheduled", "status": "True"}]})
}
