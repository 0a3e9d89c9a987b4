//! Signing in with an API key: the key is checked once and the browser keeps a signed session
//! cookie (HttpOnly, SameSite=Strict), never the key. Sessions are stateless — a tenant, an
//! expiry and an HMAC over both — so every replica with the same keys accepts them, and changing
//! the keys ends them. Forms carry a CSRF token derived from the session; a form posted without
//! the right one is refused.

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

pub const COOKIE: &str = "orchard_session";

/// Checks an API key: the tenant it belongs to.
pub type KeyCheck = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

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

    pub fn is_open(&self) -> bool {
        self.open_tenant.is_some()
    }

    /// A session cookie's value for `key`, if it is a key.
    pub fn sign_in(&self, key: &str) -> Option<(String, String)> {
        let tenant = (self.check)(key.trim())?;
        let expiry = now() + self.lifetime_secs;
        let body = format!("{}.{expiry}", hex::encode(tenant.as_bytes()));
        let tag = self.mac(&format!("session|{body}"));
        Some((tenant, format!("{body}.{tag}")))
    }

    /// The `Set-Cookie` value for a new session.
    pub fn set_cookie(&self, value: &str, secure: bool) -> String {
        let secure = if secure { "; Secure" } else { "" };
        format!("{COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}", self.lifetime_secs)
    }

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
    pub fn tenant(&self, headers: &HeaderMap) -> Option<String> {
        if let Some(t) = &self.open_tenant {
            return Some(t.clone());
        }
        let value = Self::cookie_value(headers)?;
        let mut parts = value.rsplitn(2, '.');
        let (tag, body) = (parts.next()?, parts.next()?);
        if !self.verify_mac(&format!("session|{body}"), tag) {
            return None;
        }
        let (tenant_hex, expiry) = body.split_once('.')?;
        if expiry.parse::<u64>().ok()? < now() {
            return None;
        }
        String::from_utf8(hex::decode(tenant_hex).ok()?).ok()
    }

    /// The CSRF token of the request's session (what its forms must post back).
    pub fn csrf(&self, headers: &HeaderMap) -> String {
        let session = Self::cookie_value(headers).unwrap_or_default();
        self.mac(&format!("csrf|{session}"))
    }

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
        assert_eq!(s.tenant(&with_cookie(&cookie)).as_deref(), Some("alice"));
        // Another tenant's name with alice's signature, or a changed expiry: refused.
        let forged = cookie.replacen(&hex::encode("alice"), &hex::encode("bob"), 1);
        assert_eq!(s.tenant(&with_cookie(&forged)), None);
        let (body, tag) = cookie.rsplit_once('.').unwrap();
        let (t, _) = body.split_once('.').unwrap();
        assert_eq!(s.tenant(&with_cookie(&format!("{t}.99999999999.{tag}"))), None);
        // Another server's (other keys) sessions are not this one's.
        let other = Sessions::new(b"other".to_vec(), Box::new(|_| None), None);
        assert_eq!(other.tenant(&with_cookie(&cookie)), None);
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
