//! The HTTP side: paths, verbs, injected costs, watches.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State as Extract;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::kubelet::Kubelet;
use crate::store::{Change, Key, Refused, Store};

/// What a real control plane costs, injected.
#[derive(Debug, Clone, Default)]
pub struct Costs {
    /// Added to every request but watches.
    pub latency: Duration,
    /// Each watch event is sent no sooner than this after its write.
    pub watch_delay: Duration,
    /// Requests in flight (watches aside) beyond which priority and fairness answers 429 with
    /// `Retry-After: 1`; 0 for no limit.
    pub max_in_flight: usize,
}

/// Requests answered, by "VERB resource[/subresource]" (verbs: LIST, WATCH, GET, POST, PATCH,
/// DELETE), and "429" for those refused by the in-flight limit.
pub type Requests = BTreeMap<String, u64>;

pub(crate) struct State {
    pub store: Mutex<Store>,
    costs: Costs,
    in_flight: AtomicUsize,
    requests: Mutex<Requests>,
    /// Writes (create, patch, delete; not the status subresource, which the kubelet writes)
    /// by object name, over all resources but leases.
    /// Each entry is "VERB resource STATUS".
    writes: Mutex<std::collections::HashMap<String, Vec<String>>>,
    kubelet: Option<Arc<Kubelet>>,
}

/// A running double; stops (and the kubelet's agents with it) on drop.
pub struct Double {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    state: Arc<State>,
    server: tokio::task::JoinHandle<()>,
}

impl Double {
    pub async fn start(costs: Costs, kubelet: Option<Kubelet>) -> std::io::Result<Double> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(State {
            store: Mutex::new(Store::new()),
            costs,
            in_flight: AtomicUsize::new(0),
            requests: Mutex::default(),
            writes: Mutex::default(),
            kubelet: kubelet.map(Arc::new),
        });
        let app = axum::Router::new().fallback(handle).with_state(state.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Double { url, state, server })
    }

    /// The requests answered so far.
    pub fn requests(&self) -> Requests {
        self.state.requests.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Writes to objects named `name` (any resource but leases; the kubelet's status writes
    /// not counted), answered or refused: "VERB resource STATUS" each, in order.
    pub fn writes_on(&self, name: &str) -> Vec<String> {
        self.state.writes.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned().unwrap_or_default()
    }

    /// Every pod, in every namespace.
    pub fn pods(&self) -> Vec<Value> {
        let store = self.state.store.lock().unwrap_or_else(|p| p.into_inner());
        store.all("api/v1/pods").cloned().collect()
    }

    /// Agents the kubelet runs now.
    pub fn running_agents(&self) -> usize {
        self.state.kubelet.as_ref().map_or(0, |k| k.running())
    }
}

impl Drop for Double {
    fn drop(&mut self) {
        self.server.abort();
        if let Some(kubelet) = &self.state.kubelet {
            kubelet.stop_all();
        }
    }
}

/// A request's target: `api/v1/namespaces/NS/RES[/NAME[/SUB]]` or the same under
/// `apis/GROUP/VERSION`.
struct Target {
    /// `api/v1/pods`, `apis/networking.k8s.io/v1/networkpolicies`: the store's resource key.
    resource: String,
    api_version: String,
    plural: String,
    namespace: String,
    name: Option<String>,
    sub: Option<String>,
}

fn target(path: &str) -> Option<Target> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (api_version, rest) = match parts.as_slice() {
        ["api", "v1", rest @ ..] => ("v1".to_string(), rest),
        ["apis", group, version, rest @ ..] => (format!("{group}/{version}"), rest),
        _ => return None,
    };
    let ["namespaces", namespace, plural, more @ ..] = rest else { return None };
    if more.len() > 2 {
        return None;
    }
    let prefix = if api_version == "v1" { "api/v1".to_string() } else { format!("apis/{api_version}") };
    Some(Target {
        resource: format!("{prefix}/{plural}"),
        api_version,
        plural: plural.to_string(),
        namespace: namespace.to_string(),
        name: more.first().map(|s| s.to_string()),
        sub: more.get(1).map(|s| s.to_string()),
    })
}

fn kind_of(plural: &str) -> String {
    match plural {
        "pods" => "Pod".into(),
        "networkpolicies" => "NetworkPolicy".into(),
        "ciliumnetworkpolicies" => "CiliumNetworkPolicy".into(),
        "leases" => "Lease".into(),
        "secrets" => "Secret".into(),
        "daemonsets" => "DaemonSet".into(),
        other => other.trim_end_matches('s').to_string(),
    }
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code.as_u16()});
    (code, axum::Json(body)).into_response()
}

fn refused(path: &str, why: Refused) -> Response {
    match why {
        Refused::NotFound => status(StatusCode::NOT_FOUND, "NotFound", format!("{path} not found")),
        Refused::AlreadyExists => status(StatusCode::CONFLICT, "AlreadyExists", format!("{path} already exists")),
        Refused::Conflict { have, wanted } => status(
            StatusCode::CONFLICT,
            "Conflict",
            format!("{path}: the object has been modified (resourceVersion {have}, not {wanted})"),
        ),
        Refused::Invalid(why) => status(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", format!("{path}: {why}")),
    }
}

fn query(uri: &Uri) -> BTreeMap<String, String> {
    axum::extract::Query::<BTreeMap<String, String>>::try_from_uri(uri).map(|q| q.0).unwrap_or_default()
}

/// Counts a request in flight while it lives.
struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn handle(
    Extract(state): Extract<Arc<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    let Some(target) = target(&path) else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("{path}: not served by this double"));
    };
    let query = query(&uri);
    let watch = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let verb = match (&method, &target.name, watch) {
        (&Method::GET, None, true) => "WATCH",
        (&Method::GET, None, false) => "LIST",
        (m, _, _) => m.as_str(),
    };
    let what = match &target.sub {
        Some(sub) => format!("{verb} {}/{sub}", target.plural),
        None => format!("{verb} {}", target.plural),
    };
    let count =
        |what: &str| *state.requests.lock().unwrap_or_else(|p| p.into_inner()).entry(what.into()).or_default() += 1;
    if watch {
        count(&what);
        return watch_response(&state, &target, &query);
    }
    let in_flight = state.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
    let _guard = InFlight(&state.in_flight);
    if state.costs.max_in_flight > 0 && in_flight > state.costs.max_in_flight {
        count("429");
        let mut response = status(
            StatusCode::TOO_MANY_REQUESTS,
            "TooManyRequests",
            "too many requests in flight (the double's priority and fairness limit)".into(),
        );
        response.headers_mut().insert(header::RETRY_AFTER, "1".parse().expect("header"));
        return response;
    }
    count(&what);
    let written = match (&method, &target.name) {
        (&Method::POST, None) => {
            serde_json::from_slice::<Value>(&body).ok().and_then(|o| o["metadata"]["name"].as_str().map(String::from))
        }
        (&Method::PATCH | &Method::DELETE, Some(name)) if target.sub.is_none() => Some(name.clone()),
        _ => None,
    };
    let written = written.filter(|_| target.plural != "leases");
    if !state.costs.latency.is_zero() {
        tokio::time::sleep(state.costs.latency).await;
    }
    let key = |name: &str| -> Key { (target.resource.clone(), target.namespace.clone(), name.to_string()) };
    let response = answer(&state, &target, &path, &query, method, &headers, body, key).await;
    if let Some(name) = written {
        let entry = format!("{what} {}", response.status().as_u16());
        state.writes.lock().unwrap_or_else(|p| p.into_inner()).entry(name).or_default().push(entry);
    }
    response
}

#[allow(clippy::too_many_arguments)]
async fn answer(
    state: &Arc<State>,
    target: &Target,
    path: &str,
    query: &BTreeMap<String, String>,
    method: Method,
    headers: &HeaderMap,
    body: Bytes,
    key: impl Fn(&str) -> Key,
) -> Response {
    match (method, &target.name) {
        (Method::GET, None) => list(state, target, query),
        (Method::GET, Some(name)) => {
            let store = state.store.lock().unwrap_or_else(|p| p.into_inner());
            match store.get(&key(name)) {
                Some(object) => axum::Json(object.clone()).into_response(),
                None => refused(path, Refused::NotFound),
            }
        }
        (Method::POST, None) => {
            let object: Value = match serde_json::from_slice(&body) {
                Ok(Value::Object(o)) => Value::Object(o),
                _ => return refused(path, Refused::Invalid("the body is not a JSON object".into())),
            };
            let Some(name) = object["metadata"]["name"].as_str().map(String::from) else {
                return refused(path, Refused::Invalid("metadata.name is required".into()));
            };
            let made = state.store.lock().unwrap_or_else(|p| p.into_inner()).create(key(&name), object);
            match made {
                Ok(object) => {
                    if let (Some(kubelet), "api/v1/pods") = (&state.kubelet, target.resource.as_str()) {
                        kubelet.clone().start(state.clone(), key(&name), &object);
                    }
                    (StatusCode::CREATED, axum::Json(object)).into_response()
                }
                Err(why) => refused(&format!("{path}/{name}"), why),
            }
        }
        (Method::PATCH, Some(name)) => {
            let merge = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("application/merge-patch+json"));
            if !merge {
                return status(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "UnsupportedMediaType",
                    "this double applies merge patches (application/merge-patch+json) only".into(),
                );
            }
            let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
                return refused(path, Refused::Invalid("the patch is not JSON".into()));
            };
            let status_only = target.sub.as_deref() == Some("status");
            match state.store.lock().unwrap_or_else(|p| p.into_inner()).patch(key(name), &patch, status_only) {
                Ok(object) => axum::Json(object).into_response(),
                Err(why) => refused(path, why),
            }
        }
        (Method::DELETE, Some(name)) => {
            let deleted = state.store.lock().unwrap_or_else(|p| p.into_inner()).delete(&key(name));
            match deleted {
                Ok(object) => {
                    if let (Some(kubelet), "api/v1/pods") = (&state.kubelet, target.resource.as_str()) {
                        kubelet.stop(&key(name));
                    }
                    axum::Json(object).into_response()
                }
                Err(why) => refused(path, why),
            }
        }
        (method, _) => status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            format!("{method} {path}: not served by this double"),
        ),
    }
}

fn list(state: &State, target: &Target, query: &BTreeMap<String, String>) -> Response {
    let terms = match crate::labels::parse(query.get("labelSelector").map_or("", String::as_str)) {
        Ok(terms) => terms,
        Err(why) => return status(StatusCode::BAD_REQUEST, "BadRequest", why),
    };
    let store = state.store.lock().unwrap_or_else(|p| p.into_inner());
    let items: Vec<&Value> =
        store.list(&target.resource, &target.namespace).filter(|o| crate::labels::matches(&terms, o)).collect();
    let body = json!({
        "kind": format!("{}List", kind_of(&target.plural)),
        "apiVersion": target.api_version,
        "metadata": {"resourceVersion": store.version().to_string()},
        "items": items,
    });
    axum::Json(body).into_response()
}

/// What a watch still has to send.
struct Watching {
    replay: VecDeque<Arc<Change>>,
    changes: broadcast::Receiver<Arc<Change>>,
    resource: String,
    namespace: String,
    terms: Vec<crate::labels::Term>,
    delay: Duration,
    until: tokio::time::Instant,
    ended: bool,
}

fn gone(message: &str) -> Bytes {
    let status = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": "Expired", "code": 410}});
    let mut line = serde_json::to_vec(&status).expect("JSON");
    line.push(b'\n');
    line.into()
}

fn watch_response(state: &State, target: &Target, query: &BTreeMap<String, String>) -> Response {
    let terms = match crate::labels::parse(query.get("labelSelector").map_or("", String::as_str)) {
        Ok(terms) => terms,
        Err(why) => return status(StatusCode::BAD_REQUEST, "BadRequest", why),
    };
    let timeout = query.get("timeoutSeconds").and_then(|t| t.parse().ok()).unwrap_or(1800u64);
    let from = query.get("resourceVersion").and_then(|v| v.parse::<u64>().ok()).filter(|v| *v > 0);
    let (replay, changes) = {
        let store = state.store.lock().unwrap_or_else(|p| p.into_inner());
        let replay = match from {
            Some(version) => store.since(version),
            // No version: the objects there are now, as ADDED, then what follows.
            None => Some(
                store
                    .list(&target.resource, &target.namespace)
                    .map(|object| {
                        let mut line = serde_json::to_vec(&json!({"type": "ADDED", "object": object})).expect("JSON");
                        line.push(b'\n');
                        Arc::new(Change {
                            version: store.version(),
                            resource: target.resource.clone(),
                            namespace: target.namespace.clone(),
                            object: object.clone(),
                            line: line.into(),
                            at: std::time::Instant::now()
                                .checked_sub(state.costs.watch_delay)
                                .unwrap_or_else(std::time::Instant::now),
                        })
                    })
                    .collect(),
            ),
        };
        (replay, store.changes.subscribe())
    };
    let Some(replay) = replay else {
        let body = Body::from(gone("too old resource version"));
        return (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    };
    let watching = Watching {
        replay: replay.into(),
        changes,
        resource: target.resource.clone(),
        namespace: target.namespace.clone(),
        terms,
        delay: state.costs.watch_delay,
        until: tokio::time::Instant::now() + Duration::from_secs(timeout),
        ended: false,
    };
    let stream = futures::stream::unfold(watching, |mut w| async move {
        loop {
            if w.ended {
                return None;
            }
            let change = match w.replay.pop_front() {
                Some(change) => change,
                None => match tokio::time::timeout_at(w.until, w.changes.recv()).await {
                    Ok(Ok(change)) => change,
                    Ok(Err(broadcast::error::RecvError::Lagged(_))) => {
                        w.ended = true;
                        return Some((Ok::<Bytes, std::convert::Infallible>(gone("the watch fell behind")), w));
                    }
                    Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => return None,
                },
            };
            if change.resource != w.resource
                || change.namespace != w.namespace
                || !crate::labels::matches(&w.terms, &change.object)
            {
                continue;
            }
            let due = change.at + w.delay;
            if due > std::time::Instant::now() {
                tokio::time::sleep_until(due.into()).await;
            }
            return Some((Ok(change.line.clone()), w));
        }
    });
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], Body::from_stream(stream)).into_response()
}

#[cfg(test)]
mod tests {
    #[test]
    fn paths_and_queries() {
        let t = super::target("/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/a").unwrap();
        assert_eq!((t.resource.as_str(), t.name.as_deref()), ("apis/networking.k8s.io/v1/networkpolicies", Some("a")));
        let t = super::target("/api/v1/namespaces/ns/pods/p/status").unwrap();
        assert_eq!((t.api_version.as_str(), t.sub.as_deref()), ("v1", Some("status")));
        assert!(super::target("/api/v1/pods").is_none());
        let uri: axum::http::Uri = "/x?labelSelector=a%3Db%2Cc&watch=true".parse().unwrap();
        let q = super::query(&uri);
        assert_eq!((q["labelSelector"].as_str(), q["watch"].as_str()), ("a=b,c", "true"));
    }
}
