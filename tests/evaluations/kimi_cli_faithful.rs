//! The `kimi-cli` port against the real Kimi-CLI 1.52, request by request (see
//! `orchard_tests::faithful`): one scripted episode — a `Shell` call, a `ReadFile` call, the
//! final message — played to the real program (the `program` harness) and to the port. The
//! system prompt and the tools' descriptions are the port's own wording (measured: those are the
//! only differences); everything else must be the same.

use orchard_tests::evals::completion;
use orchard_tests::faithful::{differences, play};
use serde_json::{Value, json};

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
}

fn episode() -> Vec<(u16, Value)> {
    let turn = |calls: Vec<Value>| {
        completion(json!({"role": "assistant", "content": "", "tool_calls": calls}), "tool_calls", (100, 10))
    };
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
async fn the_port_runs_the_loop_the_real_kimi_cli_runs_and_offers_a_subset_of_its_tools() {
    if let Ok(why) = std::fs::read_to_string(orchard_tests::program_cache().join("kimi-cli.skipped")) {
        panic!("the program cache has no kimi-cli: {why}");
    }
    let (real, real_requests) = play(episode(), "program", &[], json!({"preset": "kimi-cli"})).await;
    let (port, port_requests) = play(episode(), "kimi-cli", &["shell"], json!({})).await;
    assert_eq!(real_requests.len(), 3, "the real program asked for each turn: {real:#}");
    for r in [&real, &port] {
        assert_eq!(r["reward"], 1.0, "{r:#}");
    }
    // Everything but the prompt texts is the same: the task as sent, the calls kept in the
    // history, the tools' results in Kimi-CLI's words (`<system>` notes, numbered lines).
    let found = differences(&without_times(&real_requests), &without_times(&port_requests));
    let texts = |d: &&String| d.contains(": tools\n") || d.contains(", message 0:\n");
    let other: Vec<&String> = found.iter().filter(|d| !texts(d)).collect();
    assert!(other.is_empty(), "{} differences beyond the prompt texts:\n{}", other.len(), found.join("\n"));
    // The port's tools are the real program's: the same names in the same order, the same
    // required arguments, and no argument it does not have.
    let tools = |r: &Value| -> Vec<Value> { r["tools"].as_array().cloned().unwrap_or_default() };
    let (real_tools, port_tools) = (tools(&real_requests[0]), tools(&port_requests[0]));
    let names = |list: &[Value]| -> Vec<String> {
        list.iter().map(|t| t["function"]["name"].as_str().unwrap_or_default().to_string()).collect()
    };
    let real_names = names(&real_tools);
    let order: Vec<usize> = names(&port_tools)
        .iter()
        .map(|n| real_names.iter().position(|r| r == n).unwrap_or_else(|| panic!("{n} is not a tool of Kimi-CLI")))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "Kimi-CLI's order: {:?} in {real_names:?}", names(&port_tools));
    for port_tool in &port_tools {
        let name = &port_tool["function"]["name"];
        let real_tool = real_tools.iter().find(|t| t["function"]["name"] == *name).unwrap();
        let (p, r) = (&port_tool["function"]["parameters"], &real_tool["function"]["parameters"]);
        assert_eq!(p["required"], r["required"], "{name}: required arguments");
        for key in p["properties"].as_object().into_iter().flatten().map(|(k, _)| k) {
            assert!(r["properties"].get(key).is_some(), "{name}: `{key}` is not an argument of Kimi-CLI's");
        }
    }
}
