//! A sandbox's root is not the host's root: its own user namespace, Docker's read-only and
//! masked /proc paths, the bounding set equal to the granted set, Docker's seccomp profile, a
//! size limit on its writable layer, and the mounts `docker run` gives. Each checked from inside,
//! as root, the way an agent would try.

use std::time::{Duration, Instant};

use orchard_tests::Server;
use orchard_tests::images::{TestImage, busybox_layer, owned_files_layer};
use serde_json::json;

/// Docker's default capability set without CAP_MKNOD and CAP_NET_RAW (bits of CapEff).
const GRANTED_CAPS: u64 = 0xa004_05fb;

fn status_field(status: &str, field: &str) -> u64 {
    let hex = status.lines().find_map(|l| l.strip_prefix(field)).unwrap_or_else(|| panic!("{field} in {status}"));
    u64::from_str_radix(hex.trim(), 16).unwrap()
}

#[tokio::test]
async fn root_inside_cannot_change_the_hosts_kernel_or_read_its_secrets() {
    let server = Server::start().await;
    let id = server.create_host().await;
    for write in [
        "echo $(cat /proc/sys/kernel/pid_max) > /proc/sys/kernel/pid_max",
        "echo 10 > /proc/sys/vm/swappiness",
        "echo 1 > /proc/sys/vm/drop_caches",
        "echo 1 > /proc/sys/kernel/sysrq",
        "echo 1 > /proc/sysrq-trigger",
    ] {
        let r = server.sh(&id, write).await;
        assert_ne!(r.exit_code, 0, "{write} succeeded: {r:?}");
    }
    for read in ["/proc/keys", "/proc/timer_list", "/proc/kcore", "/proc/sched_debug"] {
        let r = server.sh(&id, &format!("cat {read}")).await;
        assert!(r.exit_code != 0 || r.stdout.text.is_empty(), "{read} is readable: {r:?}");
    }
    let r = server.sh(&id, "ls /proc/acpi | wc -l; touch /proc/acpi/x").await;
    assert_eq!(r.stdout.text.trim(), "0", "{r:?}");
    assert_ne!(r.exit_code, 0, "{r:?}");

    // Root inside is an unprivileged range outside.
    let r = server.sh(&id, "id -u; cat /proc/self/uid_map /proc/self/gid_map").await;
    let lines: Vec<&str> = r.stdout.text.lines().collect();
    assert_eq!(lines[0], "0");
    for map in &lines[1..3] {
        let fields: Vec<u64> = map.split_whitespace().map(|f| f.parse().unwrap()).collect();
        assert_eq!(fields[0], 0, "{map}");
        assert!(fields[1] >= 1 << 16, "root maps to host id {}: {map}", fields[1]);
        assert_eq!(fields[2], 65536, "{map}");
    }
    // Two sandboxes never share a range.
    let other = server.create_host().await;
    let theirs = server.sh(&other, "cat /proc/self/uid_map").await.stdout.text;
    assert_ne!(theirs.trim(), lines[1].trim());

    // The bounding set is the granted set: no command, however it execs, gets more.
    let status = server.sh(&id, "cat /proc/self/status").await.stdout.text;
    assert_eq!(status_field(&status, "CapEff:"), GRANTED_CAPS, "{status}");
    assert_eq!(status_field(&status, "CapBnd:"), GRANTED_CAPS, "{status}");
    assert_eq!(status_field(&status, "CapAmb:"), 0, "{status}");
}

#[tokio::test]
async fn the_seccomp_profile_refuses_what_docker_refuses_and_real_work_still_runs() {
    let server = Server::start().await;
    let id = server.create_host().await;
    // Each call made raw, through ctypes, so that no library decides for us; errno 1 is EPERM.
    let probe = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
calls = {
    "keyctl": (250, 0, 0, 0, 0),
    "add_key": (248, b"user", b"k", b"v", 1, -2),
    "bpf": (321, 0, 0, 0),
    "perf_event_open": (298, 0, 0, -1, -1, 0),
    "kexec_load": (246, 0, 0, 0, 0),
    "open_by_handle_at": (304, -100, 0, 0),
    "mount": (165, b"none", b"/mnt", b"tmpfs", 0, 0),
    "unshare_user": (272, 0x10000000),
    "ptrace_agent": (101, 16, 1, 0, 0),
}
for name, args in calls.items():
    ctypes.set_errno(0)
    ret = libc.syscall(*[ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args])
    print(name, ret, ctypes.get_errno())
"#;
    let r = server.exec(&id, json!({"command": ["python3", "-c", probe], "timeout_seconds": 30})).await;
    assert_eq!(r.exit_code, 0, "{r:?}");
    for line in r.stdout.text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((fields[1], fields[2]), ("-1", "1"), "{} was not refused with EPERM: {line}", fields[0]);
    }
    assert_eq!(r.stdout.text.lines().count(), 9, "{r:?}");

    // A real workload: a compiler, git, Python with pytest, go test.
    let work = r#"set -e
cd /workspace
printf '#include <stdio.h>\nint main(void){puts("compiled");return 0;}\n' > m.c && cc -o m m.c && ./m
git init -q repo && cd repo && git config user.email a@b.c && git config user.name t
printf 'def add(a, b):\n    return a + b\n' > calc.py
printf 'from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n' > test_calc.py
git add -A && git commit -qm one && git log --oneline | wc -l
python3 -m pytest -q 2>&1 | tail -1
mkdir gomod && cd gomod && printf 'module x\n\ngo 1.19\n' > go.mod
printf 'package x\n\nimport "testing"\n\nfunc TestX(t *testing.T) {}\n' > x_test.go
HOME=/tmp GOCACHE=/tmp/gocache GOFLAGS=-mod=mod go test ./... 2>&1 | tail -1
"#;
    let r = server.exec(&id, json!({"command": work, "timeout_seconds": 300})).await;
    assert_eq!(r.exit_code, 0, "{r:?}");
    let out = &r.stdout.text;
    assert!(out.contains("compiled") && out.contains("1 passed") && out.contains("ok"), "{r:?}");
}

#[tokio::test]
async fn a_sandbox_looks_like_docker_run_from_inside() {
    let server = Server::start().await;
    let id = server.create(json!({"image": "host", "memory": "256Mi", "cpu": 1})).await;
    let check = r#"
echo "hostname=$(hostname)"
grep -q "$(hostname)" /etc/hosts && echo hosts-names-us
test -f /etc/resolv.conf && echo resolv
for d in null zero full random urandom tty; do test -c /dev/$d && echo dev-$d; done
test -d /dev/pts && echo dev-pts
mount | grep -q ' /dev/shm type tmpfs' && touch /dev/shm/x && echo shm-writable
mount | grep -q ' /sys type sysfs (ro' && echo sys-ro
touch /sys/x 2>/dev/null || echo sys-not-writable
cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max
touch /sys/fs/cgroup/x 2>/dev/null || echo cgroup-not-writable
echo 1 > /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || echo limits-not-writable
test -d /sys/class/net/lo && echo sys-net-lo
ls /sys/firmware | wc -l
ls /sys/class/net
"#;
    let r = server.sh(&id, check).await;
    let out = r.stdout.text.clone();
    assert!(out.contains(&format!("hostname={id}")), "{r:?}");
    for expected in [
        "hosts-names-us",
        "resolv",
        "dev-null",
        "dev-zero",
        "dev-full",
        "dev-random",
        "dev-urandom",
        "dev-tty",
        "dev-pts",
        "shm-writable",
        "sys-ro",
        "sys-not-writable",
        "cgroup-not-writable",
        "limits-not-writable",
        "sys-net-lo",
        "268435456",
    ] {
        assert!(out.lines().any(|l| l == expected), "missing {expected:?} in:\n{out}");
    }
    // /sys shows the sandbox's own network (only loopback), and firmware is masked.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[lines.len() - 2], "0", "{out}");
    assert_eq!(lines[lines.len() - 1], "lo", "{out}");
}

#[tokio::test]
async fn images_whose_files_belong_to_many_users_keep_their_owners() {
    let tmp = tempfile::tempdir().unwrap();
    let layout = tmp.path().join("layout");
    let owned = owned_files_layer(&[
        ("app/root.txt", 0, 0, b"r"),
        ("app/user.txt", 1000, 1000, b"u"),
        ("app/nobody.txt", 65534, 65534, b"n"),
        ("app/high.txt", 60000, 60001, b"h"),
    ]);
    TestImage::new(vec![busybox_layer(&[]), owned], &["PATH=/bin"], "/app").write_layout(&layout, "v1");
    let server = Server::with_image_root(tmp.path()).await;
    let id = server.create(json!({"image": format!("oci:{}:v1", layout.display())})).await;
    let r = server.sh(&id, "for f in root user nobody high; do stat -c '%n %u %g' $f.txt; done").await;
    assert_eq!(
        r.stdout.text, "root.txt 0 0\nuser.txt 1000 1000\nnobody.txt 65534 65534\nhigh.txt 60000 60001\n",
        "{r:?}"
    );
    // Root inside may change them (they are its own), which a container's root can.
    let r = server.sh(&id, "chown 1000:1000 root.txt && echo more >> user.txt && stat -c '%u' root.txt").await;
    assert_eq!((r.exit_code, r.stdout.text.as_str()), (0, "1000\n"), "{r:?}");
}

fn free_bytes(path: &std::path::Path) -> u64 {
    let s = nix::sys::statvfs::statvfs(path).unwrap();
    s.blocks_available() * s.fragment_size()
}

#[tokio::test]
async fn a_disk_filler_gets_enospc_at_its_limit_and_the_host_keeps_its_space() {
    let server = Server::start().await;
    let id = server.create(json!({"image": "host", "disk": "64Mi"})).await;
    let before = free_bytes(&server.state_dir);
    let r = server.sh(&id, "dd if=/dev/zero of=/fill bs=1M count=1024 2>&1; echo rc=$?; df -k / | tail -1").await;
    assert!(r.stdout.text.contains("No space left on device"), "{r:?}");
    assert!(r.stdout.text.contains("rc=1"), "{r:?}");
    let after = free_bytes(&server.state_dir);
    let used = before.saturating_sub(after);
    // Other tests write to the same filesystem meanwhile: the point is that the 1 GiB write did
    // not land on the host.
    assert!(used < 256 << 20, "the host lost {} MiB to a 64 MiB sandbox", used >> 20);
    // The sandbox goes on working within its limit once it frees space.
    let r = server.sh(&id, "rm /fill && echo fine > /after && cat /after").await;
    assert_eq!(r.stdout.text, "fine\n", "{r:?}");
    // A limit the host cannot meet is refused by name, never silently dropped.
    let (status, v) =
        server.call(reqwest::Method::POST, "/sandboxes", Some(json!({"image": "host", "disk": "1Mi"}))).await;
    assert_eq!(status, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().starts_with("disk:"), "{v}");
}

/// Median round trip of a trivial exec.
async fn exec_p50(server: &Server, id: &str, n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let r = server.exec(id, json!({"command": ["true"], "timeout_seconds": 30})).await;
        assert_eq!(r.exit_code, 0);
        times.push(t.elapsed());
    }
    times.sort();
    times[n / 2]
}

#[tokio::test]
async fn a_fork_bomb_and_a_disk_filler_leave_a_sibling_answering() {
    let server = Server::start().await;
    let noisy = server.create(json!({"image": "host", "pids": 64, "disk": "128Mi", "cpu": 0.5})).await;
    let sibling = server.create_host().await;
    let baseline = exec_p50(&server, &sibling, 21).await;
    // Both run in the background for the whole measurement. The filler starts first: once the
    // bomb has taken the sandbox's 64 pids, nothing more starts there (as it should).
    let (status, v) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{noisy}/processes"),
            Some(json!({"command": "while :; do dd if=/dev/zero of=/f.$RANDOM bs=1M count=64 2>/dev/null; done"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{noisy}/processes"),
            Some(json!({"command": "bomb() { bomb | bomb & }; bomb"})),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = exec_p50(&server, &sibling, 21).await;
    // Generous bound: the sibling answers at about its normal speed, not seconds later.
    assert!(
        loaded < baseline * 5 + Duration::from_millis(50),
        "the sibling slowed from {baseline:?} to {loaded:?} under a neighbour's fork bomb and disk filler"
    );
    // The noisy sandbox hit its own limits.
    let r = server.sh(&sibling, "echo alive").await;
    assert_eq!(r.stdout.text, "alive\n");
    let (status, _) = server.call(reqwest::Method::DELETE, &format!("/sandboxes/{noisy}"), None).await;
    assert_eq!(status, 200);
}
