//! Running commands: shells and argv, timeouts, bounded output, concurrency, sessions, streaming,
//! background processes, the PTY, and jobs.

use std::time::{Duration, Instant};

use base64::Engine;
use futures::{SinkExt, StreamExt};
use orchard_tests::Server;
use serde_json::{Value, json};

#[tokio::test]
async fn shell_and_argv_commands_get_env_cwd_and_stdin() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let r = server
        .exec(&id, json!({"command": "pwd; echo \"$GREETING\"; cat; exit 3", "cwd": "/tmp", "env": {"GREETING": "hi there"}, "stdin": "from stdin"}))
        .await;
    assert_eq!(r.stdout.text, "/tmp\nhi there\nfrom stdin");
    assert_eq!(r.exit_code, 3);
    assert!(r.wall_seconds > 0.0 && r.peak_rss_kb > 0, "{r:?}");
    // argv: no shell, quoting preserved.
    let r = server.exec(&id, json!({"command": ["printf", "[%s]", "a b", "$HOME", "'q'"]})).await;
    assert_eq!(r.stdout.text, "[a b][$HOME]['q']");
    // A program that does not exist is an error that names it, not a crash.
    let (status, v) = server
        .call(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"), Some(json!({"command": ["no-such-program"]})))
        .await;
    assert_eq!(status, 404, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("no-such-program"), "{v}");
    let (status, v) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"command": "true", "cwd": "/nope"})),
        )
        .await;
    assert_eq!(status, 404, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("cwd: /nope"), "{v}");
    // Login shells read the profile.
    let r = server.exec(&id, json!({"command": "shopt -q login_shell && echo login", "login_shell": true})).await;
    assert_eq!(r.stdout.text, "login\n");
}

#[tokio::test]
async fn a_timeout_kills_the_command_group_and_nothing_else() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let (status, bg) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/processes"),
            Some(json!({"command": "exec sleep 1000"})),
        )
        .await;
    assert_eq!(status, 200, "{bg}");
    let started = Instant::now();
    let r = server.exec(&id, json!({"command": "sleep 300 & sleep 301 & sleep 302", "timeout_seconds": 1})).await;
    assert!(r.timed_out, "{r:?}");
    assert_eq!(r.exit_code, 124);
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    let ps = server.sh(&id, "ps -eo args").await.stdout.text;
    assert!(!ps.contains("sleep 30"), "the timed-out group survived:\n{ps}");
    assert!(ps.contains("sleep 1000"), "the background process was killed too:\n{ps}");
    assert!(ps.contains("/.orchard/agent"), "{ps}");
    // The job view says why it failed.
    let (_, job) = server
        .call(
            reqwest::Method::POST,
            &format!("/sandboxes/{id}/exec"),
            Some(json!({"command": "sleep 30", "timeout_seconds": 0.5, "wait": true})),
        )
        .await;
    assert_eq!(job["status"], "failed");
    assert_eq!(job["exit_code"], 124);
    assert!(job["error"].as_str().unwrap().contains("timed out"), "{job}");
}

#[tokio::test]
async fn a_100_mb_output_stays_bounded_and_is_spilled_whole() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let r = server.exec(&id, json!({"command": "head -c 100000000 /dev/zero | tr '\\0' 'a'; echo END >&2"})).await;
    assert_eq!(r.stdout.total_bytes, 100_000_000);
    assert!(r.stdout.truncated);
    assert!(r.stdout.text.len() < 140 * 1024, "kept {} bytes", r.stdout.text.len());
    assert!(r.stdout.text.contains("bytes omitted"), "no omission marker");
    let spill = r.stdout.full_output_path.clone().expect("spill path");
    let r2 = server.sh(&id, &format!("stat -c %s {spill}")).await;
    assert_eq!(r2.stdout.text.trim(), "100000000");
    assert_eq!(r.stderr.text, "END\n");
    assert!(!r.stderr.truncated);
    // Limits are the caller's to choose.
    let r =
        server.exec(&id, json!({"command": "seq 1 100000", "output_limit": {"head_bytes": 6, "tail_bytes": 7}})).await;
    assert!(r.stdout.text.starts_with("1\n2\n3\n\n[... orchard:"), "{}", r.stdout.text);
    assert!(r.stdout.text.ends_with("...]\n100000\n"), "{}", r.stdout.text);
}

#[tokio::test]
async fn concurrent_execs_in_one_sandbox_all_complete() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let started = Instant::now();
    let runs = (0..20).map(|i| {
        let (server, id) = (&server, &id);
        async move { server.exec(id, json!({"command": format!("sleep 1; echo {i}")})).await }
    });
    let results = futures::future::join_all(runs).await;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r.stdout.text, format!("{i}\n"));
    }
    // Twenty 1-second sleeps, run one after the other, would take 20 s.
    assert!(started.elapsed() < Duration::from_secs(10), "execs were serialised: {:?}", started.elapsed());
}

#[tokio::test]
async fn a_session_keeps_cwd_env_functions_and_survives_interrupts() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let (status, s) =
        server.call(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/sessions"), Some(json!({}))).await;
    assert_eq!(status, 200, "{s}");
    let sid = s["id"].as_str().unwrap().to_string();
    let run = |cmd: &str, timeout: f64| {
        let (server, path) = (&server, format!("/v1/sandboxes/{id}/sessions/{sid}/exec"));
        let body = json!({"command": cmd, "timeout_seconds": timeout});
        async move {
            let (status, v) = server.call(reqwest::Method::POST, &path, Some(body)).await;
            assert_eq!(status, 200, "{v}");
            serde_json::from_value::<orchard_protocol::ExecResult>(v).unwrap()
        }
    };
    run("mkdir -p /tmp/w && cd /tmp/w && export FOO=bar && greet() { echo \"hello $1\"; }", 10.0).await;
    let r = run("pwd; echo $FOO; greet world; false", 10.0).await;
    assert_eq!(r.stdout.text, "/tmp/w\nbar\nhello world\n");
    assert_eq!(r.exit_code, 1);
    // A virtualenv-style activation sticks.
    run("printf 'export VIRTUAL_ENV=/tmp/venv\\nPATH=/tmp/venv/bin:$PATH\\n' > /tmp/activate; . /tmp/activate", 10.0)
        .await;
    let r = run("echo $VIRTUAL_ENV; echo $PATH | cut -d: -f1", 10.0).await;
    assert_eq!(r.stdout.text, "/tmp/venv\n/tmp/venv/bin\n");
    // A command that overruns is interrupted; the session lives on with its state.
    let started = Instant::now();
    let r = run("sleep 60", 1.0).await;
    assert!(r.timed_out && r.exit_code == 124, "{r:?}");
    let r = run("while true; do :; done", 1.0).await;
    assert!(r.timed_out, "{r:?}");
    let r = run("trap '' INT; sleep 60", 1.0).await;
    assert!(r.timed_out, "{r:?}");
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let r = run("pwd; echo $FOO", 10.0).await;
    assert_eq!(r.stdout.text, "/tmp/w\nbar\n");
    let ps = server.sh(&id, "ps -eo args").await.stdout.text;
    assert!(!ps.contains("sleep 60"), "interrupted commands still run:\n{ps}");
    // `exit` ends the session, and it says so.
    let (status, v) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{id}/sessions/{sid}/exec"),
            Some(json!({"command": "exit 0"})),
        )
        .await;
    assert_eq!(status, 503, "{v}");
    let (_, list) = server.call(reqwest::Method::GET, &format!("/v1/sandboxes/{id}/sessions"), None).await;
    assert_eq!(list["sessions"][0]["alive"], false, "{list}");
}

#[tokio::test]
async fn a_quiet_session_command_is_left_running_to_be_continued_typed_into_or_interrupted() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let (_, s) = server.call(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/sessions"), Some(json!({}))).await;
    let sid = s["id"].as_str().unwrap().to_string();
    let call = |what: &str, body: Value| {
        let (server, path) = (&server, format!("/v1/sandboxes/{id}/sessions/{sid}/{what}"));
        async move { server.call(reqwest::Method::POST, &path, Some(body)).await }
    };
    let result = |(status, v): (u16, Value)| {
        assert_eq!(status, 200, "{v}");
        serde_json::from_value::<orchard_protocol::ExecResult>(v).unwrap()
    };
    // Quiet for 0.5 s: answered, still running, with what it printed so far.
    let started = Instant::now();
    let script = "echo ready; read -r a; echo \"got $a\"; sleep 2; echo slow; read -r b; echo \"then $b\"; false";
    let r = result(call("exec", json!({"command": script, "idle_seconds": 0.5})).await);
    assert!(r.running && !r.timed_out, "{r:?}");
    assert_eq!(r.stdout.text, "ready\n");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // Other commands wait their turn, and are told why.
    let (status, v) = call("exec", json!({"command": "true"})).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["error"]["message"].as_str().unwrap_or(&v.to_string()).contains("still running a command"), "{v}");
    // Typed input reaches it; the answer holds only the new output.
    let r = result(call("continue", json!({"input": "one\n", "idle_seconds": 0.5})).await);
    assert!(r.running && r.stdout.text == "got one\n", "{r:?}");
    // Typed ahead while it sleeps: the terminal keeps it for the next read. (Quiet for 3 s, not
    // 0.5: the sleep itself is silent.)
    let r = result(call("continue", json!({"input": "two\n", "idle_seconds": 3})).await);
    assert!(!r.running && r.exit_code == 1 && r.stdout.text == "slow\nthen two\n", "{r:?}");
    // Waiting with a hard limit: the answer comes at the limit, the command keeps going.
    let r = result(
        call(
            "exec",
            json!({"command": "while true; do echo tick; sleep 0.1; done", "idle_seconds": 5, "timeout_seconds": 1}),
        )
        .await,
    );
    assert!(r.running && r.timed_out && r.stdout.text.starts_with("tick\n"), "{r:?}");
    let r = result(call("continue", json!({"interrupt": true})).await);
    assert!(!r.running && r.exit_code == 130, "{r:?}");
    // The session carries on.
    let r = result(call("exec", json!({"command": "echo after"})).await);
    assert_eq!(r.stdout.text, "after\n");
    let (status, v) = call("continue", json!({})).await;
    assert_eq!(status, 400, "nothing is running: {v}");
}

#[tokio::test]
async fn streamed_exec_delivers_frames_as_they_happen() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let started = Instant::now();
    let resp = server
        .request(reqwest::Method::POST, &format!("/v1/sandboxes/{id}/exec"))
        .json(&json!({"command": "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.4; done", "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let mut body = resp.bytes_stream();
    let mut buf = Vec::new();
    let mut frames: Vec<(Duration, Value)> = Vec::new();
    while let Some(chunk) = body.next().await {
        buf.extend_from_slice(&chunk.unwrap());
        while let Some(pos) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=pos).collect();
            frames.push((started.elapsed(), serde_json::from_slice(&line).unwrap()));
        }
    }
    let stdout: Vec<&str> =
        frames.iter().filter(|(_, f)| f["type"] == "stdout").map(|(_, f)| f["data"].as_str().unwrap()).collect();
    assert_eq!(stdout.concat(), "out1\nout2\nout3\n");
    let last = &frames.last().unwrap().1;
    assert_eq!(last["type"], "exit");
    assert_eq!(last["result"]["stderr"]["text"], "err1\nerr2\nerr3\n");
    // The first frame arrived long before the command ended.
    assert!(frames[0].0 + Duration::from_millis(500) < frames.last().unwrap().0, "{frames:?}");
}

#[tokio::test]
async fn background_processes_can_be_listed_signalled_and_read() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let base = format!("/v1/sandboxes/{id}/processes");
    let (_, p) = server
        .call(
            reqwest::Method::POST,
            &base,
            Some(json!({"command": "trap 'echo got-term; exit 7' TERM; echo started; while :; do sleep 0.1; done"})),
        )
        .await;
    let pid = p["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, list) = server.call(reqwest::Method::GET, &base, None).await;
    assert_eq!(list["processes"][0]["state"], "running", "{list}");
    let (status, _) =
        server.call(reqwest::Method::POST, &format!("{base}/{pid}/signal"), Some(json!({"signal": "TERM"}))).await;
    assert_eq!(status, 200);
    let mut info = Value::Null;
    for _ in 0..50 {
        info = server.call(reqwest::Method::GET, &format!("{base}/{pid}"), None).await.1;
        if info["state"] == "exited" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(info["exit_code"], 7, "{info}");
    let (_, log) = server.call(reqwest::Method::GET, &format!("{base}/{pid}/log?offset=0"), None).await;
    // (When the signal, sent to the whole group, caught the shell's `sleep` child, bash also
    // logs "Terminated" in between.)
    let text = log["data"].as_str().unwrap();
    assert!(text.starts_with("started\n") && text.ends_with("got-term\n"), "{text:?}");
    assert_eq!(log["eof"], true);
    let (_, tail) = server.call(reqwest::Method::GET, &format!("{base}/{pid}/log?offset=8"), None).await;
    assert_eq!(tail["data"].as_str().unwrap(), &text[8..]);
    assert_eq!(tail["offset"], 8);
    let (status, v) =
        server.call(reqwest::Method::POST, &format!("{base}/{pid}/signal"), Some(json!({"signal": "BOGUS"}))).await;
    assert_eq!(status, 400, "{v}");
}

#[tokio::test]
async fn the_pty_websocket_speaks_orchard_env_frames() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let url = format!("{}/sandboxes/{id}/exec/pty", server.url.replace("http://", "ws://"));
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.expect("ws connect");
    use tokio_tungstenite::tungstenite::Message;
    let send = |v: Value| Message::Text(v.to_string().into());
    ws.send(send(json!({"type": "init", "cmd": ["bash", "--norc", "-i"], "env": {"PS1": "$ "}, "cwd": "/tmp", "rows": 30, "cols": 100}))).await.unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut output = String::new();
    let mut exit = None;
    let mut ready = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    while let Ok(Some(msg)) = tokio::time::timeout_at(deadline.into(), ws.next()).await {
        let Ok(Message::Text(text)) = msg else { continue };
        let frame: Value = serde_json::from_str(&text).unwrap();
        match frame["type"].as_str().unwrap() {
            "ready" => {
                ready = true;
                assert!(frame["pid"].as_i64().unwrap() > 1);
                ws.send(send(json!({"type": "resize", "rows": 40, "cols": 120}))).await.unwrap();
                let input = b64.encode("stty size; pwd; tty; exit 5\n");
                ws.send(send(json!({"type": "stdin", "data": input}))).await.unwrap();
            }
            "stdout" => output += &String::from_utf8_lossy(&b64.decode(frame["data"].as_str().unwrap()).unwrap()),
            "exit" => {
                exit = frame["code"].as_i64();
                break;
            }
            "error" => panic!("pty error: {frame}"),
            _ => {}
        }
    }
    assert!(ready);
    assert!(output.contains("40 120"), "{output}");
    assert!(output.contains("/tmp"), "{output}");
    assert!(output.contains("/dev/pts/"), "{output}");
    assert_eq!(exit, Some(5), "{output}");
}

#[tokio::test]
async fn jobs_run_in_the_background_and_retries_run_once() {
    let server = Server::start().await;
    let id = server.create_host().await;
    let body = json!({"command": "echo run >> /tmp/runs; sleep 0.5; echo done"});
    let submit = || {
        server
            .request(reqwest::Method::POST, &format!("/sandboxes/{id}/exec"))
            .header("Idempotency-Key", "retry-1")
            .json(&body)
            .send()
    };
    let first: Value = submit().await.unwrap().json().await.unwrap();
    assert_eq!(first["status"], "queued");
    let again: Value = submit().await.unwrap().json().await.unwrap();
    assert_eq!(first["job_id"], again["job_id"], "a retried submission made a second job");
    let job_id = first["job_id"].as_str().unwrap();
    let (_, job) = server.call(reqwest::Method::GET, &format!("/jobs/{job_id}/wait?timeout=30"), None).await;
    assert_eq!(job["status"], "succeeded", "{job}");
    assert_eq!(job["stdout"], "done\n");
    for field in ["created_at", "started_at", "completed_at"] {
        assert!(job[field].as_f64().unwrap() > 1.7e9, "{field}: {job}");
    }
    let runs = server.sh(&id, "wc -l < /tmp/runs").await;
    assert_eq!(runs.stdout.text.trim(), "1");
    // A short wait answers the job as it is.
    let (_, j) =
        server.call(reqwest::Method::POST, &format!("/sandboxes/{id}/exec"), Some(json!({"command": "sleep 5"}))).await;
    let (_, running) = server
        .call(reqwest::Method::GET, &format!("/jobs/{}/wait?timeout=0.2", j["job_id"].as_str().unwrap()), None)
        .await;
    assert_eq!(running["status"], "running", "{running}");
    // A failing command is a failed job with its exit code.
    let (_, failed) = server
        .call(
            reqwest::Method::POST,
            &format!("/sandboxes/{id}/exec"),
            Some(json!({"command": ["sh", "-c", "echo bad >&2; exit 2"], "wait": true})),
        )
        .await;
    assert_eq!(failed["status"], "failed");
    assert_eq!(failed["exit_code"], 2);
    assert_eq!(failed["stderr"], "bad\n");
}

/// A command string with no shell syntax is executed without the shell; whatever path a
/// command takes, its results are those `bash -c` gives.
#[tokio::test]
async fn commands_without_shell_syntax_give_what_bash_gives() {
    let server = Server::start().await;
    let id = server.create_host().await;
    for command in [
        "true",
        "false",
        "env",
        "pwd",
        "ls -la /workspace",
        "printf %s-%s a b",
        "python3 -c print(6*7)",
        "git --version",
        "no-such-program --flag",
        "/bin/echo plain words",
        "sh -c exit\\ 3",
        "echo $HOME; pwd",
    ] {
        let direct = server.exec(&id, json!({"command": command, "timeout_seconds": 30})).await;
        let bash = server.exec(&id, json!({"command": ["/bin/bash", "-c", command], "timeout_seconds": 30})).await;
        // The environment's order is bash's hash order: compared as a set.
        let sorted = |s: &str| {
            let mut lines: Vec<&str> = s.lines().collect();
            if command == "env" {
                lines.sort();
            }
            lines.join("\n")
        };
        assert_eq!(
            (direct.exit_code, sorted(&direct.stdout.text), &direct.stderr.text),
            (bash.exit_code, sorted(&bash.stdout.text), &bash.stderr.text),
            "{command:?}"
        );
    }
    let r = server.exec(&id, json!({"command": "env"})).await;
    assert!(r.stdout.text.lines().any(|l| l == "SHLVL=0"), "{r:?}");
    assert!(r.stdout.text.lines().any(|l| l == "_=/usr/bin/env"), "{r:?}");
}
