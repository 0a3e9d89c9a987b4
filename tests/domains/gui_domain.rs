//! The GUI domain end to end: the example shop served inside each task's sandbox (its
//! Dockerfile's CMD, held until its HEALTHCHECK passes), tasks graded by the shop's own state
//! (the `rubric` grader's HTTP check) and by a WebVoyager-style judge (its model played back at
//! the wire), browsed by the shipped driver in a real Chromium.

use std::path::{Path, PathBuf};

use orchard_tests::evals::{completion, eval, mock_model_with, rollouts};
use serde_json::{Value, json};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gui")
}

#[test]
fn the_shop_tasks_pass_with_their_solutions_and_fail_without() {
    let gui = examples().display().to_string();
    let args = ["--harness", "oracle", "--tools", "shell", "--grader", "rubric"];
    let mut with = vec![gui.as_str()];
    with.extend(args);
    with.extend(["--grant", "solution"]);
    let (summary, out, _) = eval(&with);
    assert_eq!(summary["passed"], 3, "{summary:#}");
    for r in rollouts(out.path()) {
        assert_eq!(r["reward"], 1.0, "{r:#}");
    }
    // With the browser in marks mode, the oracle replays each task's recorded clicks instead
    // (solution/calls.json): the shop's state is reached through the page.
    let mut browsing = vec![gui.as_str(), "--harness", "oracle", "--tools", "browser", "--grader", "rubric"];
    browsing.extend(["--grant", "solution", "--tool-config", r#"browser={"mode": "marks"}"#]);
    let (summary, out, _) = eval(&browsing);
    assert_eq!(summary["passed"], 3, "{summary:#}");
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    for line in lines.lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let clicks = t["trajectory"]["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["type"] == "tool_call" && s["call"]["name"] == "click")
            .count();
        assert!(clicks >= 2, "the oracle browsed: {clicks} clicks");
    }
    // Without the solution the shop is untouched, and every check fails.
    let mut without = vec![gui.as_str()];
    without.extend(args);
    let (summary, out, _) = eval(&without);
    assert_eq!(summary["passed"], 0, "{summary:#}");
    for r in rollouts(out.path()) {
        assert_eq!((r["status"].as_str(), r["reward"].as_f64()), (Some("graded"), Some(0.0)), "{r:#}");
    }
}

/// One shop task, browsed by the fixture harness's scripted calls through the shipped driver in
/// marks mode: the cheapest running shoe rated 4 or more is found by the shop's own filters and
/// added to the cart.
fn shop_task(root: &Path) {
    let task = root.join("cheapest-shoe");
    std::fs::create_dir_all(&task).unwrap();
    // A task folder holds its files (a link out of it is refused, as for every task folder).
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(examples().join("shop/environment"))
        .arg(task.join("environment"))
        .status()
        .unwrap();
    assert!(copied.success());
    let source = std::fs::read_to_string(examples().join("cheapest-rated-running-shoe/task.toml")).unwrap();
    std::fs::copy(examples().join("cheapest-rated-running-shoe/instruction.md"), task.join("instruction.md")).unwrap();
    // On the results page: the header's 4 marks, the filters' 6, then the products by price.
    let calls = json!([
        {"tool": "goto", "arguments": {"url": "http://127.0.0.1:8080/search?category=running-shoes&min_rating=4&sort=price_asc"}},
        {"tool": "click", "arguments": {"id": 10}},
        {"tool": "click", "arguments": {"id": 5}},
        {"tool": "answer", "arguments": {"text": "City Sprint, $48.50"}},
    ]);
    let calls: toml::Value = serde_json::from_value(calls).unwrap();
    // The example's own rubric; the fixture harness's calls; the driver in marks mode.
    let rubric = &source[source.find("[[metadata.rubric.checks]]").unwrap()..];
    let toml = format!(
        "[agent]\ntimeout_sec = 300\n[metadata]\nmode = \"tools\"\ncalls = {calls}\n\
         [metadata.tool_config.browser]\nmode = \"marks\"\n{rubric}"
    );
    std::fs::write(task.join("task.toml"), toml).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_browsing_rollout_on_the_shop_is_graded_by_the_shop_and_by_a_judge() {
    let dir = tempfile::tempdir().unwrap();
    shop_task(dir.path());
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let root = dir.path().display().to_string();
    let base = vec![root.clone(), "--harness".into(), harness.clone(), "--tools".into(), "browser".into()];

    // The shop's state: the shoe is in the cart.
    let mut args = base.clone();
    args.extend(["--grader".into(), "rubric".into()]);
    let (summary, out, _) =
        tokio::task::spawn_blocking(move || eval(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap();
    let r = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{r:#}");
    let answer = r["outcome"]["answer"].as_str().unwrap();
    assert!(answer.contains("[10]: <a> \"City Sprint\""), "{answer}");
    assert!(answer.contains("URL: http://127.0.0.1:8080/cart"), "{answer}");

    // A WebVoyager judge: it must be shown the task, the answer and the screenshots.
    let (judge, seen) = mock_model_with(|request: &Value| {
        let text = request.to_string();
        let sees = text.contains("data:image/png;base64,") && text.contains("City Sprint, $48.50");
        let verdict = if sees { "The cart shows City Sprint.\nVerdict: SUCCESS" } else { "Verdict: NOT SUCCESS" };
        completion(json!({"role": "assistant", "content": verdict}), "stop", (100, 5))
    })
    .await;
    let mut args = base.clone();
    args.extend(["--grader", "judge", "--grader-model", &judge, "--grader-model-name", "judge-1"].map(String::from));
    let (summary, out, _) =
        tokio::task::spawn_blocking(move || eval(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap();
    let r = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{r:#}");
    let requests = seen.lock().unwrap().clone();
    assert_eq!(requests.len(), 1);
    let images = requests[0].to_string().matches("data:image/png;base64,").count();
    assert!((1..=3).contains(&images), "the judge sees the last screenshots: {images}");
}

/// The text of a chat message's content (a string or parts).
fn text_of(message: &Value) -> String {
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deepshop_rows_become_tasks_judged_on_their_own_key_points_with_the_shop_standing_in() {
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("deepshop.jsonl");
    std::fs::write(
        &rows,
        r#"{"web_name": "Amazon", "id": "Amazon--7", "ques": "Find the cheapest running shoe rated 4 stars or more.", "web": "https://www.amazon.com/", "attribute": "A running shoe", "filter": "Rated 4 stars or more", "sort": "Cheapest first", "category": "Sports", "difficulty": "medium"}"#,
    )
    .unwrap();
    let tasks = dir.path().join("tasks");
    let env = examples().join("shop/environment").display().to_string();
    let (code, out, err) = orchard_tests::orchard(&[
        "convert",
        "deepshop",
        &rows.display().to_string(),
        &tasks.display().to_string(),
        "--environment",
        &env,
        "--start-url",
        "http://127.0.0.1:8080/",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 task folder(s)"), "{out}");
    if let Some(n) = orchard_tests::harbor_validates(&tasks) {
        assert_eq!(n, 1);
    }
    // The fixture harness browses as a model would: the start page, the sorted results.
    script_calls(
        &tasks.join("Amazon--7"),
        json!([
            {"tool": "goto", "arguments": {"url": "http://127.0.0.1:8080/search?category=running-shoes&min_rating=4&sort=price_asc"}},
            {"tool": "answer", "arguments": {"text": "City Sprint at $48.50"}},
        ]),
    );

    // A WebJudge judge: the key points are the row's, so it is never asked to list them.
    let (judge, seen) = mock_model_with(|request: &Value| {
        let messages = request["messages"].as_array().unwrap();
        let (system, user) = (text_of(&messages[0]), text_of(&messages[1]));
        let say = |t: &str| completion(json!({"role": "assistant", "content": t}), "stop", (100, 5));
        if system.starts_with("You rate how much one screenshot") {
            return say("The sorted results.\nScore: 5");
        }
        let points = ["A running shoe", "Rated 4 stars or more", "Cheapest first"];
        if points.iter().all(|p| user.contains(p)) && user.contains("City Sprint at $48.50") {
            say("Every key point is met.\nStatus: success")
        } else {
            say("Status: failure")
        }
    })
    .await;
    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let root = tasks.display().to_string();
    let args: Vec<String> = [&root, "--harness", &harness, "--tools", "browser", "--grader", "judge"]
        .into_iter()
        .map(String::from)
        .chain(["--grader-model", &judge, "--grader-model-name", "judge-1"].map(String::from))
        .collect();
    let (summary, out, _) =
        tokio::task::spawn_blocking(move || eval(&args.iter().map(String::as_str).collect::<Vec<_>>())).await.unwrap();
    let r = &rollouts(out.path())[0];
    assert_eq!(summary["passed"], 1, "{r:#}");
    let requests = seen.lock().unwrap().clone();
    assert!(
        requests.iter().all(|q| !text_of(&q["messages"][0]).starts_with("List the key points")),
        "the judge was asked for key points the task already has"
    );
}

/// The MiniWoB++ pages of the `miniwob` package on PyPI (`cargo xtask setup` installs it).
fn miniwob_package() -> PathBuf {
    let out = std::process::Command::new("python3")
        .args(["-c", "import importlib.util; print(importlib.util.find_spec('miniwob').submodule_search_locations[0])"])
        .output()
        .unwrap();
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(dir.join("html/core/core.js").is_file(), "the miniwob package is not installed (cargo xtask setup)");
    dir
}

/// Gives a converted task the fixture harness's scripted `calls`.
fn script_calls(task: &Path, calls: Value) {
    let calls: toml::Value = serde_json::from_value(calls).unwrap();
    let path = task.join("task.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replace("[metadata]\n", &format!("[metadata]\nmode = \"tools\"\ncalls = {calls}\n")))
        .unwrap();
}

#[test]
fn miniwob_pages_are_served_in_the_sandbox_and_their_own_reward_grades_them() {
    let dir = tempfile::tempdir().unwrap();
    let tasks = dir.path().join("tasks");
    let (code, out, err) = orchard_tests::orchard(&[
        "convert",
        "miniwob",
        &miniwob_package().display().to_string(),
        &tasks.display().to_string(),
        "--envs",
        "click-test,enter-text",
        "--seed",
        "0",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    if let Some(n) = orchard_tests::harbor_validates(&tasks) {
        assert_eq!(n, 2);
    }
    let page =
        |env: &str| json!({"tool": "goto", "arguments": {"url": format!("http://127.0.0.1:8080/miniwob/{env}.html")}});
    // In the accessibility tree: the button is [1] on click-test; on enter-text the field is [3],
    // Submit [4], and seed 0 asks for "Keneth".
    script_calls(
        &tasks.join("miniwob.click-test"),
        json!([page("click-test"), {"tool": "click", "arguments": {"id": 1}}]),
    );
    let enter = |text: &str| {
        json!([page("enter-text"), {"tool": "type", "arguments": {"id": 3, "text": text, "submit": false}},
               {"tool": "click", "arguments": {"id": 4}}])
    };
    // A wrong answer, after trying to end the episode from a javascript: URL (refused): a copy of
    // the enter-text task, made before either is given its calls.
    let wrong = tasks.join("miniwob.enter-text-wrong");
    std::fs::create_dir_all(wrong.join("tests")).unwrap();
    for f in ["instruction.md", "task.toml", "tests/test.sh"] {
        std::fs::copy(tasks.join("miniwob.enter-text").join(f), wrong.join(f)).unwrap();
    }
    std::os::unix::fs::symlink("../_miniwob/environment", wrong.join("environment")).unwrap();
    script_calls(&tasks.join("miniwob.enter-text"), enter("Keneth"));
    let mut calls = enter("Nobody");
    calls
        .as_array_mut()
        .unwrap()
        .insert(1, json!({"tool": "goto", "arguments": {"url": "javascript:core.endEpisode(1.0)"}}));
    script_calls(&wrong, calls);

    let harness = orchard_tests::test_plugin_dir().join("test-harness.wasm").display().to_string();
    let root = tasks.display().to_string();
    let (_, out, _) = eval(&[
        &root,
        "--harness",
        &harness,
        "--tools",
        "browser",
        "--grader",
        "script",
        "--tool-config",
        r#"browser={"mode": "ax"}"#,
    ]);
    let r = rollouts(out.path());
    let by = |id: &str| r.iter().find(|x| x["task_id"] == id).unwrap_or_else(|| panic!("{id}: {r:#?}"));
    assert_eq!(by("miniwob.click-test")["reward"], 1.0, "{:#}", by("miniwob.click-test"));
    assert_eq!(by("miniwob.enter-text")["reward"], 1.0, "{:#}", by("miniwob.enter-text"));
    let wrong = by("miniwob.enter-text-wrong");
    assert_eq!(wrong["reward"], 0.0, "{wrong:#}");
    let answer = wrong["outcome"]["answer"].as_str().unwrap();
    assert!(answer.contains("goto opens http(s) pages only"), "{answer}");
}

#[test]
fn the_browser_can_run_inside_the_sandbox_behind_its_agent() {
    // As on Kubernetes: the sandbox's agent starts Chromium inside the sandbox and relays its
    // DevTools pipe over the agent's authenticated connection.
    let gui = examples().display().to_string();
    let args = [gui.as_str(), "--harness", "oracle", "--tools", "browser", "--grader", "rubric", "--grant", "solution"];
    let mut args = args.to_vec();
    args.extend(["--tool-config", r#"browser={"mode": "marks"}"#]);
    let (summary, out, _) = orchard_tests::evals::eval_with_env(&args, &[("ORCHARD_BROWSER_IN_SANDBOX", "1")]);
    assert_eq!(summary["passed"], 3, "{summary:#}");
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    for line in lines.lines() {
        let t: Value = serde_json::from_str(line).unwrap();
        let steps = t["trajectory"]["steps"].as_array().unwrap().clone();
        let close = steps.iter().find(|s| s["op"] == "browser-close").unwrap_or_else(|| panic!("{t:#}"));
        // No host process to measure: the browser was the sandbox's.
        assert_eq!(close["detail"]["rss_bytes"], 0, "{close}");
    }
}
