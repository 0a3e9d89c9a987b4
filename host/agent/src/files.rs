//! The file API and its confinement.
//!
//! Every path must be absolute, must not contain `..`, and must resolve (symlinks followed) inside
//! one of the configured roots and outside /proc, /sys and /.orchard. Opened files are checked
//! again through /proc/self/fd, so a symlink swapped in between the check and the open is caught.

use std::fs::{File, Metadata};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::UNIX_EPOCH;

use orchard_protocol::{DENIED_PREFIXES, FileEntry, FileKind, Listing};

use crate::error::{AgentError, AgentResult};

pub struct Confinement {
    roots: Vec<PathBuf>,
}

impl Confinement {
    pub fn new(roots: &[PathBuf]) -> anyhow::Result<Self> {
        let roots = roots
            .iter()
            .map(|r| std::fs::canonicalize(r).map_err(|e| anyhow::anyhow!("--root {}: {e}", r.display())))
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Confinement { roots })
    }

    /// Checks the text of `path`: absolute, no `..`, no NUL.
    fn lexical(&self, path: &str) -> AgentResult<PathBuf> {
        if path.is_empty() {
            return Err(AgentError::invalid("path: empty"));
        }
        if path.contains('\0') {
            return Err(AgentError::invalid("path: contains a NUL byte"));
        }
        let p = Path::new(path);
        if !p.is_absolute() {
            return Err(AgentError::invalid(format!("path {path}: must be absolute")));
        }
        if p.components().any(|c| c == Component::ParentDir) {
            return Err(AgentError::denied(format!("path {path}: '..' is not allowed")));
        }
        Ok(p.components().collect())
    }

    /// Checks that a resolved (symlink-free) path is inside a root and outside the denied trees.
    fn check_resolved(&self, requested: &str, real: &Path) -> AgentResult<()> {
        if DENIED_PREFIXES.iter().any(|d| real.starts_with(d)) {
            return Err(AgentError::denied(format!("path {requested}: {} is off limits", real.display())));
        }
        if !self.roots.iter().any(|r| real.starts_with(r)) {
            let roots = self.roots.iter().map(|r| r.display().to_string()).collect::<Vec<_>>().join(", ");
            return Err(AgentError::denied(format!(
                "path {requested}: resolves to {}, outside the allowed roots ({roots})",
                real.display()
            )));
        }
        Ok(())
    }

    /// Resolves an existing path (following symlinks) and checks it.
    pub fn existing(&self, path: &str) -> AgentResult<PathBuf> {
        let lexical = self.lexical(path)?;
        // Check the unresolved form first so that /proc/... is refused even when it exists.
        if DENIED_PREFIXES.iter().any(|d| lexical.starts_with(d)) {
            return Err(AgentError::denied(format!("path {path}: off limits")));
        }
        let real = std::fs::canonicalize(&lexical).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
        self.check_resolved(path, &real)?;
        Ok(real)
    }

    /// Resolves a path that may not exist yet: its nearest existing ancestor is resolved and
    /// checked, and the missing components are appended (they cannot be symlinks: they do not
    /// exist). Returns the resolved path and how many trailing components are missing.
    pub fn creatable(&self, path: &str) -> AgentResult<(PathBuf, usize)> {
        let lexical = self.lexical(path)?;
        if DENIED_PREFIXES.iter().any(|d| lexical.starts_with(d)) {
            return Err(AgentError::denied(format!("path {path}: off limits")));
        }
        let mut existing = lexical.as_path();
        let mut missing = Vec::new();
        let real_base = loop {
            match std::fs::canonicalize(existing) {
                Ok(real) => break real,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    missing.push(existing.file_name().expect("a missing path has a name").to_owned());
                    existing = existing.parent().expect("/ exists");
                }
                Err(e) => return Err(AgentError::io(&format!("path {path}"), e)),
            }
        };
        let mut real = real_base;
        let count = missing.len();
        for name in missing.into_iter().rev() {
            real.push(name);
        }
        self.check_resolved(path, &real)?;
        Ok((real, count))
    }

    /// Checks what an open file really is, closing the window between check and open.
    pub fn verify_open(&self, requested: &str, file: &File) -> AgentResult<()> {
        use std::os::fd::AsRawFd;
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|e| AgentError::other(format!("path {requested}: cannot verify the opened file: {e}")))?;
        self.check_resolved(requested, &real)
    }

    pub fn is_root(&self, real: &Path) -> bool {
        self.roots.iter().any(|r| r == real)
    }
}

pub fn open_for_read(conf: &Confinement, path: &str) -> AgentResult<(File, u64)> {
    let real = conf.existing(path)?;
    let file = File::open(&real).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    conf.verify_open(path, &file)?;
    let meta = file.metadata().map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    if meta.is_dir() {
        return Err(AgentError::invalid(format!("path {path}: is a directory (use the list or tar API)")));
    }
    Ok((file, meta.len()))
}

/// A write in progress: data goes to a temporary file beside the target, renamed over it at the end
/// so that readers never see a half-written file.
pub struct AtomicWrite {
    requested: String,
    target: PathBuf,
    temp: PathBuf,
    file: Option<File>,
    written: u64,
}

impl AtomicWrite {
    pub fn begin(conf: &Confinement, path: &str, mode: Option<u32>, create_parents: bool) -> AgentResult<Self> {
        let (target, missing) = conf.creatable(path)?;
        if conf.is_root(&target) {
            return Err(AgentError::invalid(format!("path {path}: is a root directory")));
        }
        let parent = target.parent().expect("a non-root path has a parent").to_path_buf();
        if missing > 1 {
            if !create_parents {
                return Err(AgentError::not_found(format!(
                    "path {path}: parent directory {} does not exist (set create_parents)",
                    parent.display()
                )));
            }
            std::fs::create_dir_all(&parent)
                .map_err(|e| AgentError::io(&format!("creating {}", parent.display()), e))?;
        }
        if target.is_dir() {
            return Err(AgentError::invalid(format!("path {path}: is a directory")));
        }
        let name = target.file_name().expect("has a name").to_string_lossy().into_owned();
        let temp = parent.join(format!(".{name}.orchard-{}", crate::ids::nonce()));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(|e| AgentError::io(&format!("path {path}"), e))?;
        let write = AtomicWrite { requested: path.to_string(), target, temp, file: Some(file), written: 0 };
        let file = write.file.as_ref().expect("just set");
        conf.verify_open(path, file)?;
        let mode = mode.unwrap_or_else(|| existing_mode(&write.target).unwrap_or(0o644));
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(|e| AgentError::io(&format!("path {path}"), e))?;
        Ok(write)
    }

    pub fn write(&mut self, bytes: &[u8]) -> AgentResult<()> {
        let file = self.file.as_mut().expect("open until commit");
        file.write_all(bytes).map_err(|e| AgentError::io(&format!("path {}", self.requested), e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    pub fn commit(mut self) -> AgentResult<u64> {
        drop(self.file.take());
        std::fs::rename(&self.temp, &self.target)
            .map_err(|e| AgentError::io(&format!("path {}", self.requested), e))?;
        Ok(self.written)
    }
}

impl Drop for AtomicWrite {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

fn existing_mode(path: &Path) -> Option<u32> {
    std::fs::metadata(path).ok().map(|m| m.permissions().mode())
}

pub fn stat(conf: &Confinement, path: &str) -> AgentResult<FileEntry> {
    let real = conf.existing(path)?;
    let meta = std::fs::symlink_metadata(&real).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    Ok(entry(&real, &meta))
}

pub fn list(conf: &Confinement, path: &str) -> AgentResult<Listing> {
    let real = conf.existing(path)?;
    let dir = std::fs::read_dir(&real).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    let mut entries = Vec::new();
    for item in dir {
        let item = item.map_err(|e| AgentError::io(&format!("path {path}"), e))?;
        if let Ok(meta) = item.metadata() {
            entries.push(entry(&item.path(), &meta));
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Listing { path: real.display().to_string(), entries })
}

pub fn remove(conf: &Confinement, path: &str, recursive: bool) -> AgentResult<()> {
    // Remove the named entry itself, never what a symlink points to: resolve only the parent.
    let lexical = conf.lexical(path)?;
    let name = lexical.file_name().ok_or_else(|| AgentError::invalid(format!("path {path}: cannot remove /")))?;
    let parent = conf.existing(&lexical.parent().expect("has a parent").display().to_string())?;
    let target = parent.join(name);
    conf.check_resolved(path, &target)?;
    if conf.is_root(&target) {
        return Err(AgentError::invalid(format!("path {path}: is a root directory")));
    }
    let meta = std::fs::symlink_metadata(&target).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    let result = if meta.is_dir() {
        if recursive { std::fs::remove_dir_all(&target) } else { std::fs::remove_dir(&target) }
    } else {
        std::fs::remove_file(&target)
    };
    result.map_err(|e| AgentError::io(&format!("path {path}"), e))
}

fn entry(path: &Path, meta: &Metadata) -> FileEntry {
    let ft = meta.file_type();
    let kind = if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Directory
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    };
    FileEntry {
        name: path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "/".into()),
        path: path.display().to_string(),
        kind,
        size: meta.len(),
        mode: meta.mode() & 0o7777,
        modified: meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0),
        link_target: ft.is_symlink().then(|| std::fs::read_link(path).ok()).flatten().map(|t| t.display().to_string()),
    }
}
