//! The evaluation service's web UI, mounted by `orchard serve` at `/ui`: server-rendered pages
//! (askama) that read the same store as `/v1/evals`, readable without JavaScript, with two small
//! scripts of our own for live updates (no CDN, no web fonts: it works offline).
//!
//! A browser signs in with an API key and keeps a signed session cookie ([`session`]); every page
//! shows only that tenant's jobs (another tenant's answer 404, as on the API), and every form
//! that changes something carries the session's CSRF token.

#![warn(missing_docs)]
// Handlers answer a page either way: the error side of their `Result`s is the error page itself.
#![allow(clippy::result_large_err)]

mod assets;
mod compare;
mod format;
mod job;
mod jobs;
mod live;
mod rollout;
mod rollout_list;
pub mod session;

use std::sync::Arc;

use askama::Template;
use axum::extract::{FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use orchard_api_kit::{ApiError, Tenant};
use orchard_evals_api::EvalService;
use serde::Deserialize;

pub use session::{KeyCheck, Session, Sessions};

/// What the UI's pages share.
pub struct UiState {
    /// The evaluation service the pages show.
    pub service: Arc<EvalService>,
    /// Signed-in sessions.
    pub sessions: Arc<Sessions>,
}

type S = State<Arc<UiState>>;

/// The routes, to be nested at `/ui`.
pub fn routes<T: Clone + Send + Sync + 'static>(state: Arc<UiState>) -> Router<T> {
    Router::new()
        .route("/", get(jobs::page))
        .route("/jobs-rows", get(jobs::rows))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/evals/new", get(jobs::new_page))
        .route("/evals", post(jobs::submit))
        .route("/evals/{id}", get(job::page))
        .route("/evals/{id}/live", get(job::live_fragment))
        .route("/evals/{id}/events", get(job::events))
        .route("/evals/{id}/export", get(job::export))
        .route("/evals/{id}/cancel", post(job::cancel))
        .route("/evals/{id}/retry", post(job::retry))
        .route("/evals/{id}/rollouts", get(rollout_list::page))
        .route("/evals/{id}/rollouts/{rid}", get(rollout::page))
        .route("/evals/{id}/rollouts/{rid}/live", get(live::page))
        .route("/evals/{id}/rollouts/{rid}/live/vnc", get(live::vnc))
        .route("/compare", get(compare::page))
        .route("/assets/{name}", get(assets::serve))
        .layer(axum::middleware::from_fn(security_headers))
        .with_state(state)
}

/// Pages run only our own script and style, are never framed, and post forms only to us.
/// Images may be data URLs (screenshots in trajectories), nothing else from elsewhere.
async fn security_headers(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
        ("x-frame-options", "DENY"),
        ("x-content-type-options", "nosniff"),
        ("referrer-policy", "same-origin"),
    ] {
        if let Ok(v) = axum::http::HeaderValue::from_str(value) {
            headers.insert(name, v);
        }
    }
    response
}

/// A signed-in request: its tenant and its session's CSRF token. Pages without a session
/// redirect to the sign-in page and come back.
pub struct Signed {
    /// The signed-in tenant.
    pub tenant: Tenant,
    /// The form token of this session.
    pub csrf: String,
    /// A server without keys: no sign-in.
    pub open: bool,
    /// The session.
    pub session: Session,
}

impl FromRequestParts<Arc<UiState>> for Signed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<UiState>) -> Result<Self, Self::Rejection> {
        let session = state.sessions.session(&parts.headers);
        let revoked = match session.as_ref().and_then(|s| s.id.as_deref()) {
            // A store that cannot answer fails closed: sign in again.
            Some(id) => state.service.env.store.session_revoked(id).await.unwrap_or(true),
            None => false,
        };
        match session {
            Some(s) if !revoked => Ok(Signed {
                tenant: Tenant(s.tenant.clone()),
                csrf: state.sessions.csrf(&parts.headers),
                open: state.sessions.is_open(),
                session: s,
            }),
            _ => {
                // The path as the browser asked for it (this router is nested at /ui).
                let original = parts.extensions.get::<axum::extract::OriginalUri>().map(|u| u.0.clone());
                let uri = original.as_ref().unwrap_or(&parts.uri);
                let here = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/ui");
                let back = if parts.method == axum::http::Method::GET { here } else { "/ui" };
                Err(Redirect::to(&format!("/ui/login?next={}", format::url_encode(back))).into_response())
            }
        }
    }
}

impl Signed {
    fn layout(&self, title: impl Into<String>) -> Layout {
        Layout { title: title.into(), tenant: self.tenant.0.clone(), csrf: self.csrf.clone(), open: self.open }
    }

    /// Refuses a form whose CSRF token is not this session's.
    fn check_csrf(&self, state: &UiState, headers: &HeaderMap, token: &str) -> Result<(), Response> {
        if state.sessions.csrf_ok(headers, token) {
            Ok(())
        } else {
            Err(error_page(
                StatusCode::FORBIDDEN,
                "This form is stale or was not sent from Orchard's own pages: reload and try again.",
            ))
        }
    }
}

/// What every signed-in page's frame shows.
pub struct Layout {
    /// The page's title.
    pub title: String,
    /// The signed-in tenant.
    pub tenant: String,
    /// The form token of this session.
    pub csrf: String,
    /// A server without keys: no sign-in.
    pub open: bool,
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    status: u16,
    message: String,
}

fn error_page(status: StatusCode, message: &str) -> Response {
    let page = ErrorPage { status: status.as_u16(), message: message.to_string() };
    (status, render(&page)).into_response()
}

/// An API error as a page (404 for another tenant's job, as on the API).
fn api_error(e: ApiError) -> Response {
    error_page(e.status, &e.detail)
}

fn render(t: &impl Template) -> Response {
    match t.render() {
        Ok(html) => Html(html).into_response(),
        Err(e) => {
            tracing::error!("rendering a page: {e}");
            (StatusCode::INTERNAL_SERVER_ERROR, "the page could not be rendered").into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "login.html")]
struct LoginPage {
    next: String,
    error: Option<String>,
}

#[derive(Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// Only our own pages as a place to go back to (no open redirect).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n == "/ui" || (n.starts_with("/ui/") && !n.starts_with("/ui//") && !n.contains('\\')) => {
            n.to_string()
        }
        _ => "/ui".to_string(),
    }
}

async fn login_page(Query(q): Query<NextQuery>) -> Response {
    render(&LoginPage { next: safe_next(q.next.as_deref()), error: None })
}

#[derive(Deserialize)]
struct LoginForm {
    api_key: String,
    next: Option<String>,
}

async fn login(State(state): S, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    let next = safe_next(form.next.as_deref());
    if !Sessions::same_origin(&headers) {
        // Login CSRF: another site posting its own key would sign this browser in as it.
        return error_page(StatusCode::FORBIDDEN, "Sign in from Orchard's own sign-in page.");
    }
    match state.sessions.sign_in(&form.api_key) {
        Some((tenant, cookie)) => {
            tracing::info!(%tenant, "signed in to the web UI");
            // Behind a TLS-terminating proxy the cookie is sent over HTTPS only.
            let https = headers.get("x-forwarded-proto").is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"https"));
            ([(header::SET_COOKIE, state.sessions.set_cookie(&cookie, https))], Redirect::to(&next)).into_response()
        }
        None => {
            let page = LoginPage { next, error: Some("That is not an API key of this server.".into()) };
            (StatusCode::UNAUTHORIZED, render(&page)).into_response()
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct CsrfForm {
    pub(crate) csrf: String,
}

async fn logout(State(state): S, signed: Signed, headers: HeaderMap, Form(form): Form<CsrfForm>) -> Response {
    if let Err(r) = signed.check_csrf(&state, &headers, &form.csrf) {
        return r;
    }
    if let Some(id) = &signed.session.id {
        // Revoked for every replica until it would have expired anyway.
        if let Err(e) = state.service.env.store.revoke_session(id, signed.session.expires_at as f64).await {
            tracing::error!(error = %e, "could not revoke a web UI session");
            return error_page(StatusCode::SERVICE_UNAVAILABLE, "Signing out failed: try again.");
        }
    }
    ([(header::SET_COOKIE, Sessions::clear_cookie())], Redirect::to("/ui/login")).into_response()
}
