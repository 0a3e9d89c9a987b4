//! The `openhands` port against the real OpenHands SDK 1.58.2 default agent, request by request
//! (see `orchard_tests::faithful`): one scripted episode — a `terminal` command, a `file_editor`
//! view, a `think`, then `finish` — played to the real agent (the `program` harness's
//! `openhands` preset) and to the port. Every request must be the same.

use orchard_tests::faithful::{call, calls_turn, differences, play};
use serde_json::{Value, json};

fn episode() -> Vec<(u16, Value)> {
    let turn = calls_turn;
    vec![
        turn(vec![call(
            "o1",
            "terminal",
            json!({"command": "echo 'Hello, Orchard!' > /workspace/hello.txt && echo done", "summary": "write"}),
        )]),
        turn(vec![call("o2", "file_editor", json!({"command": "view", "path": "/workspace/hello.txt"}))]),
        turn(vec![call(
            "o3",
            "task_tracker",
            json!({"command": "plan", "task_list": [{"title": "write", "status": "done"}]}),
        )]),
        turn(vec![call("o4", "think", json!({"thought": "It is written: café."}))]),
        turn(vec![call("o5", "finish", json!({"message": "hello.txt is written."}))]),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn the_port_sends_what_the_real_openhands_sdk_agent_sends() {
    let Some(cache) = orchard_tests::program_cache_with("openhands") else { return };
    let (real, real_requests) = play(episode(), "program", &[], json!({"preset": "openhands"}), &cache).await;
    let (port, port_requests) = play(episode(), "openhands", &["shell", "editor"], json!({}), &cache).await;
    assert_eq!(real_requests.len(), 5, "the real agent asked for each turn: {real:#}");
    for r in [&real, &port] {
        assert_eq!(r["reward"], 1.0, "{r:#}");
        assert_eq!(r["outcome"]["answer"], "hello.txt is written.", "{r:#}");
    }
    let found = differences(&real_requests, &port_requests);
    assert!(found.is_empty(), "{} differences:\n{}", found.len(), found.join("\n"));
}
