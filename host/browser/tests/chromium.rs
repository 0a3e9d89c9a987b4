//! A real Chromium in a network namespace made by the test (as a sandbox's is): it reaches what
//! is served on that namespace's loopback and not the host's, no DevTools port is open in the
//! namespace, plugins' calls past the tab are refused, dialogs are dismissed and logged, and the
//! browser's processes go with it. Needs root (`ip netns`) and Debian's `chromium`.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orchard_browser::{Browser, BrowserError, BrowserOptions, Tab};
use serde_json::json;

/// A network namespace with its loopback up, removed on drop.
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("orchard-test-browser-{}", std::process::id());
        let ok = |c: &mut Command| assert!(c.status().unwrap().success(), "{c:?}");
        ok(Command::new("ip").args(["netns", "add", &name]));
        ok(Command::new("ip").args(["-n", &name, "link", "set", "lo", "up"]));
        Netns(name)
    }

    fn path(&self) -> std::path::PathBuf {
        std::path::PathBuf::from("/run/netns").join(&self.0)
    }

    fn exec(&self, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0]).args(args);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "delete", &self.0]).status();
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn wait_loaded(tab: &Tab, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = tab
            .cdp(
                "Runtime.evaluate",
                json!({"expression": "location.href + ' ' + document.readyState", "returnByValue": true}),
            )
            .await;
        if let Ok(v) = v
            && v["result"]["value"].as_str() == Some(&format!("{url} complete"))
        {
            return;
        }
        assert!(Instant::now() < deadline, "{url} did not load");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn title(tab: &Tab) -> String {
    let v = tab.cdp("Runtime.evaluate", json!({"expression": "document.title", "returnByValue": true})).await.unwrap();
    v["result"]["value"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chromium_in_the_sandboxes_network_sees_its_loopback_only_and_is_driven_over_a_pipe() {
    let ns = Netns::new();
    // The task's web app, on the namespace's own loopback.
    let site = tempfile::tempdir().unwrap();
    std::fs::write(site.path().join("index.html"), "<html><head><title>Shop</title></head><body>cheap</body></html>")
        .unwrap();
    let _server = Killed(
        ns.exec(&["python3", "-m", "http.server", "8765", "--bind", "127.0.0.1", "--directory"])
            .arg(site.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // A service on the host's loopback, on the same port number: the browser must not see it.
    let host = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host_port = host.local_addr().unwrap().port();
    host.set_nonblocking(true).unwrap();

    let browser =
        Browser::launch(BrowserOptions { netns: Some(ns.path()), viewport: (640, 480), ..Default::default() })
            .await
            .expect("chromium starts in the namespace");
    let tab = browser.open().await.unwrap();
    let url = "http://127.0.0.1:8765/";
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        tab.cdp("Page.navigate", json!({"url": url})).await.unwrap();
        if tokio::time::timeout(Duration::from_secs(2), wait_loaded(&tab, url)).await.is_ok()
            && title(&tab).await == "Shop"
        {
            break;
        }
        assert!(Instant::now() < deadline, "the namespace's web app never answered");
    }

    // A screenshot is a PNG of the viewport.
    let png = tab.screenshot().await.unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let (w, h) =
        (u32::from_be_bytes(png[16..20].try_into().unwrap()), u32::from_be_bytes(png[20..24].try_into().unwrap()));
    assert_eq!((w, h), (640, 480));

    // The host's loopback is not the browser's.
    let to_host = format!("http://127.0.0.1:{host_port}/");
    let nav = tab.cdp("Page.navigate", json!({"url": to_host})).await.unwrap();
    assert!(nav["errorText"].as_str().is_some_and(|e| e.contains("ERR_CONNECTION_REFUSED")), "{nav}");
    let mut accepted = host.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "the host's service was reached"
    );
    if let Ok((s, _)) = &mut accepted {
        let mut b = String::new();
        let _ = s.read_to_string(&mut b);
    }

    // No DevTools port anywhere in the namespace: only the web app listens.
    let listening = ns.exec(&["ss", "-Hltn"]).output().unwrap();
    let listening = String::from_utf8_lossy(&listening.stdout).into_owned();
    let ports: Vec<&str> = listening.lines().filter_map(|l| l.split_whitespace().nth(3)).collect();
    assert_eq!(ports, ["127.0.0.1:8765"], "{listening}");

    // Calls past the tab are refused before they reach the browser.
    for method in
        ["Browser.close", "Target.getTargets", "Fetch.enable", "Storage.clearDataForOrigin", "Page.setDownloadBehavior"]
    {
        let e = tab.cdp(method, json!({})).await.unwrap_err();
        assert!(matches!(e, BrowserError::Refused(_)), "{method}: {e}");
    }
    // The browser's own errors come back as errors.
    let e = tab.cdp("Page.noSuchMethod", json!({})).await.unwrap_err();
    assert!(matches!(e, BrowserError::Protocol { .. }), "{e}");

    // A dialog is dismissed (the page goes on) and logged.
    tab.cdp(
        "Page.navigate",
        json!({"url": "data:text/html,<title>after</title><script>alert('hello there')</script>"}),
    )
    .await
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while tab.dialogs().is_empty() || title(&tab).await != "after" {
        assert!(Instant::now() < deadline, "dialogs: {:?}", tab.dialogs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(tab.dialogs(), ["alert: hello there"]);

    // Dropped, the browser and every process of its group are gone.
    let pid = browser.pid().unwrap() as i32;
    drop(tab);
    drop(browser);
    let deadline = Instant::now() + Duration::from_secs(10);
    while nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), None).is_ok() {
        assert!(Instant::now() < deadline, "chromium's processes outlived the browser");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
