//! The fake backend keeps the real backends' contract: ids, capacity, use after delete,
//! idle expiry, forks, files through the typed calls and through raw protocol requests.

use std::time::Duration;

use http_body_util::BodyExt;
use hyper::Method;
use orchard_agent_client::{AgentClientError, full};
use orchard_protocol::{Command, ErrorKind, ExecFrame, ExecRequest};
use orchard_sandbox::{Backend, SandboxError, SandboxSpec, fork_by_tar};
use orchard_sandbox_fake::{FakeBackend, exited, normalise};

fn spec(id: Option<&str>) -> SandboxSpec {
    SandboxSpec { id: id.map(str::to_string), ..SandboxSpec::new("alice", "host") }
}

#[tokio::test]
async fn ids_are_unique_valid_and_capacity_is_kept() {
    let backend = FakeBackend::new().with_capacity(2);
    let a = backend.create(spec(Some("web"))).await.unwrap();
    assert_eq!(a.id, "web");
    assert!(matches!(backend.create(spec(Some("web"))).await, Err(SandboxError::AlreadyExists(_))));
    assert!(
        matches!(backend.create(spec(Some("Bad_Id"))).await, Err(SandboxError::InvalidSpec(m)) if m.contains("sandbox_id"))
    );
    backend.create(spec(None)).await.unwrap();
    assert_eq!(backend.free_slots().await, Some(0));
    assert!(matches!(backend.create(spec(None)).await, Err(SandboxError::Capacity(_))));
    backend.delete("web").await.unwrap();
    assert_eq!(backend.free_slots().await, Some(1));
    assert_eq!(backend.list().await.len(), 1);
}

#[tokio::test]
async fn an_agent_kept_past_delete_stops_answering() {
    let backend = FakeBackend::new();
    let info = backend.create(spec(None)).await.unwrap();
    let agent = backend.agent(&info.id).await.unwrap();
    agent.health().await.unwrap();
    backend.delete(&info.id).await.unwrap();
    assert!(matches!(agent.read_file("/tmp").await, Err(AgentClientError::Unreachable { .. })));
    assert!(matches!(backend.get(&info.id).await, Err(SandboxError::NotFound(_))));
    assert!(matches!(backend.delete(&info.id).await, Err(SandboxError::NotFound(_))));
}

#[tokio::test]
async fn idle_sandboxes_expire_and_busy_ones_do_not() {
    let backend = FakeBackend::new();
    let idle = backend.create(SandboxSpec { ttl_seconds: Some(0), ..spec(None) }).await.unwrap();
    let kept = backend.create(spec(None)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(backend.reap_expired().await, vec![idle.id]);
    assert_eq!(backend.list().await.into_iter().map(|i| i.id).collect::<Vec<_>>(), vec![kept.id]);
}

#[tokio::test]
async fn commands_go_to_the_tests_handler_with_the_sandboxes_files() {
    let backend = FakeBackend::new().with_exec(|call| {
        if call.line() == "make answer" {
            let at = normalise("answer.txt", &call.cwd);
            call.fs.write(&at, "42".into(), None, false).unwrap();
            return exited(0, "made\n", "");
        }
        exited(127, "", "unknown")
    });
    let info = backend.create(SandboxSpec { workdir: Some("/workspace/app".into()), ..spec(None) }).await.unwrap();
    let agent = backend.agent(&info.id).await.unwrap();
    let result = agent.exec(&ExecRequest::new(Command::Shell("make answer".into()))).await.unwrap();
    assert_eq!((result.exit_code, result.stdout.text.as_str()), (0, "made\n"));
    assert_eq!(agent.read_file("/workspace/app/answer.txt").await.unwrap(), "42");
    // Streamed: output frames, then the exit.
    let frames: Vec<_> = futures::StreamExt::collect::<Vec<_>>(
        agent.exec_stream(&ExecRequest::new(Command::Shell("nope".into()))).await.unwrap(),
    )
    .await;
    assert!(matches!(frames.last(), Some(Ok(ExecFrame::Exit { result })) if result.exit_code == 127));
    assert_eq!(backend.commands(&info.id).unwrap().len(), 2);
}

#[tokio::test]
async fn the_default_handler_runs_only_what_it_knows() {
    let backend = FakeBackend::new();
    let info = backend.create(spec(None)).await.unwrap();
    let agent = backend.agent(&info.id).await.unwrap();
    let run = |line: &str| ExecRequest::new(Command::Shell(line.into())).cwd("/workspace");
    assert_eq!(agent.exec(&run("mkdir -p a/b")).await.unwrap().exit_code, 0);
    assert_eq!(agent.exec(&run("touch a/b/c")).await.unwrap().exit_code, 0);
    assert!(backend.files(&info.id).unwrap().exists("/workspace/a/b/c"));
    let unknown = agent.exec(&run("python3 -c 'print(1)'")).await.unwrap();
    assert_eq!(unknown.exit_code, 127);
    assert!(unknown.stderr.text.contains("python3"), "{}", unknown.stderr.text);
}

#[tokio::test]
async fn raw_protocol_requests_answer_as_the_agent_does() {
    let backend = FakeBackend::new();
    let info = backend.create(spec(None)).await.unwrap();
    let agent = backend.agent(&info.id).await.unwrap();
    agent.send(Method::PUT, "/files?path=%2Fworkspace%2Fa%20b.txt&mode=600", full("hi")).await.unwrap();
    let stat = agent.stat("/workspace/a b.txt").await.unwrap();
    assert_eq!((stat.size, stat.mode), (2, 0o600));
    let body = agent.send(Method::GET, "/files?path=/workspace/a%20b.txt", full("")).await.unwrap();
    assert_eq!(body.into_body().collect().await.unwrap().to_bytes(), "hi");
    let missing = agent.send(Method::GET, "/files?path=/nope", full("")).await.unwrap_err();
    assert!(matches!(missing, AgentClientError::Agent { status: 404, kind: ErrorKind::NotFound, .. }), "{missing:?}");
    let bad = agent.send(Method::GET, "/files", full("")).await.unwrap_err();
    assert!(bad.to_string().contains("path"), "{bad}");
}

#[tokio::test]
async fn tar_round_trips_and_dot_dot_stays_inside() {
    let backend = FakeBackend::new();
    let info = backend.create(spec(None)).await.unwrap();
    let agent = backend.agent(&info.id).await.unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    for (name, data) in [("src/main.rs", &b"fn main() {}"[..]), ("../../etc/evil", b"x")] {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        // Written raw: the tar crate refuses `..` in `set_path`, an attacker's archive would not.
        header.as_gnu_mut().unwrap().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }
    let written = agent.tar_upload("/workspace/proj", full(builder.into_inner().unwrap())).await.unwrap();
    assert_eq!(written.entries, 2);
    let files = backend.files(&info.id).unwrap();
    assert!(files.exists("/workspace/proj/src/main.rs"));
    assert!(files.exists("/workspace/proj/etc/evil") && !files.exists("/etc/evil"));

    // What one sandbox's tar holds, another's upload recreates (fork by tar rides on this).
    let forked = fork_by_tar(&backend, &spec(None), &info.id, 2, &["/workspace"]).await.unwrap();
    for child in forked {
        let copy = backend.agent(&child.id).await.unwrap();
        assert_eq!(copy.read_file("/workspace/proj/src/main.rs").await.unwrap(), "fn main() {}");
    }
}

#[tokio::test]
async fn a_fork_copies_the_files_of_one_instant() {
    let backend = FakeBackend::new();
    let source = backend.create(spec(None)).await.unwrap();
    let agent = backend.agent(&source.id).await.unwrap();
    agent.write_file("/workspace/state", full("before"), None, false).await.unwrap();
    let forked = backend.fork(&source.id, 3).await.unwrap();
    agent.write_file("/workspace/state", full("after"), None, false).await.unwrap();
    assert_eq!(forked.sandboxes.len(), 3);
    for child in &forked.sandboxes {
        assert_eq!(child.tenant, "alice");
        let files = backend.files(&child.id).unwrap();
        assert_eq!(files.read("/workspace/state").unwrap(), "before");
    }
    assert!(backend.fork(&source.id, 0).await.is_err());
    assert!(backend.fork("missing", 1).await.is_err());
}

#[tokio::test]
async fn the_disk_limit_refuses_a_write_naming_the_path() {
    let backend = FakeBackend::new();
    let info = backend.create(SandboxSpec { disk_bytes: Some(4), ..spec(None) }).await.unwrap();
    let agent = backend.agent(&info.id).await.unwrap();
    let e = agent.write_file("/tmp/big", full("12345"), None, false).await.unwrap_err();
    assert!(e.to_string().contains("/tmp/big") && e.to_string().contains("no space"), "{e}");
}
