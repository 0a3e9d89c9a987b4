//! Applying layer tarballs onto a root directory, with OCI whiteouts.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::{ImageError, Result};

#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub path: PathBuf,
    /// Checked while reading when known.
    pub digest: Option<String>,
}

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE: &str = ".wh..wh..opq";

pub(crate) fn unpack_all(reference: &str, layers: &[Layer], dest: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(dest);
    std::fs::create_dir_all(dest).map_err(|e| ImageError::io(dest, e))?;
    for layer in layers {
        apply(reference, layer, dest)?;
    }
    Ok(())
}

/// Reads through to the inner reader while hashing what passes.
struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

fn apply(reference: &str, layer: &Layer, dest: &Path) -> Result<()> {
    let bad = |reason: String| ImageError::invalid(reference, format!("layer {}: {reason}", layer.path.display()));
    let file = File::open(&layer.path).map_err(|e| bad(e.to_string()))?;
    let mut reader = HashingReader { inner: BufReader::with_capacity(256 * 1024, file), hasher: Sha256::new() };
    let mut magic = [0u8; 4];
    let peeked = {
        let buf = std::io::BufRead::fill_buf(&mut reader.inner).map_err(|e| bad(e.to_string()))?;
        let n = buf.len().min(4);
        magic[..n].copy_from_slice(&buf[..n]);
        n
    };
    let decoded: Box<dyn Read> = if peeked >= 2 && magic[..2] == [0x1f, 0x8b] {
        Box::new(flate2::read::GzDecoder::new(&mut reader))
    } else if peeked == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        return Err(bad("zstd-compressed layers are not supported yet; re-export the image with gzip".into()));
    } else {
        Box::new(&mut reader)
    };
    extract(decoded, dest).map_err(bad)?;
    // Hash whatever the tar reader left unread (padding after the end-of-archive blocks).
    std::io::copy(&mut reader, &mut std::io::sink()).map_err(|e| bad(e.to_string()))?;
    if let Some(expected) = &layer.digest {
        let actual = format!("sha256:{}", hex::encode(reader.hasher.finalize()));
        if &actual != expected {
            return Err(bad(format!("digest mismatch: expected {expected}, got {actual}")));
        }
    }
    Ok(())
}

fn extract(reader: impl Read, dest: &Path) -> std::result::Result<(), String> {
    let mut archive = tar::Archive::new(reader);
    let am_root = nix_is_root();
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(am_root);
    archive.set_overwrite(true);
    archive.set_unpack_xattrs(false);
    for entry in archive.entries().map_err(|e| e.to_string())? {
        let mut entry = entry.map_err(|e| e.to_string())?;
        let path = entry.path().map_err(|e| e.to_string())?.into_owned();
        let rel = normalize(&path).ok_or_else(|| format!("entry {} escapes the root", path.display()))?;
        let name = rel.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if name == OPAQUE {
            // The directory's content from lower layers disappears.
            let dir = dest.join(rel.parent().unwrap_or(Path::new("")));
            if let Ok(children) = std::fs::read_dir(&dir) {
                for child in children.flatten() {
                    remove_any(&child.path());
                }
            }
            continue;
        }
        if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
            remove_any(&dest.join(rel.parent().unwrap_or(Path::new(""))).join(hidden));
            continue;
        }
        let target = dest.join(&rel);
        // A file replacing a directory (or the reverse) from a lower layer.
        if let Ok(meta) = std::fs::symlink_metadata(&target)
            && (meta.is_dir() != entry.header().entry_type().is_dir())
        {
            remove_any(&target);
        }
        let inside = entry.unpack_in(dest).map_err(|e| format!("entry {}: {}", path.display(), chain(&e)))?;
        if !inside {
            return Err(format!("entry {} escapes the root", path.display()));
        }
    }
    Ok(())
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => {
            let _ = std::fs::remove_dir_all(path);
        }
        Ok(_) => {
            let _ = std::fs::remove_file(path);
        }
        Err(_) => {}
    }
}

/// `./a/b` → `a/b`; refuses `..` and absolute names.
fn normalize(path: &Path) -> Option<PathBuf> {
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

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// An error with its causes, for messages that say what really went wrong.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text += &format!(": {cause}");
        source = cause.source();
    }
    text
}
