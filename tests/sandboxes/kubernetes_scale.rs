//! The Kubernetes backend at a few hundred sandboxes, against the fast API server double
//! (`orchard-kube-double`: the one `orchard-bench --suite kubernetes` runs 10,000 on) with a
//! request latency, a watch delay and priority-and-fairness 429s injected, and a kubelet that
//! runs the real agent per pod.

use std::sync::Arc;
use std::time::{Duration, Instant};

use orchard_kube_double::{Costs, Double, Kubelet};
use orchard_tests::{Server, ServerOptions};
use serde_json::json;

const NAMESPACE: &str = "orchard-sandboxes";
const IMAGE: &str = "registry.test/python:3.12";

struct Scale {
    double: Double,
    server: Arc<Server>,
    _dir: tempfile::TempDir,
}

async fn start(costs: Costs, pool: usize, write_rate: u32, write_burst: u32) -> Scale {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let kubelet = Kubelet::new(orchard_tests::agent_bin(), port, dir.path().join("pods"));
    let double = Double::start(costs, Some(kubelet)).await.expect("the API server double");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: d\n  cluster:\n    server: {}\ncontexts:\n- name: d\n  \
             context:\n    cluster: d\n    user: u\n    namespace: {NAMESPACE}\ncurrent-context: d\nusers:\n- name: u\n  user: {{}}\n",
            double.url
        ),
    )
    .expect("kubeconfig");
    std::fs::write(dir.path().join("key"), "the installation key").expect("key");
    let args = [
        "--backend",
        "kubernetes",
        "--kube-namespace",
        NAMESPACE,
        "--agent-image",
        "registry.test/orchard-agent:t",
        "--agent-port",
        &port.to_string(),
        "--token-key-file",
        &dir.path().join("key").display().to_string(),
        "--host-id",
        "scale-a",
        "--reap-interval",
        "0.5",
        "--allowed-registry",
        "registry.test",
        "--warm-pool",
        &format!("{IMAGE}={pool}"),
        "--max-sandboxes",
        "2000",
        "--kube-write-rate",
        &write_rate.to_string(),
        "--kube-write-burst",
        &write_burst.to_string(),
        "--create-rate",
        "none",
        "--tenant-create-rate",
        "none",
        "--max-connections-per-client",
        "4096",
    ];
    let server = Server::start_with(ServerOptions {
        extra_args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![("KUBECONFIG".into(), kubeconfig.display().to_string())],
        ..Default::default()
    })
    .await;
    Scale { double, server: Arc::new(server), _dir: dir }
}

impl Scale {
    async fn wait_for_pool(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let ready = self
                .double
                .pods()
                .iter()
                .filter(|p| p["metadata"]["annotations"].get("orchard.dev/pool").is_some())
                .filter(|p| p["status"]["podIP"].is_string())
                .count();
            if ready >= n {
                // The server sees them a watch delay later.
                tokio::time::sleep(Duration::from_millis(500)).await;
                return;
            }
            assert!(Instant::now() < deadline, "the warm pool has {ready}/{n} ready pods after 120 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// `n` creates at once; each one's id and when it was answered.
async fn creates(server: &Arc<Server>, n: usize, body: impl Fn(usize) -> serde_json::Value) -> Vec<(String, Duration)> {
    let t = Instant::now();
    let calls = (0..n).map(|i| {
        let (server, body) = (server.clone(), body(i));
        tokio::spawn(async move {
            let (status, v) = server.call(reqwest::Method::POST, "/sandboxes", Some(body)).await;
            assert_eq!(status, 200, "create: {v}");
            (v["sandbox_id"].as_str().expect("id").to_string(), t.elapsed())
        })
    });
    let mut out = Vec::new();
    for call in calls.collect::<Vec<_>>() {
        out.push(call.await.expect("create task"));
    }
    out
}

async fn deletes(server: &Arc<Server>, ids: &[String]) -> Vec<Duration> {
    let t = Instant::now();
    let calls: Vec<_> = ids
        .iter()
        .map(|id| {
            let (server, id) = (server.clone(), id.clone());
            tokio::spawn(async move {
                let (status, v) = server.call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"), None).await;
                assert!(status == 200 || status == 204, "delete {id}: {status} {v}");
                t.elapsed()
            })
        })
        .collect();
    let mut out = Vec::new();
    for call in calls {
        out.push(call.await.expect("delete task"));
    }
    out
}

/// The answered writes to an object, refused ones (429) left out.
fn answered(log: &[String]) -> Vec<&str> {
    log.iter().map(String::as_str).filter(|w| !w.ends_with(" 429")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundreds_of_warm_pool_claims_at_once_each_cost_three_writes_through_429s() {
    // An in-flight limit far below the replica's own cap (128): its writes meet 429s.
    let costs = Costs { latency: Duration::from_millis(5), watch_delay: Duration::from_millis(20), max_in_flight: 8 };
    let scale = start(costs, 200, 2000, 1000).await;
    scale.wait_for_pool(200).await;
    let claimed = creates(&scale.server, 200, |_| json!({"image": IMAGE})).await;
    let ids: Vec<String> = claimed.iter().map(|(id, _)| id.clone()).collect();
    let distinct: std::collections::HashSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 200, "a pod was claimed twice");
    assert!(ids.iter().all(|id| id.starts_with("pool-")), "every create was served by the pool: {ids:?}");
    let refused = scale.double.requests().get("429").copied().unwrap_or(0);
    assert!(refused > 0, "the burst never met the API server's limit: the test shows nothing about 429s");
    // Each claimed sandbox is its tenant's and runs commands.
    for id in ids.iter().step_by(10) {
        let r = scale.server.sh(id, "echo claimed").await;
        assert_eq!((r.exit_code, r.stdout.text.trim()), (0, "claimed"), "{id}");
    }
    deletes(&scale.server, &ids).await;
    for id in &ids {
        let log = scale.double.writes_on(&format!("orchard-{id}"));
        let writes = answered(&log);
        // The pool made it (policy, pod); the claim, use and delete cost the rest.
        assert_eq!(
            writes,
            [
                "POST networkpolicies 201",
                "POST pods 201",
                "PATCH pods 200",
                "DELETE pods 200",
                "DELETE networkpolicies 200"
            ],
            "{id}: {log:?}"
        );
    }
    // Readiness came from the watch: no pod was read one by one.
    assert_eq!(scale.double.requests().get("GET pods"), None, "{:?}", scale.double.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_go_before_creates_when_writes_queue() {
    // 150 writes a second: 100 deletes (200 writes) beside 100 cold creates (200 writes) queue
    // for ~2.7 s. Deletes first: every delete is answered before most creates are.
    let scale = start(Costs::default(), 0, 150, 10).await;
    let made =
        creates(&scale.server, 100, |n| json!({"image": IMAGE, "entrypoint": [], "sandbox_id": format!("old-{n}")}))
            .await;
    let old: Vec<String> = made.into_iter().map(|(id, _)| id).collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let server = scale.server.clone();
    let new = tokio::spawn(async move {
        creates(&server, 100, |n| json!({"image": IMAGE, "entrypoint": [], "sandbox_id": format!("new-{n}")})).await
    });
    let deleted = deletes(&scale.server, &old).await;
    let mut created: Vec<Duration> = new.await.expect("creates").into_iter().map(|(_, at)| at).collect();
    created.sort();
    let last_delete = deleted.iter().max().copied().unwrap_or_default();
    assert!(
        last_delete < created[created.len() / 2],
        "deletes waited behind creates: the last delete at {last_delete:?}, the median create at {:?}",
        created[created.len() / 2]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_beyond_the_ready_pool_wait_for_its_starting_pods() {
    // The watch a second late: when the claims come, the server knows the pool's pods only as
    // starting (from its own creates' answers), none as ready.
    let costs = Costs { watch_delay: Duration::from_secs(1), ..Costs::default() };
    let scale = start(costs, 30, 1000, 1000).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while scale.double.pods().iter().filter(|p| p["metadata"]["annotations"].get("orchard.dev/pool").is_some()).count()
        < 30
    {
        assert!(Instant::now() < deadline, "the pool's pods were never made");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // No entrypoint in the body and none readable from the image: a claim that went cold
    // instead of waiting would be refused.
    let claimed = creates(&scale.server, 30, |_| json!({"image": IMAGE})).await;
    let ids: std::collections::HashSet<&str> = claimed.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids.len(), 30, "a pod was claimed twice");
    assert!(ids.iter().all(|id| id.starts_with("pool-")), "{ids:?}");
    let r = scale.server.sh(&claimed[0].0, "echo waited").await;
    assert_eq!(r.stdout.text.trim(), "waited");
}
