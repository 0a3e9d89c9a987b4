//! `POST /http`: an HTTP/1.1 request to a service listening on the sandbox's loopback, made from
//! inside the sandbox (the agent shares its network namespace), for plugins that test web apps.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use orchard_protocol::{HttpRequest, HttpResponse};

use crate::error::{AgentError, AgentResult};

/// Responses larger than this are refused rather than held in memory.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// A grader's read goes over the service's grader socket, from this process, when the service
/// has one (see [`orchard_protocol::HttpRequest::grader`]).
async fn grader_stream(req: &HttpRequest) -> Option<tokio::net::UnixStream> {
    if !req.grader {
        return None;
    }
    connect_grader_socket(req.port)
}

fn connect_grader_socket(port: u16) -> Option<tokio::net::UnixStream> {
    use std::os::linux::net::SocketAddrExt;
    let name = orchard_protocol::grader_socket_name(port);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?;
    // Connecting to an abstract socket does not block on anything but the kernel.
    let stream = std::os::unix::net::UnixStream::connect_addr(&addr).ok()?;
    stream.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(stream).ok()
}

/// A grader's read of the desktop this agent started on `port` (pid `pid`): over the desktop's
/// grader socket, and only when the process serving it is that very desktop — the kernel says
/// who listens (`SO_PEERCRED`). A desktop the agent's commands stopped or replaced with a
/// server of their own is refused, never asked.
fn desktop_grader_stream(port: u16, pid: i32) -> AgentResult<tokio::net::UnixStream> {
    let refused = |why: String| {
        AgentError::new(
            orchard_protocol::ErrorKind::Denied,
            format!("http: the desktop on port {port} is not the one Orchard started ({why})"),
        )
    };
    let stream = connect_grader_socket(port).ok_or_else(|| refused("its grader socket is gone".into()))?;
    let peer = stream.peer_cred().map_err(|e| refused(format!("who serves it is unknown: {e}")))?;
    match peer.pid() {
        Some(p) if p == pid => Ok(stream),
        other => Err(refused(format!("pid {other:?} serves it, not {pid}"))),
    }
}

async fn handshake<S>(stream: S) -> AgentResult<hyper::client::conn::http1::SendRequest<Full<bytes::Bytes>>>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| AgentError::other(format!("http: {e}")))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// Forwards `req`; `desktop` is the pid of the desktop service this agent started on the
/// request's port, if any.
pub async fn forward(req: HttpRequest, desktop: Option<i32>) -> AgentResult<HttpResponse> {
    let timeout = Duration::from_millis(req.timeout_ms.unwrap_or(30_000));
    tokio::time::timeout(timeout, send(req, desktop)).await.map_err(|_| {
        AgentError::new(orchard_protocol::ErrorKind::Timeout, format!("http: no answer within {timeout:?}"))
    })?
}

async fn send(req: HttpRequest, desktop: Option<i32>) -> AgentResult<HttpResponse> {
    if !req.path.starts_with('/') {
        return Err(AgentError::invalid(format!("http: path {:?} must start with '/'", req.path)));
    }
    let method = hyper::Method::from_bytes(req.method.as_bytes())
        .map_err(|_| AgentError::invalid(format!("http: {:?} is not an HTTP method", req.method)))?;
    let body = B64.decode(req.body_base64.as_bytes()).map_err(|e| AgentError::invalid(format!("http: body: {e}")))?;
    let desktop = desktop.filter(|_| req.grader).map(|pid| desktop_grader_stream(req.port, pid)).transpose()?;
    let stream = match desktop {
        Some(stream) => Some(stream),
        None => grader_stream(&req).await,
    };
    let mut sender = match stream {
        Some(stream) => handshake(stream).await?,
        None => {
            let stream = tokio::net::TcpStream::connect(("127.0.0.1", req.port)).await.map_err(|e| {
                AgentError::new(
                    orchard_protocol::ErrorKind::NotFound,
                    format!("http: nothing answers on port {}: {e}", req.port),
                )
            })?;
            handshake(stream).await?
        }
    };
    let mut builder =
        hyper::Request::builder().method(method).uri(&req.path).header("host", format!("127.0.0.1:{}", req.port));
    for (k, v) in &req.headers {
        builder = builder.header(k.as_str(), v.as_str());
    }
    let request =
        builder.body(Full::new(bytes::Bytes::from(body))).map_err(|e| AgentError::invalid(format!("http: {e}")))?;
    let response = sender.send_request(request).await.map_err(|e| AgentError::other(format!("http: {e}")))?;
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let limited = http_body_util::Limited::new(response.into_body(), MAX_BODY);
    let body =
        limited.collect().await.map_err(|e| AgentError::other(format!("http: reading the answer: {e}")))?.to_bytes();
    Ok(HttpResponse { status, headers, body_base64: B64.encode(&body) })
}
