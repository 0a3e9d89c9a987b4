//! API keys and tenants. A key belongs to one tenant; a request's tenant decides which sandboxes
//! it can see (others answer 404, as if they did not exist).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::AppState;
use orchard_api_kit::ApiError;

/// The tenant a request acts for, put in the request's extensions by `authenticate`.
pub use orchard_api_kit::Tenant;

/// The tenant used when the server runs without keys (loopback only).
pub const DEFAULT_TENANT: &str = "default";

#[derive(Debug, Clone, Default)]
/// Tenants' API keys.
pub struct ApiKeys {
    by_key: HashMap<String, String>,
    /// Tenants whose keys act for everybody where that matters (replacing a shared plugin).
    admins: std::collections::BTreeSet<String>,
}

impl ApiKeys {
    /// Parses `tenant:key` pairs separated by commas or newlines (`#` starts a comment line).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut by_key = HashMap::new();
        for item in text.split([',', '\n']).map(str::trim).filter(|s| !s.is_empty() && !s.starts_with('#')) {
            let (tenant, key) =
                item.split_once(':').ok_or_else(|| format!("API key entry {:?}: expected tenant:key", redact(item)))?;
            let (tenant, key) = (tenant.trim(), key.trim());
            if tenant.is_empty() || key.is_empty() {
                return Err(format!("API key entry {:?}: tenant and key must both be non-empty", redact(item)));
            }
            if tenant == DEFAULT_TENANT {
                // The one tenant of a server without keys: its sandbox ids are not scoped.
                return Err(format!("API key entry for tenant {DEFAULT_TENANT:?}: that name is reserved"));
            }
            if key.len() < 8 {
                return Err(format!("API key for tenant {tenant:?} is shorter than 8 characters"));
            }
            if by_key.insert(key.to_string(), tenant.to_string()).is_some() {
                return Err(format!("API key for tenant {tenant:?} is given twice"));
            }
        }
        Ok(ApiKeys { by_key, admins: Default::default() })
    }

    /// Makes these tenants admins; each must have a key.
    pub fn with_admins(mut self, tenants: &[String]) -> Result<Self, String> {
        for t in tenants.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
            if !self.by_key.values().any(|owner| owner == t) {
                return Err(format!("admin tenant {t:?} has no API key"));
            }
            self.admins.insert(t.to_string());
        }
        Ok(self)
    }

    /// Whether `tenant` is an admin. Without keys (a loopback server for one operator) the one
    /// tenant there is, is.
    pub fn is_admin(&self, tenant: &str) -> bool {
        if self.is_empty() { tenant == DEFAULT_TENANT } else { self.admins.contains(tenant) }
    }

    /// No keys: one tenant, `default`, and every request is it.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The distinct tenants that have keys.
    pub fn tenants(&self) -> std::collections::BTreeSet<&str> {
        self.by_key.values().map(String::as_str).collect()
    }

    /// Every `tenant:key`, sorted (what secrets derived from the keys hash).
    pub fn fingerprint_lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self.by_key.iter().map(|(k, t)| format!("{t}:{k}")).collect();
        lines.sort();
        lines
    }

    /// The tenant a key belongs to.
    pub fn tenant_of(&self, key: &str) -> Option<&str> {
        self.by_key.get(key).map(String::as_str)
    }
}

fn redact(item: &str) -> String {
    match item.split_once(':') {
        Some((tenant, _)) => format!("{tenant}:***"),
        None => "***".into(),
    }
}

/// Paths anyone may call: probes and the service banner.
fn is_public(path: &str) -> bool {
    matches!(path, "/" | "/health" | "/v1/health" | "/ready" | "/v1/ready" | "/v1/openapi.json")
}

/// `/metrics` is the operator's: it answers the metrics token (`--metrics-token`, as a bearer
/// token) or an admin tenant's key; without API keys (a loopback server) anyone on the machine.
fn metrics_allowed(state: &AppState, request: &Request) -> bool {
    if state.keys.is_empty() {
        return true;
    }
    let headers = request.headers();
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let key = headers.get("x-api-key").and_then(|v| v.to_str().ok()).or(bearer);
    if let (Some(token), Some(given)) = (&state.metrics_token, bearer)
        && constant_time_eq(token.as_bytes(), given.as_bytes())
    {
        return true;
    }
    key.and_then(|k| state.keys.tenant_of(k)).is_some_and(|t| state.keys.is_admin(t))
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub async fn authenticate(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    if path == "/metrics" {
        if metrics_allowed(&state, &request) {
            return next.run(request).await;
        }
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "denied",
            "metrics are the operator's: send the metrics token as Authorization: Bearer, or an admin's key",
        )
        .into_response();
    }
    // The web UI signs its own requests in (a session cookie; CSRF tokens on its forms).
    // An OpenEnv session's URL carries its own credential (OpenEnv's client sends no headers).
    if is_public(&path) || path == "/ui" || path.starts_with("/ui/") || orchard_openenv::is_token_path(&path) {
        return next.run(request).await;
    }
    let tenant = if state.keys.is_empty() {
        DEFAULT_TENANT.to_string()
    } else {
        // OpenAI clients (a harness through `/v1/proxy`) send their key as a bearer token.
        let bearer = request
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(|v| v.trim().to_string());
        let header = request.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::to_string).or(bearer);
        // Browsers cannot set headers on a WebSocket: the PTY endpoint and the desktop's live
        // view also take ?api_key=.
        let websocket = path.ends_with("/pty") || path.ends_with("/desktop/vnc");
        let query = websocket.then(|| query_param(request.uri().query().unwrap_or(""), "api_key")).flatten();
        let Some(key) = header.or(query) else {
            return ApiError::new(
                StatusCode::UNAUTHORIZED,
                "denied",
                "missing API key: send it in the X-API-Key header (or as Authorization: Bearer)",
            )
            .into_response();
        };
        match state.keys.tenant_of(&key) {
            Some(t) => t.to_string(),
            None => return ApiError::new(StatusCode::FORBIDDEN, "denied", "invalid API key").into_response(),
        }
    };
    request.extensions_mut().insert(Tenant(tenant));
    next.run(request).await
}

fn query_param(query: &str, name: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| orchard_agent_client::decode(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_and_map_to_tenants() {
        let keys = ApiKeys::parse("alice:key-aaaaaaaa, bob:key-bbbbbbbb\n# comment\n").unwrap();
        assert_eq!(keys.tenant_of("key-aaaaaaaa"), Some("alice"));
        assert_eq!(keys.tenant_of("key-bbbbbbbb"), Some("bob"));
        assert_eq!(keys.tenant_of("nope"), None);
    }

    #[test]
    fn bad_key_files_are_refused_without_echoing_keys() {
        let err = ApiKeys::parse("alice-secret").unwrap_err();
        assert!(!err.contains("alice-secret"), "{err}");
        assert!(ApiKeys::parse("a:short").unwrap_err().contains("shorter than 8"));
        assert!(ApiKeys::parse("a:samekey1,b:samekey1").unwrap_err().contains("twice"));
    }

    #[test]
    fn query_keys_are_percent_decoded() {
        assert_eq!(query_param("x=1&api_key=a%2Bb%3D", "api_key").as_deref(), Some("a+b="));
    }
}
