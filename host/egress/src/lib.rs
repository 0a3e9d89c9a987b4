//! Where the server may connect when a tenant names a URL (a model endpoint, a tokenizer, a
//! judge).
//!
//! Invariants:
//!
//! - **Only what the operator allowed.** A [`Policy`] built from `--model-allow` rules admits a
//!   URL only when a rule matches its host (or every address it resolves to) and its port. With
//!   no rule, a hosted server reaches nothing a tenant names; `orchard eval` on the operator's
//!   own machine uses [`Policy::open`].
//! - **Private ranges stay private.** Loopback, link-local, the private and shared ranges,
//!   multicast and the unspecified address are refused unless a network rule covering the
//!   address, or a rule naming the host exactly, allows them; a wildcard rule (`*`,
//!   `*.example.com`) never reaches them.
//! - **Resolved once.** A name is resolved when the URL is checked, every address it gives must
//!   pass, and the client connects to exactly those addresses ([`Destination::pin`]): a DNS
//!   answer that changes between the check and the connection (rebinding) changes nothing.
//!   Confined clients follow no redirects.
//! - **Errors teach nothing.** A refused URL is answered with the field's name and one message,
//!   whether the name did not resolve, resolved somewhere private or matched no rule.

#![warn(missing_docs)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

pub use reqwest::Url;

/// A refused URL: the request field that named it and why, in words safe to show a tenant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct EgressError {
    /// The request field that named the URL (`model.url`).
    pub field: String,
    /// Why it was refused.
    pub reason: String,
}

/// One allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// Every public address (`*`).
    AnyPublic,
    /// A host name exactly (lowercase).
    Host(String),
    /// Any name under a domain (`*.example.com`; lowercase, without the `*.`).
    Suffix(String),
    /// An address range (an address alone is a /32 or /128).
    Net(IpAddr, u8),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    target: Target,
    port: Option<u16>,
}

/// The operator's rules for outgoing requests a tenant's input causes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `None`: anything goes (the operator's own machine).
    rules: Option<Vec<Rule>>,
}

/// A checked URL and the addresses the client must connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// The URL as the tenant named it.
    pub url: Url,
    /// The host name the addresses are pinned for (`None` for an address literal or an open policy).
    host: Option<String>,
    addrs: Vec<SocketAddr>,
}

/// How long resolving a name may take.
const RESOLVE_WITHIN: Duration = Duration::from_secs(5);

impl Policy {
    /// Any URL: for the operator's own runs (`orchard eval`), never for tenants.
    pub fn open() -> Policy {
        Policy { rules: None }
    }

    /// The rules, as the operator writes them: `HOST[:PORT]`, `*.DOMAIN[:PORT]`, `*[:PORT]`
    /// (any public address), `ADDRESS[:PORT]`, `CIDR[:PORT]`; IPv6 in brackets
    /// (`[fd00::/8]:443`). An empty list allows nothing.
    pub fn allow<S: AsRef<str>>(rules: &[S]) -> Result<Policy, String> {
        let rules = rules.iter().map(|r| parse_rule(r.as_ref().trim())).collect::<Result<Vec<_>, _>>()?;
        Ok(Policy { rules: Some(rules) })
    }

    /// Whether this policy admits every URL ([`Policy::open`], the operator's own runs).
    pub fn is_open(&self) -> bool {
        self.rules.is_none()
    }

    /// Checks `url` (named `field` in errors) and resolves it once.
    pub async fn check(&self, field: &str, url: &str) -> Result<Destination, EgressError> {
        let refuse = |reason: &str| EgressError { field: field.to_string(), reason: reason.to_string() };
        let parsed = Url::parse(url).map_err(|_| refuse("not a URL"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(refuse("not an http(s) URL"));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(refuse("credentials do not go in the URL; name a secret instead"));
        }
        let Some(rules) = &self.rules else {
            return Ok(Destination { url: parsed, host: None, addrs: Vec::new() });
        };
        let not_allowed = || refuse("not a destination this server allows (ask its operator)");
        let port = parsed.port_or_known_default().ok_or_else(not_allowed)?;
        let (name, addrs): (Option<String>, Vec<SocketAddr>) = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => (None, vec![SocketAddr::new(IpAddr::V4(ip), port)]),
            Some(url::Host::Ipv6(ip)) => (None, vec![SocketAddr::new(IpAddr::V6(ip), port)]),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                // A name no rule could admit is refused before it is looked up.
                let could = rules.iter().any(|r| {
                    r.port.is_none_or(|p| p == port)
                        && match &r.target {
                            Target::Host(h) => *h == name,
                            Target::Suffix(s) => name.ends_with(&format!(".{s}")),
                            Target::AnyPublic | Target::Net(..) => true,
                        }
                });
                if !could {
                    return Err(not_allowed());
                }
                let found = tokio::time::timeout(RESOLVE_WITHIN, tokio::net::lookup_host((name.as_str(), port)))
                    .await
                    .map_err(|_| not_allowed())?
                    .map_err(|_| not_allowed())?;
                let mut addrs: Vec<SocketAddr> = found.collect();
                addrs.sort();
                addrs.dedup();
                (Some(name), addrs)
            }
            None => return Err(not_allowed()),
        };
        if addrs.is_empty() || !addrs.iter().all(|a| admits(rules, name.as_deref(), a.ip(), port)) {
            return Err(not_allowed());
        }
        Ok(Destination { url: parsed, host: name, addrs })
    }
}

impl Destination {
    /// The client builder, made to connect to the checked addresses only and (when confined)
    /// to follow no redirect.
    pub fn pin(&self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        match &self.host {
            Some(host) => builder.resolve_to_addrs(host, &self.addrs).redirect(reqwest::redirect::Policy::none()),
            None if !self.addrs.is_empty() => builder.redirect(reqwest::redirect::Policy::none()),
            None => builder,
        }
    }

    /// Whether the client must stay on the checked addresses (a tenant's URL on a server).
    pub fn is_confined(&self) -> bool {
        !self.addrs.is_empty()
    }
}

/// Whether some rule admits `ip:port` (reached by the name `name`, if any).
fn admits(rules: &[Rule], name: Option<&str>, ip: IpAddr, port: u16) -> bool {
    let ip = canonical(ip);
    rules.iter().filter(|r| r.port.is_none_or(|p| p == port)).any(|r| match &r.target {
        // The operator named this host: where it points is theirs to trust.
        Target::Host(h) => name == Some(h.as_str()),
        Target::Suffix(s) => name.is_some_and(|n| n.ends_with(&format!(".{s}"))) && !is_special(ip),
        Target::AnyPublic => !is_special(ip),
        Target::Net(net, prefix) => in_net(ip, canonical(*net), *prefix),
    })
}

/// An IPv4 address mapped into IPv6 is the IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if prefix == 0 { 0 } else { u32::MAX << (32 - u32::from(prefix.min(32))) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if prefix == 0 { 0 } else { u128::MAX << (128 - u32::from(prefix.min(128))) };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Addresses no wildcard may reach: this machine, its networks, and what is not unicast.
pub fn is_special(ip: IpAddr) -> bool {
    const V4: &[(Ipv4Addr, u8)] = &[
        (Ipv4Addr::new(0, 0, 0, 0), 8),
        (Ipv4Addr::new(10, 0, 0, 0), 8),
        (Ipv4Addr::new(100, 64, 0, 0), 10),
        (Ipv4Addr::new(127, 0, 0, 0), 8),
        (Ipv4Addr::new(169, 254, 0, 0), 16),
        (Ipv4Addr::new(172, 16, 0, 0), 12),
        (Ipv4Addr::new(192, 0, 0, 0), 24),
        (Ipv4Addr::new(192, 168, 0, 0), 16),
        (Ipv4Addr::new(198, 18, 0, 0), 15),
        (Ipv4Addr::new(224, 0, 0, 0), 4),
        (Ipv4Addr::new(240, 0, 0, 0), 4),
    ];
    const V6: &[(Ipv6Addr, u8)] = &[
        (Ipv6Addr::UNSPECIFIED, 128),
        (Ipv6Addr::LOCALHOST, 128),
        (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96),
        (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),
        (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10),
        (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),
    ];
    match canonical(ip) {
        IpAddr::V4(v4) => V4.iter().any(|(n, p)| in_net(IpAddr::V4(v4), IpAddr::V4(*n), *p)),
        IpAddr::V6(v6) => V6.iter().any(|(n, p)| in_net(IpAddr::V6(v6), IpAddr::V6(*n), *p)),
    }
}

fn parse_rule(text: &str) -> Result<Rule, String> {
    let bad = |why: &str| format!("--model-allow {text:?}: {why}");
    if text.is_empty() {
        return Err(bad("empty"));
    }
    // Split off a port: `[v6]:port`, or the last `:` of a rule that is not bare IPv6.
    let (target, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inner, after) = rest.split_once(']').ok_or_else(|| bad("an IPv6 rule closes its ']'"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| bad("expected :PORT after ']'"))?),
        };
        (inner, port)
    } else {
        match text.rsplit_once(':') {
            Some((t, p)) if !t.contains(':') => (t, Some(p)),
            Some(_) => return Err(bad("write IPv6 in brackets: [fd00::/8]:443")),
            None => (text, None),
        }
    };
    let port = port
        .map(|p| p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| bad("the port is not a number 1-65535")))
        .transpose()?;
    let target = if target == "*" {
        Target::AnyPublic
    } else if let Some(domain) = target.strip_prefix("*.") {
        if domain.is_empty() || !valid_name(domain) {
            return Err(bad("not a domain after '*.'"));
        }
        Target::Suffix(domain.to_ascii_lowercase())
    } else if let Some((addr, prefix)) = target.split_once('/') {
        let addr: IpAddr = addr.parse().map_err(|_| bad("not an address before '/'"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix: u8 = prefix.parse().ok().filter(|p| *p <= max).ok_or_else(|| bad("not a prefix length"))?;
        Target::Net(addr, prefix)
    } else if let Ok(addr) = target.parse::<IpAddr>() {
        Target::Net(addr, if addr.is_ipv4() { 32 } else { 128 })
    } else if valid_name(target) {
        Target::Host(target.trim_end_matches('.').to_ascii_lowercase())
    } else {
        return Err(bad("expected HOST, *.DOMAIN, *, ADDRESS or CIDR, with an optional :PORT"));
    };
    Ok(Rule { target, port })
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.trim_end_matches('.').split('.').all(|label| {
            !label.is_empty() && label.len() <= 63 && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn ok(policy: &Policy, url: &str) -> bool {
        policy.check("model.url", url).await.is_ok()
    }

    #[tokio::test]
    async fn nothing_is_allowed_without_rules() {
        let none = Policy::allow::<&str>(&[]).unwrap();
        for url in ["http://127.0.0.1:8000/v1", "http://localhost/v1", "https://93.184.216.34/v1"] {
            let err = none.check("model.url", url).await.unwrap_err();
            assert_eq!(err.field, "model.url");
            assert!(err.reason.contains("not a destination this server allows"), "{err}");
        }
    }

    #[tokio::test]
    async fn wildcards_never_reach_private_addresses() {
        let public = Policy::allow(&["*"]).unwrap();
        assert!(ok(&public, "https://93.184.216.34/v1").await);
        for url in [
            "http://127.0.0.1:8000/v1",
            "http://localhost:8000/v1",
            "http://10.1.2.3/v1",
            "http://169.254.169.254/latest",
            "http://[::1]:8000/v1",
            "http://[::ffff:127.0.0.1]/v1",
            "http://[fe80::1]/v1",
            "http://0.0.0.0:8000/v1",
            "http://192.168.1.1/v1",
        ] {
            assert!(!ok(&public, url).await, "{url} passed a wildcard");
        }
    }

    #[tokio::test]
    async fn networks_hosts_and_ports_are_matched_as_written() {
        let p = Policy::allow(&["127.0.0.1:8000", "10.0.0.0/8", "localhost:9000", "[fd00::/8]:443"]).unwrap();
        assert!(ok(&p, "http://127.0.0.1:8000/v1").await);
        assert!(!ok(&p, "http://127.0.0.1:8001/v1").await, "another port on an allowed address");
        assert!(ok(&p, "http://10.9.8.7:1234/v1").await);
        assert!(!ok(&p, "http://11.0.0.1/v1").await);
        // A host rule trusts where the operator's name points (localhost is loopback).
        assert!(ok(&p, "http://localhost:9000/v1").await);
        assert!(!ok(&p, "http://localhost:9001/v1").await);
        assert!(ok(&p, "https://[fd00::5]/v1").await);
        assert!(!ok(&p, "http://[fd00::5]/v1").await, "port 80 is not 443");
    }

    #[tokio::test]
    async fn a_checked_name_is_pinned_to_what_it_resolved_to() {
        let p = Policy::allow(&["localhost"]).unwrap();
        let dest = p.check("model.url", "http://localhost:7/v1").await.unwrap();
        assert!(dest.is_confined());
        assert!(dest.addrs.iter().all(|a| a.ip().is_loopback() && a.port() == 7), "{:?}", dest.addrs);
        assert_eq!(dest.host.as_deref(), Some("localhost"));
    }

    #[tokio::test]
    async fn urls_that_are_not_http_or_carry_credentials_are_refused() {
        let open = Policy::open();
        assert!(open.check("u", "file:///etc/passwd").await.is_err());
        assert!(open.check("u", "http://user:pw@example.com/").await.is_err());
        assert!(open.check("u", "http://127.0.0.1:1/v1").await.is_ok(), "the operator's own runs take any URL");
    }

    #[test]
    fn bad_rules_are_refused_with_the_rule_named() {
        for bad in ["", "::1", "10.0.0.0/33", "host:0", "host:x", "*.", "[::1", "a b"] {
            let err = Policy::allow(&[bad]).unwrap_err();
            assert!(err.contains("--model-allow"), "{bad}: {err}");
        }
        assert!(Policy::allow(&["[::1]:8000", "*.openai.com:443", "api.example.com"]).is_ok());
    }
}
