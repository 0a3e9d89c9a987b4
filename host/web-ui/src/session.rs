//! Signing in with an API key: the key is checked once and the browser keeps a signed session
//! cookie (HttpOnly, SameSite=Strict), never the key. A session is a tenant, a random id, an
//! expiry and an HMAC over them, so every replica with the same keys accepts it and changing the
//! keys ends every session. Signing out records the id as revoked in the store every replica
//! reads ([`Session::id`]); a revoked id never opens a page again, even before it expires.
//! Forms carry a CSRF token derived from the session; a form posted without the right one is
//! refused. The sign-in form itself has no session yet: it is accepted only from this origin
//! (`Sec-Fetch-Site`/`Origin`), so another site cannot sign a browser in as its own tenant.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The session cookie's name.
pub const COOKIE: &str = "orchard_session";

/// Checks an API key: the tenant it belongs to.
pub type KeyCheck = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// A request's valid session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The signed-in tenant.
    pub tenant: String,
    /// What sign-out revokes (`None` on an open server, where nobody signs in).
    pub id: Option<String>,
    /// Unix seconds: a revocation is kept until then.
    pub expires_at: u64,
}

/// Signs and checks session cookies.
pub struct Sessions {
    secret: Vec<u8>,
    check: KeyCheck,
    /// A server without keys (loopback, one operator): everybody is this tenant, no sign-in.
    open_tenant: Option<String>,
    lifetime_secs: u64,
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Sessions {
    /// `secret` signs sessions: derive it from what every replica shares (the API keys).
    pub fn new(secret: Vec<u8>, check: KeyCheck, open_tenant: Option<String>) -> Sessions {
        Sessions { secret, check, open_tenant, lifetime_secs: 12 * 3600 }
    }

    fn mac(&self, text: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(text.as_bytes());
        hex::encode(mac.finalize().into_bytes())
    }

    fn verify_mac(&self, text: &str, tag_hex: &str) -> bool {
        let Ok(tag) = hex::decode(tag_hex) else { return false };
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.secret).expect("HMAC takes any key length");
        mac.update(text.as_bytes());
        mac.verify_slice(&tag).is_ok() // constant time
    }

    /// A server without keys: everybody is its one tenant.
    pub fn is_open(&self) -> bool {
        self.open_tenant.is_some()
    }

    /// A session cookie's value for `key`, if it is a key.
    pub fn sign_in(&self, key: &str) -> Option<(String, String)> {
        let tenant = (self.check)(key.trim())?;
        let expiry = now() + self.lifetime_secs;
        let id = hex::encode(rand::random::<[u8; 16]>());
        let body = format!("{}.{id}.{expiry}", hex::encode(tenant.as_bytes()));
        let tag = self.mac(&format!("session|{body}"));
        Some((tenant, format!("{body}.{tag}")))
    }

    /// The `Set-Cookie` value for a new session.
    pub fn set_cookie(&self, value: &str, secure: bool) -> String {
        let secure = if secure { "; Secure" } else { "" };
        format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}", self.lifetime_secs)
    }

    /// A cookie that ends the session.
    pub fn clear_cookie() -> String {
        format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
    }

    /// The session cookie's value in a request, as sent.
    pub fn cookie_value(headers: &HeaderMap) -> Option<String> {
        headers
            .get_all(axum::http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| *k == COOKIE)
            .map(|(_, v)| v.to_string())
    }

    /// The tenant of a request's session: a valid, unexpired cookie (or the open tenant).
    /// Whether it was revoked is the caller's question to the store ([`Session::id`]).
    pub fn session(&self, headers: &HeaderMap) -> Option<Session> {
        if let Some(t) = &self.open_tenant {
            return Some(Session { tenant: t.clone(), id: None, expires_at: 0 });
        }
        let value = Self::cookie_value(headers)?;
        let mut parts = value.rsplitn(2, '.');
        let (tag, body) = (parts.next()?, parts.next()?);
        if !self.verify_mac(&format!("session|{body}"), tag) {
            return None;
        }
        let mut fields = body.split('.');
        let (tenant_hex, id, expiry) = (fields.next()?, fields.next()?, fields.next()?);
        let expires_at = expiry.parse::<u64>().ok()?;
        if fields.next().is_some() || expires_at < now() {
            return None;
        }
        let tenant = String::from_utf8(hex::decode(tenant_hex).ok()?).ok()?;
        Some(Session { tenant, id: Some(id.to_string()), expires_at })
    }

    /// Whether a form that has no session yet (the sign-in form) was posted by this server's own
    /// page: browsers send `Sec-Fetch-Site` (or at least `Origin`) on every cross-site POST.
    /// Clients that send neither (curl, scripts) are not browsers another site can drive.
    pub fn same_origin(headers: &HeaderMap) -> bool {
        let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        if let Some(site) = header("sec-fetch-site") {
            return matches!(site, "same-origin" | "none");
        }
        let Some(origin) = header("origin") else { return true };
        // `Origin: null` (sandboxed frames, data: URLs) is never this server.
        let Some(host) = header("x-forwarded-host").or_else(|| header("host")) else { return false };
        origin.split_once("://").is_some_and(|(_, rest)| rest.eq_ignore_ascii_case(host))
    }

    /// The CSRF token of the request's session (what its forms must post back).
    pub fn csrf(&self, headers: &HeaderMap) -> String {
        let session = Self::cookie_value(headers).unwrap_or_default();
        self.mac(&format!("csrf|{session}"))
    }

    /// Whether a form's token is this session's, and the request came from this site.
    pub fn csrf_ok(&self, headers: &HeaderMap, token: &str) -> bool {
        let session = Self::cookie_value(headers).unwrap_or_default();
        self.verify_mac(&format!("csrf|{session}"), token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions() -> Sessions {
        let check: KeyCheck = Box::new(|k| (k == "alice-key-123").then(|| "alice".to_string()));
        Sessions::new(b"secret".to_vec(), check, None)
    }

    fn with_cookie(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert("cookie", format!("other=1; {COOKIE}={value}").parse().unwrap());
        h
    }

    #[test]
    fn a_signed_session_names_its_tenant_and_a_forged_one_nothing() {
        let s = sessions();
        assert!(s.sign_in("wrong").is_none());
        let (tenant, cookie) = s.sign_in("alice-key-123").unwrap();
        assert_eq!(tenant, "alice");
        let session = s.session(&with_cookie(&cookie)).unwrap();
        assert_eq!(session.tenant, "alice");
        assert_eq!(session.id.as_ref().map(String::len), Some(32));
        // Each sign-in is its own session (sign-out revokes one, not the tenant's others).
        let (_, again) = s.sign_in("alice-key-123").unwrap();
        assert_ne!(s.session(&with_cookie(&again)).unwrap().id, session.id);
        // Another tenant's name with alice's signature, or a changed expiry: refused.
        let forged = cookie.replacen(&hex::encode("alice"), &hex::encode("bob"), 1);
        assert_eq!(s.session(&with_cookie(&forged)), None);
        let (body, tag) = cookie.rsplit_once('.').unwrap();
        let (t, _) = body.rsplit_once('.').unwrap();
        assert_eq!(s.session(&with_cookie(&format!("{t}.99999999999.{tag}"))), None);
        // Another server's (other keys) sessions are not this one's.
        let other = Sessions::new(b"other".to_vec(), Box::new(|_| None), None);
        assert_eq!(other.session(&with_cookie(&cookie)), None);
    }

    #[test]
    fn the_sign_in_form_is_accepted_only_from_this_origin() {
        let headers = |pairs: &[(&str, &str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), v.parse().unwrap());
            }
            h
        };
        assert!(Sessions::same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!Sessions::same_origin(&headers(&[("sec-fetch-site", "cross-site")])));
        assert!(!Sessions::same_origin(&headers(&[("sec-fetch-site", "same-site")])));
        let host = ("host", "orchard.example:8080");
        assert!(Sessions::same_origin(&headers(&[host, ("origin", "https://orchard.example:8080")])));
        assert!(!Sessions::same_origin(&headers(&[host, ("origin", "https://evil.example")])));
        assert!(!Sessions::same_origin(&headers(&[host, ("origin", "null")])));
        // Not a browser: nothing another site could forge.
        assert!(Sessions::same_origin(&headers(&[host])));
    }

    #[test]
    fn csrf_tokens_belong_to_their_session() {
        let s = sessions();
        let (_, a) = s.sign_in("alice-key-123").unwrap();
        let (_, b) = s.sign_in("alice-key-123").unwrap();
        let token = s.csrf(&with_cookie(&a));
        assert!(s.csrf_ok(&with_cookie(&a), &token));
        assert!(!s.csrf_ok(&with_cookie(&a), "00"));
        assert!(!s.csrf_ok(&HeaderMap::new(), &token));
        if a != b {
            assert!(!s.csrf_ok(&with_cookie(&b), &token));
        }
    }
}
