//! The `program` harness: real agent programs run inside real sandboxes, their model calls
//! relayed to a model played back at the wire and recorded token for token.
//!
//! - The real mini-swe-agent 2.4.6 (PyPI, from the test program cache `target/programs`) solves
//!   an example task; the requests the endpoint saw are the real program's (its shipped
//!   `mini.yaml` prompts, its `bash` tool); the rollout's segment is exactly the ids the
//!   endpoint saw and sampled; the script grader grades the sandbox it left.
//! - Any command: a program of our own that streams (`"stream": true`) gets server-sent chunks
//!   and its answer file becomes the outcome's answer.
//! - Limits and failures: `max_model_calls`, a program that fails (its log in the outcome), an
//!   unknown preset (named).

use std::path::Path;

use orchard_tests::evals::{args, eval_async, examples, mock_model_with, read_json, rollouts};
use orchard_tests::tokens::{render_message, render_prompt, reply};
use serde_json::{Value, json};

fn hello_task() -> String {
    Path::new(&examples()).join("hello-file").display().to_string()
}

fn bash_call(id: &str, command: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "bash", "arguments": json!({"command": command}).to_string()}})
}

/// `orchard eval` of `task` under the program harness with `config`, the model at `url`, the
/// program cache at `cache` when the config needs one.
async fn eval_program(task: &str, url: &str, config: Value, cache: Option<&Path>) -> (Value, tempfile::TempDir) {
    let config = config.to_string();
    let mut list = args(&[
        task,
        "--harness",
        "program",
        "--grader",
        "script",
        "--model",
        url,
        "--model-name",
        "mock-1",
        "--logprobs",
        "--config",
        &config,
    ]);
    if let Some(cache) = cache {
        list.extend(["--program-cache".to_string(), cache.display().to_string()]);
    }
    let (summary, out, _) = eval_async(list).await;
    (summary, out)
}

/// The mini-swe-agent episode: write the file, then submit, each as a `bash` tool call.
fn mini_swe_turn(request: &Value) -> (u16, Value) {
    let turns = request["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").count();
    let message = match turns {
        0 => json!({"role": "assistant", "content": "I will write the file.",
            "tool_calls": [bash_call("c1", "echo 'Hello, Orchard!' > /workspace/hello.txt && cat /workspace/hello.txt")]}),
        _ => json!({"role": "assistant", "content": "Done.",
            "tool_calls": [bash_call("c2", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]}),
    };
    reply(request, message)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_real_mini_swe_agent_solves_a_task_in_its_sandbox_with_every_call_recorded_token_for_token() {
    let Some(cache) = orchard_tests::program_cache_with("mini-swe-agent") else { return };
    let (url, seen) = mock_model_with(mini_swe_turn).await;
    let (summary, out) = eval_program(&hello_task(), &url, json!({"preset": "mini-swe-agent"}), Some(&cache)).await;
    let record = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{record:#}");
    assert_eq!(record["outcome"]["status"], "completed", "{record:#}");
    assert_eq!(record["outcome"]["steps"], 2);

    // What reached the endpoint is the real program's: mini.yaml's system prompt, its instance
    // template around our task, its one `bash` tool, and its JSON observation of our command's
    // output, which really ran in the sandbox.
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    let first = &requests[0]["messages"];
    // Jinja drops the template's final newline, as mini-swe-agent renders it.
    assert_eq!(first[0]["content"], "You are a helpful assistant that can interact with a computer.");
    let instance = first[1]["content"].as_str().unwrap();
    assert!(instance.starts_with("Please solve this issue: Create the file `/workspace/hello.txt`"), "{instance}");
    assert!(instance.contains("<system_information>\nLinux "), "the sandbox's own uname: {instance}");
    assert_eq!(requests[0]["tools"][0]["function"]["description"], "Execute a bash command");
    let observation = &requests[1]["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(observation["role"], "tool");
    assert_eq!(observation["tool_call_id"], "c1");
    assert_eq!(observation["content"], "{\n  \"returncode\": 0,\n  \"output\": \"Hello, Orchard!\\n\"\n}");

    // The trajectory holds the two calls with the endpoint's ids, and its one segment is exactly
    // the last prompt the endpoint saw followed by what it sampled last.
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let t: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let segments = t["segments"].as_array().unwrap_or_else(|| panic!("no segments: {t:#}"));
    assert_eq!(segments.len(), 1, "the real program's history extends itself: {segments:#?}");
    let ids = |v: &Value| -> Vec<u64> { v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect() };
    let mut whole = ids(&segments[0]["prompt_ids"]);
    whole.extend(ids(&segments[0]["response_ids"]));
    let mut expected: Vec<u64> = render_prompt(&requests[1]).into_iter().map(u64::from).collect();
    expected.extend(render_message(&mini_swe_turn(&requests[1]).1["choices"][0]["message"]).into_iter().map(u64::from));
    assert_eq!(whole, expected);
    let steps = t["trajectory"]["steps"].as_array().unwrap();
    assert!(
        steps.iter().any(|s| s["type"] == "event" && s["name"] == "program-exit" && s["data"]["exit_code"] == 0),
        "{steps:#?}"
    );
}

/// A program of our own, in the sandbox's Python: asks the relay twice, the first time streamed,
/// and writes what it was told.
const OWN_PROGRAM: &str = r#"
import json, os, urllib.request
base = os.environ["OPENAI_BASE_URL"]
def ask(messages, stream):
    body = {"model": os.environ["ORCHARD_MODEL_NAME"], "messages": messages, "stream": stream,
            "stream_options": {"include_usage": True}, "tool_choice": "auto"}
    req = urllib.request.Request(base + "/chat/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json", "authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
    with urllib.request.urlopen(req) as r:
        if not stream:
            return json.load(r)["choices"][0]["message"]["content"]
        text = ""
        for line in r.read().decode().split("\n\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                for c in json.loads(line[6:])["choices"]:
                    text += c["delta"].get("content") or ""
        return text
task = open(os.environ["ORCHARD_TASK_FILE"]).read()
first = ask([{"role": "user", "content": task}], True)
second = ask([{"role": "user", "content": task}, {"role": "assistant", "content": first},
              {"role": "user", "content": "and the file?"}], False)
open("/workspace/hello.txt", "w").write(second + "\n")
open("/workspace/answer.txt", "w").write(first)
"#;

#[tokio::test(flavor = "multi_thread")]
async fn any_command_runs_as_a_program_streamed_or_not_and_its_answer_file_is_the_answer() {
    let (url, seen) = mock_model_with(|request| {
        let turns = request["messages"].as_array().unwrap().len();
        let text = if turns == 1 { "streamed reply" } else { "Hello, Orchard!" };
        reply(request, json!({"role": "assistant", "content": text}))
    })
    .await;
    let config = json!({
        "command": ["python3", "-c", OWN_PROGRAM],
        "answer_file": "/workspace/answer.txt",
        "model_name": "relay-model",
    });
    let (summary, out) = eval_program(&hello_task(), &url, config, None).await;
    let record = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{record:#}");
    assert_eq!(record["outcome"]["answer"], "streamed reply", "the SSE chunks carried the whole message");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2);
    // The program's own fields reach the endpoint; its stream flags do not (the host answers
    // whole completions and the relay streams them).
    assert_eq!(requests[0]["tool_choice"], "auto");
    assert!(requests[0].get("stream_options").is_none(), "{:#}", requests[0]);
    assert_eq!(requests[0]["model"], "mock-1", "the run's model, not the program's choice");
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_failures_and_bad_configs_end_the_run_with_their_reason() {
    let (url, seen) = mock_model_with(|request| reply(request, json!({"role": "assistant", "content": "again"}))).await;
    // A program that never stops asking is stopped at max_model_calls.
    let looping = r#"
import json, os, urllib.request
while True:
    urllib.request.urlopen(urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
        json.dumps({"messages": [{"role": "user", "content": "more"}]}).encode(), {"content-type": "application/json"})).read()
"#;
    let config = json!({"command": ["python3", "-c", looping], "max_model_calls": 3});
    let (_, out) = eval_program(&hello_task(), &url, config, None).await;
    let record = &rollouts(out.path())[0];
    assert_eq!(record["outcome"]["status"], "limit_reached", "{record:#}");
    assert_eq!(record["outcome"]["steps"], 3);
    assert_eq!(seen.lock().unwrap().len(), 3, "no call past the limit reaches the model");

    // A program that fails: its exit status and the end of its log are the outcome's message.
    let failing = "echo 'cannot go on: no such thing' >&2; exit 3";
    let (_, out) = eval_program(&hello_task(), &url, json!({"command": failing}), None).await;
    let record = &rollouts(out.path())[0];
    assert_eq!(record["outcome"]["status"], "gave_up", "{record:#}");
    let message = record["outcome"]["message"].as_str().unwrap();
    assert!(message.contains("status 3") && message.contains("cannot go on: no such thing"), "{message}");

    // A preset the harness does not know is named, with the ones it does.
    let (_, out) = eval_program(&hello_task(), &url, json!({"preset": "nope"}), None).await;
    let record = &rollouts(out.path())[0];
    let error = record["error"].as_str().unwrap_or_default();
    assert!(error.contains("preset \"nope\" is not known (known: mini-swe-agent"), "{record:#}");
    assert_eq!(read_json(&out.path().join("summary.json"))["errors"], 1);
}

/// The kimi-cli episode: one `Shell` call, then the final message.
fn kimi_turn(request: &Value) -> (u16, Value) {
    let acted = request["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
    let message = if acted {
        json!({"role": "assistant", "content": "hello.txt holds the line."})
    } else {
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "k1", "type": "function",
            "function": {"name": "Shell", "arguments": json!({"command": "echo 'Hello, Orchard!' > /workspace/hello.txt"}).to_string()}}]})
    };
    reply(request, message)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_real_kimi_cli_solves_a_task_streaming_its_calls_through_the_relay() {
    let Some(cache) = orchard_tests::program_cache_with("kimi-cli") else { return };
    let (url, seen) = mock_model_with(kimi_turn).await;
    let (summary, out) = eval_program(&hello_task(), &url, json!({"preset": "kimi-cli"}), Some(&cache)).await;
    let record = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{record:#}");
    assert_eq!(record["outcome"]["status"], "completed", "{record:#}");
    assert_eq!(record["outcome"]["answer"].as_str().map(str::trim), Some("hello.txt holds the line."));
    // The real program's requests: streamed (the relay answered in chunks), its own system prompt
    // and tools, its Shell result in its own words.
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let system = requests[0]["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.starts_with("You are Kimi Code CLI"), "{system}");
    let tools: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.starts_with(&["Agent", "AskUserQuestion", "SetTodoList", "Shell"]), "{tools:?}");
    let result = requests[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert_eq!(result["tool_call_id"], "k1");
    assert!(result["content"].to_string().contains("Command executed successfully"), "{result:#}");
}

/// The OpenHands episode: its `terminal` tool, then `finish`.
fn openhands_turn(request: &Value) -> (u16, Value) {
    let acted = request["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool");
    let (name, arguments) = if acted {
        ("finish", json!({"message": "hello.txt is written."}))
    } else {
        ("terminal", json!({"command": "echo 'Hello, Orchard!' > /workspace/hello.txt"}))
    };
    let call = json!({"id": if acted { "o2" } else { "o1" }, "type": "function",
        "function": {"name": name, "arguments": arguments.to_string()}});
    reply(request, json!({"role": "assistant", "content": "", "tool_calls": [call]}))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_real_openhands_sdk_agent_solves_a_task_and_its_finish_message_is_the_answer() {
    let Some(cache) = orchard_tests::program_cache_with("openhands") else { return };
    let (url, seen) = mock_model_with(openhands_turn).await;
    let (summary, out) = eval_program(&hello_task(), &url, json!({"preset": "openhands"}), Some(&cache)).await;
    let record = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{record:#}");
    assert_eq!(record["outcome"]["answer"], "hello.txt is written.", "{record:#}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let tools: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"terminal") && tools.contains(&"file_editor") && tools.contains(&"finish"), "{tools:?}");
    let system = requests[0]["messages"][0]["content"].to_string();
    assert!(system.contains("You are OpenHands agent"), "{system}");
}

/// The same real program through the service: a tenant submits a job naming the `program`
/// harness, and the server runs it from its operator's program cache.
#[tokio::test(flavor = "multi_thread")]
async fn a_tenant_runs_a_real_program_through_the_service() {
    let Some(cache) = orchard_tests::program_cache_with("mini-swe-agent") else { return };
    let server = orchard_tests::Server::start_with(orchard_tests::ServerOptions {
        api_keys: Some("alice:alice-key-1234".into()),
        extra_args: vec!["--program-cache".into(), cache.display().to_string()],
        ..Default::default()
    })
    .await
    .with_key("alice-key-1234");
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
    tar.append_dir_all("hello-file", hello_task()).unwrap();
    let archive = tar.into_inner().unwrap().finish().unwrap();
    let resp = server.request(reqwest::Method::POST, "/v1/datasets").body(archive).send().await.unwrap();
    let uploaded: Value = resp.json().await.unwrap();
    let (url, seen) = mock_model_with(mini_swe_turn).await;
    let job = json!({"tasks": {"archive": uploaded["id"]}, "harnesses": ["program"], "grader": "script",
        "config": {"preset": "mini-swe-agent"}, "model": {"url": url, "name": "mock-1"}});
    let (status, v) = server.call(reqwest::Method::POST, "/v1/evals", Some(job)).await;
    assert_eq!(status, 201, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let done = loop {
        let (_, v) = server.call(reqwest::Method::GET, &format!("/v1/evals/{id}"), None).await;
        if v["status"] == "done" {
            break v;
        }
        assert!(std::time::Instant::now() < deadline, "{v:#}\n{}", server.log());
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    assert_eq!(done["counts"]["passed"], 1, "{done:#}\n{}", server.log());
    assert_eq!(seen.lock().unwrap().len(), 2, "the real program's two calls, through the relay and the host");
}

/// What the relay refuses, each answered with an error naming what was wrong, and the program
/// goes on: a path that is not a chat completion, a body that is not JSON, `n` above 1, an unknown
/// role. The model list names the model the program was told.
const PROBING_PROGRAM: &str = r#"
import json, os, urllib.request, urllib.error
base = os.environ["OPENAI_BASE_URL"]
def ask(method, path, body):
    req = urllib.request.Request(base + path, body, {"content-type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            return [r.status, json.load(r)]
    except urllib.error.HTTPError as e:
        return [e.code, json.load(e)]
out = {
    "models": ask("GET", "/models", None),
    "responses": ask("POST", "/responses", b"{}"),
    "not_json": ask("POST", "/chat/completions", b"{nope"),
    "n": ask("POST", "/chat/completions", json.dumps({"messages": [{"role": "user", "content": "x"}], "n": 2}).encode()),
    "role": ask("POST", "/chat/completions", json.dumps({"messages": [{"role": "wizard", "content": "x"}]}).encode()),
}
open("/workspace/probe.json", "w").write(json.dumps(out))
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_relay_refuses_what_it_cannot_relay_by_name() {
    let (url, seen) =
        mock_model_with(|request| reply(request, json!({"role": "assistant", "content": "unused"}))).await;
    let config = json!({"command": ["python3", "-c", PROBING_PROGRAM], "answer_file": "/workspace/probe.json",
        "model_name": "relay-model"});
    let (_, out) = eval_program(&hello_task(), &url, config, None).await;
    let record = &rollouts(out.path())[0];
    let probe: Value =
        serde_json::from_str(record["outcome"]["answer"].as_str().unwrap_or_else(|| panic!("{record:#}"))).unwrap();
    assert_eq!(probe["models"][1]["data"][0]["id"], "relay-model", "{probe:#}");
    let refused = |key: &str, status: u64, says: &str| {
        assert_eq!(probe[key][0], status, "{key}: {probe:#}");
        let message = probe[key][1]["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{key}: {message}");
    };
    refused("responses", 404, "chat completions (POST …/chat/completions) only");
    refused("not_json", 400, "not JSON");
    refused("n", 400, "`n` above 1");
    refused("role", 400, "messages[0]: unknown role \"wizard\"");
    assert!(seen.lock().unwrap().is_empty(), "nothing refused reached the model");
    assert_eq!(record["outcome"]["status"], "completed", "the program went on: {record:#}");
}
