use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use futures::Stream;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use orchard_protocol::ExecFrame;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::AgentClientError;

/// A connection to the agent: a unix socket or TCP.
pub enum AgentStream {
    /// Over a unix socket.
    Unix(tokio::net::UnixStream),
    /// Over TCP.
    Tcp(tokio::net::TcpStream),
}

impl AsyncRead for AgentStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            AgentStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for AgentStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            AgentStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            AgentStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Unix(s) => Pin::new(s).poll_flush(cx),
            AgentStream::Tcp(s) => Pin::new(s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            AgentStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            AgentStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Splits a newline-delimited JSON body into exec frames.
pub(crate) fn ndjson_frames(body: Incoming) -> impl Stream<Item = crate::Result<ExecFrame>> + Send {
    futures::stream::unfold((body, BytesMut::new(), false), |(mut body, mut buf, done)| async move {
        loop {
            if let Some(pos) = buf.iter().position(|b| *b == b'\n') {
                let line = buf.split_to(pos + 1);
                let frame = serde_json::from_slice::<ExecFrame>(&line[..pos])
                    .map_err(|e| AgentClientError::Protocol(format!("bad frame: {e}")));
                return Some((frame, (body, buf, done)));
            }
            if done {
                return None;
            }
            match body.frame().await {
                Some(Ok(frame)) => {
                    if let Ok(mut data) = frame.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
                Some(Err(e)) => return Some((Err(AgentClientError::Protocol(e.to_string())), (body, buf, true))),
                None => {
                    if buf.is_empty() {
                        return None;
                    }
                    buf.extend_from_slice(b"\n");
                    return Some((
                        Err(AgentClientError::Protocol("stream ended inside a frame".into())),
                        (body, BytesMut::new(), true),
                    ));
                }
            }
        }
    })
}
