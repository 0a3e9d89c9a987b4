//! Directory transfer as tar streams, in both directions, without holding an archive in memory.

use std::io::{Read, Write};

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::error::{AgentError, AgentResult};
use crate::files::Confinement;

/// A `Write` that hands 64 KiB chunks to an async body stream; it blocks (we run on a blocking
/// thread) when the client reads slower than we archive.
struct ChannelWriter {
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

impl ChannelWriter {
    fn send_buf(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(64 * 1024)));
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "client went away"))
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= 64 * 1024 {
            self.send_buf()?;
        }
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.send_buf()
    }
}

/// Archives the directory `path` (symlinks kept as symlinks) into a stream of chunks.
pub fn archive(conf: &Confinement, path: &str) -> AgentResult<mpsc::Receiver<Result<Bytes, std::io::Error>>> {
    let real = conf.existing(path)?;
    if !real.is_dir() {
        return Err(AgentError::invalid(format!("path {path}: not a directory")));
    }
    let (tx, rx) = mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        let err_tx = tx.clone();
        let mut builder = tar::Builder::new(ChannelWriter { tx, buf: Vec::with_capacity(64 * 1024) });
        builder.follow_symlinks(false);
        let result = builder.append_dir_all(".", &real).and_then(|_| builder.into_inner()).and_then(|mut w| w.flush());
        if let Err(e) = result {
            // Abort the body so the client sees a broken transfer rather than a short archive.
            let _ = err_tx.blocking_send(Err(e));
        }
    });
    Ok(rx)
}

/// Extracts a tar stream into the directory `path` (created if missing). Entries that would land
/// outside it (absolute names, `..`, links pointing out) are refused. Returns (bytes, entries).
pub fn extract(conf: &Confinement, path: &str, reader: impl Read) -> AgentResult<(u64, u64)> {
    let (real, _) = conf.creatable(path)?;
    std::fs::create_dir_all(&real).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    let mut counting = CountingReader { inner: reader, count: 0 };
    let mut archive = tar::Archive::new(&mut counting);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut entries = 0;
    for entry in archive.entries().map_err(|e| AgentError::invalid(format!("tar: {e}")))? {
        let mut entry = entry.map_err(|e| AgentError::invalid(format!("tar: {e}")))?;
        let name = entry.path().map(|p| p.display().to_string()).unwrap_or_default();
        let inside = entry.unpack_in(&real).map_err(|e| AgentError::invalid(format!("tar entry {name}: {e}")))?;
        if !inside {
            return Err(AgentError::denied(format!("tar entry {name}: would be written outside {path}")));
        }
        entries += 1;
    }
    Ok((counting.count, entries))
}

struct CountingReader<R> {
    inner: R,
    count: u64,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count += n as u64;
        Ok(n)
    }
}
