//! The `kimi-cli` port against the real Kimi-CLI 1.52, request by request (see
//! `orchard_tests::faithful`): one scripted episode — a `Shell` call, a `ReadFile` call, the
//! final message — played to the real program (the `program` harness) and to the port. Every
//! request must be the same but for the clock's readings.

use orchard_tests::evals::completion;
use orchard_tests::faithful::{call, calls_turn, differences, play};
use serde_json::{Value, json};

fn episode() -> Vec<(u16, Value)> {
    let turn = calls_turn;
    vec![
        turn(vec![call(
            "k1",
            "Shell",
            json!({"command": "echo 'Hello, Orchard!' > /workspace/hello.txt && echo done"}),
        )]),
        turn(vec![call("k2", "ReadFile", json!({"path": "/workspace/hello.txt"}))]),
        completion(json!({"role": "assistant", "content": "hello.txt holds the line."}), "stop", (100, 10)),
    ]
}

/// The same request with the clock's readings blanked (each side asks at its own time).
fn without_times(requests: &[Value]) -> Vec<Value> {
    let time = regex::Regex::new(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?([+-]\d{2}:\d{2}|Z)?").unwrap();
    requests.iter().map(|r| serde_json::from_str(&time.replace_all(&r.to_string(), "<time>")).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_port_sends_what_the_real_kimi_cli_sends() {
    let Some(cache) = orchard_tests::program_cache_with("kimi-cli") else { return };
    let (real, real_requests) = play(episode(), "program", &[], json!({"preset": "kimi-cli"}), &cache).await;
    let (port, port_requests) = play(episode(), "kimi-cli", &["shell"], json!({}), &cache).await;
    assert_eq!(real_requests.len(), 3, "the real program asked for each turn: {real:#}");
    for r in [&real, &port] {
        assert_eq!(r["reward"], 1.0, "{r:#}");
    }
    // The system prompt (its skills listed where the program cache has them), the fifteen tools,
    // the task as sent, the calls kept in the history, the tools' results in Kimi-CLI's words.
    let found = differences(&without_times(&real_requests), &without_times(&port_requests));
    assert!(found.is_empty(), "{} differences:\n{}", found.len(), found.join("\n"));
    let tools = port_requests[0]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 15, "all of Kimi-CLI's tools");
}
