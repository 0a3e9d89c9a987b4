//! Unpacking an uploaded `.tar.gz` of task folders, within limits, links checked.

use std::io::Read;
use std::path::{Component, Path};

use cap_std::ambient_authority;
use cap_std::fs::Dir;

/// What one upload may hold once unpacked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// File content in all, uncompressed.
    pub total_bytes: u64,
    /// Entries (files, folders, links).
    pub entries: u64,
    /// One file.
    pub file_bytes: u64,
}

impl Default for Limits {
    /// 256 MiB unpacked, 20,000 entries, 64 MiB a file: a SWE-bench task with its repository
    /// fits; a decompression bomb does not.
    fn default() -> Self {
        Limits { total_bytes: 256 << 20, entries: 20_000, file_bytes: 64 << 20 }
    }
}

/// Why an archive was refused. `TooLarge` is the caller's 413; the rest its 422.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// `what` is the limit's unit ("bytes unpacked", "entries", "bytes in one file"); `entry`
    /// the file that crossed it, where one did.
    #[error("{}over the limit of {limit} {what}", entry.as_ref().map(|e| format!("{e}: ")).unwrap_or_default())]
    TooLarge {
        /// The limit's unit.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The entry that crossed it, where one did.
        entry: Option<String>,
    },
    /// An entry that may not be unpacked (a link outside the archive, a hard link, a special
    /// file, a path that would land outside the folder).
    #[error("entry {entry}: {reason}")]
    Refused {
        /// The entry's path in the archive.
        entry: String,
        /// Why it was refused.
        reason: String,
    },
    /// The upload is not a gzip-compressed tar.
    #[error("not a .tar.gz: {0}")]
    Malformed(String),
    /// Writing the unpacked folder failed (the server's disk, not the upload).
    #[error("storing the archive: {0}")]
    Storage(std::io::Error),
}

/// A reader that fails once more than `left` bytes have come through: the decompressed stream
/// is bounded whatever the headers claim.
struct Bounded<R> {
    inner: R,
    left: u64,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n as u64 > self.left {
            return Err(std::io::Error::other(BOMB));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

const BOMB: &str = "orchard: decompressed stream over its bound";

/// Whether a link at `name` pointing at `target` stays inside the archive by its text (a first,
/// cheap check; the whole chain is resolved once everything is unpacked).
fn text_stays_inside(name: &Path, target: &Path) -> bool {
    if target.is_absolute() {
        return false;
    }
    let mut depth: i64 = name.components().filter(|c| matches!(c, Component::Normal(_))).count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::ParentDir => depth -= 1,
            Component::CurDir => {}
            _ => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    true
}

fn refused(entry: &Path, reason: impl Into<String>) -> UnpackError {
    UnpackError::Refused { entry: entry.display().to_string(), reason: reason.into() }
}

/// Unpacks the `.tar.gz` `gz` into `dir` (atomically: a half-unpacked folder is never used;
/// an existing complete one is kept). Returns the bytes of file content unpacked.
pub fn unpack(gz: &[u8], dir: &Path, limits: Limits) -> Result<u64, UnpackError> {
    let staging = dir.with_extension(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(UnpackError::Storage)?;
    let result = unpack_into(gz, &staging, limits).and_then(|bytes| {
        check_links(&staging)?;
        std::fs::write(staging.join(".complete"), b"").map_err(UnpackError::Storage)?;
        Ok(bytes)
    });
    let bytes = match result {
        Ok(bytes) => bytes,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            return Err(e);
        }
    };
    match std::fs::rename(&staging, dir) {
        Ok(()) => Ok(bytes),
        // Another runner of this replica unpacked it first.
        Err(_) if dir.join(".complete").is_file() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(bytes)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            Err(UnpackError::Storage(e))
        }
    }
}

fn unpack_into(gz: &[u8], staging: &Path, limits: Limits) -> Result<u64, UnpackError> {
    // Headers and padding take at most 1.5 KiB an entry beyond the content (long names more).
    let bound = limits.total_bytes + limits.entries.saturating_mul(4096) + (1 << 20);
    let stream = Bounded { inner: flate2::read::GzDecoder::new(gz), left: bound };
    let mut archive = tar::Archive::new(stream);
    archive.set_preserve_permissions(false);
    archive.set_preserve_ownerships(false);
    archive.set_unpack_xattrs(false);
    archive.set_overwrite(true);
    let (mut count, mut total) = (0u64, 0u64);
    let io = |e: std::io::Error| {
        if e.to_string().contains(BOMB) {
            UnpackError::TooLarge { what: "bytes unpacked", limit: limits.total_bytes, entry: None }
        } else {
            UnpackError::Malformed(e.to_string())
        }
    };
    for entry in archive.entries().map_err(io)? {
        let mut entry = entry.map_err(io)?;
        let name = entry.path().map_err(io)?.into_owned();
        count += 1;
        if count > limits.entries {
            return Err(UnpackError::TooLarge { what: "entries", limit: limits.entries, entry: None });
        }
        let size = entry.header().size().map_err(io)?;
        match entry.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                if size > limits.file_bytes {
                    return Err(UnpackError::TooLarge {
                        what: "bytes in one file",
                        limit: limits.file_bytes,
                        entry: Some(name.display().to_string()),
                    });
                }
                total += size;
                if total > limits.total_bytes {
                    return Err(UnpackError::TooLarge {
                        what: "bytes unpacked",
                        limit: limits.total_bytes,
                        entry: Some(name.display().to_string()),
                    });
                }
            }
            tar::EntryType::Directory => {}
            tar::EntryType::Symlink => {
                let target = entry.link_name().map_err(io)?.map(|t| t.into_owned()).unwrap_or_default();
                if !text_stays_inside(&name, &target) {
                    return Err(refused(&name, "links outside the archive"));
                }
            }
            // Metadata of the next entry (long names, pax records): tar reads them itself.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            tar::EntryType::Link => {
                return Err(refused(&name, "is a hard link; task folders hold files, folders and symlinks"));
            }
            other => {
                return Err(refused(
                    &name,
                    format!("is a {other:?} entry; task folders hold files, folders and symlinks"),
                ));
            }
        }
        let landed = entry.unpack_in(staging).map_err(|e| {
            if e.to_string().contains(BOMB) {
                UnpackError::TooLarge { what: "bytes unpacked", limit: limits.total_bytes, entry: None }
            } else {
                refused(&name, "could not be unpacked")
            }
        })?;
        if !landed {
            return Err(refused(&name, "would land outside the archive's folder"));
        }
    }
    Ok(total)
}

/// Every symlink of the unpacked tree resolves, whole chain and all, to something inside it
/// (the kernel resolves each beneath the root: a chain that climbs out on the way fails).
fn check_links(staging: &Path) -> Result<(), UnpackError> {
    let root = Dir::open_ambient_dir(staging, ambient_authority()).map_err(UnpackError::Storage)?;
    let mut stack = vec![std::path::PathBuf::new()];
    while let Some(folder) = stack.pop() {
        let at = if folder.as_os_str().is_empty() { Path::new(".") } else { folder.as_path() };
        for entry in root.read_dir(at).map_err(UnpackError::Storage)? {
            let entry = entry.map_err(UnpackError::Storage)?;
            let rel = folder.join(entry.file_name());
            let kind = entry.file_type().map_err(UnpackError::Storage)?;
            if kind.is_symlink() {
                if root.metadata(&rel).is_err() {
                    return Err(refused(&rel, "links outside the archive, or to nothing in it"));
                }
            } else if kind.is_dir() {
                stack.push(rel);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A .tar.gz of (name, kind) entries: `Ok(content)` files, `Err(target)` symlinks.
    fn archive(entries: &[(&str, Result<&[u8], &str>)]) -> Vec<u8> {
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast()));
        for (name, what) in entries {
            let mut header = tar::Header::new_gnu();
            header.set_mode(0o644);
            match what {
                Ok(content) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_size(content.len() as u64);
                    builder.append_data(&mut header, name, *content).unwrap();
                }
                Err(target) => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_size(0);
                    builder.append_link(&mut header, name, target).unwrap();
                }
            }
        }
        builder.into_inner().unwrap().finish().unwrap()
    }

    #[test]
    fn a_chain_of_links_that_climbs_out_is_refused_at_unpack() {
        let tmp = tempfile::tempdir().unwrap();
        let gz = archive(&[
            ("t1/instruction.md", Ok(b"hi")),
            ("t1/up", Err("..")),
            ("t1/task.toml", Err("up/t1/up/../../../etc/shadow")),
        ]);
        let err = unpack(&gz, &tmp.path().join("d"), Limits::default()).unwrap_err();
        assert!(matches!(err, UnpackError::Refused { .. }), "{err}");
        assert!(err.to_string().contains("t1/task.toml"), "{err}");
        assert!(!tmp.path().join("d").exists(), "a refused archive left a folder behind");
    }

    #[test]
    fn a_folder_link_to_the_parent_of_the_upload_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        // `up -> ..` is inside by its text at t1/; `solution -> up/..` reaches above the root.
        let gz = archive(&[("t1/instruction.md", Ok(b"hi")), ("t1/up", Err("..")), ("t1/solution", Err("up/.."))]);
        let err = unpack(&gz, &tmp.path().join("d"), Limits::default()).unwrap_err();
        assert!(err.to_string().contains("t1/solution"), "{err}");
    }

    #[test]
    fn links_inside_the_archive_are_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let gz = archive(&[
            ("shop/environment/Dockerfile", Ok(b"FROM x")),
            ("a/instruction.md", Ok(b"hi")),
            ("a/environment", Err("../shop/environment")),
        ]);
        unpack(&gz, &tmp.path().join("d"), Limits::default()).unwrap();
        assert_eq!(std::fs::read_to_string(tmp.path().join("d/a/environment/Dockerfile")).unwrap(), "FROM x");
        assert!(tmp.path().join("d/.complete").is_file());
    }

    #[test]
    fn a_dangling_link_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let gz = archive(&[("a/instruction.md", Ok(b"hi")), ("a/x", Err("nothing-here"))]);
        assert!(unpack(&gz, &tmp.path().join("d"), Limits::default()).is_err());
    }

    #[test]
    fn uploads_over_their_limits_are_refused_while_reading() {
        let tmp = tempfile::tempdir().unwrap();
        let zeros = vec![0u8; 1 << 20];
        let gz = archive(&[("a/instruction.md", Ok(&zeros))]);
        let small = Limits { total_bytes: 1 << 30, entries: 100, file_bytes: 1000 };
        let err = unpack(&gz, &tmp.path().join("d"), small).unwrap_err();
        assert!(matches!(err, UnpackError::TooLarge { what: "bytes in one file", limit: 1000, .. }), "{err}");
        let total = Limits { total_bytes: 1500, entries: 100, file_bytes: 1000 };
        let gz = archive(&[("a/1", Ok(&zeros[..900])), ("a/2", Ok(&zeros[..900]))]);
        assert!(matches!(unpack(&gz, &tmp.path().join("e"), total), Err(UnpackError::TooLarge { .. })));
        let few = Limits { total_bytes: 1 << 20, entries: 2, file_bytes: 1000 };
        let gz = archive(&[("a/1", Ok(b"1")), ("a/2", Ok(b"2")), ("a/3", Ok(b"3"))]);
        let err = unpack(&gz, &tmp.path().join("f"), few).unwrap_err();
        assert!(matches!(err, UnpackError::TooLarge { what: "entries", limit: 2, .. }), "{err}");
    }

    #[test]
    fn one_file_over_the_total_is_refused_before_it_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        // 8 MiB of zeros compress to a few KiB.
        let zeros = vec![0u8; 8 << 20];
        let gz = archive(&[("a/big", Ok(&zeros))]);
        let limits = Limits { total_bytes: 1024, entries: 1, file_bytes: 16 << 20 };
        assert!(matches!(unpack(&gz, &tmp.path().join("d"), limits), Err(UnpackError::TooLarge { .. })));
        assert!(!tmp.path().join("d").exists() && std::fs::read_dir(tmp.path()).unwrap().count() == 0);
    }
}
