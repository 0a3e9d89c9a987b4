//! Desktop tasks end to end: `[environment.desktop]` starts a real Xvfb, window manager and the
//! desktop service inside each task's sandbox; the shipped `desktop` driver (contract 0.3.0)
//! acts through XTEST in OSWorld's computer_13 and pyautogui action spaces; the `rubric`
//! grader reads the desktop's state (files, windows, clipboard) after the agent.

use std::path::{Path, PathBuf};

use orchard_tests::evals::{eval, rollouts};
use serde_json::Value;

/// One desktop eval at a time: under three at once (24 desktops on 2 cores) Mousepad sometimes
/// never maps its window (seen 1 in 8 tasks; not understood yet), which is the machine's limit
/// here, not what these tests are about.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(crate) fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/desktop")
}

const ORACLE: [&str; 8] = ["--harness", "oracle", "--tools", "desktop", "--grader", "rubric", "--grant", "solution"];

/// Each trajectory, by task.
fn trajectories(out: &Path) -> Vec<(String, Value)> {
    let text = std::fs::read_to_string(out.join("trajectories.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|t| (t["task_id"].as_str().unwrap_or_default().to_string(), t))
        .collect()
}

/// The content parts of the tool results in a trajectory's conversation.
fn tool_results(t: &Value) -> Vec<Value> {
    t["trajectory"]["conversation"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn the_desktop_examples_pass_with_their_actions_and_fail_without() {
    let _one = serial();
    let tasks = examples().display().to_string();
    let mut with = vec![tasks.as_str()];
    with.extend(ORACLE);
    let (summary, out, _) = eval(&with);
    let rolled = rollouts(out.path());
    assert_eq!(rolled.len(), 8, "{summary:#}");
    for r in &rolled {
        assert_eq!(r["reward"], 1.0, "{}: {:#}", r["task_id"], r["verdict"]);
    }
    for (task, t) in trajectories(out.path()) {
        let parts = tool_results(&t);
        let texts: Vec<&str> = parts.iter().filter_map(|p| p["text"].as_str()).collect();
        let images = parts.iter().filter(|p| p["type"] == "image").count();
        match task.as_str() {
            // Text only: the code below the editor's fold is read from the accessibility tree.
            "read-hidden-code" => {
                assert!(texts.iter().any(|t| t.contains("release code: K7P-2291")), "{texts:?}");
                assert_eq!(images, 0, "a11y_tree observations carry no screenshot");
            }
            // The terminal has no accessibility tree: only the screenshot shows its colour.
            "terminal-colour" => {
                assert!(images >= 1);
                assert!(!texts.iter().any(|t| t.contains("Accessibility tree")));
            }
            _ => assert!(images >= 1, "{task}: every action answers with a screenshot"),
        }
        // Every action crossed the host: recorded as the driver's desktop calls.
        let steps = t["trajectory"]["steps"].as_array().unwrap();
        assert!(steps.iter().any(|s| s["type"] == "sandbox" && s["op"].as_str().unwrap().starts_with("desktop-")));
    }
    // An agent that only looks: every task's desktop check fails.
    let root = tempfile::tempdir().unwrap();
    let looking = r#"[{"tool": "observe", "arguments": {}}]"#;
    for r in &rolled {
        task_with_calls(root.path(), r["task_id"].as_str().unwrap(), looking);
    }
    let idle = root.path().display().to_string();
    let mut without = vec![idle.as_str()];
    without.extend(ORACLE);
    let (summary, out, _) = eval(&without);
    assert_eq!(summary["passed"], 0, "{summary:#}");
    for r in rollouts(out.path()) {
        assert_eq!((r["status"].as_str(), r["passed"].as_bool()), (Some("graded"), Some(false)), "{r:#}");
    }
}

/// A copy of example `name` under `root` with its own `solution/calls.json`.
fn task_with_calls(root: &Path, name: &str, calls: &str) -> String {
    let dest = root.join(name);
    let copied = std::process::Command::new("cp").arg("-r").arg(examples().join(name)).arg(&dest).status().unwrap();
    assert!(copied.success());
    std::fs::write(dest.join("solution/calls.json"), calls).unwrap();
    root.display().to_string()
}

/// Example `name` run by the oracle replaying `calls`, the driver configured with `config`.
fn replay(name: &str, calls: &str, config: &str) -> (Value, tempfile::TempDir) {
    let root = tempfile::tempdir().unwrap();
    let tasks = task_with_calls(root.path(), name, calls);
    let config = format!("desktop={config}");
    let mut args = vec![tasks.as_str()];
    args.extend(ORACLE);
    args.extend(["--tool-config", &config]);
    let (summary, out, _) = eval(&args);
    (summary, out)
}

#[test]
fn pyautogui_code_and_grid_points_drive_the_same_desktop() {
    let _one = serial();
    // OSWorld's pyautogui action space: the code runs inside the sandbox on its display.
    let calls = r#"[{"tool": "pyautogui", "arguments": {"code": "pyautogui.hotkey('ctrl', 'end'); pyautogui.write('- oat milk\\n'); pyautogui.hotkey('ctrl', 's')"}}]"#;
    let (summary, out) = replay("edit-note", calls, r#"{"action_space": "pyautogui"}"#);
    assert_eq!(summary["passed"], 1, "{summary:#} {:#}", rollouts(out.path())[0]);

    // Qwen-VL's 0-1000 grid: Accept's centre (403, 424) of 1024x768 is (394, 553) on the grid.
    let calls = r#"[{"tool": "computer", "arguments": {"action_type": "CLICK", "parameters": {"x": 394, "y": 553}}}]"#;
    let (summary, out) = replay("accept-licence", calls, r#"{"coordinates": "grid"}"#);
    assert_eq!(summary["passed"], 1, "{summary:#} {:#}", rollouts(out.path())[0]);

    // pyautogui code on the same grid: its click lands on Accept too.
    let calls = r#"[{"tool": "pyautogui", "arguments": {"code": "pyautogui.click(394, 553)"}}]"#;
    let (summary, out) = replay("accept-licence", calls, r#"{"action_space": "pyautogui", "coordinates": "grid"}"#);
    assert_eq!(summary["passed"], 1, "{summary:#} {:#}", rollouts(out.path())[0]);
    let calls = r#"[{"tool": "pyautogui", "arguments": {"code": "pyautogui.click(x=1394, y=553)"}}]"#;
    let (summary, out) = replay("accept-licence", calls, r#"{"action_space": "pyautogui", "coordinates": "grid"}"#);
    assert_eq!(summary["passed"], 0);
    let (_, t) = trajectories(out.path()).remove(0);
    let said: String = tool_results(&t).iter().filter_map(|p| p["text"].as_str()).collect();
    assert!(said.contains("(1394, 553) is off the 0-1000 grid"), "{said}");

    // A point off the grid is the model's error to see, not a click somewhere.
    let calls = r#"[{"tool": "computer", "arguments": {"action_type": "CLICK", "parameters": {"x": 1394, "y": 521}}}]"#;
    let (summary, out) = replay("accept-licence", calls, r#"{"coordinates": "grid"}"#);
    assert_eq!(summary["passed"], 0);
    let (_, t) = trajectories(out.path()).remove(0);
    let said = tool_results(&t)[0]["text"].as_str().unwrap().to_string();
    assert!(said.contains("off the 0-1000 grid"), "{said}");
}

#[test]
fn bad_desktop_settings_are_refused_by_name() {
    let _one = serial();
    // An unknown driver key fails the rollout naming it.
    let tasks = examples().join("edit-note").display().to_string();
    let mut args = vec![tasks.as_str()];
    args.extend(ORACLE);
    args.extend(["--tool-config", r#"desktop={"mode": "vision"}"#]);
    let (_, out, _) = eval(&args);
    let r = &rollouts(out.path())[0];
    assert_eq!(r["reward"].as_f64().unwrap_or(0.0), 0.0);
    assert!(r.to_string().contains("desktop driver config: unknown key `mode`"), "{r:#}");

    // A task with no desktop: the driver's calls are unavailable, naming the task field.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("no-desktop");
    std::fs::create_dir_all(dir.join("solution")).unwrap();
    std::fs::write(dir.join("instruction.md"), "look").unwrap();
    std::fs::write(
        dir.join("task.toml"),
        "[[metadata.rubric.checks]]\nname = \"x\"\nkind = \"file_exists\"\npath = \"/nothing\"\n",
    )
    .unwrap();
    std::fs::write(dir.join("solution/calls.json"), r#"[{"tool": "observe", "arguments": {}}]"#).unwrap();
    let tasks = root.path().display().to_string();
    let mut args = vec![tasks.as_str()];
    args.extend(ORACLE);
    let (_, out, _) = eval(&args);
    let r = &rollouts(out.path())[0];
    assert!(r.to_string().contains("[environment.desktop]"), "{r:#}");

    // A desktop Xvfb cannot make is refused when the task is read.
    let results = tempfile::tempdir().unwrap();
    let scratch = results.path().join("out").display().to_string();
    std::fs::write(
        dir.join("task.toml"),
        "[environment.desktop]\ndepth = 8\n[[metadata.rubric.checks]]\nname = \"x\"\nkind = \"file_exists\"\npath = \"/n\"\n",
    )
    .unwrap();
    let (code, stdout, stderr) = orchard_tests::orchard(&[
        "eval",
        &tasks,
        "--harness",
        "oracle",
        "--tools",
        "desktop",
        "--grader",
        "rubric",
        "--out",
        &scratch,
    ]);
    assert!(code != 0 || stdout.contains("depth"), "{stdout}\n{stderr}");
    assert!(format!("{stdout}{stderr}").contains("[environment.desktop] depth = 8"), "{stdout}\n{stderr}");
}

/// An agent that stops the desktop and serves the answer the grader wants from a server of its
/// own, on the desktop's port and on its grader socket: the agent refuses to let the grader ask
/// it (the kernel says which process listens), and the check fails naming why.
#[test]
fn a_forged_desktop_does_not_fool_the_grader() {
    let _one = serial();
    let root = tempfile::tempdir().unwrap();
    let dest = root.path().join("copy-second-line");
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(examples().join("copy-second-line"))
        .arg(&dest)
        .status()
        .unwrap();
    assert!(copied.success());
    std::fs::remove_file(dest.join("solution/calls.json")).unwrap();
    let forger = r#"#!/bin/bash
cat > /tmp/forger.py <<'PY'
import socket, threading
def serve(sock):
    while True:
        c, _ = sock.accept()
        c.recv(65536)
        body = b"Readability counts."
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        c.close()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
u = socket.socket(socket.AF_UNIX)
for _ in range(100):
    try:
        t.bind(("127.0.0.1", 5000)); u.bind("\0orchard-grader-5000"); break
    except OSError:
        import time; time.sleep(0.1)
t.listen(); u.listen()
threading.Thread(target=serve, args=(u,), daemon=True).start()
serve(t)
PY
pkill -KILL -f 'agent desktop' || true
setsid python3 /tmp/forger.py > /tmp/forger.log 2>&1 < /dev/null &
sleep 2
curl -s http://127.0.0.1:5000/orchard/clipboard
"#;
    std::fs::write(dest.join("solution/solve.sh"), forger).unwrap();
    let tasks = root.path().display().to_string();
    let args = [tasks.as_str(), "--harness", "oracle", "--tools", "shell", "--grader", "rubric", "--grant", "solution"];
    let (summary, out, _) = eval(&args);
    assert_eq!(summary["passed"], 0, "{summary:#}");
    let r = &rollouts(out.path())[0];
    let why = r["verdict"]["explanation"].as_str().unwrap_or_default();
    assert!(why.contains("not the one Orchard started"), "{r:#}");
    // The forger did answer on the port: the agent's command saw its text.
    let (_, t) = trajectories(out.path()).remove(0);
    assert!(t.to_string().contains("Readability counts."), "the forger never served");
}

#[test]
fn a_crashed_x_server_fails_only_its_rollout_and_says_so() {
    let _one = serial();
    let root = tempfile::tempdir().unwrap();
    // One task's X server is killed under it; the other task runs beside it as usual.
    let crash = r#"[{"tool": "bash", "arguments": {"command": "pkill -KILL Xvfb; sleep 1"}},
                    {"tool": "computer", "arguments": {"action_type": "HOTKEY", "parameters": {"keys": ["ctrl", "end"]}}}]"#;
    task_with_calls(root.path(), "edit-note", crash);
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(examples().join("type-greeting"))
        .arg(root.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let tasks = root.path().display().to_string();
    let mut args = vec![tasks.as_str()];
    args.extend(ORACLE);
    args.extend(["--tools", "shell"]);
    let (summary, out, _) = eval(&args);
    let rolled = rollouts(out.path());
    assert_eq!(rolled.len(), 2, "{summary:#}");
    for r in &rolled {
        match r["task_id"].as_str().unwrap() {
            "edit-note" => {
                assert_eq!(r["status"], "error", "{r:#}");
                let error = r["error"].as_str().unwrap_or_default();
                assert!(error.contains("the X server (Xvfb :99) exited"), "{error}");
            }
            _ => assert_eq!(r["reward"], 1.0, "{r:#}"),
        }
    }
}

#[test]
fn a_crashed_app_is_named_in_the_trajectory() {
    let _one = serial();
    let calls = r#"[{"tool": "computer", "arguments": {"action_type": "TYPING", "parameters": {"text": "x"}}},
                    {"tool": "computer", "arguments": {"action_type": "WAIT", "parameters": {"seconds": 6}}}]"#;
    // The app dies under the agent (a signal from outside it): the rollout is graded on what is
    // left, and its trajectory says the app crashed, with its command.
    let root = tempfile::tempdir().unwrap();
    let tasks = task_with_calls(root.path(), "edit-note", calls);
    // The app is killed a moment after the agent starts.
    std::fs::write(
        root.path().join("edit-note/environment/Dockerfile"),
        "FROM orchard-desktop:bookworm\nWORKDIR /root\nCOPY notes.txt /root/notes.txt\n\
         CMD [\"sh\", \"-c\", \"(sleep 3; pkill -KILL -x mousepad) & exec mousepad /root/notes.txt\"]\n",
    )
    .unwrap();
    let mut args = vec![tasks.as_str()];
    args.extend(ORACLE);
    let (summary, out, _) = eval(&args);
    let r = &rollouts(out.path())[0];
    assert_eq!(r["status"], "graded", "{r:#}\n{summary:#}");
    let (_, t) = trajectories(out.path()).remove(0);
    let steps = t["trajectory"]["steps"].as_array().unwrap();
    let crash = steps.iter().find(|s| s["type"] == "event" && s["name"] == "app-crashed");
    let said = crash.map(|s| s["data"]["message"].to_string()).unwrap_or_default();
    assert!(said.contains("the task's app (sh -c"), "{steps:#?}");
    assert!(said.contains("exited"), "{said}");
}
