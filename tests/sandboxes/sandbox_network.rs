//! Open networking: a sandbox with `block_network: false` reaches the outside through NAT, never
//! the host's own services or other sandboxes, and an allowlist narrows where it may go.
//!
//! "The outside" is a network namespace this test makes itself (a peer host on a veth pair), so
//! no traffic leaves the machine.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use orchard_tests::Server;
use serde_json::json;

/// A TCP service that answers every connection with one line (no name lookups at start, unlike
/// `python3 -m http.server`, which stalls on DNS in a namespace without any).
const LINE_SERVER: &str = "import socket,sys\ns=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\ns.bind((sys.argv[1], 8080)); s.listen(64)\nwhile True:\n    c,_=s.accept(); c.sendall(b'hello from the peer\\n'); c.close()\n";

/// A peer host in its own network namespace, serving on port 8080.
struct Peer {
    name: String,
    ip: String,
    server: Child,
}

impl Peer {
    fn start() -> Peer {
        let n = std::process::id() % 200 + 20;
        let name = format!("orchard-test-peer-{n}");
        let (host_if, host_ip, ip) = (format!("otp{n}"), format!("10.214.{n}.1"), format!("10.214.{n}.2"));
        let _ = Command::new("ip").args(["netns", "delete", &name]).status();
        let _ = Command::new("ip").args(["link", "delete", &host_if]).status();
        let ok = |args: &[&str]| assert!(Command::new("ip").args(args).status().unwrap().success(), "ip {args:?}");
        ok(&["netns", "add", &name]);
        ok(&["link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &name]);
        ok(&["addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        ok(&["link", "set", &host_if, "up"]);
        ok(&["-n", &name, "addr", "add", &format!("{ip}/30"), "dev", "eth0"]);
        ok(&["-n", &name, "link", "set", "eth0", "up"]);
        ok(&["-n", &name, "link", "set", "lo", "up"]);
        ok(&["-n", &name, "route", "add", "default", "via", &host_ip]);
        let server = Command::new("ip")
            .args(["netns", "exec", &name, "/usr/bin/python3", "-c", LINE_SERVER, &ip])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect((ip.as_str(), 8080)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the peer's service did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Peer { name, ip, server }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.server.kill();
        let _ = self.server.wait();
        let _ = Command::new("ip").args(["netns", "delete", &self.name]).status();
    }
}

/// A shell command that prints what the service at `ip`:8080 says.
fn fetch(ip: &str) -> String {
    format!("timeout 3 bash -c 'exec 3<>/dev/tcp/{ip}/8080 && cat <&3'")
}

#[tokio::test]
async fn open_network_reaches_out_but_never_the_host_and_allowlists_narrow_it() {
    let peer = Peer::start();
    let server = Server::start().await;
    let host_service = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
    let host_port = host_service.local_addr().unwrap().port();

    let open = server.create(json!({"image": "host", "block_network": false})).await;
    let r = server.sh(&open, &fetch(&peer.ip)).await;
    assert_eq!(r.stdout.text, "hello from the peer\n", "{r:?}");
    let r = server.sh(&open, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '").await;
    assert_eq!(r.stdout.text.trim(), "eth0 lo");

    // The host's own services: not on the sandbox's loopback, not through its gateway.
    let gateway = server.record(&open)["network"]["host_ip"].as_str().unwrap().to_string();
    for target in ["127.0.0.1".to_string(), gateway] {
        let r = server
            .sh(&open, &format!("timeout 3 bash -c 'echo > /dev/tcp/{target}/{host_port}' && echo CONNECTED"))
            .await;
        assert!(!r.stdout.text.contains("CONNECTED"), "reached the host at {target}: {r:?}");
    }

    // Not another sandbox either.
    let other = server.create(json!({"image": "host", "block_network": false})).await;
    let other_ip = server.record(&other)["network"]["sandbox_ip"].as_str().unwrap().to_string();
    let (status, _) = server
        .call(
            reqwest::Method::POST,
            &format!("/v1/sandboxes/{other}/processes"),
            Some(json!({"command": ["/usr/bin/python3", "-c", LINE_SERVER, "0.0.0.0"]})),
        )
        .await;
    assert_eq!(status, 200);
    // The service is up (the sandbox itself reaches it) ...
    let r = server.sh(&other, &format!("for i in $(seq 50); do {} && break; sleep 0.1; done", fetch(&other_ip))).await;
    assert_eq!(r.stdout.text, "hello from the peer\n", "{r:?}");
    // ... and the other sandbox does not.
    let r = server.sh(&open, &fetch(&other_ip)).await;
    assert!(!r.stdout.text.contains("hello"), "{r:?}");

    // An allowlist that includes the peer reaches it; one that does not, does not.
    let allowed = server
        .create(json!({"image": "host", "block_network": false, "network_allow": [format!("{}/32", peer.ip)]}))
        .await;
    assert_eq!(server.sh(&allowed, &fetch(&peer.ip)).await.stdout.text, "hello from the peer\n");
    let denied = server.create(json!({"image": "host", "block_network": false, "network_allow": ["192.0.2.99"]})).await;
    let r = server.sh(&denied, &fetch(&peer.ip)).await;
    assert_ne!(r.exit_code, 0, "{r:?}");

    // Deleting an open sandbox removes its namespace and interface.
    let record = server.record(&open);
    let (netns, host_if) = (
        record["network"]["netns"].as_str().unwrap().to_string(),
        record["network"]["host_if"].as_str().unwrap().to_string(),
    );
    server.call(reqwest::Method::DELETE, &format!("/sandboxes/{open}"), None).await;
    // The answer comes once its processes are gone; the network is removed right behind it.
    let gone = || {
        !std::path::Path::new(&format!("/run/netns/{netns}")).exists()
            && !std::path::Path::new(&format!("/sys/class/net/{host_if}")).exists()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gone() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(gone(), "namespace {netns} or interface {host_if} still there 10 s after the delete");
    // A bad allowlist entry is refused by name.
    let (status, v) = server
        .call(
            reqwest::Method::POST,
            "/sandboxes",
            Some(json!({"image": "host", "block_network": false, "network_allow": ["10.0.0.0/99"]})),
        )
        .await;
    assert_eq!(status, 400);
    assert!(v["detail"].as_str().unwrap().contains("network_allow"), "{v}");
    drop(peer);
}
