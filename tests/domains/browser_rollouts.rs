//! The `browser` import in a rollout: a driver plugin's tab is a real Chromium started in the
//! sandbox's network, so it loads the web app the task serves on the sandbox's own loopback,
//! and not a service on the host's loopback; its calls land in the trajectory.

use orchard_tests::evals::{eval, read_json};
use orchard_tests::test_plugin_dir;

/// A task serving `files` from /site on the sandbox's loopback (port 8080), then making `calls`
/// through the fixture harness; the rollout's record and its trajectory steps.
fn run_calls(
    files: &[(&str, &str)],
    calls: serde_json::Value,
    tools: &[&str],
) -> (serde_json::Value, Vec<serde_json::Value>) {
    let (r, steps, _) = run_calls_with(files, calls, tools, &[]);
    (r, steps)
}

/// [`run_calls`] with more `orchard eval` arguments; also the trajectory's conversation.
fn run_calls_with(
    files: &[(&str, &str)],
    calls: serde_json::Value,
    tools: &[&str],
    extra: &[&str],
) -> (serde_json::Value, Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let task = dir.path().join("site");
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::write(task.join("instruction.md"), "Browse.").unwrap();
    let mut dockerfile = "FROM scratch\nWORKDIR /site\n".to_string();
    for (name, body) in files {
        std::fs::write(task.join("environment").join(name), body).unwrap();
        dockerfile.push_str(&format!("COPY {name} /site/{name}\n"));
    }
    std::fs::write(task.join("environment/Dockerfile"), dockerfile).unwrap();
    let mut all = vec![serde_json::json!({"tool": "bash", "arguments": {"command": SERVE}})];
    all.extend(calls.as_array().unwrap().iter().cloned());
    std::fs::write(
        task.join("task.toml"),
        format!(
            "[agent]\ntimeout_sec = 120\n[metadata]\nmode = \"tools\"\ncalls = {}\n",
            toml_inline(&serde_json::Value::Array(all))
        ),
    )
    .unwrap();
    let harness = test_plugin_dir().join("test-harness.wasm").display().to_string();
    let tasks = dir.path().display().to_string();
    let mut args = vec![tasks.as_str(), "--harness", harness.as_str(), "--tools", "shell"];
    for t in tools {
        args.extend(["--tools", t]);
    }
    args.extend(["--grader", "script"]);
    args.extend(extra);
    let (_, out, _) = eval(&args);
    let rollout = std::fs::read_dir(out.path().join("rollouts")).unwrap().next().unwrap().unwrap().path();
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let t: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    (
        read_json(&rollout),
        t["trajectory"]["steps"].as_array().unwrap().clone(),
        t["trajectory"]["conversation"].as_array().unwrap().clone(),
    )
}

/// The tool results of `conversation` that carry an image: the images' bytes.
fn images(conversation: &[serde_json::Value]) -> Vec<Vec<u8>> {
    use base64::Engine;
    conversation
        .iter()
        .filter(|m| m["role"] == "tool")
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter_map(|p| p["data_base64"].as_str().map(|d| base64::engine::general_purpose::STANDARD.decode(d).unwrap()))
        .collect()
}

/// A PNG's width and height, from its header.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[1..4], b"PNG", "not a PNG");
    (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()))
}

/// What each call answered, split from the fixture harness's answer.
fn answers(r: &serde_json::Value) -> Vec<String> {
    let answer = r["outcome"]["answer"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    answer.split("\n---\n").map(String::from).collect()
}

/// A page with something in each place marks must reach: a button, a text field, a link that
/// opens a new tab, a button behind an alert, a button in an open shadow root and one in a
/// same-origin frame.
const MARKED_PAGE: &str = "<html><head><title>Start</title></head><body>\
    <button onclick=\"document.title='Clicked'\">go</button>\
    <form action=\"/search.html\"><input name=q placeholder=query></form>\
    <a href=\"/popup.html\" target=\"_blank\">open</a>\
    <button onclick=\"alert('hello there')\">warn</button>\
    <div id=host></div><script>document.getElementById('host').attachShadow({mode:'open'}).innerHTML=\
    '<button onclick=\\'document.title=&quot;Shadow&quot;\\'>in shadow</button>';</script>\
    <iframe style=\"width:300px;height:60px\" srcdoc=\"<button onclick=&quot;parent.document.title='Framed'&quot;>in frame</button>\"></iframe>\
    </body></html>";

#[test]
fn marks_number_every_reachable_element_and_act_on_them_by_number() {
    let results = "<html><head><title>Results</title></head><body>found</body></html>";
    let popup = "<html><head><title>Popup page</title></head><body>new tab</body></html>";
    let calls = serde_json::json!([
        {"tool": "goto", "arguments": {"url": "http://127.0.0.1:8080/"}},
        {"tool": "click", "arguments": {"id": 0}},
        {"tool": "click", "arguments": {"id": 5}},
        {"tool": "click", "arguments": {"id": 4}},
        {"tool": "click", "arguments": {"id": 3}},
        {"tool": "click", "arguments": {"id": 2}},
        {"tool": "back", "arguments": {}},
        {"tool": "type", "arguments": {"id": 1, "text": "shoes"}},
        {"tool": "click", "arguments": {"id": 99}},
    ]);
    let files = [("index.html", MARKED_PAGE), ("search.html", results), ("popup.html", popup)];
    let (r, _, conversation) = run_calls_with(
        &files,
        calls,
        &["browser"],
        &["--tool-config", r#"browser={"mode": "marks", "screenshot_width": 640}"#],
    );
    let parts = answers(&r);
    let first = &parts[1];
    for label in [
        "[0]: <button> \"go\"",
        "[1]: <input type=text> \"query\"",
        "[2]: <a> \"open\"",
        "[3]: <button> \"warn\"",
        "[4]: <button> \"in shadow\"",
        "[5]: <button> \"in frame\"",
    ] {
        assert!(first.contains(label), "{label} not in {first}");
    }
    assert!(parts[2].contains("Title: Clicked"), "{}", parts[2]);
    assert!(parts[3].contains("Title: Framed"), "{}", parts[3]);
    assert!(parts[4].contains("Title: Shadow"), "{}", parts[4]);
    assert!(parts[5].contains("A dialog was dismissed (alert: hello there)"), "{}", parts[5]);
    assert!(
        parts[6].contains("opened a new tab at http://127.0.0.1:8080/popup.html")
            && parts[6].contains("Title: Popup page"),
        "{}",
        parts[6]
    );
    assert!(parts[7].contains("went back") && parts[7].contains("URL: http://127.0.0.1:8080/\n"), "{}", parts[7]);
    assert!(parts[8].contains("URL: http://127.0.0.1:8080/search.html?q=shoes"), "{}", parts[8]);
    assert!(parts[9].starts_with("ERROR ") && parts[9].contains("no element [99]"), "{}", parts[9]);
    // Every observation's screenshot is in the conversation, scaled to the configured width.
    let shots = images(&conversation);
    assert_eq!(shots.len(), 8, "one screenshot per successful action");
    for shot in &shots {
        assert_eq!(png_size(shot), (640, 400));
    }
}

#[test]
fn the_accessibility_tree_mode_is_text_only_capped_and_acts_by_id() {
    let mut many = String::from(
        "<html><head><title>Tree</title></head><body><h1>Shop</h1>\
        <button onclick=\"document.title='Pressed'\">Buy now</button>\
        <form action=\"/search.html\"><input name=q aria-label=\"Search products\"></form>",
    );
    for i in 0..300 {
        many.push_str(&format!("<a href=\"/p{i}\">Product {i}</a> "));
    }
    many.push_str("</body></html>");
    let results = "<html><head><title>Results</title></head><body>found</body></html>";
    let calls = serde_json::json!([
        {"tool": "goto", "arguments": {"url": "http://127.0.0.1:8080/"}},
        {"tool": "click", "arguments": {"id": 1}},
        {"tool": "type", "arguments": {"id": 2, "text": "socks"}},
    ]);
    let (r, _, conversation) = run_calls_with(
        &[("index.html", &many), ("search.html", results)],
        calls,
        &["browser"],
        &["--tool-config", r#"browser={"mode": "ax", "max_elements": 10}"#],
    );
    let parts = answers(&r);
    let tree = &parts[1];
    assert!(tree.contains("[0] heading \"Shop\""), "{tree}");
    assert!(tree.contains("[1] button \"Buy now\""), "{tree}");
    assert!(tree.contains("[2] textbox \"Search products\""), "{tree}");
    assert!(tree.contains("[3] link \"Product 0\""), "{tree}");
    assert!(!tree.contains("Product 9\""), "capped at 10: {tree}");
    assert!(tree.contains("more not listed"), "{tree}");
    assert!(parts[2].contains("Title: Pressed"), "{}", parts[2]);
    assert!(parts[3].contains("search.html?q=socks"), "{}", parts[3]);
    assert!(images(&conversation).is_empty(), "ax mode shows no screenshot unless asked");
}

/// Starts the site's web server in the sandbox and waits for it.
const SERVE: &str = "cd /site && (setsid python3 -m http.server 8080 --bind 127.0.0.1 > /dev/null 2>&1 &) ; \
                     for i in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/8080) 2>/dev/null && break; sleep 0.1; done; echo up";

#[test]
fn the_shipped_driver_clicks_types_and_goes_back_on_a_grid() {
    let index = "<html><head><title>Start</title><style>body{margin:0} #b{position:absolute;left:0;top:0;width:100%;height:50%} \
                 #q{position:absolute;left:0;top:60%;width:100%;height:20%}</style></head><body>\
                 <button id=b onclick=\"document.title='Clicked'\">go</button>\
                 <form action=\"/search.html\"><input id=q name=q></form></body></html>";
    let results = "<html><head><title>Results</title></head><body>found</body></html>";
    let calls = serde_json::json!([
        {"tool": "goto", "arguments": {"url": "http://127.0.0.1:8080/"}},
        {"tool": "click", "arguments": {"x": 500, "y": 250}},
        {"tool": "click", "arguments": {"x": 500, "y": 700}},
        {"tool": "type", "arguments": {"text": "shoes", "submit": true}},
        {"tool": "back", "arguments": {}},
        {"tool": "click", "arguments": {"x": 1200, "y": 5}},
        {"tool": "answer", "arguments": {"text": "done"}},
    ]);
    let (r, steps) = run_calls(&[("index.html", index), ("search.html", results)], calls, &["browser"]);
    let answer = r["outcome"]["answer"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    let parts: Vec<&str> = answer.split("\n---\n").collect();
    assert_eq!(parts.len(), 8, "{answer}");
    assert!(parts[1].contains("URL: http://127.0.0.1:8080/") && parts[1].contains("Title: Start"), "{}", parts[1]);
    assert!(parts[2].contains("Title: Clicked"), "{}", parts[2]);
    assert!(
        parts[4].contains("URL: http://127.0.0.1:8080/search.html?q=shoes") && parts[4].contains("Title: Results"),
        "{}",
        parts[4]
    );
    // Back at the first page (restored from the back-forward cache, its title as the click left it).
    assert!(parts[5].contains("went back") && parts[5].contains("URL: http://127.0.0.1:8080/\n"), "{}", parts[5]);
    assert!(parts[6].starts_with("ERROR ") && parts[6].contains("x must be a number from 0 to 1000"), "{}", parts[6]);
    assert_eq!(parts[7], "ANSWER: done");
    // Every browsing step's screenshot is in the trajectory's conversation as an image.
    let shots = steps.iter().filter(|s| s["op"] == "browser-screenshot" && s["detail"]["ok"] == true).count();
    assert!(shots >= 5, "{shots} screenshots");
}

#[test]
fn a_driver_sees_the_sandboxes_web_app_and_not_the_hosts_loopback() {
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();
    let index = "<html><head><title>Orchard Shop</title></head><body>ok</body></html>";
    let calls = serde_json::json!([
        {"tool": "visit", "arguments": {"url": "http://127.0.0.1:8080/"}},
        {"tool": "visit", "arguments": {"url": format!("http://127.0.0.1:{host_port}/")}},
    ]);
    // The 0.1.0 fixture driver: a browser behind the frozen contract works the same.
    let driver = test_plugin_dir().join("test-browser.wasm").display().to_string();
    let (r, steps) = run_calls(&[("index.html", index)], calls, &[&driver]);
    let answer = r["outcome"]["answer"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    assert!(answer.contains("title: Orchard Shop"), "{answer}");
    assert!(answer.contains("ERR_CONNECTION_REFUSED"), "the host's loopback was reached: {answer}");
    assert!(matches!(host.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
    // The browser's operations are in the trajectory.
    let ops: Vec<&str> =
        steps.iter().filter_map(|s| s["op"].as_str()).filter(|op| op.starts_with("browser-")).collect();
    for op in ["browser-open", "browser-cdp", "browser-screenshot"] {
        assert!(ops.contains(&op), "{op} not in {ops:?}");
    }
}

/// A JSON value as a TOML inline value.
fn toml_inline(v: &serde_json::Value) -> String {
    let value: toml::Value = serde_json::from_value(v.clone()).unwrap();
    value.to_string()
}

/// A task folder serving `index` on the sandbox's loopback, whose scripted calls open it.
fn site_task(root: &std::path::Path, name: &str, index: &str, environment: &str) {
    let task = root.join(name);
    std::fs::create_dir_all(task.join("environment")).unwrap();
    std::fs::write(task.join("instruction.md"), "Browse.").unwrap();
    std::fs::write(task.join("environment/index.html"), index).unwrap();
    std::fs::write(
        task.join("environment/Dockerfile"),
        "FROM scratch\nWORKDIR /site\nCOPY index.html /site/index.html\n",
    )
    .unwrap();
    let calls = serde_json::json!([
        {"tool": "bash", "arguments": {"command": SERVE}},
        {"tool": "goto", "arguments": {"url": "http://127.0.0.1:8080/"}},
        {"tool": "wait", "arguments": {"seconds": 5}},
        {"tool": "screenshot", "arguments": {}},
    ]);
    std::fs::write(
        task.join("task.toml"),
        format!(
            "[agent]\ntimeout_sec = 120\n[environment]\n{environment}\n[metadata]\nmode = \"tools\"\ncalls = {}\n",
            toml_inline(&calls)
        ),
    )
    .unwrap();
}

#[test]
fn a_browser_over_the_sandboxes_memory_fails_only_its_own_rollout_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    // The page keeps allocating; the browser lives in the sandbox's memory group, so the
    // sandbox's limit (not the host) stops it.
    let hog = "<html><head><title>Hog</title></head><body><script>const keep = []; \
               setInterval(() => { for (let i = 0; i < 20; i++) keep.push(new Array(1 << 20).fill(i)); }, 10);\
               </script></body></html>";
    site_task(dir.path(), "hog", hog, "memory = \"512M\"");
    site_task(dir.path(), "quiet", "<html><head><title>Quiet</title></head><body>ok</body></html>", "");
    let harness = test_plugin_dir().join("test-harness.wasm").display().to_string();
    let tasks = dir.path().display().to_string();
    let (_, out, _) =
        eval(&[&tasks, "--harness", &harness, "--tools", "shell", "--tools", "browser", "--grader", "script"]);
    let rollout = |id: &str| {
        std::fs::read_dir(out.path().join("rollouts"))
            .unwrap()
            .map(|e| read_json(&e.unwrap().path()))
            .find(|r| r["task_id"] == id)
            .unwrap()
    };
    let hog = rollout("hog");
    assert_eq!(hog["status"], "error", "{hog:#}");
    let error = hog["error"].as_str().unwrap();
    // The OOM killer takes the renderer first (Chromium ranks it so); on a tighter machine it may
    // take the browser itself. Either way the reason is named.
    assert!(error.contains("browser.session") && (error.contains("crashed") || error.contains("killed")), "{error}");
    eprintln!("hog: {error} after {} s", hog["agent_seconds"]);
    let quiet = rollout("quiet");
    assert_ne!(quiet["status"], "error", "{quiet:#}");
    let answer = quiet["outcome"]["answer"].as_str().unwrap();
    assert!(answer.contains("Title: Quiet"), "{answer}");
    // The quiet browser's memory at the end is in its trajectory.
    let lines = std::fs::read_to_string(out.path().join("trajectories.jsonl")).unwrap();
    let quiet_t = lines
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|t| t["task_id"] == "quiet" || t["trajectory"]["steps"].to_string().contains("Title: Quiet"));
    let steps = quiet_t.unwrap()["trajectory"]["steps"].clone();
    let close = steps.as_array().unwrap().iter().find(|s| s["op"] == "browser-close").cloned().unwrap();
    let rss = close["detail"]["rss_bytes"].as_u64().unwrap();
    assert!(rss > 10 << 20, "a running Chromium holds more than 10 MiB: {rss}");
}

#[test]
fn a_page_that_never_yields_times_out_its_calls_without_hanging_the_rollout() {
    let dir = tempfile::tempdir().unwrap();
    let hung = "<html><head><title>Hung</title></head><body><script>setTimeout(() => { for (;;) {} }, 300);</script></body></html>";
    site_task(dir.path(), "hung", hung, "");
    let harness = test_plugin_dir().join("test-harness.wasm").display().to_string();
    let tasks = dir.path().display().to_string();
    let started = std::time::Instant::now();
    let (_, out, _) = orchard_tests::evals::eval_with_env(
        &[&tasks, "--harness", &harness, "--tools", "shell", "--tools", "browser", "--grader", "script"],
        &[("ORCHARD_BROWSER_CALL_TIMEOUT_MS", "2000")],
    );
    let r = read_json(&std::fs::read_dir(out.path().join("rollouts")).unwrap().next().unwrap().unwrap().path());
    let answer = r["outcome"]["answer"].as_str().unwrap_or_else(|| panic!("{r:#}"));
    let parts: Vec<&str> = answer.split("\n---\n").collect();
    assert_eq!(parts.len(), 4, "{answer}");
    // Each call after the page hung answers the model with the timeout; the run goes on.
    for part in &parts[2..] {
        assert!(part.starts_with("ERROR ") && part.contains("not responding"), "{part}");
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(90), "{:?}", started.elapsed());
}
