//! deploy/: every overlay renders offline with `kubectl kustomize`, validates against the
//! Kubernetes 1.32 schemas (`kubernetes-validate --strict`), and holds what an operator relies
//! on; the objects the kubernetes backend writes validate too.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use orchard_sandbox::SandboxSpec;
use orchard_sandbox_k8s::spec::{self, ClusterConfig, PodPlan};
use serde_json::{Value, json};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_path_buf()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Strict schema validation of a YAML or JSON file of one or more documents.
fn validate(file: &Path) {
    let out = run(Command::new("python3")
        .args(["-m", "kubernetes_validate", "--strict", "--no-warn", "-k", "1.32.0"])
        .arg(file));
    assert!(!out.contains("ERROR") && !out.contains("failed"), "{out}");
}

fn render(overlay: &str) -> Vec<Value> {
    let yaml = run(Command::new("kubectl").arg("kustomize").arg(root().join("deploy/overlays").join(overlay)));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{overlay}.yaml"));
    std::fs::write(&file, &yaml).unwrap();
    validate(&file);
    let json = run(Command::new("python3")
        .args([
            "-c",
            "import sys, yaml, json; print(json.dumps([d for d in yaml.safe_load_all(open(sys.argv[1])) if d]))",
        ])
        .arg(&file));
    serde_json::from_str(&json).expect("rendered documents")
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(name)))
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

#[test]
fn every_overlay_renders_validates_and_grants_least_privilege() {
    let serve_help = run(Command::new(orchard_tests::orchard_bin()).args(["serve", "--help"]));
    for overlay in ["dev", "production", "cilium", "image-locality"] {
        let docs = render(overlay);
        // RBAC: a namespaced Role on the sandbox namespace, named verbs and resources only;
        // with --image-locality also reading nodes, and nothing else cluster-wide.
        let cluster_wide: Vec<&Value> =
            docs.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "ClusterRoleBinding").collect();
        if overlay == "image-locality" {
            let reader = find(&docs, "ClusterRole", "orchard-host-nodes-reader");
            assert_eq!(
                reader["rules"],
                json!([{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}])
            );
            let binding = find(&docs, "ClusterRoleBinding", "orchard-host-nodes-reader");
            assert_eq!(
                binding["subjects"],
                json!([{"kind": "ServiceAccount", "name": "orchard-host", "namespace": "orchard"}])
            );
            assert_eq!(cluster_wide.len(), 2, "{overlay}: {cluster_wide:?}");
        } else {
            assert!(cluster_wide.is_empty(), "{overlay}: {cluster_wide:?}");
        }
        let role = find(&docs, "Role", "orchard-host");
        assert_eq!(role["metadata"]["namespace"], "orchard-sandboxes");
        for rule in role["rules"].as_array().unwrap() {
            for field in ["apiGroups", "resources", "verbs"] {
                let values: Vec<&str> = rule[field].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
                assert!(!values.contains(&"*"), "{overlay}: wildcard in {field}: {rule}");
                assert!(
                    !values.iter().any(|v| v.contains("exec") || v.contains("attach") || v.contains("portforward")),
                    "{rule}"
                );
            }
        }
        let binding = find(&docs, "RoleBinding", "orchard-host");
        assert_eq!(
            binding["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "orchard-host", "namespace": "orchard"})
        );
        // The host: replicas, probes, a PDB and a Service over the same labels.
        let deployment = find(&docs, "Deployment", "orchard-host");
        let replicas = deployment["spec"]["replicas"].as_i64().unwrap();
        assert!(if overlay == "dev" { replicas >= 1 } else { replicas >= 3 }, "{overlay}: {replicas}");
        let pod = &deployment["spec"]["template"];
        let labels = &pod["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/name"], "orchard-host", "the backend's default --host-label");
        let container = &pod["spec"]["containers"][0];
        // Ready only while the evaluation service's database answers.
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/v1/ready");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
        let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert!(args.contains(&"--backend=kubernetes"), "{args:?}");
        for arg in args.iter().filter(|a| a.starts_with("--")) {
            let flag = arg.split('=').next().unwrap();
            assert!(
                serve_help.contains(&format!("{flag} ")) || serve_help.contains(&format!("{flag}\n")),
                "{overlay}: orchard serve has no {flag}"
            );
        }
        let secrets: Vec<&str> = pod["spec"]["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["secret"]["secretName"].as_str())
            .collect();
        assert!(
            secrets.iter().any(|s| s.starts_with("orchard-api-keys"))
                && secrets.iter().any(|s| s.starts_with("orchard-token-key"))
        );
        let pdb = find(&docs, "PodDisruptionBudget", "orchard-host");
        assert_eq!(pdb["spec"]["selector"]["matchLabels"], *labels);
        let service = find(&docs, "Service", "orchard");
        assert_eq!(service["spec"]["selector"], *labels);
        // Sandboxes: default-deny in their namespace; the host's own policy admits its API.
        let deny = find(&docs, "NetworkPolicy", "sandboxes-default-deny");
        assert_eq!(
            (deny["spec"]["podSelector"].clone(), deny["metadata"]["namespace"].clone()),
            (json!({}), json!("orchard-sandboxes"))
        );
        assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert!(deny["spec"].get("ingress").is_none() && deny["spec"].get("egress").is_none());
        find(&docs, "NetworkPolicy", "orchard-host");
        // Every replica shares one PostgreSQL, named by a Secret; metrics are scraped.
        let env = container["env"].as_array().unwrap();
        let database = env.iter().find(|e| e["name"] == "ORCHARD_DATABASE_URL").expect("ORCHARD_DATABASE_URL");
        let secret = &database["valueFrom"]["secretKeyRef"];
        assert!(secret["name"].as_str().unwrap().starts_with("orchard-database"), "{database}");
        assert_eq!(secret["key"], "url");
        assert_eq!(pod["metadata"]["annotations"]["prometheus.io/path"], "/metrics");
        let egress = &find(&docs, "NetworkPolicy", "orchard-host")["spec"]["egress"];
        assert!(egress.to_string().contains("5432"), "the host cannot reach its database: {egress}");
        if overlay == "dev" {
            find(&docs, "Secret", "orchard-api-keys");
            // A PostgreSQL of its own: data on a claim, reachable from the host pods alone.
            let pg = find(&docs, "StatefulSet", "orchard-postgres");
            assert_eq!(pg["spec"]["volumeClaimTemplates"][0]["metadata"]["name"], "data");
            assert_eq!(pg["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"], true);
            let url = find(&docs, "Secret", secret["name"].as_str().unwrap());
            assert!(url["data"]["url"].is_string() || url["stringData"]["url"].is_string(), "{url}");
            let only = find(&docs, "NetworkPolicy", "orchard-postgres");
            assert_eq!(only["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"], *labels);
            find(&docs, "Service", "orchard-postgres");
        } else {
            assert!(docs.iter().all(|d| d["kind"] != "Secret"), "production keys are not kept in git");
            assert!(docs.iter().all(|d| d["kind"] != "StatefulSet"), "production uses an external database");
        }
    }
}

#[test]
fn the_objects_the_backend_writes_validate_strictly() {
    let cluster = ClusterConfig {
        namespace: "orchard-sandboxes".into(),
        agent_image: "ghcr.io/orchard-env/orchard-agent:0.1.0".into(),
        agent_port: 7070,
        host_pod_labels: BTreeMap::from([("app.kubernetes.io/name".into(), "orchard-host".into())]),
        host_namespace: Some("orchard".into()),
        runtime_class: Some("gvisor".into()),
        run_as_user: Some(1000),
        node_selector: BTreeMap::from([("orchard.dev/pool".into(), "sandboxes".into())]),
        tolerations: vec![k8s_openapi::api::core::v1::Toleration {
            key: Some("orchard.dev/pool".into()),
            operator: Some("Equal".into()),
            value: Some("sandboxes".into()),
            effect: Some("NoSchedule".into()),
            toleration_seconds: None,
        }],
        ephemeral_storage: Some("20Gi".into()),
        user_namespaces: true,
        cilium_fqdn: true,
    };
    let mut sandbox = SandboxSpec::new("team-a", "python:3.12");
    sandbox.block_network = false;
    sandbox.network_allow = vec!["10.0.0.0/8".into()];
    sandbox.cpu = Some(2.0);
    sandbox.memory_bytes = Some(4 << 30);
    sandbox.disk_bytes = Some(10 << 30);
    sandbox.env = BTreeMap::from([("A".into(), "1".into())]);
    let plan = PodPlan {
        id: "sb-1",
        spec: &sandbox,
        owner_host: "orchard-host-0",
        created_at: 1_800_000_000.0,
        ttl_seconds: 600,
        token: "t",
        nonce: "n",
        image_command: vec!["python3".into()],
        pool: None,
        // Validated with the rest: the preferred node affinity --image-locality writes.
        prefer_nodes: vec!["node-a".into(), "node-b".into()],
    };
    let docs = [
        serde_json::to_value(spec::pod(&cluster, &plan)).unwrap(),
        serde_json::to_value(spec::network_policy(&cluster, &plan)).unwrap(),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (i, doc) in docs.iter().enumerate() {
        let mut doc = doc.clone();
        // k8s-openapi's Serialize writes apiVersion and kind; check it, the schemas need them.
        assert!(doc["apiVersion"].is_string() && doc["kind"].is_string(), "{doc}");
        doc["metadata"]["name"] = json!(format!("orchard-sb-{i}"));
        let file = dir.path().join(format!("{i}.json"));
        std::fs::write(&file, doc.to_string()).unwrap();
        validate(&file);
    }
}

#[test]
fn the_first_eval_job_validates_and_uses_only_real_flags() {
    let file = root().join("deploy/examples/eval-job.yaml");
    validate(&file);
    let json = run(Command::new("python3")
        .args(["-c", "import sys, yaml, json; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"])
        .arg(&file));
    let job: Value = serde_json::from_str(&json).unwrap();
    let pod = &job["spec"]["template"];
    assert_eq!(pod["metadata"]["labels"]["app.kubernetes.io/name"], "orchard-host", "admitted by the sandbox policies");
    let args: Vec<&str> =
        pod["spec"]["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert_eq!(args[0], "eval");
    let help = run(Command::new(orchard_tests::orchard_bin()).args(["eval", "--help"]));
    for arg in args.iter().filter(|a| a.starts_with("--")) {
        let flag = arg.split('=').next().unwrap();
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "orchard eval has no {flag}"
        );
    }
}

#[test]
fn orchard_kube_prepull_prints_daemonsets_that_validate_and_pull_every_image_once() {
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("images.txt");
    let images: Vec<String> =
        (0..120).map(|i| format!("docker.io/swebench/sweb.eval.x86_64.repo__task-{i}:latest")).collect();
    std::fs::write(&list, format!("# a SWE-bench-sized set, in small\n{}\n{}\n", images.join("\n"), images[7]))
        .unwrap();
    let json = run(&mut orchard_tests::orchard_command(&[
        "kube",
        "prepull",
        list.to_str().unwrap(),
        "--name",
        "swe-bench",
        "--per-daemonset",
        "50",
        "--node-selector",
        "pool=sandboxes",
    ]));
    let doc: Value = serde_json::from_str(&json).unwrap();
    let items = doc["items"].as_array().unwrap();
    assert_eq!(items.len(), 3, "120 images, 50 a DaemonSet");
    let mut pulled = Vec::new();
    for (i, item) in items.iter().enumerate() {
        assert_eq!(item["kind"], "DaemonSet");
        assert_eq!(item["metadata"]["name"], format!("swe-bench-{i}"));
        let pod = &item["spec"]["template"]["spec"];
        assert_eq!(pod["nodeSelector"], json!({"pool": "sandboxes"}), "placed where sandboxes run");
        assert_eq!(pod["automountServiceAccountToken"], false);
        let init = pod["initContainers"].as_array().unwrap();
        assert_eq!(init[0]["command"][1], "--install", "the agent is installed first");
        for c in &init[1..] {
            assert_eq!(c["command"], json!(["/.orchard/bin/orchard-agent", "--version"]));
            assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
            pulled.push(c["image"].as_str().unwrap().to_string());
        }
        let file = dir.path().join(format!("ds-{i}.json"));
        std::fs::write(&file, item.to_string()).unwrap();
        validate(&file);
    }
    assert_eq!(pulled, images, "every image once, in order");
    // A list with a line that is no image reference is refused, naming the line.
    std::fs::write(&list, "ok/image:1\nrm -rf /\n").unwrap();
    let out = orchard_tests::orchard_command(&["kube", "prepull", list.to_str().unwrap()]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"), "{}", String::from_utf8_lossy(&out.stderr));
}
