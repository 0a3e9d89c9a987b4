//! The `mini-swe` port against the real mini-swe-agent 2.4.6, message for message.
//!
//! One scripted model at the wire plays the same episode to both: the real program (run in a
//! sandbox by the `program` harness, from the test program cache) and the port (with the shell
//! adapter). The episode walks through what the two could disagree on — merged stderr and
//! escaped non-ASCII output, a reply without an action, parallel calls, output long enough to
//! be elided, an unknown tool, a submission whose command fails, the real submission — in the
//! tool-call mode (`mini.yaml`) and the markdown mode (`mini_textbased.yaml`). Every request
//! each one sent must be the same: roles, texts, tool calls and tools.

use orchard_tests::evals::completion;
use orchard_tests::faithful::{differences, play};
use serde_json::{Value, json};

fn call(id: &str, name: &str, command: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": json!({"command": command}).to_string()}})
}

fn turn(content: &str, calls: Vec<Value>) -> (u16, Value) {
    let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = json!(calls);
    }
    completion(message, finish, (100, 10))
}

const NOISY: &str = "printf 'caf\\303\\251 <b> & it'\"'\"'s\\n'; echo to-stderr >&2";
const FAILED_SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 3";
const WRITE: &str = "echo 'Hello, Orchard!' > /workspace/hello.txt";
const SUBMIT: &str = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo the submission";

/// The episode in tool calls.
fn tool_episode() -> Vec<(u16, Value)> {
    vec![
        turn("Look around.", vec![call("c1", "bash", NOISY)]),
        turn("No action this time.", vec![]),
        turn("Two at once.", vec![call("c2", "bash", "echo one"), call("c3", "bash", "seq 1 3000")]),
        turn("Wrong tool.", vec![call("c4", "edit", "x")]),
        turn("Submit too early.", vec![call("c5", "bash", FAILED_SUBMIT)]),
        turn("Write it.", vec![call("c6", "bash", WRITE)]),
        turn("Submit.", vec![call("c7", "bash", SUBMIT)]),
    ]
}

fn block(command: &str) -> String {
    format!("THOUGHT: next.\n\n```mswea_bash_command\n{command}\n```")
}

/// The same episode in markdown actions.
fn text_episode() -> Vec<(u16, Value)> {
    vec![
        turn(&block(NOISY), vec![]),
        turn("THOUGHT: the old syntax.\n\n```bash\nls\n```", vec![]),
        turn(&format!("{}\n\n{}", block("echo one"), block("seq 1 3000")), vec![]),
        turn(&block("seq 1 3000"), vec![]),
        turn(&block(FAILED_SUBMIT), vec![]),
        turn(&block(WRITE), vec![]),
        turn(&block(SUBMIT), vec![]),
    ]
}

async fn check(episode: fn() -> Vec<(u16, Value)>, real_config: Value, port_config: Value) {
    let Some(cache) = orchard_tests::program_cache_with("mini-swe-agent") else { return };
    let (real, real_requests) = play(episode(), "program", &[], real_config, &cache).await;
    let (port, port_requests) = play(episode(), "mini-swe", &["shell"], port_config, &cache).await;
    assert_eq!(real_requests.len(), 7, "the real program asked for each turn: {real:#}");
    let found = differences(&real_requests, &port_requests);
    assert!(found.is_empty(), "{} differences:\n{}", found.len(), found.join("\n"));
    for r in [&real, &port] {
        assert_eq!(r["outcome"]["status"], "completed", "{r:#}");
        assert_eq!(r["outcome"]["answer"], "the submission\n", "{r:#}");
        assert_eq!(r["reward"], 1.0, "{r:#}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_port_sends_what_the_real_mini_swe_agent_sends_in_tool_calls() {
    check(tool_episode, json!({"preset": "mini-swe-agent"}), json!({})).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_port_sends_what_the_real_mini_swe_agent_sends_in_markdown_actions() {
    check(
        text_episode,
        json!({"preset": "mini-swe-agent", "config": ["mini_textbased.yaml"], "model_class": "litellm_textbased"}),
        json!({"action_format": "text"}),
    )
    .await;
}
