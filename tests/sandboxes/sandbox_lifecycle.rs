//! Create, delete, expire, crash and restart; images; batches.

use std::time::{Duration, Instant};

use orchard_tests::{Server, ServerOptions, images, pid_alive};
use serde_json::json;

fn mounts_mentioning(id: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/mounts").unwrap().lines().filter(|l| l.contains(id)).map(str::to_string).collect()
}

#[tokio::test]
async fn delete_leaves_no_process_mount_cgroup_or_directory() {
    let server = Server::start().await;
    let id = server.create(json!({"image": "host", "memory": "128Mi"})).await;
    server.exec(&id, json!({"command": "sleep 1000 & sleep 1000 & echo started"})).await;
    let record = server.record(&id);
    let init = record["init_pid"].as_i64().unwrap();
    let cgroups: Vec<String> =
        record["cgroups"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_string()).collect();
    let dir = server.state_dir.join("run/sandboxes").join(&id);
    assert!(pid_alive(init) && dir.is_dir() && !cgroups.is_empty());
    let procs_in_cgroup = std::fs::read_to_string(format!("{}/cgroup.procs", cgroups[0])).unwrap();
    assert!(procs_in_cgroup.lines().count() >= 3, "sandbox processes are not in its cgroup: {procs_in_cgroup}");

    let (status, _) = server.call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200);
    // Nothing of it runs once the delete is answered...
    assert!(!pid_alive(init), "the sandbox's init survived");
    let leftover = std::process::Command::new("pgrep").args(["-f", "sleep 1000"]).output().unwrap();
    assert!(leftover.stdout.is_empty(), "processes left: {}", String::from_utf8_lossy(&leftover.stdout));
    // ...and what it held on the host is removed right behind the answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    while (dir.exists() || cgroups.iter().any(|c| std::path::Path::new(c).exists())) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for c in &cgroups {
        assert!(!std::path::Path::new(c).exists(), "cgroup {c} left behind");
    }
    assert!(!dir.exists(), "directory left behind");
    assert!(!server.state_dir.join("layers").join(&id).exists(), "writable layer left behind");
    assert!(mounts_mentioning(&id).is_empty(), "{:?}", mounts_mentioning(&id));
    let leftover = std::process::Command::new("pgrep").args(["-f", "sleep 1000"]).output().unwrap();
    assert!(leftover.stdout.is_empty(), "processes left: {}", String::from_utf8_lossy(&leftover.stdout));
    let (status, v) = server.call(reqwest::Method::GET, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 404, "{v}");
    let (status, _) = server.call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_restarted_host_adopts_live_sandboxes_and_cleans_up_the_rest() {
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let opts = || ServerOptions { state_dir: Some(state.clone()), ..Default::default() };
    let mut first = Server::start_with(opts()).await;
    let keep = first.create_host().await;
    let doomed = first.create_host().await;
    first.sh(&keep, "echo persisted > /workspace/note").await;
    let doomed_record = first.record(&doomed);
    let doomed_init = doomed_record["init_pid"].as_i64().unwrap();
    first.crash();

    // While no host runs, one sandbox dies.
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(doomed_init as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while pid_alive(doomed_init) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let second = Server::start_with(opts()).await;
    let r = second.sh(&keep, "cat /workspace/note").await;
    assert_eq!(r.stdout.text, "persisted\n", "the live sandbox was not adopted");
    let (status, _) = second.call(reqwest::Method::GET, &format!("/sandboxes/{doomed}"), None).await;
    assert_eq!(status, 404);
    assert!(!state.join("run/sandboxes").join(&doomed).exists(), "dead sandbox's directory left");
    for c in doomed_record["cgroups"].as_array().unwrap() {
        assert!(!std::path::Path::new(c.as_str().unwrap()).exists(), "dead sandbox's cgroup {c} left");
    }
    assert!(second.log().contains("adopted=1 cleaned=1"), "{}", second.log());
}

#[tokio::test]
async fn idle_sandboxes_expire_unless_kept_alive() {
    let server = Server::start().await;
    let idle = server.create(json!({"image": "host", "timeout": 2})).await;
    let kept = server.create(json!({"image": "host", "timeout": 2})).await;
    let init = server.record(&idle)["init_pid"].as_i64().unwrap();
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (status, v) = server.call(reqwest::Method::POST, &format!("/sandboxes/{kept}/heartbeat"), None).await;
        assert_eq!(status, 200, "{v}");
    }
    let (status, _) = server.call(reqwest::Method::GET, &format!("/sandboxes/{idle}"), None).await;
    assert_eq!(status, 404, "the idle sandbox was not reaped");
    assert!(!pid_alive(init));
    let (status, _) = server.call(reqwest::Method::GET, &format!("/sandboxes/{kept}"), None).await;
    assert_eq!(status, 200, "the sandbox kept alive by heartbeats was reaped");
}

#[tokio::test]
async fn oci_images_are_unpacked_once_and_their_config_honoured() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    let base = images::busybox_layer(&[("app/data.txt", b"from layer one\n"), ("app/gone.txt", b"deleted later\n")]);
    let top = images::whiteout_layer("app/gone.txt");
    images::oci_layout(&layout, &[base, top], &["GREETING=hello from config", "PATH=/bin"], "/app", "v1");
    let server = Server::with_image_root(tmp.path()).await;
    let image = format!("oci:{}:v1", layout.display());
    let id = server.create(json!({"image": image})).await;
    let r = server.sh(&id, "echo \"$GREETING\"; pwd; cat data.txt; ls; cat /proc/1/cmdline | tr '\\0' ' '").await;
    assert_eq!(r.exit_code, 0, "{r:?}");
    let lines: Vec<&str> = r.stdout.text.lines().collect();
    assert_eq!(&lines[..3], ["hello from config", "/app", "from layer one"], "{r:?}");
    assert!(!r.stdout.text.contains("gone.txt"), "whiteout ignored: {r:?}");
    // No bash in this image: string commands ran under sh. The image's Cmd is started as well.
    let (_, procs) = server.call(reqwest::Method::GET, &format!("/v1/sandboxes/{id}/processes"), None).await;
    assert_eq!(procs["processes"][0]["id"], "entrypoint", "{procs}");
    // Writes go to the sandbox's own layer, never to the shared image.
    server.sh(&id, "echo changed > /app/data.txt").await;
    let other = server.create(json!({"image": image})).await;
    assert_eq!(server.sh(&other, "cat /app/data.txt").await.stdout.text, "from layer one\n");
    // Unpacked once, under the manifest digest.
    let unpacked: Vec<_> = std::fs::read_dir(server.state_dir.join("images/rootfs")).unwrap().collect();
    assert_eq!(unpacked.len(), 1);
    // A missing tag is a clear error.
    let (status, v) = server
        .call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": format!("oci:{}:v2", layout.display())})))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("no image tagged \"v2\""), "{v}");
}

#[tokio::test]
async fn batch_creation_is_all_or_nothing() {
    let server = Server::start_with(ServerOptions {
        extra_args: vec!["--max-sandboxes".into(), "5".into()],
        ..Default::default()
    })
    .await;
    let (status, v) =
        server.call(reqwest::Method::POST, "/v1/sandboxes/batch", Some(json!({"count": 6, "image": "host"}))).await;
    assert_eq!(status, 429, "{v}");
    let (_, list) = server.call(reqwest::Method::GET, "/v1/sandboxes", None).await;
    assert_eq!(list["sandboxes"].as_array().unwrap().len(), 0, "a refused batch created sandboxes");
    // A batch where one create fails (a bad image for all) rolls back.
    let (status, v) = server
        .call(reqwest::Method::POST, "/v1/sandboxes/batch", Some(json!({"count": 3, "image": "/no/such/dir"})))
        .await;
    assert_eq!(status, 400, "{v}");
    let (status, v) =
        server.call(reqwest::Method::POST, "/v1/sandboxes/batch", Some(json!({"count": 4, "image": "host"}))).await;
    assert_eq!(status, 200, "{v}");
    let ids: Vec<String> =
        v["sandboxes"].as_array().unwrap().iter().map(|s| s["sandbox_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(ids.len(), 4);
    let (_, results) = server
        .call(
            reqwest::Method::POST,
            "/v1/exec/batch",
            Some(json!({"sandbox_ids": [ids[0], ids[1], "sb-unknown"], "command": "hostname"})),
        )
        .await;
    assert_eq!(results["results"][0]["result"]["stdout"]["text"], format!("{}\n", ids[0]));
    assert_eq!(results["results"][1]["result"]["stdout"]["text"], format!("{}\n", ids[1]));
    assert_eq!(results["results"][2]["error"]["status"], 404);
    // One more than capacity fails, the host stays at its limit.
    let (status, _) = server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": "host"}))).await;
    assert_eq!(status, 200);
    let (status, v) = server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": "host"}))).await;
    assert_eq!(status, 429, "{v}");
}

#[tokio::test]
async fn a_dead_agent_is_reported_not_hung_on() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let init = server.record(&id)["init_pid"].as_i64().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(init as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = server
        .request(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .json(&json!({"command": "true"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    let (_, v) = server.call(reqwest::Method::GET, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(v["status"], "failed", "{v}");
    let (status, _) = server.call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200);
}

/// Ids of the sandboxes the local backend holds, pooled ones included (from its state dir).
fn sandbox_dirs(server: &Server) -> std::collections::BTreeSet<String> {
    std::fs::read_dir(server.state_dir.join("run/sandboxes"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

async fn wait_for_dirs(server: &Server, n: usize) -> std::collections::BTreeSet<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let dirs = sandbox_dirs(server);
        if dirs.len() == n {
            return dirs;
        }
        assert!(std::time::Instant::now() < deadline, "expected {n} sandboxes, have {dirs:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_warm_pool_serves_plain_creates_and_refills() {
    let server = orchard_tests::Server::start_with(orchard_tests::ServerOptions {
        extra_args: ["--warm-pool", "host=2"].map(String::from).to_vec(),
        ..Default::default()
    })
    .await;
    let pooled = wait_for_dirs(&server, 2).await;
    // Pooled sandboxes are nobody's: not listed, not reachable.
    let (_, listed) = server.call(reqwest::Method::GET, "/sandboxes", None).await;
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 0, "{listed}");
    for id in &pooled {
        let (status, _) = server.call(reqwest::Method::GET, &format!("/sandboxes/{id}"), None).await;
        assert_eq!(status, 404);
    }
    // A plain create takes one, ready, and the pool refills behind it.
    let id = server.create_host().await;
    assert!(pooled.contains(&id), "{id} was not taken from the pool {pooled:?}");
    let r = server.sh(&id, "echo from-the-pool; hostname").await;
    assert_eq!(r.stdout.text, format!("from-the-pool\n{id}\n"));
    let (_, info) = server.call(reqwest::Method::GET, &format!("/sandboxes/{id}"), None).await;
    assert_eq!((info["memory"].as_str(), info["status"].as_str()), (Some("2Gi"), Some("ready")), "{info}");
    wait_for_dirs(&server, 3).await;
    // A create of another shape is made fresh.
    let other = server.create(json!({"image": "host", "memory": "512Mi"})).await;
    assert!(!pooled.contains(&other));
    // A create with its own working directory and environment is served too: the claim sets
    // them as the sandbox's defaults.
    let refilled = sandbox_dirs(&server);
    let own = server.create(json!({"image": "host", "workdir": "/srv/app", "env": {"GREETING": "hi"}})).await;
    assert!(refilled.contains(&own), "{own} was not taken from the pool {refilled:?}");
    let r = server.sh(&own, "pwd; echo $GREETING").await;
    assert_eq!(r.stdout.text, "/srv/app\nhi\n");
    // Claimed sandboxes are like any other: listed, deleted, reaped when idle.
    let (_, listed) = server.call(reqwest::Method::GET, "/sandboxes", None).await;
    assert_eq!(listed["sandboxes"].as_array().unwrap().len(), 3, "{listed}");
    let short = server.create(json!({"image": "host", "timeout": 1})).await;
    assert!(pooled.contains(&short) || !sandbox_dirs(&server).is_empty());
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let (status, _) = server.call(reqwest::Method::GET, &format!("/sandboxes/{short}"), None).await;
    assert_eq!(status, 404, "the claimed sandbox was not reaped when idle");
    let (status, _) = server.call(reqwest::Method::DELETE, &format!("/sandboxes/{id}"), None).await;
    assert_eq!(status, 200);
}
