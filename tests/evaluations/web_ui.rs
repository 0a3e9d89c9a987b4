//! The web UI in a real browser: headless Chromium (Debian's `chromium`) driven by chromiumoxide
//! against the real server. Sign in, submit a job of the example tasks from the form, watch its
//! counts tick without a reload, open a rollout and see its steps and its screenshot, compare two
//! jobs, and fail to see another tenant's job.

use std::path::Path;
use std::time::{Duration, Instant};

use chromiumoxide::{Browser, BrowserConfig, Page};
use futures::StreamExt;
use orchard_tests::evals::{completion, examples, mock_model_with};
use orchard_tests::{Server, ServerOptions};
use reqwest::Method;
use serde_json::{Value, json};

struct Chromium {
    browser: Browser,
    _profile: tempfile::TempDir,
    handler: tokio::task::JoinHandle<()>,
}

impl Chromium {
    async fn start() -> Chromium {
        let exe = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .expect("chromium is not installed: run `cargo xtask setup` (apt package chromium)");
        // A profile of its own: chromiumoxide's default is shared between browsers.
        let profile = tempfile::tempdir().unwrap();
        let config = BrowserConfig::builder()
            .chrome_executable(exe)
            .user_data_dir(profile.path())
            .no_sandbox()
            .args(["disable-gpu", "disable-background-networking", "disable-component-update", "no-first-run"])
            .request_timeout(Duration::from_secs(30))
            // chromiumoxide waits 20 s for the DevTools line by default; a loaded machine (the
            // whole suite, CI) once took longer.
            .launch_timeout(Duration::from_secs(90))
            .build()
            .unwrap();
        let (browser, mut handler) = Browser::launch(config).await.expect("launching chromium");
        let handler = tokio::spawn(async move { while handler.next().await.is_some() {} });
        Chromium { browser, _profile: profile, handler }
    }

    async fn close(mut self) {
        let _ = self.browser.close().await;
        let _ = self.browser.wait().await;
        self.handler.abort();
    }
}

async fn js<T: serde::de::DeserializeOwned>(page: &Page, script: &str) -> T {
    page.evaluate(script).await.unwrap_or_else(|e| panic!("{script}: {e}")).into_value().unwrap()
}

async fn text(page: &Page, selector: &str) -> String {
    js(page, &format!("(document.querySelector({selector:?}) || {{}}).textContent || ''")).await
}

/// Waits until `script` (a JS expression) is true on the page.
/// (A navigation in progress answers "no context" for a moment: asked again.)
async fn until(page: &Page, script: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let now = page.evaluate(format!("!!({script})")).await.ok().and_then(|v| v.into_value::<bool>().ok());
        if now == Some(true) {
            return;
        }
        if Instant::now() >= deadline {
            let body = page.evaluate("document.body ? document.body.innerText : ''").await.ok();
            let body: String = body.and_then(|v| v.into_value().ok()).unwrap_or_default();
            panic!("timed out waiting for {script} on {:?}:\n{body}", page.url().await);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn goto(page: &Page, url: &str) {
    page.goto(url).await.unwrap_or_else(|e| panic!("{url}: {e}"));
    page.wait_for_navigation().await.unwrap();
}

async fn sign_in(page: &Page, base: &str, key: &str) {
    goto(page, &format!("{base}/ui")).await;
    // Not signed in: the sign-in page, which comes back to where we were going.
    until(page, "document.getElementById('api_key')", Duration::from_secs(10)).await;
    page.find_element("#api_key").await.unwrap().click().await.unwrap().type_str(key).await.unwrap();
    page.find_element("#sign-in").await.unwrap().click().await.unwrap();
    until(page, "document.getElementById('tenant')", Duration::from_secs(10)).await;
}

/// The react harness asks for a screenshot (the test browser driver answers with a real PNG),
/// then answers.
fn screenshot_then_answer(body: &Value) -> (u16, Value) {
    let messages = body["messages"].as_array().unwrap();
    if messages.last().is_some_and(|m| m["role"] == "tool") {
        completion(json!({"role": "assistant", "content": "done"}), "stop", (30, 2))
    } else {
        let call = json!({"id": "call_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}});
        completion(json!({"role": "assistant", "content": "", "tool_calls": [call]}), "tool_calls", (20, 5))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_web_ui_in_chromium() {
    let server = Server::start_with(ServerOptions {
        api_keys: Some("alice:alice-key-1234,bob:bob-key-123456".into()),
        extra_args: vec![
            "--dataset".into(),
            format!("examples={}", examples()),
            "--eval-concurrency".into(),
            "2".into(),
        ],
        ..Default::default()
    })
    .await
    .with_key("alice-key-1234");
    let base = server.url.clone();
    let chromium = Chromium::start().await;
    let page = chromium.browser.new_page("about:blank").await.unwrap();

    // A wrong key is refused on the page.
    goto(&page, &format!("{base}/ui/login")).await;
    page.find_element("#api_key").await.unwrap().click().await.unwrap().type_str("not-a-key-at-all").await.unwrap();
    page.find_element("#sign-in").await.unwrap().click().await.unwrap();
    until(&page, "document.getElementById('error')", Duration::from_secs(10)).await;
    assert!(text(&page, "#error").await.contains("not an API key"));

    sign_in(&page, &base, "alice-key-1234").await;
    assert_eq!(text(&page, "#tenant").await, "alice");
    // The session is a cookie scripts cannot read.
    let cookies: String = js(&page, "document.cookie").await;
    assert!(!cookies.contains("orchard_session"), "{cookies}");

    // Submit the example tasks from the form: 5 tasks × 3 attempts, one at a time, so that the
    // counts have time to tick while we watch.
    goto(&page, &format!("{base}/ui/evals/new")).await;
    let field = |id: &'static str, value: &'static str| {
        let page = page.clone();
        async move {
            js::<bool>(&page, &format!("(document.getElementById({id:?}).value = {value:?}, true)")).await;
        }
    };
    field("harnesses", "oracle").await;
    field("grants", "solution").await;
    field("attempts", "3").await;
    field("concurrency", "1").await;
    page.find_element("#submit").await.unwrap().click().await.unwrap();
    // The job's first start compiles its plugins: on a loaded machine (the whole suite in CI)
    // that once took longer than 30 s.
    until(&page, "document.getElementById('live')", Duration::from_secs(120)).await;
    let url = page.url().await.unwrap().unwrap();
    let first = url.rsplit('/').next().unwrap().to_string();
    assert!(first.starts_with("ev-"), "{url}");

    // The counts tick over server-sent events, without a reload: a marker set on this page
    // survives until the job is done.
    js::<bool>(&page, "(window.__notReloaded = true)").await;
    let initial: i64 = text(&page, "#done").await.parse().unwrap();
    let mut seen = vec![initial];
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let done: i64 = text(&page, "#done").await.parse().unwrap_or(-1);
        if seen.last() != Some(&done) {
            seen.push(done);
        }
        if text(&page, "#status").await == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "job did not finish: {seen:?}\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(js::<bool>(&page, "window.__notReloaded === true").await, "the page reloaded");
    // Without a reload the count moved from where it was to the job's end. Steps in between
    // are usual but not certain: on a loaded machine the last rollouts can finish within one
    // of the page's updates (seen once in a full suite run: [0, 7]).
    assert!(seen.len() >= 2 && seen.last() > seen.first(), "the counts did not tick on the page: {seen:?}");
    // The matrix and the per-harness table arrive too (fetched as rollouts finish).
    until(&page, "document.querySelectorAll('#matrix tbody tr').length === 5", Duration::from_secs(10)).await;
    let per_harness = text(&page, "#per-harness").await;
    assert!(per_harness.contains("oracle") && per_harness.contains("100%"), "{per_harness}");

    // A second job over the API: the react harness with the test browser driver, uploaded by
    // alice for herself, and a model that asks for a screenshot.
    let wasm = std::fs::read(orchard_tests::test_plugin_dir().join("test-browser.wasm")).unwrap();
    let resp = server.request(Method::PUT, "/v1/plugins/test-browser").body(wasm).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let (model, _) = mock_model_with(screenshot_then_answer).await;
    let (status, v) = server
        .call(
            Method::POST,
            "/v1/evals",
            Some(json!({"tasks": {"dataset": "examples"}, "harnesses": ["react"], "tools": ["test-browser"],
                        "grader": "script", "concurrency": 2, "model": {"url": model, "name": "mock-1"}})),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let second = v["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let (_, v) = server.call(Method::GET, &format!("/v1/evals/{second}"), None).await;
        if v["status"] == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "second job: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The jobs list shows both, live.
    goto(&page, &format!("{base}/ui")).await;
    until(&page, &format!("document.querySelector('[data-job=\"{second}\"]')"), Duration::from_secs(10)).await;
    assert!(text(&page, "#jobs-rows").await.contains(&first));

    // A rollout: its steps, the tool call, and the screenshot decoded as a real image.
    let (_, rollouts) = server.call(Method::GET, &format!("/v1/evals/{second}/rollouts?limit=1"), None).await;
    let rid = rollouts["rollouts"][0]["rollout_id"].as_str().unwrap().to_string();
    goto(&page, &format!("{base}/ui/evals/{second}/rollouts/{rid}")).await;
    until(&page, "document.getElementById('steps')", Duration::from_secs(10)).await;
    let steps = text(&page, "#steps").await;
    assert!(steps.contains("tool screenshot"), "{steps}");
    assert!(steps.contains("model mock-1"), "{steps}");
    until(
        &page,
        "document.querySelector('#steps img.shot') && document.querySelector('#steps img.shot').complete",
        Duration::from_secs(10),
    )
    .await;
    let size: Vec<u32> =
        js(&page, "(i => [i.naturalWidth, i.naturalHeight])(document.querySelector('#steps img.shot'))").await;
    assert_eq!(size, vec![24, 16], "the screenshot is not shown as an image");

    // Compare: the oracle passes every task, the mock model none: each flipped the same way.
    goto(&page, &format!("{base}/ui/compare?a={first}&b={second}")).await;
    until(&page, "document.getElementById('pairs')", Duration::from_secs(10)).await;
    assert_eq!(text(&page, "#broke").await, "5", "{}", text(&page, "#paired").await);
    assert_eq!(text(&page, "#fixed").await, "0");
    assert_eq!(js::<i64>(&page, "document.querySelectorAll('#pairs tbody tr.broke').length").await, 5);

    // A form posted without this session's token is refused; the session cookie is no API key.
    let cookie: Vec<chromiumoxide::cdp::browser_protocol::network::Cookie> = page.get_cookies().await.unwrap();
    let session = cookie.iter().find(|c| c.name == "orchard_session").expect("session cookie");
    assert!(session.http_only);
    let with_cookie = format!("orchard_session={}", session.value);
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(120))
        .build()
        .unwrap();
    let forged = http
        .post(format!("{base}/ui/evals/{first}/retry"))
        .header("cookie", &with_cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("csrf=00")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);
    // Pages are never framed and run only our own script.
    let login = http.get(format!("{base}/ui/login")).send().await.unwrap();
    let csp = login.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("frame-ancestors 'none'") && csp.contains("script-src 'self'"), "{csp}");
    let api = http.get(format!("{base}/v1/evals")).header("cookie", &with_cookie).send().await.unwrap();
    assert_eq!(api.status(), 401, "the API answered a request carrying only the UI's cookie");

    // Bob signs in and sees none of it: not in his list, and alice's job is not found.
    js::<bool>(&page, "(document.querySelector('header form').submit(), true)").await;
    until(&page, "document.getElementById('api_key')", Duration::from_secs(10)).await;
    sign_in(&page, &base, "bob-key-123456").await;
    assert_eq!(text(&page, "#tenant").await, "bob");
    assert!(!text(&page, "#jobs-rows").await.contains(&first));
    goto(&page, &format!("{base}/ui/evals/{first}")).await;
    until(&page, "document.getElementById('error')", Duration::from_secs(10)).await;
    assert!(text(&page, "#error").await.contains("not found"));
    goto(&page, &format!("{base}/ui/evals/{second}/rollouts/{rid}")).await;
    until(&page, "document.getElementById('error')", Duration::from_secs(10)).await;
    goto(&page, &format!("{base}/ui/evals/{first}/rollouts")).await;
    until(&page, "document.getElementById('error')", Duration::from_secs(10)).await;
    assert!(text(&page, "#error").await.contains("not found"));
    // Nor can bob's jobs use alice's plugin.
    let bob = Server::attach(&base, std::path::Path::new("/nonexistent")).with_key("bob-key-123456");
    let (status, v) = bob
        .call(
            Method::POST,
            "/v1/evals",
            Some(json!({"tasks": {"dataset": "examples"}, "harnesses": ["react"], "tools": ["test-browser"],
                        "grader": "script", "model": {"url": "http://127.0.0.1:9/v1", "name": "m"}})),
        )
        .await;
    assert_eq!(status, 422, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("no plugin named \"test-browser\""), "{v}");
    chromium.close().await;
}

/// A running desktop rollout's page links its live view; the view draws the rollout's desktop
/// from VNC over the page's WebSocket (through the sandbox's agent), and a finished rollout has
/// nothing to watch.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_desktop_rollout_is_watched_live_in_chromium() {
    // One desktop task whose agent keeps the rollout running a while.
    let tasks = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/desktop/edit-note");
    let copied = std::process::Command::new("cp").arg("-r").arg(&source).arg(tasks.path()).status().unwrap();
    assert!(copied.success());
    let task = tasks.path().join("edit-note");
    std::fs::remove_file(task.join("solution/calls.json")).unwrap();
    std::fs::write(task.join("solution/solve.sh"), "#!/bin/sh\nsleep 45\n").unwrap();
    let server = Server::start_with(ServerOptions {
        api_keys: Some("alice:alice-key-1234".into()),
        extra_args: vec!["--dataset".into(), format!("live={}", tasks.path().display())],
        ..Default::default()
    })
    .await
    .with_key("alice-key-1234");
    let (status, v) = server
        .call(
            Method::POST,
            "/v1/evals",
            Some(json!({"tasks": {"dataset": "live"}, "harnesses": ["oracle"], "tools": ["shell"],
                        "grader": "rubric", "grants": ["solution"]})),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let eval = v["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let rollout = loop {
        let (_, v) = server.call(Method::GET, &format!("/v1/evals/{eval}/rollouts"), None).await;
        if let Some(r) = v["rollouts"].as_array().and_then(|r| r.iter().find(|r| r["state"] == "running")) {
            break r["rollout_id"].as_str().or(r["id"].as_str()).unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "no rollout started: {v}\n{}", server.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let base = server.url.clone();
    let chromium = Chromium::start().await;
    let page = chromium.browser.new_page("about:blank").await.unwrap();
    sign_in(&page, &base, "alice-key-1234").await;
    goto(&page, &format!("{base}/ui/evals/{eval}/rollouts/{rollout}")).await;
    until(&page, "document.getElementById('live-link')", Duration::from_secs(10)).await;
    page.find_element("#live-link").await.unwrap().click().await.unwrap();
    // The desktop's own size, then its pixels: Mousepad's window is not all black.
    until(
        &page,
        "(() => { const c = document.getElementById('live-desktop'); return c && c.dataset.size === '1024x768' && Number(c.dataset.frames || 0) > 0; })()",
        // A rollout just claimed may still be starting its desktop: the page tries again.
        Duration::from_secs(60),
    )
    .await;
    // The view may open while the rollout's app is still mapping its window (the desktop is
    // black before it): the pixels are what the next updates draw.
    let lit_pixels = "(() => { const c = document.getElementById('live-desktop'); const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4 * 97) { if (d[i] | d[i + 1] | d[i + 2]) n++; } return n; })()";
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lit: u32 = js(&page, lit_pixels).await;
    while lit <= 100 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
        lit = js(&page, lit_pixels).await;
    }
    assert!(lit > 100, "the live view drew {lit} lit pixels of the desktop");
    assert!(text(&page, "#live-desktop-state").await.contains("live: 1024x768"));

    // Once the rollout is over there is nothing to watch, and the page says why.
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        let (_, v) = server.call(Method::GET, &format!("/v1/evals/{eval}"), None).await;
        if v["status"] == "done" {
            break;
        }
        assert!(Instant::now() < deadline, "the job did not finish: {v}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    goto(&page, &format!("{base}/ui/evals/{eval}/rollouts/{rollout}/live")).await;
    let said: String = js(&page, "document.body.innerText").await;
    assert!(said.contains("only a running rollout's desktop can be watched"), "{said}");
    chromium.close().await;
}
