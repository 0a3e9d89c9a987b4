//! The ZeroClaw- and Kimi-CLI-style harnesses, driven by a model played back at the wire on
//! real sandboxes: the requests each sends (system prompt sections, tool names, message shapes)
//! step by step; subagents as nested conversations with their own tools, only their final
//! message returning; loop detection; compaction when and how the originals compact; retries.

use std::path::Path;
use std::sync::{Arc, Mutex};

use orchard_tests::evals::{args, check_against_schema, completion, eval_async, export, mock_model, mock_model_with};
use serde_json::{Value, json};

fn example(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().join("examples").join(path).display().to_string()
}

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
}

fn calls(list: Vec<Value>) -> (u16, Value) {
    completion(json!({"role": "assistant", "content": "", "tool_calls": list}), "tool_calls", (100, 10))
}

fn say(text: &str) -> (u16, Value) {
    completion(json!({"role": "assistant", "content": text}), "stop", (100, 10))
}

/// `examples/tasks/hello-file` under `harness` with the shell adapter, graded by its script,
/// the model at `url`.
async fn hello_file(harness: &str, url: &str, config: Option<&str>) -> (Value, tempfile::TempDir, String) {
    let task = example("tasks/hello-file");
    let mut list = vec![task.as_str(), "--harness", harness, "--tools", "shell", "--grader", "script", "--model", url];
    list.extend(config.iter().flat_map(|c| ["--config", *c]));
    eval_async(args(&list)).await
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map_or(vec![], |t| t.iter().map(|t| t["function"]["name"].as_str().unwrap().to_string()).collect())
}

fn messages(request: &Value) -> Vec<Value> {
    request["messages"].as_array().unwrap().clone()
}

/// A message's text whether the endpoint got a string or a list of parts.
fn text(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

/// The first rollout's line of `trajectories.jsonl` (outcome, verdict, trajectory).
fn rollout(out: &Path) -> Value {
    let lines = std::fs::read_to_string(out.join("trajectories.jsonl")).unwrap();
    serde_json::from_str(lines.lines().next().unwrap()).unwrap()
}

fn trajectory(out: &Path) -> Value {
    rollout(out)["trajectory"].clone()
}

fn events(trajectory: &Value, name: &str) -> Vec<Value> {
    trajectory["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["type"] == "event" && s["name"] == name)
        .map(|s| s["data"].clone())
        .collect()
}

/// The sections the real ZeroClaw (0.8.2, built from source and run by hand against a recording
/// endpoint with native tools) sent, in its order.
const ZEROCLAW_SECTIONS: [&str; 8] = [
    "## CRITICAL: No Tool Narration",
    "## CRITICAL: Tool Honesty",
    "## Your Task",
    "## Safety",
    "## Workspace",
    "## Project Context",
    "## Current Date",
    "## Runtime",
];

/// ZeroClaw on an assistant task: its prompt sections, a duplicate call skipped, `delegate` to a
/// configured agent with its own tool subset and `spawn_subagent` with the caller's tools, each a
/// fresh conversation whose final message alone comes back; the drafts they made are graded.
#[tokio::test(flavor = "multi_thread")]
async fn zeroclaw_delegates_and_spawns_subagents_whose_final_message_alone_returns() {
    let draft_bo = json!({"to": ["bo@orchard.test"], "subject": "Re: Lunch Thursday?", "body": "Thursday lunch works for me at 12:30.", "in_reply_to": "m4"});
    let draft_ana = json!({"to": ["ana@orchard.test"], "subject": "Re: Q1 report", "body": "I will send my comments on section 3 by Thursday.", "in_reply_to": "m1"});
    let (url, seen) = mock_model(vec![
        calls(vec![call("a1", "mail_search", json!({})), call("a2", "mail_search", json!({}))]),
        calls(vec![call("d1", "delegate", json!({"agent": "reader", "prompt": "What does Bo want in m4?"}))]),
        calls(vec![call("r1", "mail_read", json!({"id": "m4"}))]),
        say("Bo asks whether I am free for lunch on Thursday."),
        calls(vec![call("s1", "spawn_subagent", json!({"prompt": format!("Save this draft: {draft_bo}")}))]),
        calls(vec![call("s0", "spawn_subagent", json!({"prompt": "help"})), call("s2", "mail_draft", draft_bo)]),
        say("Draft saved."),
        calls(vec![call("a3", "mail_draft", draft_ana)]),
        say("Both drafts are saved; nothing was sent."),
    ])
    .await;
    let config = json!({"agents": {"reader": {"system_prompt": "You are a mail reader.", "tools": ["mail_search", "mail_read"]}},
                        "date": "2026-12-03", "now": "2026-12-03 20:50:02", "model_name": "mock-1"});
    let (summary, out, _) = eval_async(args(&[
        &example("assistant/draft-replies"),
        "--harness",
        "zeroclaw",
        "--grader",
        "rubric",
        "--model",
        &url,
        "--config",
        &config.to_string(),
    ]))
    .await;
    assert_eq!(summary["passed"], 1, "{summary:#}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 9);

    // The main agent's first request: the sections in ZeroClaw's order, the task, the tools.
    let first = messages(&seen[0]);
    let system = text(&first[0]);
    let at: Vec<usize> =
        ZEROCLAW_SECTIONS.iter().map(|h| system.find(h).unwrap_or_else(|| panic!("{h} missing:\n{system}"))).collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "sections out of order: {at:?}");
    assert!(system.contains("2026-12-03") && system.contains("Model: mock-1"), "{system}");
    assert_eq!((first.len(), first[1]["role"].as_str()), (2, Some("user")));
    // The task comes stamped with the time, as the real ZeroClaw 0.8.2 sends it.
    assert!(
        text(&first[1]).starts_with("[2026-12-03 20:50:02 +00:00] Two messages in my inbox"),
        "{}",
        text(&first[1])
    );
    let tools = tool_names(&seen[0]);
    for t in
        ["mail_search", "mail_draft", "memory_store", "memory_recall", "memory_forget", "delegate", "spawn_subagent"]
    {
        assert!(tools.contains(&t.to_string()), "{t} not offered: {tools:?}");
    }
    // The same call twice in one response runs once.
    let second = messages(&seen[1]);
    let (a1, a2) = (&second[second.len() - 2], &second[second.len() - 1]);
    assert_eq!((a1["tool_call_id"].as_str(), a2["tool_call_id"].as_str()), (Some("a1"), Some("a2")));
    assert!(text(a1).contains("Lunch Thursday?"), "{a1}");
    assert_eq!(text(a2), "Skipped duplicate tool call 'mail_search' with identical arguments in this turn.");

    // `delegate`: a fresh conversation with the agent's identity and its tool subset.
    let sub = messages(&seen[2]);
    assert_eq!(sub.len(), 2, "{sub:#?}");
    assert!(text(&sub[0]).starts_with("You are a mail reader.") && text(&sub[0]).contains("## Safety"));
    assert_eq!(text(&sub[1]), "[2026-12-03 20:50:02 +00:00] What does Bo want in m4?");
    let sub_tools = tool_names(&seen[2]);
    assert!(sub_tools.starts_with(&["mail_search".to_string(), "mail_read".to_string()]), "{sub_tools:?}");
    assert!(!sub_tools.contains(&"mail_draft".to_string()), "{sub_tools:?}");
    // Only its final message returns; its own calls stay in its conversation.
    let back = messages(&seen[4]);
    let result = back.last().unwrap();
    assert_eq!(
        (result["tool_call_id"].as_str(), text(result).as_str()),
        (Some("d1"), "Bo asks whether I am free for lunch on Thursday.")
    );
    assert!(!seen[4].to_string().contains("\"r1\""), "the subagent's calls leaked into the parent");

    // `spawn_subagent`: the caller's tools, spawn_subagent among them as ZeroClaw offers it, and
    // refused when the subagent calls it (the depth-1 cap).
    let spawned = tool_names(&seen[5]);
    assert!(
        spawned.contains(&"mail_draft".to_string()) && spawned.contains(&"spawn_subagent".to_string()),
        "{spawned:?}"
    );
    let refused = messages(&seen[6]).iter().find(|m| m["tool_call_id"] == "s0").cloned().unwrap();
    assert_eq!(text(&refused), "Error: spawn_subagent: a subagent may not spawn its own subagents (depth-1 cap)");
    assert_eq!(messages(&seen[5]).len(), 2);
    assert_eq!(text(messages(&seen[7]).last().unwrap()), "Draft saved.");

    // Both subagents are on record, nested under the main agent, with their conversations.
    let t = trajectory(out.path());
    let starts = events(&t, "subagent-start");
    let ends = events(&t, "subagent-end");
    assert_eq!(starts.len(), 2);
    assert_eq!(
        (starts[0]["name"].as_str(), starts[0]["parent"].as_str(), starts[0]["depth"].as_u64()),
        (Some("reader"), Some("main"), Some(1))
    );
    assert_eq!(starts[1]["name"], "subagent");
    let reader = &ends[0];
    assert_eq!(reader["status"], "completed");
    assert_eq!(reader["messages"].as_array().unwrap().len(), 5, "system, task, call, result, answer: {reader:#}");
    assert_eq!(reader["messages"][2]["tool_calls"][0]["function"]["name"], "mail_read");

    // OpenAI export: the main conversation, then each subagent's as its own record, linked.
    let records = export(out.path(), &["--format", "openai"]);
    check_against_schema(&records, "openai-chat.schema.json");
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["metadata"]["subagents"], json!(["d1", "s1"]));
    assert!(!records[0].to_string().contains("\"r1\""), "the main record holds no subagent turn");
    assert_eq!(
        (records[1]["metadata"]["agent"].as_str(), records[1]["metadata"]["parent"].as_str()),
        (Some("reader"), Some("main"))
    );
    assert_eq!(records[1]["messages"][2]["tool_calls"][0]["id"], "r1");
    let reader_tools: Vec<&str> =
        records[1]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(reader_tools.starts_with(&["mail_search", "mail_read"]) && !reader_tools.contains(&"mail_draft"));
    assert_eq!(records[2]["messages"].as_array().unwrap().last().unwrap()["content"], "Draft saved.");

    // ATIF v1.7: the subagents embedded, each referred to from the observation that returned it.
    let atif = export(out.path(), &["--format", "atif"]);
    check_against_schema(&atif, "atif-v1.7.schema.json");
    let doc = &atif[0];
    assert_eq!(doc["schema_version"], "ATIF-v1.7");
    let embedded = doc["subagent_trajectories"].as_array().unwrap();
    assert_eq!(embedded.len(), 2);
    let refs: Vec<String> = doc["steps"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["observation"]["results"].as_array().cloned().unwrap_or_default())
        .filter_map(|r| r["subagent_trajectory_ref"][0]["trajectory_id"].as_str().map(str::to_string))
        .collect();
    let ids: Vec<String> = embedded.iter().map(|t| t["trajectory_id"].as_str().unwrap().to_string()).collect();
    assert_eq!(refs, ids, "every embedded trajectory is referred to, in order");
    assert_eq!(embedded[0]["agent"]["name"], "reader");
    assert_eq!(embedded[0]["steps"][2]["tool_calls"][0]["function_name"], "mail_read");
}

/// ZeroClaw's guards: the same call three times warns, a fourth is flagged blocked (both in the
/// system prompt), a fifth ends the run; with other calls the iteration cap ends it.
#[tokio::test(flavor = "multi_thread")]
async fn zeroclaw_warns_refuses_and_breaks_repeated_calls_and_caps_iterations() {
    let (url, seen) = mock_model_with(|_| calls(vec![call("x", "shell", json!({"command": "echo same"}))])).await;
    let (summary, out, _) = hello_file("zeroclaw", &url, None).await;
    assert_eq!(summary["passed"], 0);
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 5, "the fifth identical call ends the run");
    // As ZeroClaw does: the detector's notes go into the system prompt, the calls still run.
    let system = |i: usize| text(&messages(&seen[i])[0]);
    assert!(!system(2).contains("[Loop Detection]"));
    assert!(
        system(3).contains("[Loop Detection] Warning: tool 'shell' has been called 3 times consecutively"),
        "{}",
        system(3)
    );
    assert!(system(4).contains("[Loop Detection — BLOCKED] Blocked: tool 'shell' called 4 times consecutively"));
    // Each `shell` call is one command in the sandbox (the harness's own read of the workspace
    // files aside).
    let ran = trajectory(out.path())["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["type"] == "tool_call" && s.to_string().contains("echo same"))
        .count();
    assert_eq!(ran, 5, "the fifth runs, then the circuit breaker ends the run");
    let r = rollout(out.path());
    assert_eq!(r["outcome"]["status"], "gave_up", "{r:#}");
    assert!(r["outcome"]["message"].as_str().unwrap().contains("Circuit breaker"));

    let n = Arc::new(Mutex::new(0));
    let (url, seen) = mock_model_with(move |_| {
        let mut n = n.lock().unwrap();
        *n += 1;
        calls(vec![call("y", "shell", json!({"command": format!("echo {n}")}))])
    })
    .await;
    let (_, out, _) = hello_file("zeroclaw", &url, Some(r#"{"max_tool_iterations": 4}"#)).await;
    assert_eq!(seen.lock().unwrap().len(), 4);
    let r = rollout(out.path());
    assert_eq!(r["outcome"]["status"], "limit_reached");
}

/// ZeroClaw compacts past half its window (by the endpoint's own count): the first 3 messages
/// (with the results of their calls) and the last 4 stay, the middle becomes the model's
/// summary; a context-overflow error compacts again and the call is made once more.
#[tokio::test(flavor = "multi_thread")]
async fn zeroclaw_compacts_at_half_the_window_and_on_a_context_overflow() {
    let step = Arc::new(Mutex::new(0));
    let (url, seen) = mock_model_with(move |request| {
        let tools = tool_names(request);
        if tools.is_empty() {
            return say("SUMMARY: echoed 1, 2 and 3.");
        }
        let mut step = step.lock().unwrap();
        *step += 1;
        match *step {
            1..=3 => calls(vec![call(&format!("c{step}"), "bash", json!({"command": format!("echo {step}")}))]),
            // The endpoint counts this prompt at 2500 tokens: past half of 4000.
            4 => completion(
                json!({"role": "assistant", "content": "", "tool_calls": [call("c4", "bash", json!({"command": "echo 4"}))]}),
                "tool_calls",
                (2500, 10),
            ),
            5 => (400, json!({"error": {"message": "This model's maximum context length is 4096 tokens."}})),
            _ => say("Done."),
        }
    })
    .await;
    let (_, out, _) = hello_file("zeroclaw", &url, Some(r#"{"context_tokens": 4000}"#)).await;
    let seen = seen.lock().unwrap().clone();
    let roles = |r: &Value| messages(r).iter().map(|m| m["role"].as_str().unwrap().to_string()).collect::<Vec<_>>();
    // 4 turns, the summary, the overflowing call, the summary again, the call again.
    assert_eq!(seen.len(), 8, "{:#?}", seen.iter().map(tool_names).collect::<Vec<_>>());
    let summary_request = text(&messages(&seen[4])[1]);
    assert!(
        tool_names(&seen[4]).is_empty() && summary_request.contains("echo 2") && !summary_request.contains("echo 4"),
        "{summary_request}"
    );
    let before = messages(&seen[3]);
    let after = messages(&seen[5]);
    assert_eq!(
        roles(&seen[5]),
        ["system", "user", "assistant", "tool", "user", "assistant", "tool", "assistant", "tool"]
    );
    assert_eq!(after[..4], before[..4], "the first 3 messages (and the results of their calls) stay");
    assert!(
        text(&after[4]).starts_with("[Compaction summary of 2 earlier messages]")
            && text(&after[4]).contains("SUMMARY")
    );
    assert_eq!(after[5]["tool_calls"][0]["id"], "c3", "the last 4 stay: {after:#?}");
    assert_eq!(after[8]["tool_call_id"], "c4");
    assert!(tool_names(&seen[6]).is_empty(), "the overflow compacts");
    let retried = messages(&seen[7]);
    assert_eq!(retried.len(), after.len(), "the overflowing call made again on the compacted context");
    let t = trajectory(out.path());
    let compactions = events(&t, "compaction");
    assert_eq!(compactions.len(), 2);
    assert!(compactions[1]["reason"].as_str().unwrap().contains("overflow"));
}

/// The section headings of Kimi-CLI 1.52's system prompt, in order.
const KIMI_SECTIONS: [&str; 10] = [
    "# Prompt and Tool Use",
    "# General Guidelines for Coding",
    "# General Guidelines for Research and Data Processing",
    "# Working Environment",
    "## Operating System",
    "## Date and Time",
    "## Working Directory",
    "# Project Information",
    "# Skills",
    "# Ultimate Reminders",
];

/// Kimi-CLI on a file task: the request shapes the real one sends (tools, parameters, sections,
/// `<system>` notes before tool output), SetTodoList in the harness, an `Agent` subagent with
/// narrowed tools asked once for more when its report is brief, and only its report returning.
#[tokio::test(flavor = "multi_thread")]
async fn kimi_cli_sends_what_the_real_one_sends_and_runs_agent_subagents() {
    let long_report = "I created /workspace/hello.txt with WriteFile, then fixed the missing exclamation mark with \
                       StrReplaceFile; the file now holds exactly one line, `Hello, Orchard!`, followed by a newline. \
                       Nothing else in the workspace was touched.";
    let (url, seen) = mock_model(vec![
        calls(vec![
            call("t1", "SetTodoList", json!({"todos": [{"title": "Write hello.txt", "status": "in_progress"}]})),
            call("t2", "Shell", json!({"command": "echo hi"})),
        ]),
        calls(vec![call("t3", "ReadFile", json!({"path": "missing.txt"}))]),
        calls(vec![call("t4", "Agent", json!({"description": "write the file", "prompt": "Create /workspace/hello.txt containing exactly the line `Hello, Orchard!`."}))]),
        calls(vec![call("s1", "WriteFile", json!({"path": "hello.txt", "content": "Hello, Orchard\n"}))]),
        calls(vec![call("s2", "StrReplaceFile", json!({"path": "/workspace/hello.txt", "edit": {"old": "Orchard", "new": "Orchard!"}}))]),
        say("Done."),
        say(long_report),
        calls(vec![call("t5", "ReadFile", json!({"path": "hello.txt"}))]),
        say("hello.txt is written."),
    ])
    .await;
    let (summary, out, _) = hello_file("kimi-cli", &url, None).await;
    assert_eq!(summary["passed"], 1, "{summary:#}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 9);

    let first = messages(&seen[0]);
    assert_eq!(first.len(), 2, "the system prompt and the task");
    let system = text(&first[0]);
    let at: Vec<usize> = KIMI_SECTIONS
        .iter()
        .map(|h| system.find(&format!("\n{h}\n")).unwrap_or_else(|| panic!("{h}:\n{system}")))
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "{at:?}");
    assert!(
        system.contains("**Linux**")
            && system.contains("`/workspace`")
            && !system.contains("${")
            && !system.contains("{%")
    );
    let offered: Vec<&Value> = seen[0]["tools"].as_array().unwrap().iter().collect();
    let names: Vec<&str> = offered.iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    // Kimi-CLI's fifteen, as it offers them (`kimi_cli_faithful.rs` diffs them against the real
    // program); the adapters' own bash, read_file... are not shown.
    assert_eq!(
        names,
        [
            "Agent",
            "AskUserQuestion",
            "SetTodoList",
            "Shell",
            "TaskList",
            "TaskOutput",
            "TaskStop",
            "ReadFile",
            "Glob",
            "Grep",
            "WriteFile",
            "StrReplaceFile",
            "FetchURL",
            "ExitPlanMode",
            "EnterPlanMode"
        ]
    );
    // Tool results: the note in <system> tags, then the output — as the real one answered.
    let results = messages(&seen[1]);
    assert_eq!(text(&results[results.len() - 2]), "<system>Todo list updated</system>Todo list updated");
    assert_eq!(text(&results[results.len() - 1]), "<system>Command executed successfully.</system>hi\n");
    assert!(text(messages(&seen[2]).last().unwrap()).starts_with("<system>ERROR: `missing.txt` does not exist"));

    // The subagent: a fresh conversation, the subagent role, no Agent or SetTodoList.
    let sub = messages(&seen[3]);
    assert_eq!(sub.len(), 2);
    assert!(text(&sub[0]).contains("You are now running as a subagent"));
    // The `coder` subagent's tools, as Kimi-CLI's Agent tool lists them (those it has here).
    assert_eq!(tool_names(&seen[3]), ["Shell", "ReadFile", "Glob", "Grep", "WriteFile", "StrReplaceFile", "FetchURL"]);
    assert_eq!(
        text(messages(&seen[4]).last().unwrap()),
        "<system>File successfully overwritten. Current size: 15 bytes.</system>"
    );
    assert_eq!(
        text(messages(&seen[5]).last().unwrap()),
        "<system>File successfully edited. Applied 1 edit(s) with 1 total replacement(s).</system>"
    );
    let nudged = messages(&seen[6]);
    assert!(
        text(nudged.last().unwrap()).starts_with("Your previous response was too brief"),
        "a brief report is asked for more"
    );
    let back = messages(&seen[7]);
    assert_eq!(
        (back.last().unwrap()["tool_call_id"].as_str(), text(back.last().unwrap()).as_str()),
        (Some("t4"), long_report)
    );
    assert!(!seen[7].to_string().contains("\"s1\""), "the subagent's calls stay in its conversation");
    assert_eq!(
        text(messages(&seen[8]).last().unwrap()),
        "<system>1 lines read from file starting from line 1. Total lines in file: 1. End of file reached.</system>     1\tHello, Orchard!\n"
    );
    let t = trajectory(out.path());
    let ends = events(&t, "subagent-end");
    assert_eq!(
        (ends.len(), ends[0]["name"].as_str(), ends[0]["status"].as_str()),
        (1, Some("coder"), Some("completed"))
    );
    assert_eq!(ends[0]["answer"], long_report);
}

/// Kimi-CLI's compaction (at 85 % of the window, by the endpoint's count): the last 2
/// user/assistant messages and what follows stay, the rest goes to the model as numbered
/// messages and comes back as one user message; a failing endpoint is tried again per step.
#[tokio::test(flavor = "multi_thread")]
async fn kimi_cli_compacts_keeping_the_last_two_messages_and_retries_a_failing_step() {
    let state = Arc::new(Mutex::new((0, 0)));
    let (url, seen) = mock_model_with(move |request| {
        let mut state = state.lock().unwrap();
        let (requests, steps) = &mut *state;
        *requests += 1;
        // The first step's first try exhausts the host's own retries (7 attempts), then fails once more.
        if *requests <= 8 {
            return (500, json!({"error": {"message": "overloaded"}}));
        }
        if tool_names(request).is_empty() {
            return say("SUMMARY of the first turn.");
        }
        let turns = *steps;
        *steps += 1;
        match turns {
            0 | 1 => calls(vec![call(&format!("c{turns}"), "Shell", json!({"command": format!("echo {turns}")}))]),
            2 => completion(
                json!({"role": "assistant", "content": "", "tool_calls": [call("c2", "Shell", json!({"command": "echo 2"}))]}),
                "tool_calls",
                (3500, 10),
            ),
            _ => say("Done."),
        }
    })
    .await;
    let (_, out, _) =
        hello_file("kimi-cli", &url, Some(r#"{"context_tokens": 4000, "reserved_context_size": 100}"#)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 8 + 3 + 1 + 1, "8 failures, 3 steps, the compaction, the last step");
    let compaction = &seen[11];
    let request = messages(compaction);
    assert_eq!(text(&request[0]), "You are a helpful assistant that compacts conversation context.");
    assert!(tool_names(compaction).is_empty());
    let numbered = text(&request[1]);
    assert!(numbered.starts_with("## Message 1\nRole: user\nContent:\nCreate the file"), "{numbered}");
    assert!(
        numbered.contains("## Message 2\nRole: assistant\nContent:\n")
            && numbered.contains("## Message 3\nRole: tool\nContent:\n")
    );
    assert!(!numbered.contains("## Message 4"), "the last 2 user/assistant messages stay");
    let after = messages(&seen[12]);
    let roles: Vec<&str> = after.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "tool"]);
    assert_eq!(
        text(&after[1]),
        "<system>Previous context has been compacted. Here is the compaction output:</system>SUMMARY of the first turn."
    );
    assert_eq!(
        (after[2]["tool_calls"][0]["id"].as_str(), after[4]["tool_calls"][0]["id"].as_str()),
        (Some("c1"), Some("c2"))
    );
    let t = trajectory(out.path());
    assert_eq!(events(&t, "compaction").len(), 1);
    assert_eq!(rollout(out.path())["outcome"]["status"], "completed");
}
