//! References measured on this machine in the same run.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::stats::Samples;

/// The floor any exec pays: fork+exec+wait of `true` on the host, no sandbox, no HTTP.
pub fn fork_exec_true(n: usize) -> Samples {
    let mut s = Samples::default();
    for _ in 0..n {
        let t = Instant::now();
        let _ = Command::new("true").status();
        s.push(t.elapsed());
    }
    s
}

/// A bare bubblewrap sandbox running `true` (the isolation floor of a create).
pub fn bwrap_start(n: usize) -> Result<Samples, String> {
    let mut s = Samples::default();
    for _ in 0..n {
        let t = Instant::now();
        let status = Command::new("bwrap")
            .args(["--unshare-all", "--as-pid-1", "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin"])
            .args([
                "--symlink",
                "usr/lib",
                "/lib",
                "--symlink",
                "usr/lib64",
                "/lib64",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "true",
            ])
            .status()
            .map_err(|e| format!("bwrap: {e}"))?;
        if !status.success() {
            return Err("bwrap failed".into());
        }
        s.push(t.elapsed());
    }
    Ok(s)
}

/// `runc run` of `true` in a busybox rootfs: the OCI runtime others build on.
pub fn runc_start(n: usize) -> Result<Samples, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rootfs = dir.path().join("rootfs/bin");
    std::fs::create_dir_all(&rootfs).map_err(|e| e.to_string())?;
    std::fs::copy("/bin/busybox", rootfs.join("busybox")).map_err(|_| "runc: needs busybox-static".to_string())?;
    std::os::unix::fs::symlink("busybox", rootfs.join("true")).map_err(|e| e.to_string())?;
    let spec = Command::new("runc")
        .arg("spec")
        .current_dir(dir.path())
        .status()
        .map_err(|_| "runc not installed".to_string())?;
    if !spec.success() {
        return Err("runc spec failed".into());
    }
    let config_path = dir.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&config_path).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    config["process"]["terminal"] = false.into();
    config["process"]["args"] = serde_json::json!(["true"]);
    std::fs::write(&config_path, config.to_string()).map_err(|e| e.to_string())?;
    let mut s = Samples::default();
    for i in 0..n {
        let t = Instant::now();
        let status = Command::new("runc")
            .args(["run", "-b"])
            .arg(dir.path())
            .arg(format!("orchard-bench-{}-{i}", std::process::id()))
            .stdout(Stdio::null())
            .status()
            .map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("runc run failed".into());
        }
        s.push(t.elapsed());
    }
    Ok(s)
}

/// A field of /proc/PID/status in KiB.
pub fn status_kb(pid: i32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with(&format!("{field}:")))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// CPU seconds (user + system) a process has used: /proc/PID/stat's utime and stime, in the
/// kernel's fixed USER_HZ of 100 ticks a second.
pub fn cpu_seconds(pid: i32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start after its closing parenthesis.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Idle RSS of the smallest Python HTTP agent: `python3 -m http.server`.
pub fn python_http_server_rss_kb() -> Option<u64> {
    let mut child = Command::new("python3")
        .args(["-m", "http.server", "0", "--bind", "127.0.0.1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(800));
    let rss = status_kb(child.id() as i32, "VmRSS");
    let _ = child.kill();
    let _ = child.wait();
    rss
}
