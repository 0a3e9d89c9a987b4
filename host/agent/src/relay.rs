//! `orchard-agent model-relay`: runs a real agent program inside the sandbox with its OpenAI
//! base URL pointed here, and hands each of its model calls to the harness outside.
//!
//! The program asks `POST …/chat/completions` on the sandbox's loopback; the call waits in a
//! queue until the harness (the `program` plugin, through the sandbox's `http` import) takes it
//! with `GET /_orchard/next`, asks the run's model, and answers with `POST /_orchard/answer/ID`.
//! So every model call the program makes is one the host made and recorded, with its token ids
//! and log-probabilities, whatever client library the program uses.
//!
//! Invariants:
//! - The relay lives exactly as long as the program: it exits with the program's status (128 + N
//!   for a signal), and kills its process group (the program, what it started, and itself) at
//!   `--deadline-secs` or when no harness has asked for work for `--orphan-secs` (the harness is
//!   gone: nobody will answer).
//! - A call is handed out once; an answer is taken once, for a call that is waiting.
//! - Everything is bounded: request bodies (16 MiB), queued calls (64), the harness's wait (30 s).
//! - A streamed request (`"stream": true`) gets the answer as server-sent chunks, as OpenAI's API
//!   sends them: one delta with the whole message, one with the finish reason, usage when asked.
//!
//! Known limit: the endpoints are on the sandbox's loopback, so the program could take or answer
//! its own calls. It gains nothing the host would record as the model's: only calls the harness
//! made through the host are in the trajectory.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Parser;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{Notify, oneshot};

const MAX_BODY: usize = 16 * 1024 * 1024;
const MAX_QUEUED: usize = 64;
const MAX_WAIT: Duration = Duration::from_secs(30);

#[derive(Parser, Debug)]
#[command(name = "orchard-agent model-relay", about = "Runs an agent program, relaying its model calls")]
pub struct RelayArgs {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write the port once listening (written whole, then renamed into place).
    #[arg(long)]
    port_file: PathBuf,
    /// The model name `GET /v1/models` answers and the program is told (`ORCHARD_MODEL_NAME`).
    #[arg(long, default_value = "orchard")]
    model: String,
    /// Kill the program after this many seconds.
    #[arg(long, default_value_t = 3600)]
    deadline_secs: u64,
    /// Kill the program when no harness has asked for work for this many seconds.
    #[arg(long, default_value_t = 900)]
    orphan_secs: u64,
    /// The program and its arguments.
    #[arg(last = true, required = true)]
    program: Vec<String>,
}

/// A call the program made, waiting for its answer.
struct Pending {
    id: String,
    request: Value,
    answer: oneshot::Sender<Answer>,
}

struct Answer {
    status: u16,
    body: Value,
}

#[derive(Default)]
struct Queue {
    /// Calls no harness has taken yet.
    waiting: VecDeque<Pending>,
    /// Calls taken, by id, until answered.
    taken: HashMap<String, oneshot::Sender<Answer>>,
}

struct Relay {
    queue: Mutex<Queue>,
    arrived: Notify,
    model: String,
    last_harness: Mutex<Instant>,
    next_id: std::sync::atomic::AtomicU64,
}

/// Runs the relay; returns the program's exit status.
pub fn main(args: Vec<String>) -> anyhow::Result<i32> {
    let args = RelayArgs::try_parse_from(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

async fn run(args: RelayArgs) -> anyhow::Result<i32> {
    use anyhow::Context;
    let listener = tokio::net::TcpListener::bind(args.listen).await.context("model-relay: listening")?;
    let port = listener.local_addr()?.port();
    let tmp = args.port_file.with_extension("partial");
    std::fs::write(&tmp, port.to_string()).context("model-relay: writing the port file")?;
    std::fs::rename(&tmp, &args.port_file).context("model-relay: writing the port file")?;

    let relay = Arc::new(Relay {
        queue: Mutex::default(),
        arrived: Notify::new(),
        model: args.model.clone(),
        last_harness: Mutex::new(Instant::now()),
        next_id: Default::default(),
    });
    let app = Router::new()
        .route("/_orchard/next", get(next))
        .route("/_orchard/answer/{id}", post(answer))
        .route("/{*path}", post(program_call).get(program_get))
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .with_state(relay.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let base = format!("http://127.0.0.1:{port}/v1");
    let mut command = tokio::process::Command::new(&args.program[0]);
    command
        .args(&args.program[1..])
        .env("ORCHARD_MODEL_URL", &base)
        .env("ORCHARD_MODEL_NAME", &args.model)
        .env("OPENAI_BASE_URL", &base)
        .env("OPENAI_API_BASE", &base);
    if std::env::var_os("OPENAI_API_KEY").is_none() {
        command.env("OPENAI_API_KEY", "orchard-relay");
    }
    let mut child = command.spawn().with_context(|| format!("model-relay: starting {:?}", args.program[0]))?;
    let deadline = tokio::time::sleep(Duration::from_secs(args.deadline_secs));
    tokio::pin!(deadline);
    let orphan = Duration::from_secs(args.orphan_secs);
    loop {
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                use std::os::unix::process::ExitStatusExt;
                return Ok(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(9)));
            }
            _ = &mut deadline => {
                eprintln!("model-relay: the program ran past {} s and was killed", args.deadline_secs);
                kill_group();
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                let idle = relay.last_harness.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
                if idle > orphan {
                    eprintln!("model-relay: no harness asked for {} s; the program was killed", orphan.as_secs());
                    kill_group();
                }
            }
        }
    }
}

/// Kills the program, whatever it started and the relay itself: the harness starts the relay as
/// a background process, the leader of its own process group, which the program shares. The
/// harness reads why from the relay's log.
fn kill_group() -> ! {
    // SAFETY: kill with pid 0 (our process group) and a signal number has no memory effects.
    unsafe { libc::kill(0, libc::SIGKILL) };
    std::process::exit(137)
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, axum::Json(json!({"error": {"message": message, "type": "orchard_relay_error"}}))).into_response()
}

/// `GET /v1/models` (clients that check the model first); anything else is not relayed.
async fn program_get(State(relay): State<Arc<Relay>>, Path(path): Path<String>) -> Response {
    if path.trim_end_matches('/').ends_with("models") {
        let model = json!({"id": relay.model, "object": "model", "created": 0, "owned_by": "orchard"});
        return axum::Json(json!({"object": "list", "data": [model]})).into_response();
    }
    error(StatusCode::NOT_FOUND, &format!("GET /{path}: the relay serves chat completions and the model list only"))
}

/// The program's model call: queued for the harness, answered when it answers.
async fn program_call(State(relay): State<Arc<Relay>>, Path(path): Path<String>, body: Bytes) -> Response {
    if !path.trim_end_matches('/').ends_with("chat/completions") {
        return error(
            StatusCode::NOT_FOUND,
            &format!("POST /{path}: the relay serves OpenAI chat completions (POST …/chat/completions) only"),
        );
    }
    let request: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return error(StatusCode::BAD_REQUEST, "the request body is not a JSON object"),
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("the request body is not JSON: {e}")),
    };
    let stream = request.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let include_usage = request.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false);
    let (tx, rx) = oneshot::channel();
    {
        let mut queue = relay.queue.lock().unwrap_or_else(|p| p.into_inner());
        if queue.waiting.len() + queue.taken.len() >= MAX_QUEUED {
            return error(StatusCode::TOO_MANY_REQUESTS, "too many model calls waiting at once");
        }
        let n = relay.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = format!("{n}-{}", crate::ids::nonce());
        queue.waiting.push_back(Pending { id, request, answer: tx });
    }
    relay.arrived.notify_waiters();
    let Ok(answer) = rx.await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the harness went away before answering");
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    if stream && status.is_success() {
        return sse(&answer.body, include_usage);
    }
    (status, axum::Json(answer.body)).into_response()
}

/// A whole chat completion as OpenAI's stream sends it.
fn sse(completion: &Value, include_usage: bool) -> Response {
    let mut out = String::new();
    let head = |choices: Value| {
        json!({
            "id": completion.get("id").cloned().unwrap_or(json!("chatcmpl-orchard")),
            "object": "chat.completion.chunk",
            "created": completion.get("created").cloned().unwrap_or(json!(0)),
            "model": completion.get("model").cloned().unwrap_or(json!("orchard")),
            "choices": choices,
        })
    };
    let choice = completion.pointer("/choices/0").cloned().unwrap_or(json!({}));
    let mut delta = choice.get("message").cloned().unwrap_or(json!({"role": "assistant"}));
    if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for (i, call) in calls.iter_mut().enumerate() {
            call["index"] = json!(i);
        }
    }
    let mut event = |v: Value| out.push_str(&format!("data: {v}\n\n"));
    event(head(json!([{"index": 0, "delta": delta, "finish_reason": null}])));
    let mut last = head(json!([{"index": 0, "delta": {}, "finish_reason": choice.get("finish_reason")}]));
    if let Some(usage) = completion.get("usage") {
        if include_usage {
            event(last);
            last = head(json!([]));
        }
        last["usage"] = usage.clone();
    }
    event(last);
    out.push_str("data: [DONE]\n\n");
    let mut response = out.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[derive(Deserialize)]
struct NextQuery {
    wait_ms: Option<u64>,
}

/// The harness takes the oldest waiting call: `{"id", "request"}`, or 204 after the wait.
async fn next(State(relay): State<Arc<Relay>>, Query(q): Query<NextQuery>) -> Response {
    let wait = Duration::from_millis(q.wait_ms.unwrap_or(0)).min(MAX_WAIT);
    let until = tokio::time::Instant::now() + wait;
    loop {
        *relay.last_harness.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let arrived = relay.arrived.notified();
        {
            let mut queue = relay.queue.lock().unwrap_or_else(|p| p.into_inner());
            while let Some(call) = queue.waiting.pop_front() {
                if call.answer.is_closed() {
                    continue; // the program gave up on it
                }
                queue.taken.insert(call.id.clone(), call.answer);
                return axum::Json(json!({"id": call.id, "request": call.request})).into_response();
            }
        }
        if tokio::time::timeout_at(until, arrived).await.is_err() {
            return StatusCode::NO_CONTENT.into_response();
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    status: u16,
    body: Value,
}

/// The harness answers a call it took.
async fn answer(State(relay): State<Arc<Relay>>, Path(id): Path<String>, body: Bytes) -> Response {
    let parsed: AnswerBody = match serde_json::from_slice(&body) {
        Ok(a) => a,
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("answer: {e}")),
    };
    *relay.last_harness.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    let sender = relay.queue.lock().unwrap_or_else(|p| p.into_inner()).taken.remove(&id);
    match sender {
        Some(tx) => {
            // The program may have hung up meanwhile; the answer then goes nowhere.
            let _ = tx.send(Answer { status: parsed.status, body: parsed.body });
            StatusCode::NO_CONTENT.into_response()
        }
        None => error(StatusCode::NOT_FOUND, &format!("no call {id:?} is waiting for an answer")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_streamed_answer_has_the_message_the_finish_and_the_usage_when_asked() {
        let completion = json!({
            "id": "c1", "model": "m", "created": 5,
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "hi",
                "tool_calls": [{"id": "t", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
        });
        async fn events(completion: &Value, include_usage: bool) -> Vec<Value> {
            let response = sse(completion, include_usage);
            let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
            let text = String::from_utf8(body.to_vec()).unwrap();
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
            text.split("\n\n")
                .filter_map(|e| e.strip_prefix("data: "))
                .filter(|e| *e != "[DONE]")
                .map(|e| serde_json::from_str(e).unwrap())
                .collect()
        }
        let with = events(&completion, true).await;
        assert_eq!(with.len(), 3);
        assert_eq!(with[0]["choices"][0]["delta"]["content"], "hi");
        assert_eq!(with[0]["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
        assert_eq!(with[1]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(with[2]["choices"], json!([]));
        assert_eq!(with[2]["usage"]["total_tokens"], 4);
        let without = events(&completion, false).await;
        assert_eq!(without.len(), 2);
        assert_eq!(without[1]["usage"]["total_tokens"], 4, "usage rides on the finish chunk");
    }
}
