//! The desktop service (`orchard-agent desktop`): a real Xvfb and window manager, driven by
//! OSWorld's own client (`desktop_env` 1.0.2's `PythonController`, unchanged, from the Python
//! 3.12 venv): screenshots that show what is on the screen, scripts and commands run on the
//! display, files, directory trees; the X server dies with the service.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;

/// Width and height from a PNG's IHDR.
fn png_size(png: &[u8]) -> (u32, u32) {
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    (be(&png[16..20]), be(&png[20..24]))
}

fn decoded_pixels(png: &[u8]) -> Vec<u8> {
    let decoder = png::Decoder::new(std::io::Cursor::new(png));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    buf.truncate(info.buffer_size());
    buf
}

/// Starts `orchard-agent desktop` of `size` on `display` (with `path` as its PATH when given),
/// its port file in `dir`; the service and the port it listens on.
async fn start_desktop(dir: &Path, size: &str, display: u32, path: Option<String>) -> (tokio::process::Child, String) {
    let port_file = dir.join("port");
    let mut command = tokio::process::Command::new(orchard_tests::agent_bin());
    command.args(["desktop", "--listen", "127.0.0.1:0", "--size", size, "--display", &display.to_string()]);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let mut service = command
        .arg("--port-file")
        .arg(&port_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Ok(port) = std::fs::read_to_string(&port_file) {
            return (service, port);
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the desktop did not start");
        assert!(service.try_wait().unwrap().is_none(), "the desktop service exited at start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn osworlds_client_drives_an_orchard_desktop() {
    let Some(python) = orchard_tests::py312_tool("python") else { return };
    if !Path::new("/usr/bin/Xvfb").exists() {
        panic!("Xvfb is missing: `cargo xtask setup` installs it (the xvfb package)");
    }
    let dir = tempfile::tempdir().unwrap();
    // A display number of this process's own: tests run side by side.
    let display = 100 + std::process::id() % 800;
    let (mut service, port) = start_desktop(dir.path(), "800x600x24", display, None).await;
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/desktop/osworld_client.py");
    let out = tokio::process::Command::new(python).arg(&script).arg(&port).arg(&scratch).output().await.unwrap();
    let said = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{said}");
    let got: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();

    assert_eq!(got["size"], serde_json::json!({"width": 800, "height": 600}), "{said}");
    assert_eq!(got["bash"]["returncode"], 0, "{got:#}");
    assert_eq!(got["bash"]["output"], format!("display=:{display}\n"), "{got:#}");
    assert_eq!(
        (got["bash_fail"]["returncode"].as_i64(), got["bash_fail"]["status"].as_str()),
        (Some(3), Some("error"))
    );
    assert_eq!(got["bash_fail"]["output"], "nope\n");
    assert!(got["bash_timeout"]["error"].as_str().unwrap().contains("timed out after 1 seconds"), "{got:#}");
    // The screenshots: PNGs of the screen's size; the window opened in between shows.
    let screens: Vec<Vec<u8>> = got["screens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| base64::engine::general_purpose::STANDARD.decode(s.as_str().unwrap()).unwrap())
        .collect();
    for s in &screens {
        assert_eq!(png_size(s), (800, 600));
    }
    let (before, after) = (decoded_pixels(&screens[0]), decoded_pixels(&screens[1]));
    let changed = before.chunks(3).zip(after.chunks(3)).filter(|(a, b)| a != b).count();
    assert!(changed > 300 * 100 / 2, "the window did not show: {changed} pixels changed");
    assert_eq!(got["python"]["output"], "42\n", "{got:#}");
    assert_eq!(got["python"]["return_code"], 0);
    assert_eq!(got["execute"]["output"], format!(":{display}\n"), "{got:#}");
    assert_eq!(got["file"], "orchard\n");
    assert!(got["missing_file"].is_null());
    let tree = &got["tree"];
    assert_eq!((tree["name"].as_str(), tree["type"].as_str()), (Some("scratch"), Some("directory")), "{tree}");
    let names: Vec<&str> = tree["children"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["note.txt", "sub"]);
    assert!(got["desktop_path"].as_str().unwrap().ends_with("/Desktop"));
    // The accessibility tree, as OSWorld's XML: the editor's frame named by its file, and the
    // file's text in its text node.
    let tree = got["accessibility"].as_str().unwrap_or_default();
    assert!(tree.starts_with("<desktop-frame"), "{tree:.300}");
    assert!(tree.contains("https://accessibility.ubuntu.example.org/ns/state"), "{tree:.300}");
    assert!(
        tree.contains("<application name=\"mousepad\"") || tree.contains("<application name=\"Mousepad\""),
        "{tree:.500}"
    );
    assert!(tree.contains("note.txt - Mousepad") && tree.contains(">orchard\n"), "{tree:.500}");

    // The X server dies with the service, even killed outright.
    let socket = format!("/tmp/.X11-unix/X{display}");
    assert!(Path::new(&socket).exists());
    let pid = service.id().unwrap() as i32;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let _ = service.wait().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let xvfb_alive = || {
        std::process::Command::new("pgrep")
            .args(["-f", &format!("Xvfb :{display} ")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    while xvfb_alive() {
        assert!(Instant::now() < deadline, "Xvfb :{display} outlived the desktop service");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // What the killed server left does not keep the display: a new desktop starts on it.
    let mut again = tokio::process::Command::new(orchard_tests::agent_bin())
        .args(["desktop", "--listen", "127.0.0.1:0", "--size", "640x480", "--display", &display.to_string()])
        .arg("--port-file")
        .arg(dir.path().join("port2"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("again.log")).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.path().join("port2").exists() {
        let said = || std::fs::read_to_string(dir.path().join("again.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "a second desktop did not start on :{display}: {}", said());
        assert!(again.try_wait().unwrap().is_none(), "a second desktop exited at start on :{display}: {}", said());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = again.kill().await;
}

/// An opener that ends like a crashed first start, then shows a window named by the file.
const FLAKY_OPENER: &str = r#"#!/bin/sh
count="$(dirname "$0")/count-$(basename "$1")"
echo x >> "$count"
case "$(basename "$1")" in
  never.bin) echo "no application for $1" >&2; exit 4 ;;
esac
if [ "$(wc -l < "$count")" -lt 2 ]; then echo "crashed at its first start" >&2; exit 1; fi
exec xmessage -title "$(basename "$1") - Viewer" opened
"#;

/// OSWorld's `/setup/open_file` runs the opener again when no window shows (an app that died
/// on a slow first start), and when none ever does, answers within the tries — not after the
/// full wait — with how each opener ended and what it printed.
#[tokio::test(flavor = "multi_thread")]
async fn open_file_asks_again_when_no_window_shows_and_says_why_it_failed() {
    if !Path::new("/usr/bin/Xvfb").exists() || !Path::new("/usr/bin/xmessage").exists() {
        panic!("Xvfb and xmessage are missing: `cargo xtask setup` installs them");
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let opener = bin.join("xdg-open");
    std::fs::write(&opener, FLAKY_OPENER).unwrap();
    std::fs::set_permissions(&opener, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let display = 1000 + std::process::id() % 800;
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let (mut service, port) = start_desktop(dir.path(), "640x480", display, Some(path)).await;
    let http = orchard_tests::http_client();
    let open = |file: String| {
        let http = http.clone();
        let url = format!("http://127.0.0.1:{}/setup/open_file", port.trim());
        async move {
            let started = Instant::now();
            let response = http.post(url).json(&serde_json::json!({"path": file})).send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap(), started.elapsed())
        }
    };
    let file = |name: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, "data").unwrap();
        path.display().to_string()
    };

    // The first opener fails; the second shows the window: one answer, after two tries.
    let (status, body, _) = open(file("report.txt")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(std::fs::read_to_string(bin.join("count-report.txt")).unwrap().lines().count(), 2);

    // No opener ever succeeds: three tries, answered well before the two-minute wait.
    let (status, body, took) = open(file("never.bin")).await;
    assert_eq!(status, 500, "{body}");
    assert!(took < Duration::from_secs(30), "took {took:?}: {body}");
    assert_eq!(std::fs::read_to_string(bin.join("count-never.bin")).unwrap().lines().count(), 3);
    for said in ["no window for never.bin", "xdg-open try 3: exit status: 4", "no application for"] {
        assert!(body.contains(said), "{said:?} missing from {body}");
    }

    // A file that is not there is named, and nothing is run.
    let (status, body, _) = open(dir.path().join("absent.txt").display().to_string()).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("absent.txt"), "{body}");
    assert!(!bin.join("count-absent.txt").exists());
    let _ = service.kill().await;
}
