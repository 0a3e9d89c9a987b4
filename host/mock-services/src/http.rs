//! The routes: `GET /` lists the services; per service `GET /<svc>/<collection>` (search with
//! `q=` and `field=value`), `GET|PATCH|DELETE /<svc>/<collection>/<id>`, `POST /<svc>/<collection>`,
//! the actions (`POST /mail/send`, `POST /mail/drafts/<id>/send`, `POST /mail/messages/<id>/labels`,
//! `GET /calendar/freebusy`, `POST /calendar/events/<id>/invite`, `POST /helpdesk/tickets/<id>/reply`),
//! `GET /<svc>/audit` and `POST /<svc>/reset`. Every answer is JSON; errors are
//! `{"error": ...}` with 400 or 404.
//!
//! Two doors, one state: [`router`] is the agent's (TCP on the sandbox's loopback): every call is
//! recorded and may draw an injected fault; the audit and reset are not served there.
//! [`grader_router`] is the grader's (a socket only the in-sandbox agent process reaches, see
//! `main.rs`): its reads are never recorded, never faulted, and it alone reads the audit and
//! resets. So the audit holds the agent's calls alone, whatever either side sends.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::faults::{Fault, Faults};
use crate::store::{AuditEntry, CallError, SERVICES, Store};

/// The mock services' server state.
pub struct App {
    /// The services' data and audit log.
    pub store: Mutex<Store>,
    /// Faults to inject, if any.
    pub faults: Option<Faults>,
    calls: std::sync::atomic::AtomicU64,
}

impl App {
    /// A server over `store`.
    pub fn new(store: Store, faults: Option<Faults>) -> Arc<App> {
        Arc::new(App { store: Mutex::new(store), faults, calls: Default::default() })
    }
}

/// Who is calling: decided by the door a connection came in by, never by the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caller {
    /// The agent's calls (recorded in the audit).
    Agent,
    /// The grader's reads (not recorded: graders never count their own actions).
    Grader,
}

/// The agent's door.
pub fn router(app: Arc<App>) -> Router {
    routes(app, Caller::Agent)
}

/// The grader's door.
pub fn grader_router(app: Arc<App>) -> Router {
    routes(app, Caller::Grader)
}

fn routes(app: Arc<App>, caller: Caller) -> Router {
    Router::new()
        .route("/", axum::routing::get(index))
        .route("/{svc}/{a}", axum::routing::any(call))
        .route("/{svc}/{a}/{b}", axum::routing::any(call))
        .route("/{svc}/{a}/{b}/{c}", axum::routing::any(call))
        .layer(axum::Extension(caller))
        .with_state(app)
}

async fn index() -> axum::Json<Value> {
    let services: Value =
        SERVICES.iter().map(|(s, c)| (s.to_string(), json!(c))).collect::<serde_json::Map<_, _>>().into();
    axum::Json(json!({ "services": services }))
}

fn error(status: StatusCode, message: impl Into<String>) -> (StatusCode, Value) {
    (status, json!({ "error": message.into() }))
}

impl From<CallError> for (StatusCode, Value) {
    fn from(e: CallError) -> Self {
        match e {
            CallError::NotFound(m) => error(StatusCode::NOT_FOUND, m),
            CallError::Invalid(m) => error(StatusCode::BAD_REQUEST, m),
        }
    }
}

async fn call(
    State(app): State<Arc<App>>,
    axum::Extension(caller): axum::Extension<Caller>,
    method: Method,
    Path(parts): Path<Vec<String>>,
    Query(query): Query<BTreeMap<String, String>>,
    body: Bytes,
) -> Response {
    let Some(service) = parts.first().filter(|s| SERVICES.iter().any(|(n, _)| n == *s)).cloned() else {
        return (StatusCode::NOT_FOUND, axum::Json(json!({"error": format!("no service {:?}", parts[0])})))
            .into_response();
    };
    let rest: Vec<&str> = parts[1..].iter().map(String::as_str).collect();
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => {
                return (StatusCode::BAD_REQUEST, axum::Json(json!({"error": format!("body: {e}")}))).into_response();
            }
        }
    };
    let mut store = app.store.lock().await;
    match (caller, &method, rest.as_slice()) {
        (Caller::Grader, &Method::GET, ["audit"]) => {
            return axum::Json(json!({ "calls": store.audit(&service) })).into_response();
        }
        (Caller::Grader, &Method::POST, ["reset"]) => {
            return match store.reset(&service) {
                Ok(()) => axum::Json(json!({"reset": service})).into_response(),
                Err(e) => (StatusCode::BAD_REQUEST, axum::Json(json!({"error": e}))).into_response(),
            };
        }
        (Caller::Agent, _, ["audit"] | ["reset"]) => {
            // Recorded like any call: an agent that tries to read or wipe its record is seen.
            let (status, result) =
                error(StatusCode::FORBIDDEN, format!("/{service}/{}: the grader's, not a service route", rest[0]));
            store.record(
                &service,
                AuditEntry {
                    seq: 0,
                    method: method.to_string(),
                    path: format!("/{}", parts.join("/")),
                    query,
                    body,
                    status: status.as_u16(),
                    result: result.clone(),
                    injected: None,
                },
            );
            return (status, axum::Json(result)).into_response();
        }
        // The grader's reads: answered from the state, not recorded, never faulted.
        (Caller::Grader, _, _) => {
            let (status, result) = dispatch(&mut store, &service, &method, &rest, &query, body);
            return (status, axum::Json(result)).into_response();
        }
        _ => {}
    }
    let n = app.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let fault = app.faults.as_ref().and_then(|f| f.draw(n));
    let (status, result) = match fault {
        Some(Fault::ServerError) => error(StatusCode::INTERNAL_SERVER_ERROR, "internal error (injected)"),
        Some(Fault::RateLimited) => error(StatusCode::TOO_MANY_REQUESTS, "rate limited (injected): retry after 1 s"),
        Some(Fault::Timeout) => error(StatusCode::GATEWAY_TIMEOUT, "timed out (injected)"),
        None => dispatch(&mut store, &service, &method, &rest, &query, body.clone()),
    };
    let entry = AuditEntry {
        seq: 0,
        method: method.to_string(),
        path: format!("/{}", parts.join("/")),
        query,
        body,
        status: status.as_u16(),
        result: result.clone(),
        injected: fault.map(|f| format!("{f:?}")),
    };
    store.record(&service, entry);
    drop(store);
    if let (Some(Fault::Timeout), Some(f)) = (fault, &app.faults) {
        tokio::time::sleep(std::time::Duration::from_millis(f.timeout_ms)).await;
    }
    let mut response = (status, axum::Json(result)).into_response();
    if fault == Some(Fault::RateLimited) {
        response.headers_mut().insert("retry-after", axum::http::HeaderValue::from_static("1"));
    }
    response
}

fn dispatch(
    store: &mut Store,
    service: &str,
    method: &Method,
    rest: &[&str],
    query: &BTreeMap<String, String>,
    body: Value,
) -> (StatusCode, Value) {
    use crate::actions;
    let result = match (service, method, rest) {
        ("mail", &Method::POST, ["send"]) => actions::send_mail(store, body).map(|v| (StatusCode::CREATED, v)),
        ("mail", &Method::POST, ["drafts", id, "send"]) => {
            actions::send_draft(store, id).map(|v| (StatusCode::CREATED, v))
        }
        ("mail", &Method::POST, ["messages", id, "labels"]) => {
            actions::label(store, id, body).map(|v| (StatusCode::OK, v))
        }
        ("calendar", &Method::GET, ["freebusy"]) => actions::free_busy(store, query).map(|v| (StatusCode::OK, v)),
        ("calendar", &Method::POST, ["events", id, "invite"]) => {
            actions::invite(store, id, body).map(|v| (StatusCode::OK, v))
        }
        ("helpdesk", &Method::POST, ["tickets", id, "reply"]) => {
            actions::reply_ticket(store, id, body).map(|v| (StatusCode::OK, v))
        }
        (_, &Method::GET, [collection]) => store.list(service, collection, query).map(|v| (StatusCode::OK, v)),
        (_, &Method::POST, [collection]) => store.create(service, collection, body).map(|v| (StatusCode::CREATED, v)),
        (_, &Method::GET, [collection, id]) => store.get(service, collection, id).map(|v| (StatusCode::OK, v)),
        (_, &Method::PATCH | &Method::PUT, [collection, id]) => {
            store.update(service, collection, id, body).map(|v| (StatusCode::OK, v))
        }
        (_, &Method::DELETE, [collection, id]) => store.delete(service, collection, id).map(|v| (StatusCode::OK, v)),
        _ => Err(CallError::NotFound(format!("no route {method} /{service}/{}", rest.join("/")))),
    };
    result.unwrap_or_else(Into::into)
}
