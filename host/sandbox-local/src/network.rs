//! Networking for sandboxes.
//!
//! By default a sandbox gets a network namespace of its own with only loopback (bubblewrap's
//! `--unshare-net`). With the network open, it gets a namespace wired to the host by a veth pair
//! on a private /30, NAT to the outside, and firewall rules that keep it away from the host's own
//! services and from other sandboxes. An allowlist narrows what it may reach to CIDRs, IPs or
//! domain names (resolved when the sandbox is created).

use std::net::{IpAddr, Ipv4Addr};
use std::process::Command;

use serde::{Deserialize, Serialize};

/// Sandboxes' addresses come from 10.213.0.0/16, four per sandbox.
const POOL: [u8; 2] = [10, 213];
const MAX_SLOTS: u32 = 16_383;
const CHAIN_IN: &str = "ORCHARD-IN";
const CHAIN_FWD: &str = "ORCHARD-FWD";

/// What was set up for one sandbox, recorded so that it can be torn down after a crash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Attachment {
    pub slot: u32,
    pub netns: String,
    pub host_if: String,
    pub host_ip: Ipv4Addr,
    pub sandbox_ip: Ipv4Addr,
    /// Allowed destinations (CIDRs); empty means anywhere but the host and other sandboxes.
    pub allow: Vec<String>,
}

fn slot_addrs(slot: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = slot * 4;
    let (hi, lo) = ((base >> 8) as u8, (base & 0xff) as u8);
    (Ipv4Addr::new(POOL[0], POOL[1], hi, lo + 1), Ipv4Addr::new(POOL[0], POOL[1], hi, lo + 2))
}

fn run(program: &str, args: &[&str], stdin: Option<&str>) -> Result<(), String> {
    use std::io::Write;
    let mut cmd = Command::new(program);
    cmd.args(args).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped());
    if stdin.is_some() {
        cmd.stdin(std::process::Stdio::piped());
    }
    let mut child = cmd.spawn().map_err(|e| format!("{program}: {e} (is it installed?)"))?;
    if let (Some(text), Some(mut input)) = (stdin, child.stdin.take()) {
        input.write_all(text.as_bytes()).map_err(|e| format!("{program}: {e}"))?;
    }
    let out = child.wait_with_output().map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// One-time host setup: forwarding, NAT for the pool, and the chains that fence sandboxes in.
pub fn prepare_host() -> Result<(), String> {
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1").map_err(|e| format!("enabling ip_forward: {e}"))?;
    let pool = format!("{}.{}.0.0/16", POOL[0], POOL[1]);
    for chain in [CHAIN_IN, CHAIN_FWD] {
        // Create, or empty if it is left from an earlier run.
        if run("iptables", &["-N", chain], None).is_err() {
            run("iptables", &["-F", chain], None)?;
        }
    }
    let ensure = |table: &str, rule: &[&str]| -> Result<(), String> {
        let mut check = vec!["-t", table, "-C"];
        check.extend_from_slice(rule);
        if run("iptables", &check, None).is_ok() {
            return Ok(());
        }
        let mut insert = vec!["-t", table, "-I"];
        insert.extend_from_slice(rule);
        run("iptables", &insert, None)
    };
    ensure("filter", &["INPUT", "-s", &pool, "-j", CHAIN_IN])?;
    ensure("filter", &["FORWARD", "-s", &pool, "-j", CHAIN_FWD])?;
    ensure("filter", &["FORWARD", "-d", &pool, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"])?;
    ensure("nat", &["POSTROUTING", "-s", &pool, "!", "-d", &pool, "-j", "MASQUERADE"])?;
    // Nothing from a sandbox reaches the host itself; nothing reaches another sandbox.
    run("iptables", &["-A", CHAIN_IN, "-j", "DROP"], None)?;
    run("iptables", &["-A", CHAIN_FWD, "-d", &pool, "-j", "DROP"], None)?;
    Ok(())
}

/// Resolves allowlist entries (CIDRs, IPs, domain names) to CIDRs.
pub async fn resolve_allow(entries: &[String]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for entry in entries {
        let e = entry.trim();
        if let Some((ip, len)) = e.split_once('/') {
            let ok = ip.parse::<Ipv4Addr>().is_ok() && len.parse::<u8>().is_ok_and(|l| l <= 32);
            if !ok {
                return Err(format!("network_allow: {e:?} is not an IPv4 CIDR"));
            }
            out.push(e.to_string());
        } else if let Ok(ip) = e.parse::<IpAddr>() {
            match ip {
                IpAddr::V4(v4) => out.push(format!("{v4}/32")),
                IpAddr::V6(_) => return Err(format!("network_allow: {e:?}: IPv6 is not supported yet")),
            }
        } else {
            let addrs = tokio::net::lookup_host((e, 0))
                .await
                .map_err(|err| format!("network_allow: cannot resolve {e:?}: {err}"))?;
            let mut any = false;
            for addr in addrs {
                if let IpAddr::V4(v4) = addr.ip() {
                    out.push(format!("{v4}/32"));
                    any = true;
                }
            }
            if !any {
                return Err(format!("network_allow: {e:?} has no IPv4 address"));
            }
        }
    }
    Ok(out)
}

/// Creates the sandbox's namespace, wires it, and installs its rules. `taken` says which slots
/// this host already uses; other hosts on the machine may hold more, which shows when creating
/// the slot's interface fails because it exists.
pub fn attach(instance: &str, id: &str, taken: &dyn Fn(u32) -> bool, allow: Vec<String>) -> Result<Attachment, String> {
    let netns = format!("orchard-{instance}-{id}");
    run("ip", &["netns", "add", &netns], None)?;
    let mut claimed = None;
    for slot in (1..=MAX_SLOTS).filter(|s| !taken(*s)) {
        let host_if = format!("orv{slot}");
        match run("ip", &["link", "add", &host_if, "type", "veth", "peer", "name", "eth0", "netns", &netns], None) {
            Ok(()) => {
                claimed = Some((slot, host_if));
                break;
            }
            Err(e) if e.contains("File exists") => continue,
            Err(e) => {
                let _ = run("ip", &["netns", "delete", &netns], None);
                return Err(e);
            }
        }
    }
    let Some((slot, host_if)) = claimed else {
        let _ = run("ip", &["netns", "delete", &netns], None);
        return Err("no free network slot on this machine".into());
    };
    let (host_ip, sandbox_ip) = slot_addrs(slot);
    let a = Attachment { slot, netns, host_if, host_ip, sandbox_ip, allow };
    let result = (|| {
        let host_batch = format!("addr add {hip}/30 dev {hi}\nlink set {hi} up\n", hi = a.host_if, hip = a.host_ip);
        run("ip", &["-batch", "-"], Some(&host_batch))?;
        let ns_batch = format!(
            "link set lo up\naddr add {sip}/30 dev eth0\nlink set eth0 up\nroute add default via {hip}\n",
            sip = a.sandbox_ip,
            hip = a.host_ip
        );
        run("ip", &["-n", &a.netns, "-batch", "-"], Some(&ns_batch))?;
        if !a.allow.is_empty() {
            let src = format!("{}/32", a.sandbox_ip);
            let mut rules = String::from("*filter\n");
            for cidr in &a.allow {
                rules += &format!("-I {CHAIN_FWD} -s {src} -d {cidr} -j ACCEPT\n");
            }
            // Inserted last, so it lands first: ... then everything else from this sandbox drops.
            rules += "COMMIT\n";
            run("iptables-restore", &["--noflush"], Some(&rules))?;
            run("iptables", &["-I", CHAIN_FWD, &(a.allow.len() + 1).to_string(), "-s", &src, "-j", "DROP"], None)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        detach(&a);
        return Err(e);
    }
    Ok(a)
}

/// The namespace file to `setns` into.
pub fn netns_path(a: &Attachment) -> std::path::PathBuf {
    std::path::Path::new("/run/netns").join(&a.netns)
}

/// Removes the namespace (which removes the veth pair) and the sandbox's rules. Idempotent.
pub fn detach(a: &Attachment) {
    // Deleting the host end removes the pair now; a namespace's own teardown is asynchronous.
    let _ = run("ip", &["link", "delete", &a.host_if], None);
    let _ = run("ip", &["netns", "delete", &a.netns], None);
    let src = format!("{}/32", a.sandbox_ip);
    for cidr in &a.allow {
        let _ = run("iptables", &["-D", CHAIN_FWD, "-s", &src, "-d", cidr, "-j", "ACCEPT"], None);
    }
    if !a.allow.is_empty() {
        let _ = run("iptables", &["-D", CHAIN_FWD, "-s", &src, "-j", "DROP"], None);
    }
}

/// Namespaces of this host instance that no known sandbox owns (left by a crash).
pub fn stray_namespaces(instance: &str, known: &std::collections::HashSet<String>) -> Vec<String> {
    let prefix = format!("orchard-{instance}-");
    std::fs::read_dir("/run/netns")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| n.starts_with(&prefix) && !known.contains(n))
                .collect()
        })
        .unwrap_or_default()
}

pub fn delete_namespace(name: &str) {
    let _ = run("ip", &["netns", "delete", name], None);
}

/// Brings `lo` up in the calling thread's network namespace (a new one has it down).
pub fn loopback_up() -> std::io::Result<()> {
    /// `struct ifreq` with the flags member of its union.
    #[repr(C)]
    struct IfreqFlags {
        name: [u8; libc::IFNAMSIZ],
        flags: libc::c_short,
        _pad: [u8; 22],
    }
    // SAFETY: a datagram socket only for the interface ioctls; closed below.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut req = IfreqFlags { name: [0; libc::IFNAMSIZ], flags: 0, _pad: [0; 22] };
    req.name[..2].copy_from_slice(b"lo");
    // SAFETY: ifreq-shaped buffer for SIOCGIFFLAGS / SIOCSIFFLAGS.
    let result = unsafe {
        if libc::ioctl(sock, libc::SIOCGIFFLAGS, &mut req) < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            req.flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
            if libc::ioctl(sock, libc::SIOCSIFFLAGS, &req) < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) }
        }
    };
    // SAFETY: closing the socket made above.
    unsafe { libc::close(sock) };
    result.map_err(|e| std::io::Error::other(format!("bringing up loopback: {e}")))
}

/// Per-namespace settings Docker makes for a container's network namespace: any port may be
/// bound and ICMP echo sockets opened without capabilities in the namespace's owner (the
/// host's user namespace owns it, so the sandbox's root has none there).
pub fn sandbox_sysctls() {
    let _ = std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0");
    let _ = std::fs::write("/proc/sys/net/ipv4/ping_group_range", "0 2147483647");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_get_disjoint_slash_30s() {
        assert_eq!(slot_addrs(1), (Ipv4Addr::new(10, 213, 0, 5), Ipv4Addr::new(10, 213, 0, 6)));
        assert_eq!(slot_addrs(64), (Ipv4Addr::new(10, 213, 1, 1), Ipv4Addr::new(10, 213, 1, 2)));
        assert_eq!(slot_addrs(MAX_SLOTS).1, Ipv4Addr::new(10, 213, 255, 254));
    }
}
