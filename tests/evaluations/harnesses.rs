//! The shipped harnesses and tool adapters, driven through real sandboxes by a model played back
//! at the wire: each harness in its own action format, with malformed actions, parallel calls,
//! reasoning, a 429 and a 500 on the way; the adapters against their documented semantics; a
//! cross-harness matrix and its exports.

use std::path::Path;

use orchard_tests::evals::{
    args, check_against_schema, completion, eval, eval_async, examples, export, mock_model, read_json,
};
use orchard_tests::tokens::{render_message, render_prompt};
use serde_json::{Value, json};

fn task(name: &str) -> String {
    Path::new(&examples()).join(name).display().to_string()
}

fn assistant(text: &str) -> Value {
    json!({"role": "assistant", "content": text})
}

fn call(id: &str, name: &str, arguments: Value) -> Value {
    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
}

fn calls(text: &str, calls: Vec<Value>) -> Value {
    json!({"role": "assistant", "content": text, "tool_calls": calls})
}

/// `orchard eval` of one example task under `harness` with `tools`, graded by `script`, the
/// model at `url`.
async fn eval_with_model(
    task_name: &str,
    harness: &str,
    tools: &[&str],
    url: &str,
    config: Option<&str>,
) -> (Value, tempfile::TempDir, String) {
    let mut list = vec![task(task_name), "--harness".into(), harness.into()];
    for t in tools {
        list.extend(["--tools".to_string(), t.to_string()]);
    }
    list.extend(["--grader", "script", "--model", url].map(String::from));
    if let Some(c) = config {
        list.extend(["--config".to_string(), c.to_string()]);
    }
    eval_async(list).await
}

fn last_message(request: &Value) -> Value {
    request["messages"].as_array().unwrap().last().unwrap().clone()
}

fn only_rollout(out: &Path) -> Value {
    let dir = out.join("rollouts");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "{files:?}");
    read_json(&files.remove(0))
}

fn trajectory(out: &Path) -> Value {
    let lines = std::fs::read_to_string(out.join("trajectories.jsonl")).unwrap();
    serde_json::from_str(lines.lines().next().unwrap()).unwrap()
}

/// mini-swe-agent's markdown action (`mini_textbased.yaml`), with the format's errors.
fn mswea(thought: &str, command: &str) -> String {
    format!("THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```")
}

/// The port's message-for-message agreement with the real program is
/// `mini_swe_faithful.rs`; this is the port through retries and its bookkeeping.
#[tokio::test(flavor = "multi_thread")]
async fn mini_swe_drops_malformed_replies_and_submits_with_its_sentinel() {
    let (url, seen) = mock_model(vec![
        (429, json!({"error": "slow down"})),
        completion(assistant("THOUGHT: I will just think about it."), "stop", (300, 10)),
        completion(assistant(&format!("{}\n\n{}", mswea("two", "ls"), mswea("at once", "pwd"))), "stop", (320, 20)),
        (500, json!({"error": "oops"})),
        completion(
            assistant(&mswea(
                "write the file and show it.",
                "echo 'Hello, Orchard!' > /workspace/hello.txt && cat /workspace/hello.txt && ls /nonexistent",
            )),
            "stop",
            (350, 30),
        ),
        completion(
            assistant(&mswea("done.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo 'the file is written'")),
            "stop",
            (400, 15),
        ),
    ])
    .await;
    let (summary, out, _) =
        eval_with_model("hello-file", "mini-swe", &["shell"], &url, Some(r#"{"action_format": "text"}"#)).await;
    assert_eq!(summary["passed"], 1, "{summary:#}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 6, "a 429 and a 500 retried, then four turns");
    // The markdown format offers no function tools.
    assert!(requests[1].get("tools").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)), "{:#}", requests[1]);
    let system = requests[1]["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(system.contains("```mswea_bash_command"), "{system}");
    assert!(requests[1]["messages"][1]["content"].as_str().unwrap().contains("/workspace/hello.txt"));
    // A malformed reply is dropped: only the format error naming what was found follows.
    let messages = requests[2]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "system, task, format error: {messages:#?}");
    let error = last_message(&requests[2]);
    assert_eq!(error["role"], "user");
    let text = error["content"].as_str().unwrap();
    assert!(text.contains("<error>\nExpected exactly 1 action, found 0.\n</error>"), "{text}");
    assert!(last_message(&requests[3])["content"].as_str().unwrap().contains("found 2 actions."));
    // The observation takes mini-swe-agent's shape, stderr merged into the output.
    let observation = last_message(&requests[5]);
    let text = observation["content"].as_str().unwrap();
    assert!(text.starts_with("<returncode>2</returncode>\n<output>\nHello, Orchard!\nls: "), "{text}");
    assert!(text.ends_with("</output>"), "{text}");

    let rollout = only_rollout(out.path());
    assert_eq!(rollout["outcome"]["status"], "completed");
    assert_eq!(rollout["outcome"]["answer"], "the file is written\n");
    assert_eq!(rollout["outcome"]["steps"], 4);
    let t = &trajectory(out.path())["trajectory"];
    assert_eq!(t["model_calls"], 4);
    let events: Vec<&Value> =
        t["steps"].as_array().unwrap().iter().filter(|s| s["type"] == "event" && s["name"] == "format-error").collect();
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["data"]["error"], "Expected exactly 1 action, found 2.");
    let commands: Vec<String> = t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["type"] == "tool_call" && s["call"]["id"] != "mini-swe-uname")
        .map(|s| {
            serde_json::from_str::<Value>(s["call"]["arguments"].as_str().unwrap()).unwrap()["command"].to_string()
        })
        .collect();
    assert_eq!(commands.len(), 2, "only well-formed actions ran: {commands:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn mini_swe_ends_on_three_malformed_replies_and_at_its_limits() {
    let malformed = || completion(assistant("I am not sure what to do."), "stop", (100, 5));
    let (url, seen) = mock_model(vec![malformed(), malformed(), malformed(), malformed()]).await;
    let (summary, out, _) = eval_with_model("hello-file", "mini-swe", &["shell"], &url, None).await;
    assert_eq!(seen.lock().unwrap().len(), 3, "the run stopped at the third malformed reply");
    let rollout = only_rollout(out.path());
    assert_eq!(rollout["outcome"]["status"], "format_error", "{rollout:#}");
    assert_eq!(rollout["outcome"]["steps"], 3);
    // The sandbox is still graded: the task was not done.
    assert_eq!((summary["graded"].as_u64(), summary["passed"].as_u64()), (Some(1), Some(0)), "{summary:#}");

    // Tool calls (the default): every `bash` call of a reply runs, each answered in turn; the
    // step limit ends the run.
    let bash = |id: &str, cmd: &str| call(id, "bash", json!({"command": cmd}));
    let (url, seen) = mock_model(vec![
        completion(calls("Look first.", vec![bash("a1", "ls /workspace")]), "tool_calls", (100, 5)),
        completion(calls("Both.", vec![bash("b1", "echo b1"), bash("b2", "echo b2")]), "tool_calls", (120, 5)),
        completion(calls("Again.", vec![bash("c1", "echo again")]), "tool_calls", (140, 5)),
        completion(calls("More.", vec![bash("d1", "echo more")]), "tool_calls", (160, 5)),
    ])
    .await;
    let (_, out, _) = eval_with_model("hello-file", "mini-swe", &["shell"], &url, Some(r#"{"step_limit": 3}"#)).await;
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3, "three steps, then the limit");
    let offered: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["bash"]);
    let answer = last_message(&requests[1]);
    assert_eq!((answer["role"].as_str(), answer["tool_call_id"].as_str()), (Some("tool"), Some("a1")));
    assert!(answer["content"].as_str().unwrap().starts_with("{\n  \"returncode\": 0,"), "{answer:#}");
    let messages = requests[2]["messages"].as_array().unwrap();
    let both: Vec<&Value> = messages.iter().rev().take(2).rev().collect();
    assert_eq!(both[0]["tool_call_id"], "b1");
    assert!(both[1]["content"].as_str().unwrap().contains("b2\\n"), "{both:#?}");
    let rollout = only_rollout(out.path());
    assert_eq!(rollout["outcome"]["status"], "limit_reached", "{rollout:#}");
    assert_eq!(rollout["outcome"]["message"], "LimitsExceeded: 3 model calls, $0.0000");

    // The cost limit: $2 per million prompt tokens, 600 000 tokens a turn, $2 allowed.
    let act = || completion(calls("Look.", vec![bash("e1", "ls")]), "tool_calls", (600_000, 10));
    let (url, seen) = mock_model(vec![act(), act(), act(), act()]).await;
    let (_, out, _) = eval_with_model(
        "hello-file",
        "mini-swe",
        &["shell"],
        &url,
        Some(r#"{"cost_limit": 2.0, "prices": {"prompt": 2.0, "completion": 0.0}}"#),
    )
    .await;
    assert_eq!(seen.lock().unwrap().len(), 2, "$1.20 after one call, $2.40 after two");
    let rollout = only_rollout(out.path());
    assert_eq!(rollout["outcome"]["status"], "limit_reached", "{rollout:#}");
    assert_eq!(rollout["outcome"]["message"], "LimitsExceeded: 2 model calls, $2.4000");
}

#[tokio::test(flavor = "multi_thread")]
async fn openhands_fixes_a_bug_with_the_sdks_tools() {
    let bash = |id: &str, cmd: &str| call(id, "terminal", json!({"command": cmd}));
    let edit = |id: &str, args: Value| call(id, "file_editor", args);
    let path = "/workspace/stats.py";
    let bash_turn = |id: &str, arguments: Value| {
        completion(calls("", vec![call(id, "terminal", arguments)]), "tool_calls", (1100, 10))
    };
    let turns = vec![
        completion(
            json!({"role": "assistant", "content": "", "reasoning_content": "Start by moving into the project.",
                "tool_calls": [bash("o1", "cd /workspace && export ANSWER=42")]}),
            "tool_calls",
            (500, 10),
        ),
        (429, json!({"error": "slow down"})),
        // Parallel calls: state carried over in the session, a thought, and a view.
        completion(
            calls(
                "",
                vec![
                    bash("o2", "pwd && echo $ANSWER && python3 -c 'import stats; print(stats.mean([1, 2]))'"),
                    call("o3", "think", json!({"thought": "Floor division is the bug; [] divides by zero."})),
                    edit("o4", json!({"command": "view", "path": path})),
                ],
            ),
            "tool_calls",
            (700, 40),
        ),
        completion(
            calls(
                "",
                vec![edit("o5", json!({"command": "str_replace", "path": path, "old_str": "values", "new_str": "xs"}))],
            ),
            "tool_calls",
            (900, 20),
        ),
        (500, json!({"error": "oops"})),
        completion(
            calls(
                "",
                vec![edit(
                    "o6",
                    json!({"command": "str_replace", "path": path, "old_str": "    return sum(values) // len(values)",
                        "new_str": "    if not values:\n        return 0.0\n    return sum(values) / len(values)"}),
                )],
            ),
            "tool_calls",
            (1000, 30),
        ),
        // OpenHands' soft timeout (1 s here): a command waiting for input goes quiet and is left
        // running; other commands are refused; input is typed into it.
        bash_turn(
            "o7",
            json!({"command": "for i in 1 2; do echo step $i; sleep 0.3; done; read -r name; echo \"hi $name\""}),
        ),
        bash_turn("o8", json!({"command": "ls"})),
        bash_turn("o8b", json!({"command": "Orchard", "is_input": "true"})),
        // A silent command, then C-c.
        bash_turn("o9", json!({"command": "sleep 30"})),
        bash_turn("o10", json!({"command": "C-c", "is_input": "true"})),
        bash_turn("o11", json!({"command": ""})),
        // A command that never goes quiet meets its hard timeout, keeps running, and is stopped.
        bash_turn("o12", json!({"command": "while true; do echo tick; sleep 0.2; done", "timeout": 1})),
        bash_turn("o13", json!({"command": "C-c", "is_input": "true"})),
        // A reply without a tool call ends the run, as the SDK's conversation does.
        completion(assistant("mean() now divides exactly and handles []."), "stop", (1200, 10)),
    ];
    let (url, seen) = mock_model(turns).await;
    let (summary, out, _) =
        eval_with_model("fix-python-bug", "openhands", &["shell", "editor"], &url, Some(r#"{"soft_timeout": 1}"#))
            .await;
    assert_eq!(summary["passed"], 1, "{summary:#}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 15);
    let offered: Vec<&str> =
        requests[0]["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(offered, ["terminal", "file_editor", "task_tracker", "finish", "think"]);
    // The request after the parallel calls holds their three answers, in order.
    let messages = requests[3]["messages"].as_array().unwrap();
    let tools: Vec<&Value> = messages.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tools.len(), 4);
    let ran = tools[1]["content"].as_str().unwrap();
    assert_eq!(
        ran,
        "/workspace\n42\n1\n[The command completed with exit code 0.]\n[Current working directory: /workspace]\n\
         [Command finished with exit code 0]",
        "the session kept cd and export"
    );
    assert_eq!(tools[2]["content"], "Your thought has been logged.");
    assert!(
        tools[3]["content"].as_str().unwrap().contains("     3\t    return sum(values) // len(values)"),
        "{:#}",
        tools[3]
    );
    // The reasoning went back with its turn.
    assert_eq!(messages[2]["reasoning_content"], "Start by moving into the project.");
    // A non-unique old_str is refused, precisely.
    let refused = last_message(&requests[4]);
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("No replacement was performed. Multiple occurrences of old_str `values` in lines [3, 3]")
            || refused["content"]
                .as_str()
                .unwrap()
                .contains("No replacement was performed. Multiple occurrences of old_str `values`"),
        "{refused:#}"
    );
    let edited = last_message(&requests[6]);
    assert!(
        edited["content"].as_str().unwrap().starts_with("The file /workspace/stats.py has been edited."),
        "{edited:#}"
    );
    let answer = |i: usize| last_message(&requests[i])["content"].as_str().unwrap().to_string();
    let waiting = answer(7);
    assert!(
        waiting.starts_with("step 1\nstep 2\n[The command has no new output after 1 seconds. You may wait longer"),
        "{waiting}"
    );
    assert!(answer(8).starts_with("\n[Your command \"ls\" is NOT executed. The previous command is still running"));
    assert_eq!(
        answer(9),
        "hi Orchard\n[The command completed with exit code 0.]\n[Current working directory: /workspace]\n\
         [Command finished with exit code 0]",
        "typed into the running command"
    );
    assert!(answer(10).starts_with("\n[The command has no new output after 1 seconds."), "{}", answer(10));
    assert!(answer(11).starts_with("\n[The command completed with exit code 130. CTRL+C was sent.]"), "{}", answer(11));
    assert_eq!(answer(12), "[An error occurred during execution.]\nNo previous running command to retrieve logs from.");
    let ticking = answer(13);
    assert!(
        ticking.starts_with("tick\ntick\n") && ticking.contains("[The command timed out after 1 seconds."),
        "{ticking}"
    );
    assert!(answer(14).contains("[The command completed with exit code 130. CTRL+C was sent.]"), "{}", answer(14));

    let rollout = only_rollout(out.path());
    assert_eq!(rollout["outcome"]["answer"], "mean() now divides exactly and handles [].");
    let t = &trajectory(out.path())["trajectory"];
    let steps = t["steps"].as_array().unwrap();
    assert!(steps.iter().any(|s| s["type"] == "event" && s["name"] == "think"));
    let adapters: Vec<&str> =
        steps.iter().filter(|s| s["type"] == "tool_call").map(|s| s["adapter"].as_str().unwrap()).collect();
    assert!(adapters.contains(&"shell@0.1.0") && adapters.contains(&"editor@0.1.0"), "{adapters:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn react_compacts_older_turns_when_the_context_budget_is_reached() {
    let bash = |id: &str, cmd: &str| call(id, "bash", json!({"command": cmd}));
    let (url, seen) = mock_model(vec![
        completion(
            calls("First a note.", vec![bash("r1", "echo noted > /workspace/notes.txt")]),
            "tool_calls",
            (200, 10),
        ),
        // The endpoint counts 5000 prompt tokens: over the 1000-token budget.
        completion(
            calls("Now the file.", vec![bash("r2", "echo 'Hello, Orchard!' > /workspace/hello.txt")]),
            "tool_calls",
            (5000, 10),
        ),
        completion(assistant("Wrote notes.txt; hello.txt remains to check."), "stop", (300, 20)),
        completion(assistant("Done."), "stop", (400, 5)),
    ])
    .await;
    let (summary, out, _) = eval_with_model(
        "hello-file",
        "react",
        &["shell"],
        &url,
        Some(r#"{"context_tokens": 1000, "keep_recent_messages": 2}"#),
    )
    .await;
    assert_eq!(summary["passed"], 1, "{summary:#}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 4);
    // The third request is the summary: the folded turns, rendered for the model.
    let summary_request = requests[2]["messages"].as_array().unwrap();
    assert!(summary_request[0]["content"].as_str().unwrap().contains("compress an agent's working history"));
    assert!(summary_request[1]["content"].as_str().unwrap().contains("assistant called bash"), "{summary_request:#?}");
    // The next turn carries the system prompt, the task, the summary, and the recent exchange.
    let messages = requests[3]["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "user", "assistant", "tool"], "{messages:#?}");
    assert_eq!(
        messages[2]["content"],
        "[Context compacted: 2 earlier messages, summarised]\nWrote notes.txt; hello.txt remains to check."
    );
    assert_eq!(messages[3]["tool_calls"][0]["id"], "r2", "a tool result stays with its call");
    let t = &trajectory(out.path())["trajectory"];
    let compaction =
        t["steps"].as_array().unwrap().iter().find(|s| s["type"] == "event" && s["name"] == "compaction").unwrap();
    assert_eq!(compaction["data"]["folded"], 2);
    assert_eq!(compaction["data"]["budget"], 1000);
}

/// Runs the fixture harness's `tools` mode: the calls in order, their answers joined.
fn run_calls(tools: &[&str], calls: Value) -> Vec<String> {
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let config = json!({"mode": "tools", "calls": calls}).to_string();
    let mut list = vec![task("hello-file"), "--harness".into(), harness, "--grader".into(), "script".into()];
    for t in tools {
        list.extend(["--tools".to_string(), t.to_string()]);
    }
    list.extend(["--config".to_string(), config]);
    let (_, out, _) = eval(&list.iter().map(String::as_str).collect::<Vec<_>>());
    let rollout = only_rollout(out.path());
    assert_eq!(rollout["outcome"]["status"], "completed", "{rollout:#}");
    rollout["outcome"]["answer"].as_str().unwrap().split("\n---\n").map(str::to_string).collect()
}

#[test]
fn the_editor_and_files_adapters_keep_their_documented_semantics() {
    let editor = |args: Value| json!({"tool": "str_replace_editor", "arguments": args});
    let files = |tool: &str, args: Value| json!({"tool": tool, "arguments": args});
    let p = "/workspace/a.py";
    let answers = run_calls(
        &["editor", "files"],
        json!([
            editor(json!({"command": "create", "path": p, "file_text": "x = 1\nx = 1\ny = 2\n"})),
            editor(json!({"command": "create", "path": p, "file_text": "again"})),
            editor(json!({"command": "str_replace", "path": p, "old_str": "x = 1", "new_str": "x = 0"})),
            editor(json!({"command": "str_replace", "path": p, "old_str": "z = 9", "new_str": "z = 0"})),
            editor(json!({"command": "str_replace", "path": p, "old_str": "y = 2", "new_str": "y = 3"})),
            editor(json!({"command": "insert", "path": p, "insert_line": 0, "new_str": "# top"})),
            editor(json!({"command": "undo_edit", "path": p})),
            editor(json!({"command": "view", "path": p})),
            editor(json!({"command": "view", "path": "a.py"})),
            editor(json!({"command": "undo_edit", "path": "/workspace/never.py"})),
            files("read_lines", json!({"path": p, "start_line": 2, "end_line": 3})),
            files("read_lines", json!({"path": p, "start_line": 9, "end_line": 12})),
            files("write_file", json!({"path": "/workspace/sub/b.txt", "content": "y = 3 too\n"})),
            files("grep", json!({"pattern": "y = 3", "path": "/workspace"})),
            files("find_files", json!({"path": "/workspace", "name": "*.txt"})),
            files("list_dir", json!({"path": "/workspace/sub"})),
            files("read_lines", json!({"path": "/workspace/missing.txt"})),
        ]),
    );
    assert_eq!(answers.len(), 17, "{answers:#?}");
    assert_eq!(answers[0], format!("File created successfully at: {p}"));
    assert_eq!(
        answers[1],
        format!("ERROR File already exists at: {p}. Cannot overwrite files using command `create`.")
    );
    assert_eq!(
        answers[2],
        "ERROR No replacement was performed. Multiple occurrences of old_str `x = 1` in lines [1, 2]. Please ensure it is unique."
    );
    assert_eq!(
        answers[3],
        format!("ERROR No replacement was performed, old_str `z = 9` did not appear verbatim in {p}.")
    );
    assert!(
        answers[4].starts_with(&format!("The file {p} has been edited.")) && answers[4].contains("     3\ty = 3"),
        "{}",
        answers[4]
    );
    assert!(answers[5].contains("     1\t# top"), "{}", answers[5]);
    assert!(answers[6].starts_with(&format!("Last edit to {p} undone successfully.")), "{}", answers[6]);
    // After the undo: the replacement stays, the insertion is gone.
    assert!(answers[7].contains("     1\tx = 1\n     2\tx = 1\n     3\ty = 3"), "{}", answers[7]);
    assert!(!answers[7].contains("# top"));
    assert_eq!(answers[8], "ERROR The path a.py is not an absolute path, it should start with `/`.");
    assert!(answers[9].starts_with("ERROR "), "{}", answers[9]);
    assert_eq!(answers[10], format!("[{p}: lines 2-3 of 3]\nx = 1\ny = 3"));
    assert!(answers[11].starts_with("ERROR ") && answers[11].contains("do not exist"), "{}", answers[11]);
    assert_eq!(answers[12], "wrote 10 bytes to /workspace/sub/b.txt");
    assert!(
        answers[13].contains("/workspace/a.py:3:y = 3") && answers[13].contains("/workspace/sub/b.txt:1:y = 3 too"),
        "{}",
        answers[13]
    );
    assert!(answers[14].contains("/workspace/sub/b.txt") && !answers[14].contains("a.py"), "{}", answers[14]);
    assert!(answers[15].contains("b.txt  (10 bytes)"), "{}", answers[15]);
    assert!(answers[16].starts_with("ERROR "), "{}", answers[16]);
}

#[test]
fn the_shell_adapter_keeps_a_session_and_runs_background_processes() {
    let shell = |tool: &str, args: Value| json!({"tool": tool, "arguments": args});
    // The agent numbers sessions, commands and processes from one counter per sandbox, so in a
    // fresh sandbox the ids below are known in advance: session-1, exec-2, exec-3, proc-4, ...
    let answers = run_calls(
        &["shell"],
        json!([
            shell("bash_session", json!({"command": "cd /tmp && export LEVEL=7"})),
            shell("bash_session", json!({"command": "pwd; echo $LEVEL"})),
            shell("bash", json!({"command": "pwd; echo \"[$LEVEL]\"", "cwd": "/workspace"})),
            shell("bash", json!({"command": "sleep 5; echo late", "timeout": 0.5})),
            shell("background_start", json!({"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done"})),
            shell("bash", json!({"command": "sleep 1.5"})),
            shell("background_log", json!({"id": "proc-4"})),
            shell("background_start", json!({"command": "echo waiting; sleep 30"})),
            shell("bash", json!({"command": "sleep 0.5"})),
            shell("background_log", json!({"id": "proc-6"})),
            shell("background_signal", json!({"id": "proc-6", "signal": "TERM"})),
            shell("bash", json!({"command": "sleep 0.5"})),
            shell("background_log", json!({"id": "proc-6", "offset": 8})),
            shell("background_log", json!({"id": "proc-99"})),
            shell("bash_session", json!({"command": "exit 3"})),
            shell("bash_session", json!({"command": "pwd; echo \"[$LEVEL]\""})),
            shell("bash", json!({})),
        ]),
    );
    assert_eq!(answers.len(), 17, "{answers:#?}");
    assert_eq!(answers[1], "exit code: 0\nstdout:\n/tmp\n7\n", "the session kept cd and export");
    assert_eq!(answers[2], "exit code: 0\nstdout:\n/workspace\n[]\n", "a fresh bash sees neither");
    assert_eq!(answers[3], "ERROR [command timed out after 0.5 s and was interrupted]\nexit code: 124\n");
    assert_eq!(answers[4], "started background process proc-4");
    assert_eq!(answers[6], "[exited with code 0; next offset 21]\ntick 1\ntick 2\ntick 3\n");
    assert_eq!(answers[7], "started background process proc-6");
    assert_eq!(answers[9], "[running; next offset 8]\nwaiting\n");
    assert_eq!(answers[10], "sent TERM to proc-6");
    assert!(answers[12].starts_with("[exited") && answers[12].ends_with("; next offset 8]\n"), "{}", answers[12]);
    assert_eq!(answers[13], "ERROR no process proc-99");
    assert_eq!(
        answers[14],
        "ERROR session session-1 exited while running the command; the next command starts a new session"
    );
    assert_eq!(answers[15], "exit code: 0\nstdout:\n/workspace\n[]\n", "a new session starts clean in the workdir");
    assert_eq!(answers[16], "ERROR bash: missing string argument `command`");
}

/// Validates every line of a JSONL export against one of `tests/schemas/`.
/// Replies by the request's shape, so that rollouts of several harnesses can run at once:
/// function calling (react) writes the file with two parallel calls, with reasoning, logprobs and
/// token ids; mini-swe writes with its `bash` tool then submits; the fixture harness just says hello.
fn reply_by_format(request: &Value) -> (u16, Value) {
    let messages = request["messages"].as_array().unwrap();
    let has_tools = request["tools"].as_array().is_some_and(|t| !t.is_empty());
    if messages.len() == 1 {
        return completion(assistant("hello from the mock"), "stop", (5, 4));
    }
    // mini-swe (mini-swe-agent's `bash` tool): write, then submit.
    if request["tools"][0]["function"]["description"] == "Execute a bash command" {
        let command = if messages.iter().any(|m| m["role"] == "tool") {
            "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
        } else {
            "echo 'Hello, Orchard!' > /workspace/hello.txt"
        };
        return completion(
            calls("Next.", vec![call("m1", "bash", json!({"command": command}))]),
            "tool_calls",
            (350, 12),
        );
    }
    if has_tools {
        if messages.iter().any(|m| m["role"] == "tool") {
            return completion(assistant("hello.txt is written."), "stop", (420, 6));
        }
        let turn = calls(
            "Writing, then checking.",
            vec![
                call("w1", "bash", json!({"command": "echo 'Hello, Orchard!' > /workspace/hello.txt"})),
                call("w2", "bash", json!({"command": "ls /workspace"})),
            ],
        );
        let mut turn = turn;
        turn["reasoning_content"] = "The task wants one file with one line.".into();
        let (status, mut body) = completion(turn, "tool_calls", (300, 3));
        body["choices"][0]["logprobs"] = json!({"content": [{"token": "a", "logprob": -0.25}, {"token": "b", "logprob": -0.5}, {"token": "c", "logprob": 0.0}]});
        body["choices"][0]["token_ids"] = json!([101, 102, 103]);
        return (status, body);
    }
    unreachable!("every harness of the matrix is answered above: {request:#}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_task_by_harness_matrix_exports_to_every_training_format() {
    let (url, seen) = orchard_tests::evals::mock_model_with(reply_by_format).await;
    let user_harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let (summary, out, stdout) = eval_async(args(&[
        &task("hello-file"),
        "--harness",
        "react",
        "--harness",
        "mini-swe",
        "--harness",
        &user_harness,
        "--tools",
        "shell",
        "--grader",
        "script",
        "--model",
        &url,
        "--model-name",
        "mock-1",
        "--logprobs",
        "--attempts",
        "2",
        "--harness-config",
        r#"test-harness={"mode": "model"}"#,
    ]))
    .await;
    // The matrix: the user's own component is a column like the shipped ones.
    let columns: Vec<(&str, u64, f64)> = summary["harnesses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["harness"].as_str().unwrap(), h["passed"].as_u64().unwrap(), h["pass_at_k"].as_f64().unwrap()))
        .collect();
    assert_eq!(columns.len(), 3, "{summary:#}");
    assert!(columns[0].0.starts_with("react@") && columns[1].0.starts_with("mini-swe@"), "{columns:?}");
    assert_eq!(columns.iter().map(|c| (c.1, c.2)).collect::<Vec<_>>(), [(2, 1.0), (2, 1.0), (0, 0.0)]);
    assert!(stdout.contains("(cells: mean reward / pass@2)"), "{stdout}");
    let row = stdout.lines().find(|l| l.starts_with("hello-file")).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(row.matches("1.000 / 1.000").count(), 2, "{row}");
    assert!(row.trim_end().ends_with("0.000 / 0.000"), "{row}");
    assert!(seen.lock().unwrap().iter().all(|r| r["logprobs"] == true && r["model"] == "mock-1"));

    let run = out.path();
    let all = export(run, &["--format", "openai"]);
    assert_eq!(all.len(), 6);
    check_against_schema(&all, "openai-chat.schema.json");
    assert_eq!(export(run, &["--format", "openai", "--only-passed"]).len(), 4);
    assert_eq!(export(run, &["--format", "openai", "--min-reward", "0.5"]).len(), 4);
    assert_eq!(export(run, &["--format", "openai", "--min-reward", "1.5"]).len(), 0);

    // OpenAI round trip: a react record is the last request the endpoint saw plus its reply.
    // (react is offered the shell adapter's seven tools; mini-swe its one `bash`.)
    let react = all.iter().find(|r| r["tools"].as_array().is_some_and(|t| t.len() == 7)).unwrap();
    let messages = react["messages"].as_array().unwrap();
    let last_request = seen
        .lock()
        .unwrap()
        .iter()
        .rfind(|r| {
            r["tools"].as_array().is_some_and(|t| t.len() == 7)
                && r["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool")
        })
        .unwrap()
        .clone();
    let sent = last_request["messages"].as_array().unwrap();
    assert_eq!(messages.len(), sent.len() + 1);
    for (exported, wire) in messages.iter().zip(sent) {
        assert_eq!(exported["role"], wire["role"]);
        assert_eq!(exported["content"].as_str().unwrap_or(""), wire["content"].as_str().unwrap_or(""));
        assert_eq!(exported["tool_calls"], wire["tool_calls"]);
        assert_eq!(exported["tool_call_id"], wire["tool_call_id"]);
        assert_eq!(exported.get("reasoning_content"), wire.get("reasoning_content"));
    }
    assert_eq!(messages.last().unwrap()["content"], "hello.txt is written.");
    assert_eq!(react["tools"].as_array().unwrap().len(), 7, "the shell adapter's tools");

    let atif = export(run, &["--format", "atif"]);
    check_against_schema(&atif, "atif-v1.7.schema.json");
    let react = atif.iter().find(|a| a["agent"]["name"] == "react").unwrap();
    assert_eq!(react["agent"]["model_name"], "mock-1");
    let agent_step = react["steps"].as_array().unwrap().iter().find(|s| s["tool_calls"].is_array()).unwrap();
    assert_eq!(agent_step["reasoning_content"], "The task wants one file with one line.");
    assert_eq!(agent_step["tool_calls"][0]["arguments"]["command"], "echo 'Hello, Orchard!' > /workspace/hello.txt");
    let sources: Vec<&str> = agent_step["observation"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["source_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["w1", "w2"]);
    assert!(agent_step["observation"]["results"][1]["content"].as_str().unwrap().contains("hello.txt"));
    assert_eq!(agent_step["metrics"]["logprobs"], json!([-0.25, -0.5, 0.0]));
    assert_eq!(agent_step["metrics"]["completion_token_ids"], json!([101, 102, 103]));
    assert_eq!(agent_step["metrics"]["prompt_tokens"], 300);
    assert_eq!(react["final_metrics"]["total_prompt_tokens"], 720);
    assert_eq!(react["extra"]["passed"], true);
    let user = atif.iter().find(|a| a["agent"]["name"] == "test-harness").unwrap();
    assert_eq!(user["extra"]["passed"], false);

    let sharegpt = export(run, &["--format", "sharegpt", "--only-passed"]);
    assert_eq!(sharegpt.len(), 4);
    check_against_schema(&sharegpt, "sharegpt.schema.json");
    for record in &sharegpt {
        let froms: Vec<&str> =
            record["conversations"].as_array().unwrap().iter().map(|t| t["from"].as_str().unwrap()).collect();
        for (i, from) in froms.iter().enumerate() {
            let user_side = matches!(*from, "human" | "observation");
            assert_eq!(user_side, i % 2 == 0, "turns alternate, user first: {froms:?}");
        }
        assert_eq!(froms.len() % 2, 0, "the model has the last word: {froms:?}");
    }
    // mini-swe's observations are mini-swe-agent's JSON (`returncode`), react's the adapter's.
    let observed = |r: &Value| r["conversations"][2]["value"].as_str().unwrap_or_default().contains("returncode");
    let react = sharegpt.iter().find(|r| r["conversations"][1]["from"] == "function_call" && !observed(r)).unwrap();
    let results: Vec<String> = serde_json::from_str(react["conversations"][2]["value"].as_str().unwrap()).unwrap();
    assert_eq!(results.len(), 2, "parallel results, one observation");
    let mini = sharegpt.iter().find(|r| observed(r)).unwrap();
    assert_eq!(mini["conversations"][1]["from"], "function_call", "mini-swe-agent's bash tool");

    let (code, _, stderr) = orchard_tests::orchard(&["export", run.to_str().unwrap(), "--format", "alpaca"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("unknown format \"alpaca\" (openai, atif, sharegpt)"), "{stderr}");
    let (code, _, stderr) = orchard_tests::orchard(&["export", "/nonexistent-run", "--format", "atif"]);
    assert_ne!(code, 0);
    assert!(stderr.contains("is this an `orchard eval --out` directory?"), "{stderr}");
}

/// Two tool turns (one with two parallel calls), then the answer; every reply carries the prompt's
/// and the completion's ids, as vLLM does with `return_token_ids`, and a logprob per token.
fn reply_with_tokens(request: &Value) -> (u16, Value) {
    assert_eq!(request["return_token_ids"], true, "{request}");
    assert_eq!(request["top_logprobs"], 1, "{request}");
    let tool_turns = request["messages"].as_array().unwrap().iter().filter(|m| m["role"] == "assistant").count();
    let message = match tool_turns {
        0 => calls("", vec![call("a1", "bash", json!({"command": "echo hi > /workspace/a.txt"}))]),
        1 => calls(
            "two at once",
            vec![
                call("b1", "bash", json!({"command": "cat /workspace/a.txt"})),
                call("b2", "bash", json!({"command": "ls /workspace"})),
            ],
        ),
        _ => assistant("a.txt holds hi."),
    };
    orchard_tests::tokens::reply(request, message)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rollouts_segments_are_exactly_the_ids_the_endpoint_saw_and_sampled() {
    let (url, seen) = orchard_tests::evals::mock_model_with(reply_with_tokens).await;
    let (_, out, _) = eval_async(args(&[
        &task("hello-file"),
        "--harness",
        "react",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--model",
        &url,
        "--model-name",
        "mock-1",
        "--logprobs",
    ]))
    .await;
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let t: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let segments = t["segments"].as_array().unwrap_or_else(|| panic!("no segments: {t:#}"));
    assert_eq!(segments.len(), 1, "{segments:#?}");
    let s = &segments[0];
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    // Prompt + response is exactly the last prompt the endpoint saw, then what it sampled last.
    let ids = |v: &Value| -> Vec<u64> { v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap()).collect() };
    let mut whole = ids(&s["prompt_ids"]);
    whole.extend(ids(&s["response_ids"]));
    let last = requests.last().unwrap();
    let mut expected: Vec<u64> = render_prompt(last).into_iter().map(u64::from).collect();
    expected.extend(render_message(&json!({"content": "a.txt holds hi."})).into_iter().map(u64::from));
    assert_eq!(whole, expected);
    assert_eq!(ids(&s["prompt_ids"]), render_prompt(&requests[0]).into_iter().map(u64::from).collect::<Vec<_>>());
    // Sampled tokens only under the mask, each with its logprob; observations at 0.
    let mask = ids(&s["loss_mask"]);
    let response = ids(&s["response_ids"]);
    assert_eq!(mask.len(), response.len());
    let turns = s["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    let mut masked = 0;
    for turn in turns {
        let (a, b) = (turn["start"].as_u64().unwrap() as usize, turn["end"].as_u64().unwrap() as usize);
        assert!(mask[a..b].iter().all(|m| *m == 1));
        let logprobs = s["logprobs"].as_array().unwrap();
        for i in a..b {
            assert!((logprobs[i].as_f64().unwrap() + response[i] as f64 / 1000.0).abs() < 1e-6);
        }
        masked += b - a;
    }
    assert_eq!(mask.iter().filter(|m| **m == 1).count(), masked, "only sampled tokens are trained on");
}

/// A compaction rewrites the history: the call after it extends no earlier prompt, so it starts
/// a new segment that says so; each segment is still exactly what the endpoint saw and sampled.
#[tokio::test(flavor = "multi_thread")]
async fn a_compaction_starts_a_new_segment_and_every_segment_is_what_the_endpoint_saw() {
    let calls_made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = calls_made.clone();
    let (url, seen) = orchard_tests::evals::mock_model_with(move |request| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let message = match n {
            0 => calls("", vec![call("k1", "bash", json!({"command": "echo 1 > /workspace/a"}))]),
            1 => calls("", vec![call("k2", "bash", json!({"command": "echo 2 >> /workspace/a"}))]),
            _ => assistant("done"),
        };
        let (status, mut body) = orchard_tests::tokens::reply(request, message);
        // The second call reports a prompt over the context budget: the harness compacts next.
        if n == 1 {
            body["usage"]["prompt_tokens"] = json!(5000);
        }
        (status, body)
    })
    .await;
    let (_, out, _) = eval_async(args(&[
        &task("hello-file"),
        "--harness",
        "react",
        "--tools",
        "shell",
        "--grader",
        "script",
        "--model",
        &url,
        "--logprobs",
        "--config",
        r#"{"context_tokens": 1000, "keep_recent_messages": 2, "compaction": "truncate"}"#,
    ]))
    .await;
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let t: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    let segments = t["segments"].as_array().unwrap_or_else(|| panic!("no segments: {t:#}"));
    assert_eq!(segments.len(), 2, "{segments:#?}");
    assert_eq!(segments[0]["start"]["kind"], "first");
    assert_eq!(segments[1]["start"]["kind"], "history_rewritten", "{:#}", segments[1]["start"]);
    assert_eq!(segments[0]["calls"], json!([0, 1]));
    assert_eq!(segments[1]["calls"], json!([2]));
    let ids = |v: &Value| -> Vec<u32> { v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect() };
    let whole = |s: &Value| [ids(&s["prompt_ids"]), ids(&s["response_ids"])].concat();
    let sampled = |m: Value| render_message(&m);
    let first = [
        render_prompt(&requests[1]),
        sampled(calls("", vec![call("k2", "bash", json!({"command": "echo 2 >> /workspace/a"}))])),
    ]
    .concat();
    assert_eq!(whole(&segments[0]), first, "the first segment ends with the second call's sample");
    let second = [render_prompt(&requests[2]), sampled(assistant("done"))].concat();
    assert_eq!(whole(&segments[1]), second, "the new segment is the compacted prompt and its sample");
    assert!(requests[2]["messages"].as_array().unwrap().len() < requests[1]["messages"].as_array().unwrap().len() + 2);
}

/// A harness refuses a configuration key it does not know (a typo never runs on the defaults);
/// in a matrix, keys only one harness reads go in its own `--harness-config`.
#[tokio::test(flavor = "multi_thread")]
async fn harnesses_refuse_unknown_config_keys_and_take_their_own() {
    let (url, seen) = mock_model(vec![]).await;
    let list = |config: &[&str]| {
        let mut list = vec![task("hello-file")];
        list.extend(args(&["--harness", "mini-swe", "--harness", "react", "--tools", "shell", "--grader", "script"]));
        list.extend(args(&["--model", &url]));
        list.extend(args(config));
        list
    };
    let (_, out, _) = eval_async(list(&["--config", r#"{"step_limt": 1}"#])).await;
    assert!(seen.lock().unwrap().is_empty(), "no model call on a refused configuration");
    for name in ["hello-file__mini-swe__1.json", "hello-file__react__1.json"] {
        let rollout = read_json(&out.path().join("rollouts").join(name));
        let text = rollout.to_string();
        assert!(text.contains("config: unknown key `step_limt` (known: "), "{rollout:#}");
    }

    // Each harness's own keys over the shared ones: one model call each, then its limit.
    let act = || completion(calls("Look.", vec![call("a1", "bash", json!({"command": "ls"}))]), "tool_calls", (10, 5));
    let (url2, seen) = mock_model(vec![act(), act(), act(), act()]).await;
    let mut both = list(&[
        "--config",
        r#"{"temperature": 0.5}"#,
        "--harness-config",
        r#"mini-swe={"step_limit": 1}"#,
        "--harness-config",
        r#"react={"max_steps": 1}"#,
    ]);
    both.iter_mut().filter(|a| **a == url).for_each(|a| *a = url2.clone());
    let both = both.into_iter().chain(args(&["--concurrency", "1"])).collect();
    let (_, out, _) = eval_async(both).await;
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 2, "one call under each harness's own limit");
    assert!(requests.iter().all(|r| r["temperature"] == 0.5), "{requests:#?}");
    for name in ["hello-file__mini-swe__1.json", "hello-file__react__1.json"] {
        let rollout = read_json(&out.path().join("rollouts").join(name));
        assert_eq!(rollout["outcome"]["status"], "limit_reached", "{rollout:#}");
    }

    // A harness the run does not have is refused before anything runs.
    let out = tempfile::tempdir().unwrap();
    let mut bad = list(&["--harness-config", r#"openhands={"max_iterations": 1}"#]);
    bad.extend(["--out".into(), out.path().display().to_string()]);
    let bad: Vec<&str> = std::iter::once("eval").chain(bad.iter().map(String::as_str)).collect();
    let (code, _, stderr) = orchard_tests::orchard(&bad);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("harness_config.openhands: not a harness of this job (its harnesses: mini-swe, react)"),
        "{stderr}"
    );
}
