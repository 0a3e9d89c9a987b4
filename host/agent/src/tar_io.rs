//! Directory transfer as tar streams, in both directions, without holding an archive in memory.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;

use cap_fs_ext::OsMetadataExt;
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, OpenOptions};

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
///
/// The walk opens every directory and file relative to its parent's descriptor without
/// following symlinks, so a directory swapped for a link while the walk runs is not entered.
pub fn archive(conf: &Confinement, path: &str) -> AgentResult<mpsc::Receiver<Result<Bytes, std::io::Error>>> {
    let at = conf.existing(path)?;
    let top = at.dir.open_dir(at.rel_or_dot()).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    let (tx, rx) = mpsc::channel(4);
    tokio::task::spawn_blocking(move || {
        let err_tx = tx.clone();
        let mut builder = tar::Builder::new(ChannelWriter { tx, buf: Vec::with_capacity(64 * 1024) });
        let result = append_dir(&mut builder, &top, Path::new("."), 0)
            .and_then(|_| builder.into_inner())
            .and_then(|mut w| w.flush());
        if let Err(e) = result {
            // Abort the body so the client sees a broken transfer rather than a short archive.
            let _ = err_tx.blocking_send(Err(e));
        }
    });
    Ok(rx)
}

/// Deeper than this is a loop or an attack: refused.
const MAX_DEPTH: usize = 256;

fn header_for(meta: &cap_std::fs::Metadata) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_mode(meta.mode() & 0o7777);
    header.set_uid(u64::from(meta.uid()));
    header.set_gid(u64::from(meta.gid()));
    header.set_mtime(meta.mtime().max(0) as u64);
    header
}

fn append_dir<W: Write>(builder: &mut tar::Builder<W>, dir: &Dir, name: &Path, depth: usize) -> std::io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(std::io::Error::other(format!("{}: directories nested deeper than {MAX_DEPTH}", name.display())));
    }
    let meta = dir.dir_metadata()?;
    let mut header = header_for(&meta);
    header.set_entry_type(tar::EntryType::Directory);
    header.set_size(0);
    builder.append_data(&mut header, name, std::io::empty())?;
    let mut children: Vec<_> = dir.entries()?.filter_map(Result::ok).map(|e| e.file_name()).collect();
    children.sort();
    for child in children {
        let path = name.join(&child);
        let Ok(meta) = dir.symlink_metadata(&child) else { continue };
        let ft = meta.file_type();
        if ft.is_dir() {
            // Not followed if it became a symlink since it was listed.
            let Ok(sub) = dir.open_dir_nofollow(&child) else { continue };
            append_dir(builder, &sub, &path, depth + 1)?;
        } else if ft.is_symlink() {
            let target = dir.read_link_contents(&child)?;
            let mut header = header_for(&meta);
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            builder.append_link(&mut header, &path, &target)?;
        } else if ft.is_file() {
            let mut options = OpenOptions::new();
            options.read(true).follow(FollowSymlinks::No);
            let Ok(file) = dir.open_with(&child, &options) else { continue };
            let file = file.into_std();
            // The size of what was opened, not of what was listed.
            let opened = file.metadata()?;
            let mut header = header_for(&meta);
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(opened.len());
            builder.append_data(&mut header, &path, file.take(opened.len()))?;
        }
    }
    Ok(())
}

/// Extracts a tar stream into the directory `path` (created if missing). Every entry is
/// written relative to that directory's descriptor: absolute names and `..` are refused, and
/// links inside it (placed there by the archive or by a process in the sandbox) can never lead a
/// write out of it. Returns (bytes, entries).
pub fn extract(conf: &Confinement, path: &str, reader: impl Read) -> AgentResult<(u64, u64)> {
    let (at, _) = conf.creatable(path)?;
    let io = |e| AgentError::io(&format!("path {path}"), e);
    at.dir.create_dir_all(at.rel_or_dot()).map_err(io)?;
    let dest = at.dir.open_dir(at.rel_or_dot()).map_err(io)?;
    let mut counting = CountingReader { inner: reader, count: 0 };
    let mut archive = tar::Archive::new(&mut counting);
    let mut entries = 0;
    for entry in archive.entries().map_err(|e| AgentError::invalid(format!("tar: {e}")))? {
        let mut entry = entry.map_err(|e| AgentError::invalid(format!("tar: {e}")))?;
        let raw = entry.path().map_err(|e| AgentError::invalid(format!("tar: {e}")))?.into_owned();
        let name = raw.display().to_string();
        let Some(rel) = relative_inside(&raw) else {
            return Err(AgentError::denied(format!("tar entry {name}: would be written outside {path}")));
        };
        if rel.as_os_str().is_empty() {
            continue; // the directory itself
        }
        let failed = |e: std::io::Error| AgentError::invalid(format!("tar entry {name}: {e}"));
        if let Some(parent) = rel.parent().filter(|p| !p.as_os_str().is_empty()) {
            dest.create_dir_all(parent).map_err(failed)?;
        }
        let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                dest.create_dir_all(&rel).map_err(failed)?;
                let _ = dest
                    .set_permissions(&rel, cap_std::fs::Permissions::from_std(std::fs::Permissions::from_mode(mode)));
            }
            tar::EntryType::Symlink => {
                let target =
                    entry.link_name().map_err(failed)?.ok_or_else(|| failed(std::io::Error::other("no target")))?;
                let _ = dest.remove_file(&rel);
                dest.symlink(target.as_ref(), &rel).map_err(failed)?;
            }
            tar::EntryType::Link => {
                let target =
                    entry.link_name().map_err(failed)?.ok_or_else(|| failed(std::io::Error::other("no target")))?;
                let target = relative_inside(&target).ok_or_else(|| {
                    AgentError::denied(format!("tar entry {name}: links to {}, outside {path}", target.display()))
                })?;
                let _ = dest.remove_file(&rel);
                dest.hard_link(&target, &dest, &rel).map_err(failed)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous | tar::EntryType::GNUSparse => {
                // Replace, never write through: an existing symlink at the name is removed, not
                // followed.
                if dest.symlink_metadata(&rel).is_ok_and(|m| !m.is_dir()) {
                    dest.remove_file(&rel).map_err(failed)?;
                }
                let mut options = OpenOptions::new();
                options.write(true).create_new(true).follow(FollowSymlinks::No);
                let file = dest.open_with(&rel, &options).map_err(failed)?;
                let mut file = file.into_std();
                std::io::copy(&mut entry, &mut file).map_err(failed)?;
                file.set_permissions(std::fs::Permissions::from_mode(mode)).map_err(failed)?;
            }
            // Devices, fifos and the rest are not files an agent transfers.
            _ => continue,
        }
        entries += 1;
    }
    Ok((counting.count, entries))
}

/// `path` as a relative path with no `..`, or `None` when it would leave the directory.
fn relative_inside(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
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
