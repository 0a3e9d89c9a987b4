//! What a sandbox cannot do: see host files, reach the network, harm its agent, exceed limits.

use orchard_tests::Server;
use serde_json::json;

#[tokio::test]
async fn host_files_outside_the_image_are_invisible() {
    let server = Server::start().await;
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host-secret-42").unwrap();
    let id = server.create_host().await;

    let r = server.sh(&id, &format!("cat {}; ls /", secret.display())).await;
    assert!(r.stderr.text.contains("No such file or directory"), "{r:?}");
    assert!(!r.stdout.text.contains("host-secret-42"));
    // The root holds the image's skeleton, not the host's root.
    let root: Vec<&str> = r.stdout.text.lines().collect();
    assert!(root.contains(&"usr") && root.contains(&"workspace"), "{root:?}");
    for host_only in ["boot", "work", "srv/orchard"] {
        assert!(!root.contains(&host_only), "host directory {host_only} visible: {root:?}");
    }
    // Nor the host's state directory, where tokens live.
    let r = server.sh(&id, &format!("ls {}", server.state_dir.display())).await;
    assert_ne!(r.exit_code, 0, "state dir visible: {r:?}");
    // The host image's /usr is read-only.
    let r = server.sh(&id, "touch /usr/bin/orchard-was-here").await;
    assert_ne!(r.exit_code, 0);
    assert!(!std::path::Path::new("/usr/bin/orchard-was-here").exists());
}

#[tokio::test]
async fn network_is_loopback_only_by_default() {
    let server = Server::start().await;
    // A service on the host's loopback, which the sandbox must not reach.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = tokio::spawn(async move {
        tokio::time::timeout(std::time::Duration::from_secs(3), listener.accept()).await.is_ok()
    });
    let id = server.create_host().await;

    let r = server.sh(&id, &format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED")).await;
    assert!(!r.stdout.text.contains("CONNECTED"), "{r:?}");
    assert!(r.stderr.text.contains("Connection refused"), "{r:?}");
    // Only loopback exists.
    let r = server.sh(&id, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").await;
    assert_eq!(r.stdout.text.trim(), "lo", "{r:?}");
    assert!(!accepted.await.unwrap(), "the host listener got a connection from the sandbox");
    // Loopback inside the sandbox works: it is the sandbox's own.
    let r = server.sh(&id, "cat /proc/net/route | wc -l").await;
    assert_eq!(r.stdout.text.trim(), "1", "no routes but the header: {r:?}");
}

#[tokio::test]
async fn the_agent_survives_its_commands_and_its_token_stays_secret() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let token = server.record(&id)["token"].as_str().unwrap().to_string();

    let r = server.sh(&id, "kill -9 1; kill -TERM 1; kill -INT 1; pkill -9 -x agent; echo done").await;
    assert!(r.stdout.text.contains("done"));
    let r = server.sh(&id, "echo still here").await;
    assert_eq!(r.stdout.text, "still here\n");

    // The token is nowhere a command can read it.
    let probe = "cat /proc/1/environ /proc/1/cmdline 2>&1; env; ls -la /proc/1/fd 2>&1; head -c 4096 /proc/1/mem 2>&1 | od -c | head -2; \
                 grep -rl --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr --exclude-dir=dev \"$T\" / 2>/dev/null; echo end";
    let r = server.exec(&id, json!({"command": probe.replace("$T", &token), "timeout_seconds": 60})).await;
    let everything = format!("{}{}", r.stdout.text, r.stderr.text);
    // grep's own command line holds the token; it must match no file.
    let leaks: Vec<&str> = everything.lines().filter(|l| l.contains(&token) && !l.contains("grep")).collect();
    assert!(leaks.is_empty(), "token visible: {leaks:?}");
    assert!(everything.contains("Permission denied"), "{everything}");
    // Nor through the file API.
    let (status, v) =
        server.call(reqwest::Method::GET, &format!("/sandboxes/{id}/files?path=/proc/1/environ"), None).await;
    assert_eq!(status, 403, "{v}");
    // The agent's socket is not even in the sandbox.
    let r = server.sh(&id, "find / -xdev -type s 2>/dev/null | grep -c agent.sock").await;
    assert_eq!(r.stdout.text.trim(), "0");
    // Nor does a command inherit any descriptor of the host's (the agent's listener, bwrap's
    // info pipe and its second reader): only its own stdio and the listing's directory.
    let r = server.sh(&id, "ls /proc/self/fd").await;
    let fds: Vec<&str> = r.stdout.text.lines().collect();
    assert_eq!(fds, ["0", "1", "2", "3"], "{r:?}");
}

#[tokio::test]
async fn memory_cpu_and_process_limits_are_enforced() {
    let server = Server::start().await;
    let id = server.create(json!({"image": "host", "memory": "64Mi", "cpu": "0.5", "pids": 32})).await;

    // Allocating 200 MiB in a 64 MiB sandbox gets the process killed by the OOM killer.
    let r = server.sh(&id, "perl -e '$x = \"a\" x (200*1024*1024); print \"survived\\n\"'").await;
    assert!(!r.stdout.text.contains("survived"), "{r:?}");
    assert_eq!(r.exit_code, 137, "expected SIGKILL: {r:?}");
    // Below the limit works.
    let r = server.sh(&id, "perl -e '$x = \"a\" x (16*1024*1024); print \"ok\\n\"'").await;
    assert_eq!(r.stdout.text, "ok\n", "{r:?}");

    // Half a core: a busy loop for 2 s of wall time gets about 1 s of CPU.
    let r = server.sh(&id, "timeout 2 sh -c 'while :; do :; done'; true").await;
    assert!(r.cpu_seconds < 1.4, "cpu limit not enforced: {} s of CPU in {} s", r.cpu_seconds, r.wall_seconds);
    assert!(r.cpu_seconds > 0.5, "the loop barely ran: {r:?}");

    // 32 processes at most: of 60 forks, the ones past the limit fail.
    let forks = "perl -e 'my @kids; for (1..60) { my $p = fork(); last unless defined $p; if ($p == 0) { sleep 30; exit 0 } push @kids, $p } print scalar(@kids), \"\\n\"; kill 9, @kids'";
    let r = server.sh(&id, forks).await;
    let started: u32 = r.stdout.text.trim().parse().unwrap_or_else(|_| panic!("{r:?}"));
    assert!((20..32).contains(&started), "pids limit not enforced: {started} forks succeeded");

    let cgroups = server.record(&id)["cgroups"].clone();
    let memory = cgroups
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .find(|c| c.contains("memory"))
        .map(str::to_string);
    if let Some(dir) = memory {
        let limit = std::fs::read_to_string(format!("{dir}/memory.limit_in_bytes"))
            .or_else(|_| std::fs::read_to_string(format!("{dir}/memory.max")))
            .unwrap();
        assert_eq!(limit.trim(), (64u64 << 20).to_string());
    }
}

/// Without root, sandboxes get a user namespace (root inside maps to the user outside), overlay
/// roots still work, and nothing is left behind. Needs the `orchard-test` account that
/// `cargo xtask setup` creates.
#[tokio::test]
async fn an_unprivileged_host_runs_sandboxes_in_a_user_namespace() {
    let user = orchard_tests::UNPRIVILEGED_USER;
    let dir = orchard_tests::unprivileged_install();
    let (bin, state) = (dir.path().join("bin"), dir.path().join("state"));
    let uid = std::process::Command::new("id").args(["-u", user]).output().unwrap();
    let uid = String::from_utf8(uid.stdout).unwrap().trim().to_string();
    let script = "echo uid=$(id -u); cat /proc/self/uid_map; echo data > /root/file && cat /root/file";
    let out = std::process::Command::new("runuser")
        .args(["-u", user, "--"])
        .arg(bin.join("orchard"))
        .args(["run", "--state-dir"])
        .arg(&state)
        .args(["--agent-bin"])
        .arg(bin.join("agent"))
        .args(["--", script])
        .env_remove("ORCHARD_STATE_DIR")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("uid=0"), "{stdout}");
    let map: Vec<&str> = stdout.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(map, ["0", uid.as_str(), "1"], "{stdout}");
    assert!(stdout.ends_with("data\n"), "{stdout}");
    let left: Vec<_> = std::fs::read_dir(state.join("run/sandboxes")).unwrap().collect();
    assert!(left.is_empty(), "sandbox directories left: {left:?}");
}
