//! The client's connection handling against a hand-rolled HTTP/1.1 peer on a unix socket, so
//! that every connection and every byte on it is the test's to count and to break.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use orchard_agent_client::{AgentAddr, AgentClient, AgentClientError, SandboxAgent};
use orchard_protocol::{Command, ExecRequest};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};

const EXEC_ANSWER: &str = r#"{"exit_code":0,"timed_out":false,"stdout":{"text":"hi\n","total_bytes":3,"truncated":false},"stderr":{"text":"","total_bytes":0,"truncated":false},"wall_seconds":0.001,"cpu_seconds":0.001,"peak_rss_kb":1}"#;

/// How the peer treats each connection.
#[derive(Clone, Copy)]
enum Peer {
    /// Answers every request and keeps the connection open.
    KeepAlive,
    /// Answers one request, then closes the socket a little later (the connection idles in the
    /// client's pool by then) without having said so in the answer.
    CloseSilently,
    /// Answers one request with `Connection: close`, then closes.
    SayClose,
    /// Announces a longer body than it sends, then closes.
    CutShort,
    /// Answers 404 with the agent's error body.
    NotFound,
    /// Reads the request and closes without an answer (an agent killed in the middle of a call).
    Vanish,
}

struct Agent {
    accepted: Arc<AtomicUsize>,
    answered: Arc<AtomicUsize>,
    client: AgentClient,
    _dir: tempfile::TempDir,
}

fn start(peer: Peer) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let (accepted, answered) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, n) = (accepted.clone(), answered.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { return };
            a.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(stream, peer, n.clone()));
        }
    });
    Agent { accepted, answered, client: AgentClient::new(AgentAddr::Unix(path.clone()), "token"), _dir: dir }
}

/// Reads one request (head and `Content-Length` body); false at the end of the connection.
async fn read_request(stream: &mut UnixStream, buf: &mut Vec<u8>) -> bool {
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            assert!(head.contains("authorization: bearer token"), "the request carries the token: {head}");
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            while buf.len() < end + 4 + length {
                let mut chunk = [0u8; 4096];
                let n = stream.read(&mut chunk).await.unwrap_or(0);
                if n == 0 {
                    return false;
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            buf.drain(..end + 4 + length);
            return true;
        }
        let mut chunk = [0u8; 4096];
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

async fn serve(mut stream: UnixStream, peer: Peer, answered: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    while read_request(&mut stream, &mut buf).await {
        let answer = match peer {
            Peer::Vanish => return,
            Peer::KeepAlive | Peer::CloseSilently => ok(EXEC_ANSWER, ""),
            Peer::SayClose => ok(EXEC_ANSWER, "connection: close\r\n"),
            Peer::CutShort => format!("HTTP/1.1 200 OK\r\ncontent-length: 500\r\n\r\n{}", &EXEC_ANSWER[..40]),
            Peer::NotFound => {
                let body = r#"{"kind":"not_found","message":"no such file: /nope"}"#;
                format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
        };
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
        answered.fetch_add(1, Ordering::SeqCst);
        match peer {
            Peer::KeepAlive | Peer::NotFound => {}
            Peer::CloseSilently => {
                tokio::time::sleep(Duration::from_millis(5)).await;
                return;
            }
            Peer::SayClose | Peer::CutShort | Peer::Vanish => return,
        }
    }
}

fn ok(body: &str, extra: &str) -> String {
    format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n{body}", body.len())
}

fn echo() -> ExecRequest {
    ExecRequest::new(Command::Argv(vec!["echo".into(), "hi".into()]))
}

#[tokio::test]
async fn buffered_calls_share_one_kept_connection() {
    let agent = start(Peer::KeepAlive);
    for _ in 0..50 {
        let result = agent.client.exec(&echo()).await.unwrap();
        assert_eq!((result.exit_code, result.stdout.text.as_str()), (0, "hi\n"));
    }
    assert_eq!(agent.accepted.load(Ordering::SeqCst), 1, "one connection carried all 50 calls");
    assert_eq!(agent.answered.load(Ordering::SeqCst), 50);
}

#[tokio::test]
async fn calls_at_once_each_get_a_connection_and_all_are_kept_for_later() {
    let agent = Arc::new(start(Peer::KeepAlive));
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let agent = agent.clone();
            tokio::spawn(async move { agent.client.exec(&echo()).await.map(|r| r.exit_code) })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 0);
    }
    let opened = agent.accepted.load(Ordering::SeqCst);
    assert!((1..=8).contains(&opened), "{opened} connections for 8 calls at once");
    for _ in 0..20 {
        agent.client.exec(&echo()).await.unwrap();
    }
    assert_eq!(agent.accepted.load(Ordering::SeqCst), opened, "later calls reused the kept connections");
}

#[tokio::test]
async fn a_connection_the_agent_closed_while_idle_is_not_used_again() {
    let agent = start(Peer::CloseSilently);
    for n in 1..=5 {
        // Long enough for the close to have arrived: the client must notice it before sending.
        tokio::time::sleep(Duration::from_millis(20)).await;
        let result = agent.client.exec(&echo()).await;
        assert!(result.is_ok(), "call {n} after the agent closed the last connection: {result:?}");
        assert_eq!(agent.accepted.load(Ordering::SeqCst), n, "each call opened a connection of its own");
    }
}

#[tokio::test]
async fn an_answer_that_says_close_is_not_followed_on_its_connection() {
    let agent = start(Peer::SayClose);
    for n in 1..=5 {
        agent.client.exec(&echo()).await.unwrap();
        assert_eq!(agent.accepted.load(Ordering::SeqCst), n);
    }
}

#[tokio::test]
async fn an_answer_cut_short_is_an_error_not_a_short_answer() {
    let agent = start(Peer::CutShort);
    let err = agent.client.exec(&echo()).await.unwrap_err();
    assert!(matches!(err, AgentClientError::Unreachable { .. }), "{err:?}");
    // The next call is not handed the broken connection.
    let err = agent.client.exec(&echo()).await.unwrap_err();
    assert!(matches!(err, AgentClientError::Unreachable { .. }), "{err:?}");
    assert_eq!(agent.accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_error_answer_keeps_its_status_kind_and_message_and_the_connection() {
    let agent = start(Peer::NotFound);
    for _ in 0..3 {
        match agent.client.stat("/nope").await.unwrap_err() {
            AgentClientError::Agent { status, kind, message } => {
                assert_eq!((status, kind), (404, orchard_protocol::ErrorKind::NotFound));
                assert_eq!(message, "no such file: /nope");
            }
            other => panic!("expected the agent's error, got {other:?}"),
        }
    }
    assert_eq!(agent.accepted.load(Ordering::SeqCst), 1, "an error answer leaves its connection usable");
}

#[tokio::test]
async fn an_agent_that_goes_away_in_the_middle_of_a_call_fails_it_at_once() {
    let agent = start(Peer::Vanish);
    for _ in 0..3 {
        let outcome = tokio::time::timeout(Duration::from_secs(10), agent.client.exec(&echo())).await;
        let err = outcome.expect("the call hung on a closed connection").unwrap_err();
        assert!(matches!(err, AgentClientError::Unreachable { .. }), "{err:?}");
    }
    assert_eq!(agent.accepted.load(Ordering::SeqCst), 3, "a broken connection is not kept");
}

#[tokio::test]
async fn an_agent_that_is_not_there_is_unreachable() {
    let client = AgentClient::new(AgentAddr::Unix(Path::new("/nonexistent/agent.sock").into()), "token");
    let err = client.exec(&echo()).await.unwrap_err();
    assert!(matches!(err, AgentClientError::Unreachable { .. }), "{err:?}");
}
