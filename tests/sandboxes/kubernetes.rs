//! The kubernetes backend against a Kubernetes API server double (kmock, real HTTP) and a fake
//! kubelet that runs the real agent per pod: specs written, direct routing with the token,
//! failure reporting, pods deleted behind our back, restarts, two replicas, 429 storms.

use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::Api;
use orchard_tests::images::{TestImage, busybox_layer, start_registry};
use orchard_tests::kube::{ApiServer, FakeKubelet, NAMESPACE};
use orchard_tests::{Server, ServerOptions};
use serde_json::{Value, json};

/// Each test process picks its own agent port so that parallel test binaries never collide.
/// The double's pods share the host's network and /tmp: one desktop pod at a time (each takes
/// display :99 and port 5000 there).
static ONE_DESKTOP: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn agent_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    l.local_addr().expect("addr").port()
}

struct Cluster {
    api: ApiServer,
    kubelet: FakeKubelet,
    port: u16,
    key_dir: tempfile::TempDir,
}

impl Cluster {
    async fn start() -> Cluster {
        let api = ApiServer::start().await;
        let port = agent_port();
        let kubelet = FakeKubelet::start(api.client(), port);
        let key_dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(key_dir.path().join("key"), "an installation key shared by replicas").expect("key");
        Cluster { api, kubelet, port, key_dir }
    }

    async fn host(&self, host_id: &str) -> Server {
        self.host_with(host_id, &[]).await
    }

    async fn host_with(&self, host_id: &str, extra: &[&str]) -> Server {
        let mut args = self.api.backend_args(&self.key_dir.path().join("key"), host_id, self.port);
        // The operator's registries: the fake cluster's, and a dead address the tests use.
        args.extend(
            [
                "--allowed-registry",
                "registry.test",
                "--allowed-registry",
                "127.0.0.1:9",
                "--allowed-registry",
                "docker.io",
            ]
            .map(String::from),
        );
        args.extend(extra.iter().map(|a| a.to_string()));
        self.start_host(args).await
    }

    /// `orchard serve` with these arguments, against the double.
    async fn start_host(&self, args: Vec<String>) -> Server {
        Server::start_with(ServerOptions {
            extra_args: args,
            env: vec![("KUBECONFIG".into(), self.api.kubeconfig.display().to_string())],
            ..Default::default()
        })
        .await
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.api.client(), NAMESPACE)
    }
}

async fn create(server: &Server, body: Value) -> Value {
    let (status, v) = server.call(reqwest::Method::POST, "/sandboxes", Some(body)).await;
    assert_eq!(status, 200, "create: {v}\n{}", server.log());
    v
}

async fn wait_until<F: AsyncFnMut() -> bool>(what: &str, timeout: Duration, mut check: F) {
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gone_now(r: Result<(), kube::Error>) -> bool {
    matches!(r, Err(kube::Error::Api(e)) if e.code == 404)
}

#[tokio::test]
async fn sandbox_pods_carry_the_agent_and_exec_files_and_pty_go_straight_to_it() {
    let cluster = Cluster::start().await;
    let server = cluster.host("host-a").await;
    let v = create(
        &server,
        json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-direct", "entrypoint": ["sleep", "300"],
               "cpu": "500m", "memory": "256Mi", "env": {"GREETING": "hello"}}),
    )
    .await;
    assert_eq!(v["status"], "ready", "{v}");

    // The pod as written.
    let pod: Pod = cluster.api().get("orchard-sb-direct").await.expect("pod");
    let p = serde_json::to_value(&pod).unwrap();
    let spec = &p["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["initContainers"][0]["image"], "registry.test/orchard-agent:test");
    assert_eq!(
        spec["initContainers"][0]["command"],
        json!(["/orchard-agent", "--install", "/.orchard/bin/orchard-agent"])
    );
    assert_eq!(spec["volumes"][0], json!({"name": "orchard-bin", "emptyDir": {}}));
    let main = &spec["containers"][0];
    assert_eq!(main["image"], "registry.test/python:3.12");
    let command: Vec<&str> = main["command"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(command[0], "/.orchard/bin/orchard-agent");
    assert_eq!(&command[command.len() - 3..], ["--", "sleep", "300"]);
    assert_eq!(main["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert_eq!(main["securityContext"]["allowPrivilegeEscalation"], false);
    // The server's default disk limit becomes the pod's ephemeral-storage limit.
    assert_eq!(
        main["resources"]["limits"],
        json!({"cpu": "500m", "memory": "268435456", "ephemeral-storage": "10737418240"})
    );
    assert_eq!(main["env"], json!([{"name": "GREETING", "value": "hello"}]));
    let meta = &p["metadata"];
    assert_eq!(meta["labels"]["orchard.dev/sandbox"], "sb-direct");
    assert_eq!(meta["labels"]["app.kubernetes.io/managed-by"], "orchard");
    assert_eq!(meta["annotations"]["orchard.dev/owner-host"], "host-a");
    let (ip, token_hash, _) = cluster.kubelet.agent("orchard-sb-direct").expect("the kubelet ran the agent");
    assert_eq!(meta["annotations"]["orchard.dev/token-sha256"], token_hash.as_str());
    // The token is derived from the installation key; the pod (and so the sandbox) holds only
    // its hash, and no Secret is made for it.
    let key = std::fs::read(cluster.key_dir.path().join("key")).unwrap();
    let nonce = meta["annotations"]["orchard.dev/token-nonce"].as_str().unwrap();
    let token = orchard_sandbox_k8s::token::sandbox_token(&key, "sb-direct", nonce);
    assert_eq!(hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&token)), token_hash);
    assert!(!p.to_string().contains(&token), "the token is never in the pod");
    assert!(gone_now(cluster.api::<Secret>().get("orchard-sb-direct").await.map(|_| ())), "a token Secret was made");
    let policy: NetworkPolicy = cluster.api().get("orchard-sb-direct").await.expect("network policy");
    let policy = serde_json::to_value(&policy).unwrap();
    assert_eq!(policy["spec"]["egress"], json!([]), "network blocked by default");
    assert_eq!(policy["spec"]["ingress"][0]["ports"][0]["port"], cluster.port);

    // Exec, files, processes and PTY, through the host, answered by the agent on the pod IP.
    let r = server.sh("sb-direct", "echo $GREETING from the pod && echo err >&2").await;
    assert_eq!((r.exit_code, r.stdout.text.as_str(), r.stderr.text.as_str()), (0, "hello from the pod\n", "err\n"));
    let (status, _) = server
        .request(reqwest::Method::PUT, "/v1/sandboxes/sb-direct/files?path=/workspace/note.txt")
        .body("written through the pod's agent")
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(status, 200);
    let read = server.request(reqwest::Method::GET, "/v1/sandboxes/sb-direct/files?path=/workspace/note.txt");
    assert_eq!(read.send().await.unwrap().text().await.unwrap(), "written through the pod's agent");
    let r = server.sh("sb-direct", "cat /workspace/note.txt; ls /.orchard/bin").await;
    assert_eq!(
        r.stdout.text, "written through the pod's agentorchard-agent\n",
        "the pod's own files, where the init container put the agent"
    );
    let (status, procs) = server.call(reqwest::Method::GET, "/v1/sandboxes/sb-direct/processes", None).await;
    assert_eq!(status, 200);
    assert!(procs.to_string().contains("entrypoint"), "the image's command runs behind the agent: {procs}");
    let url = format!("{}/sandboxes/sb-direct/exec/pty", server.url.replace("http://", "ws://"));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("ws");
    use tokio_tungstenite::tungstenite::Message;
    let frame = |v: Value| Message::Text(v.to_string().into());
    ws.send(frame(json!({"type": "init", "cmd": ["sh", "-c", "echo pty-$((6*7)); exit 3"], "rows": 24, "cols": 80})))
        .await
        .unwrap();
    let (mut output, mut exit) = (String::new(), None);
    while let Ok(Some(Ok(Message::Text(text)))) = tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        let f: Value = serde_json::from_str(&text).unwrap();
        match f["type"].as_str().unwrap() {
            "stdout" => {
                let bytes = base64::engine::general_purpose::STANDARD.decode(f["data"].as_str().unwrap()).unwrap();
                output += &String::from_utf8_lossy(&bytes);
            }
            "exit" => {
                exit = f["code"].as_i64();
                break;
            }
            _ => {}
        }
    }
    assert!(output.contains("pty-42"), "{output}");
    assert_eq!(exit, Some(3));

    // None of that went through the API server; the agent wants the token.
    let requests = cluster.api.requests().await;
    for (method, path) in &requests {
        assert!(
            !["/exec", "/attach", "/portforward", "/proxy", "/log"].iter().any(|s| path.ends_with(s)),
            "{method} {path} went through the API server"
        );
    }
    let direct = orchard_tests::http_client().get(format!("http://{ip}:{}/health", cluster.port)).send().await.unwrap();
    assert_eq!(direct.status(), 401, "the agent refuses requests without the sandbox's token");

    // Delete: pod (grace 0) and policy go; the kubelet stops the agent.
    let (status, _) = server.call(reqwest::Method::DELETE, "/sandboxes/sb-direct", None).await;
    assert_eq!(status, 200);
    let gone = |r: Result<_, kube::Error>| matches!(r, Err(kube::Error::Api(e)) if e.code == 404);
    assert!(gone(cluster.api::<Pod>().get("orchard-sb-direct").await.map(|_| ())));
    assert!(gone(cluster.api::<Secret>().get("orchard-sb-direct").await.map(|_| ())));
    assert!(gone(cluster.api::<NetworkPolicy>().get("orchard-sb-direct").await.map(|_| ())));
    let deletes: Vec<_> = cluster
        .api
        .requests()
        .await
        .into_iter()
        .filter(|(m, p)| m == "DELETE" && p.ends_with("/pods/orchard-sb-direct"))
        .collect();
    assert_eq!(deletes.len(), 1);
    let (status, _) = server.call(reqwest::Method::GET, "/sandboxes/sb-direct", None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn unschedulable_image_pull_and_exited_pods_are_reported_as_such() {
    let cluster = Cluster::start().await;
    let server = cluster.host("host-a").await;
    let v =
        create(&server, json!({"image": "registry.test/unschedulable:1", "sandbox_id": "sb-big", "entrypoint": []}))
            .await;
    // The create answers once the scheduler has spoken; on a loaded machine the double's
    // scheduler may not have yet, and the sandbox reads `pending` until it does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let mut info = v.clone();
    while info["status"] == "pending" && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        info = server.call(reqwest::Method::GET, "/sandboxes/sb-big", None).await.1;
    }
    assert_eq!(info["status"], "unschedulable", "{v}\n{info}");
    let (_, info) = server.call(reqwest::Method::GET, "/sandboxes/sb-big", None).await;
    assert!(info["status_message"].as_str().unwrap().contains("Insufficient cpu"), "{info}");
    let (status, body) =
        server.call(reqwest::Method::POST, "/v1/sandboxes/sb-big/exec", Some(json!({"command": "true"}))).await;
    assert!(status >= 400, "exec on an unscheduled sandbox: {status} {body}");
    assert!(body.to_string().contains("Insufficient cpu"), "{body}");

    let v =
        create(&server, json!({"image": "registry.test/no-such-image:1", "sandbox_id": "sb-pull", "entrypoint": []}))
            .await;
    assert_eq!(v["status"], "failed", "{v}");
    let (_, info) = server.call(reqwest::Method::GET, "/sandboxes/sb-pull", None).await;
    assert_eq!(
        info["status_message"],
        "image pull failed (ErrImagePull) for registry.test/no-such-image:1: manifest unknown"
    );

    let v = create(&server, json!({"image": "registry.test/exits:1", "sandbox_id": "sb-oom", "entrypoint": []})).await;
    assert_eq!(v["status"], "failed", "{v}");
    let (_, info) = server.call(reqwest::Method::GET, "/sandboxes/sb-oom", None).await;
    assert!(info["status_message"].as_str().unwrap().contains("exited with code 137 (OOMKilled)"), "{info}");

    // What the cluster cannot do is refused up front, naming the field.
    for (body, field) in [
        (json!({"image": "host"}), "image"),
        (json!({"image": "python:3", "block_network": false, "network_allow": ["example.com"]}), "network_allow"),
        (json!({"image": "python:3", "pids": 100}), "pids"),
    ] {
        let (status, v) = server.call(reqwest::Method::POST, "/sandboxes", Some(body)).await;
        assert_eq!(status, 400, "{v}");
        assert!(v.to_string().contains(field), "{v}");
    }
    // Without an entrypoint the host reads it from the registry, and says so when it cannot.
    let (status, v) =
        server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": "127.0.0.1:9/none:1"}))).await;
    assert!(status >= 400 && v.to_string().contains("entrypoint"), "{status} {v}");
}

#[tokio::test]
async fn a_pod_deleted_behind_our_back_disappears_with_its_objects() {
    let cluster = Cluster::start().await;
    let server = cluster.host("host-a").await;
    create(&server, json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-lost", "entrypoint": []})).await;
    cluster.api::<Pod>().delete("orchard-sb-lost", &Default::default()).await.expect("delete behind its back");
    wait_until("the sandbox to disappear", Duration::from_secs(10), async || {
        server.call(reqwest::Method::GET, "/sandboxes/sb-lost", None).await.0 == 404
    })
    .await;
    let (status, _) =
        server.call(reqwest::Method::POST, "/v1/sandboxes/sb-lost/exec", Some(json!({"command": "true"}))).await;
    assert_eq!(status, 404);
    wait_until("its secret and policy to be collected", Duration::from_secs(10), async || {
        let secret = cluster.api::<Secret>().get_opt("orchard-sb-lost").await.unwrap();
        let policy = cluster.api::<NetworkPolicy>().get_opt("orchard-sb-lost").await.unwrap();
        secret.is_none() && policy.is_none()
    })
    .await;
    // The id is free again, with a new pod and a new token.
    create(&server, json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-lost", "entrypoint": []})).await;
    assert_eq!(server.sh("sb-lost", "echo again").await.stdout.text, "again\n");
}

#[tokio::test]
async fn a_restarted_host_adopts_its_pods_and_reaps_what_expired_meanwhile() {
    let cluster = Cluster::start().await;
    let mut first = cluster.host("host-a").await;
    create(
        &first,
        json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-stays", "entrypoint": [], "timeout": 600}),
    )
    .await;
    create(
        &first,
        json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-brief", "entrypoint": [], "timeout": 1}),
    )
    .await;
    first.crash();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let second = cluster.host("host-a").await;
    let (_, list) = second.call(reqwest::Method::GET, "/sandboxes", None).await;
    let ids: Vec<&str> =
        list["sandboxes"].as_array().unwrap().iter().map(|s| s["sandbox_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["sb-stays"], "adopted the live one, reaped the expired one at start: {list}");
    assert!(cluster.api::<Pod>().get_opt("orchard-sb-brief").await.unwrap().is_none());
    assert_eq!(second.sh("sb-stays", "echo adopted").await.stdout.text, "adopted\n", "the token derives again");
    // A host with another key cannot talk to these sandboxes, and says why.
    let other_key = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(other_key.path(), "a different installation's key").unwrap();
    let mut args = cluster.api.backend_args(other_key.path(), "host-z", cluster.port);
    let at = args.iter().position(|a| a == "--reap-interval").unwrap();
    args[at + 1] = "3600".into();
    let stranger = cluster.start_host(args).await;
    let (status, v) =
        stranger.call(reqwest::Method::POST, "/v1/sandboxes/sb-stays/exec", Some(json!({"command": "true"}))).await;
    assert!(status >= 500 && v.to_string().contains("different token key"), "{status} {v}");
}

#[tokio::test]
async fn two_replicas_share_the_reaper_without_double_deletes() {
    let cluster = Cluster::start().await;
    let a = cluster.host("host-a").await;
    let b = cluster.host("host-b").await;
    let ids: Vec<String> = (0..16).map(|i| format!("sb-ttl-{i}")).collect();
    for (i, id) in ids.iter().enumerate() {
        let server = if i % 2 == 0 { &a } else { &b };
        create(server, json!({"image": "registry.test/python:3.12", "sandbox_id": id, "entrypoint": [], "timeout": 2}))
            .await;
    }
    // Both replicas serve every sandbox (sb-ttl-14 was created through a, moments ago).
    assert_eq!(b.sh("sb-ttl-14", "echo from-b").await.stdout.text, "from-b\n");
    wait_until("every sandbox to expire", Duration::from_secs(30), async || {
        cluster.api::<Pod>().list(&Default::default()).await.unwrap().items.is_empty()
    })
    .await;
    let deletes = cluster.api.requests().await;
    for id in &ids {
        let n = deletes.iter().filter(|(m, p)| m == "DELETE" && p.ends_with(&format!("/pods/orchard-{id}"))).count();
        assert_eq!(n, 1, "{id} deleted {n} times");
    }
    let reaped_by =
        |s: &Server| ids.iter().filter(|id| s.log().contains(&format!("sandbox={id} expired=true"))).count();
    let (by_a, by_b) = (reaped_by(&a), reaped_by(&b));
    assert_eq!(by_a + by_b, ids.len(), "a reaped {by_a}, b reaped {by_b}");
    assert!(by_a > 0 && by_b > 0, "the work is shared: a {by_a}, b {by_b}");
}

#[tokio::test]
async fn a_429_storm_on_create_is_ridden_out_with_backoff() {
    let cluster = Cluster::start().await;
    let server = cluster.host("host-a").await;
    cluster.api.inject_faults("POST", "/pods", 429, 6).await;
    cluster.api.inject_faults("POST", "/networkpolicies", 503, 2).await;
    let creates = (0..3).map(|i| {
        let server = &server;
        async move {
            create(
                server,
                json!({"image": "registry.test/python:3.12", "sandbox_id": format!("sb-storm-{i}"), "entrypoint": []}),
            )
            .await
        }
    });
    for v in futures::future::join_all(creates).await {
        assert_eq!(v["status"], "ready", "{v}");
    }
    let requests = cluster.api.requests().await;
    let pod_posts = requests.iter().filter(|(m, p)| m == "POST" && p.ends_with("/pods")).count();
    let policy_posts = requests.iter().filter(|(m, p)| m == "POST" && p.ends_with("/networkpolicies")).count();
    assert_eq!((pod_posts, policy_posts), (3 + 6, 3 + 2), "each refused write retried, nothing created twice");
    assert_eq!(cluster.api::<Pod>().list(&Default::default()).await.unwrap().items.len(), 3);
    for i in 0..3 {
        assert_eq!(server.sh(&format!("sb-storm-{i}"), "echo ok").await.stdout.text, "ok\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orchard_eval_runs_on_kubernetes_with_the_entrypoint_from_the_registry() {
    let cluster = Cluster::start().await;
    // A real registry on loopback holds the task image; the host reads its entrypoint from it.
    let registry = start_registry();
    let image = TestImage::new(vec![busybox_layer(&[])], &["PATH=/usr/bin:/bin"], "/");
    image.push(&orchard_tests::http_client(), &registry.addr, "test/tasks", "v1").await;
    let reference = format!("{}/test/tasks:v1", registry.addr);
    let mut args: Vec<String> = [
        orchard_tests::evals::examples().as_str(),
        "--harness",
        "oracle",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--grant",
        "solution",
        "--image",
        &reference,
        "--insecure-registry",
        &registry.addr,
        "--concurrency",
        "2",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(cluster.api.backend_args(&cluster.key_dir.path().join("key"), "eval-host", cluster.port));
    let kubeconfig = cluster.api.kubeconfig.display().to_string();
    let (summary, _out, stdout) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        orchard_tests::evals::eval_with_env(&args, &[("KUBECONFIG", &kubeconfig)])
    })
    .await
    .unwrap();
    let tasks_run = summary["rollouts"].as_u64().unwrap_or_default();
    assert!(tasks_run >= 5, "{summary:#}");
    assert_eq!(
        summary["passed"], summary["rollouts"],
        "the oracle passes every example task on pods: {summary:#}\n{stdout}"
    );
    // Every rollout's pod was created with the image's own command and deleted afterwards.
    let requests = cluster.api.requests().await;
    let created = requests.iter().filter(|(m, p)| m == "POST" && p.ends_with("/pods")).count();
    let deleted = requests.iter().filter(|(m, p)| m == "DELETE" && p.contains("/pods/")).count();
    assert_eq!((created as u64, deleted as u64), (tasks_run, tasks_run), "{requests:?}");
    assert!(cluster.api::<Pod>().list(&Default::default()).await.unwrap().items.is_empty());
    let started = cluster.kubelet.started.lock().unwrap().clone();
    assert_eq!(started.len() as u64, tasks_run);
    for (pod, command) in started {
        assert_eq!(&command[command.len() - 2..], ["--", "sh"], "{pod}: the image config's Cmd runs behind the agent");
    }
}

#[tokio::test]
async fn domain_allowlists_become_cilium_policies_when_the_cluster_has_cilium() {
    let cluster = Cluster::start().await;
    let server = cluster.host_with("host-a", &["--fqdn-policy", "cilium"]).await;
    let allow = json!(["pypi.org", "*.pythonhosted.org", "10.1.0.0/16"]);
    create(
        &server,
        json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-pip", "entrypoint": [],
               "block_network": false, "network_allow": allow}),
    )
    .await;
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("cilium.io", "v2", "CiliumNetworkPolicy"),
        "ciliumnetworkpolicies",
    );
    let cilium: Api<kube::api::DynamicObject> = Api::namespaced_with(cluster.api.client(), NAMESPACE, &resource);
    let cnp = serde_json::to_value(cilium.get("orchard-sb-pip").await.expect("a CiliumNetworkPolicy")).unwrap();
    assert_eq!(cnp["spec"]["endpointSelector"]["matchLabels"], json!({"orchard.dev/sandbox": "sb-pip"}));
    assert_eq!(
        cnp["spec"]["egress"][1]["toFQDNs"],
        json!([{"matchName": "pypi.org"}, {"matchPattern": "*.pythonhosted.org"}])
    );
    let policy = serde_json::to_value(cluster.api::<NetworkPolicy>().get("orchard-sb-pip").await.unwrap()).unwrap();
    assert_eq!(
        policy["spec"]["egress"],
        json!([{"to": [{"ipBlock": {"cidr": "10.1.0.0/16"}}]}]),
        "only the CIDR besides the names"
    );
    let (status, _) = server.call(reqwest::Method::DELETE, "/sandboxes/sb-pip", None).await;
    assert_eq!(status, 200);
    assert!(cilium.get_opt("orchard-sb-pip").await.unwrap().is_none(), "deleted with the sandbox");
}

/// Warm pools on Kubernetes: ready pods of a shape are claimed by creates of that shape with a
/// resourceVersion precondition, so two replicas racing for the pool never claim one pod twice.
#[tokio::test]
async fn two_replicas_claim_from_one_warm_pool_and_never_the_same_pod() {
    let cluster = Cluster::start().await;
    let image = "registry.test/python:3.12";
    let pool = ["--warm-pool", "registry.test/python:3.12=4"];
    let a = cluster.host_with("host-a", &pool).await;
    let b = cluster.host_with("host-b", &pool).await;
    wait_until("the pool to fill", Duration::from_secs(60), async || {
        let pods = cluster.api::<Pod>().list(&Default::default()).await.unwrap().items;
        let ready = pods.iter().filter(|p| {
            p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("orchard.dev/pool"))
                && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        });
        ready.count() >= 4
    })
    .await;
    // Only one replica fills a pool: no more than asked for.
    let pooled = cluster.api::<Pod>().list(&Default::default()).await.unwrap().items.len();
    assert_eq!(pooled, 4, "the pool was overfilled");
    // An unclaimed pool pod dies on time with no replica left (the kubelet keeps its deadline):
    // its idle TTL (an hour) plus an hour's slack plus the day any sandbox may live, so that a
    // claim's deadline (its age plus its lifetime) only ever lowers it.
    let pods = cluster.api::<Pod>().list(&Default::default()).await.unwrap().items;
    for pod in &pods {
        let deadline = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds);
        assert_eq!(deadline, Some(3600 + 3600 + 86_400), "{:?}", pod.metadata.name);
    }
    // The API server (and its double) refuses a raise.
    let raise = json!({"spec": {"activeDeadlineSeconds": 1_000_000}});
    let refused = cluster
        .api::<Pod>()
        .patch(pods[0].metadata.name.as_deref().unwrap(), &Default::default(), &kube::api::Patch::Merge(&raise))
        .await
        .expect_err("a raised deadline must be refused");
    assert!(refused.to_string().contains("less than or equal"), "{refused}");
    // Pooled pods are nobody's.
    let (_, listed) = a.call(reqwest::Method::GET, "/sandboxes", None).await;
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 0, "{listed}");

    // A precondition that no longer holds is refused, as by a real API server.
    let pods = cluster.api::<Pod>().list(&Default::default()).await.unwrap().items;
    let name = pods[0].metadata.name.clone().unwrap();
    let stale = json!({"metadata": {"resourceVersion": "1", "annotations": {"x": "y"}}});
    let refused = cluster
        .api::<Pod>()
        .patch(&name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&stale))
        .await
        .expect_err("a stale resourceVersion must not be applied");
    assert!(refused.to_string().contains("409") || refused.to_string().contains("Conflict"), "{refused}");

    // Eight creates at once over two replicas, for a pool of four.
    let body = json!({"image": image, "entrypoint": []});
    let creates = (0..8).map(|i| {
        let server = if i % 2 == 0 { &a } else { &b };
        let body = body.clone();
        async move { create(server, body).await["sandbox_id"].as_str().unwrap().to_string() }
    });
    let ids: Vec<String> = futures::future::join_all(creates).await;
    let distinct: std::collections::BTreeSet<&String> = ids.iter().collect();
    assert_eq!(distinct.len(), 8, "a pod was handed out twice: {ids:?}");
    let claimed: Vec<&String> = ids.iter().filter(|id| id.starts_with("pool-")).collect();
    // Claims beyond the four ready pods wait for the pods the pool's owner starts next, so more
    // than four may come from the pool; each is a pod of the cluster, handed out once (above).
    assert!(!claimed.is_empty(), "claimed {claimed:?}");
    let existing: std::collections::BTreeSet<String> = cluster
        .api::<Pod>()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(claimed.iter().all(|id| existing.contains(&format!("orchard-{id}"))), "claimed {claimed:?}");
    // Each claimed pod now belongs to the tenant and works from either replica.
    let first = claimed[0];
    assert_eq!(b.sh(first, "echo claimed").await.stdout.text, "claimed\n");
    let pod = cluster.api::<Pod>().get(&format!("orchard-{first}")).await.unwrap();
    let notes = pod.metadata.annotations.unwrap();
    assert!(!notes.contains_key("orchard.dev/pool"), "{notes:?}");
    assert_eq!(notes.get("orchard.dev/tenant").map(String::as_str), Some("default"));
    // The hard lifetime (the server's default, a day) counts from the claim, kept by the kubelet.
    let deadline = pod.spec.as_ref().and_then(|s| s.active_deadline_seconds).expect("activeDeadlineSeconds");
    assert!((86_400..86_400 + 120).contains(&deadline), "activeDeadlineSeconds {deadline}");
    // The owner of the pool tops it up again.
    wait_until("the pool to refill", Duration::from_secs(60), async || {
        let pods = cluster.api::<Pod>().list(&Default::default()).await.unwrap().items;
        pods.iter()
            .filter(|p| p.metadata.annotations.as_ref().is_some_and(|a| a.contains_key("orchard.dev/pool")))
            .count()
            >= 4
    })
    .await;
    // One uncontended warm-pool lifecycle (claim, use, delete) costs the API server 3 writes:
    // the claim's patch, and the pod's and its policy's deletes. No Secret: the pod holds only
    // its token's hash.
    let before = cluster.api.requests().await.len();
    let id = create(&a, body.clone()).await["sandbox_id"].as_str().unwrap().to_string();
    assert!(id.starts_with("pool-"), "not claimed from the pool: {id}");
    assert_eq!(a.sh(&id, "echo used").await.stdout.text, "used\n");
    let (status, v) = a.call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{v}");
    let name = format!("orchard-{id}");
    let writes: Vec<(String, String)> = cluster.api.requests().await[before..]
        .iter()
        .filter(|(method, path)| method != "GET" && path.ends_with(&name))
        .cloned()
        .collect();
    assert_eq!(writes.len(), 3, "writes for one warm-pool lifecycle: {writes:?}");
}

/// `orchard eval TASKS ARGS` on the Kubernetes backend, the tasks' image a busybox pushed to a
/// registry of the test's own (the fake kubelet brings the host's /usr): the summary and the
/// results' folder.
async fn eval_on_kubernetes(
    cluster: &Cluster,
    tasks: &std::path::Path,
    args: &[&str],
    host_id: &str,
) -> (Value, tempfile::TempDir) {
    let registry = start_registry();
    let image = TestImage::new(vec![busybox_layer(&[])], &["PATH=/usr/bin:/bin"], "/");
    image.push(&orchard_tests::http_client(), &registry.addr, "test/tasks", "v2").await;
    let reference = format!("{}/test/tasks:v2", registry.addr);
    let mut full: Vec<String> = std::iter::once(tasks.to_str().unwrap())
        .chain(args.iter().copied())
        .chain(["--image", &reference, "--insecure-registry", &registry.addr])
        .map(str::to_string)
        .collect();
    full.extend(cluster.api.backend_args(&cluster.key_dir.path().join("key"), host_id, cluster.port));
    let kubeconfig = cluster.api.kubeconfig.display().to_string();
    let (summary, out, _) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = full.iter().map(String::as_str).collect();
        orchard_tests::evals::eval_with_env(&args, &[("KUBECONFIG", &kubeconfig)])
    })
    .await
    .unwrap();
    drop(registry);
    (summary, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollouts_browser_on_kubernetes_runs_in_the_pod_behind_its_agent() {
    let cluster = Cluster::start().await;
    // The task serves its page from the pod (the double's pods share the host's loopback: a
    // port of its own) and the fixture harness opens it through the shipped driver.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("page");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::write(task.join("instruction.md"), "Browse.").unwrap();
    std::fs::write(task.join("environment/index.html"), "<html><head><title>From the pod</title></head></html>")
        .unwrap();
    std::fs::write(
        task.join("environment/Dockerfile"),
        format!(
            "FROM scratch\nWORKDIR /site\nCOPY index.html /site/index.html\n\
             CMD [\"python3\", \"-m\", \"http.server\", \"{port}\", \"--bind\", \"127.0.0.1\"]\n\
             HEALTHCHECK CMD python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/')\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        task.join("task.toml"),
        format!(
            "[agent]\ntimeout_sec = 120\n[metadata]\nmode = \"tools\"\n\
             calls = [{{tool = \"goto\", arguments = {{url = \"http://127.0.0.1:{port}/\"}}}}]\n"
        ),
    )
    .unwrap();
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let args = ["--harness", &harness, "--tools", "browser", "--grader", "script"];
    let (_, out) = eval_on_kubernetes(&cluster, dir.path(), &args, "browser-host").await;
    let rollout = std::fs::read_dir(out.path().join("rollouts")).unwrap().next().unwrap().unwrap().path();
    let r = orchard_tests::evals::read_json(&rollout);
    let answer = r["outcome"]["answer"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    assert!(answer.contains("Title: From the pod"), "{answer}");
    // The Kubernetes backend has no namespace to start a host process in: the browser was the
    // pod agent's, relayed over its authenticated connection.
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    assert!(lines.contains("\"browser-open\"") && lines.contains("\"browser-close\""), "{lines}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollouts_desktop_on_kubernetes_runs_in_the_pod_behind_its_agent() {
    let _one = ONE_DESKTOP.lock().await;
    let cluster = Cluster::start().await;
    // A desktop example as it is: its desktop starts in the pod through the agent's /desktop
    // (the double's pods share the host's network and /tmp: display :99 and port 5000 are this
    // test's alone), the driver acts through the agent, and the rubric reads the file and the
    // desktop's windows through its grader socket.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/desktop");
    let dir = tempfile::tempdir().unwrap();
    let copied =
        std::process::Command::new("cp").arg("-r").arg(examples.join("edit-note")).arg(dir.path()).status().unwrap();
    assert!(copied.success());
    let args = ["--harness", "oracle", "--tools", "desktop", "--grader", "rubric", "--grant", "solution"];
    let (summary, out) = eval_on_kubernetes(&cluster, dir.path(), &args, "desktop-host").await;
    let rollout = std::fs::read_dir(out.path().join("rollouts")).unwrap().next().unwrap().unwrap().path();
    let r = orchard_tests::evals::read_json(&rollout);
    assert_eq!(r["reward"], 1.0, "{r:#}\n{summary:#}");
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    // The driver's actions reached the pod's desktop through its agent.
    assert!(lines.contains("\"op\":\"desktop-act\""), "{lines:.2000}");
}

/// OSWorld's own `DesktopEnv` (PyPI desktop-env, through `orchard_client.osworld`) on a server
/// whose sandboxes are Kubernetes pods: each task's machine is a pod with a desktop, reached
/// through the port route and the pod's agent; both fixture tasks score 1 by OSWorld's metrics.
#[tokio::test(flavor = "multi_thread")]
async fn osworlds_desktop_env_runs_on_kubernetes_pods() {
    let Some(python) = orchard_tests::py312_tool("python") else { return };
    let _one = ONE_DESKTOP.lock().await;
    let cluster = Cluster::start().await;
    let server = cluster.host("osworld-host").await;
    let env = [
        ("ORCHARD_OSWORLD_IMAGE", "registry.test/orchard-desktop:bookworm"),
        // The double's registry is not a real one: the image's entrypoint is given (none).
        ("ORCHARD_OSWORLD_SANDBOX", r#"{"entrypoint": []}"#),
    ];
    let (got, said) = orchard_tests::osworld::run_fixture_tasks(&python, &server, "act", &env).await;
    assert_eq!(got["scores"]["orchard-edit-notes"], 1.0, "{got:#}\n{said}");
    assert_eq!(got["scores"]["orchard-calc-totals"], 1.0, "{got:#}\n{said}");
    // Each task's machine was a pod of its own, and none is left.
    for sandbox in got["sandboxes"].as_array().unwrap() {
        let name = format!("orchard-{}", sandbox.as_str().unwrap());
        let left: Result<Pod, _> = cluster.api().get(&name).await;
        assert!(left.is_err() || left.unwrap().metadata.deletion_timestamp.is_some(), "{name} is left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_image_locality_a_pod_prefers_the_nodes_that_hold_its_image() {
    use k8s_openapi::api::core::v1::Node;
    let cluster = Cluster::start().await;
    let nodes: Api<Node> = Api::all(cluster.api.client());
    for (name, held) in [
        ("node-a", ["docker.io/library/busybox@sha256:00", "registry.test/python:3.12"]),
        ("node-b", ["registry.test/python:3.11", "registry.test/other:1"]),
        ("node-c", ["registry.test/python:3.12", "registry.test/other:1"]),
    ] {
        let node = json!({"metadata": {"name": name}, "status": {"images": [{"names": held, "sizeBytes": 1}]}});
        nodes.create(&Default::default(), &serde_json::from_value(node).unwrap()).await.expect("node");
    }
    let server = cluster.host_with("host-a", &["--image-locality"]).await;
    // The node watch lists them at start; give it a moment past the pod watch's sync.
    tokio::time::sleep(Duration::from_secs(1)).await;
    create(&server, json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-near", "entrypoint": []})).await;
    create(&server, json!({"image": "registry.test/python:3.13", "sandbox_id": "sb-far", "entrypoint": []})).await;
    let pods = cluster.api::<Pod>();
    let affinity = |pod: Pod| serde_json::to_value(pod.spec.expect("spec").affinity).expect("json");
    let near = affinity(pods.get("orchard-sb-near").await.expect("pod"));
    let preferred = &near["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(preferred["weight"], 100, "{near}");
    assert_eq!(
        preferred["preference"]["matchFields"][0],
        json!({"key": "metadata.name", "operator": "In", "values": ["node-a", "node-c"]}),
        "{near}"
    );
    assert_eq!(affinity(pods.get("orchard-sb-far").await.expect("pod")), Value::Null, "no node holds python:3.13");
    // A replica without the flag prefers nothing.
    let plain = cluster.host("host-b").await;
    create(&plain, json!({"image": "registry.test/python:3.12", "sandbox_id": "sb-plain", "entrypoint": []})).await;
    assert_eq!(affinity(pods.get("orchard-sb-plain").await.expect("pod")), Value::Null);
}
