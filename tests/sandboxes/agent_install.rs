//! `orchard-agent --install PATH`: how the Kubernetes backend's init container puts the agent
//! into the volume the sandbox's image runs it from.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

#[test]
fn the_agent_installs_itself_and_the_copy_runs() {
    let agent = orchard_tests::agent_bin();
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("deep/bin/orchard-agent");
    let out = Command::new(&agent).arg("--install").arg(&target).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&target).unwrap(), std::fs::read(&agent).unwrap());
    assert_eq!(std::fs::metadata(&target).unwrap().permissions().mode() & 0o777, 0o755);
    assert!(!target.with_extension("orchard-partial").exists());
    let version = Command::new(&target).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("orchard-agent "), "{version:?}");
    // Installing is all it does: serving at the same time is refused, by name.
    let both = Command::new(&agent).args(["--install", "/tmp/x", "--listen", "tcp:127.0.0.1:0"]).output().unwrap();
    assert!(!both.status.success());
    assert!(String::from_utf8_lossy(&both.stderr).contains("--install"), "{both:?}");
}
