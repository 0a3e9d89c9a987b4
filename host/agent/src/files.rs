//! The file API and its confinement, on cap-std.
//!
//! Every path must be absolute and free of `..`; it is resolved inside one of the configured
//! roots, each held open as a [`cap_std::fs::Dir`], and every file system call is made relative
//! to that directory (openat2 with `RESOLVE_BENEATH` where the kernel has it): whatever a process
//! in the sandbox swaps in meanwhile, no call can reach outside the root it started from.
//!
//! Symlinks are followed the way a process in the sandbox would see them, with one rule: where a
//! link leads (an absolute target, or `..` above its root) must itself be inside an allowed root.
//! /proc, /sys and /.orchard are refused whatever the roots, and an opened file is checked again
//! through /proc/self/fd (a symlink swapped in can lead elsewhere in a root, never out of it, but
//! it could lead into /proc).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use cap_fs_ext::OsMetadataExt;
use std::path::{Component, Path, PathBuf};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};
use orchard_protocol::{DENIED_PREFIXES, FileEntry, FileKind, Listing};

use crate::error::{AgentError, AgentResult};

/// Symlinks followed while resolving one path, as the kernel's own limit.
const MAX_LINKS: usize = 40;

struct Root {
    /// Canonical, absolute.
    path: PathBuf,
    dir: Dir,
}

pub struct Confinement {
    roots: Vec<Root>,
}

/// A path resolved inside a root: the root's directory and the path relative to it (empty for
/// the root itself).
pub struct Resolved<'a> {
    pub dir: &'a Dir,
    pub rel: PathBuf,
    /// The absolute path, for messages and listings.
    pub real: PathBuf,
}

impl Resolved<'_> {
    /// `.` for the root itself: cap-std takes no empty paths.
    pub fn rel_or_dot(&self) -> &Path {
        if self.rel.as_os_str().is_empty() { Path::new(".") } else { &self.rel }
    }
}

impl Confinement {
    pub fn new(roots: &[PathBuf]) -> anyhow::Result<Self> {
        let roots = roots
            .iter()
            .map(|r| {
                let path = std::fs::canonicalize(r).map_err(|e| anyhow::anyhow!("--root {}: {e}", r.display()))?;
                let dir = Dir::open_ambient_dir(&path, ambient_authority())
                    .map_err(|e| anyhow::anyhow!("--root {}: {e}", r.display()))?;
                Ok(Root { path, dir })
            })
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
        if DENIED_PREFIXES.iter().any(|d| p.starts_with(d)) {
            return Err(AgentError::denied(format!("path {path}: off limits")));
        }
        Ok(p.components().collect())
    }

    /// The root holding `abs` (the longest that does), or why there is none.
    fn root_of(&self, requested: &str, abs: &Path) -> AgentResult<usize> {
        if DENIED_PREFIXES.iter().any(|d| abs.starts_with(d)) {
            return Err(AgentError::denied(format!("path {requested}: {} is off limits", abs.display())));
        }
        self.roots
            .iter()
            .enumerate()
            .filter(|(_, r)| abs.starts_with(&r.path))
            .max_by_key(|(_, r)| r.path.as_os_str().len())
            .map(|(i, _)| i)
            .ok_or_else(|| {
                let roots = self.roots.iter().map(|r| r.path.display().to_string()).collect::<Vec<_>>().join(", ");
                AgentError::denied(format!(
                    "path {requested}: resolves to {}, outside the allowed roots ({roots})",
                    abs.display()
                ))
            })
    }

    fn resolved(&self, requested: &str, abs: PathBuf) -> AgentResult<Resolved<'_>> {
        let root = &self.roots[self.root_of(requested, &abs)?];
        let rel = abs.strip_prefix(&root.path).expect("root_of checked the prefix").to_path_buf();
        Ok(Resolved { dir: &root.dir, rel, real: abs })
    }

    /// Resolves `path` following symlinks (the last one too when `follow_last`); the components
    /// that do not exist yet are kept as they are (they cannot be symlinks). Every lookup goes
    /// through a root's `Dir`.
    fn resolve(&self, requested: &str, path: &Path, follow_last: bool) -> AgentResult<(PathBuf, usize)> {
        let mut pending: Vec<std::ffi::OsString> =
            path.components().filter(|c| matches!(c, Component::Normal(_))).map(|c| c.as_os_str().to_owned()).collect();
        pending.reverse();
        let mut current = PathBuf::from("/");
        let mut links = 0;
        let mut missing = 0;
        while let Some(name) = pending.pop() {
            let candidate = current.join(&name);
            if missing > 0 {
                current = candidate;
                missing += 1;
                continue;
            }
            let last = pending.is_empty();
            // Above a root (its ancestors are canonical: no symlinks there), descend as written.
            if self.roots.iter().any(|r| r.path.starts_with(&candidate) && r.path != candidate) {
                current = candidate;
                continue;
            }
            let root = &self.roots[self.root_of(requested, &candidate)?];
            let rel = candidate.strip_prefix(&root.path).expect("prefix").to_path_buf();
            if rel.as_os_str().is_empty() {
                current = candidate;
                continue;
            }
            let meta = match root.dir.symlink_metadata(&rel) {
                Ok(m) => m,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    current = candidate;
                    missing = 1;
                    continue;
                }
                Err(e) => return Err(AgentError::io(&format!("path {requested}"), e)),
            };
            if !meta.file_type().is_symlink() || (last && !follow_last) {
                current = candidate;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(AgentError::invalid(format!("path {requested}: too many levels of symbolic links")));
            }
            let target =
                root.dir.read_link_contents(&rel).map_err(|e| AgentError::io(&format!("path {requested}"), e))?;
            // Splice the target in: absolute from `/`, relative from the link's directory.
            let base = if target.is_absolute() { PathBuf::from("/") } else { current.clone() };
            let mut spliced = base;
            for c in target.components() {
                match c {
                    Component::Normal(n) => spliced.push(n),
                    Component::ParentDir => {
                        spliced.pop();
                    }
                    _ => {}
                }
            }
            for c in spliced.components().rev() {
                if let Component::Normal(n) = c {
                    pending.push(n.to_owned());
                }
            }
            current = PathBuf::from("/");
        }
        Ok((current, missing))
    }

    /// An existing path, symlinks followed.
    pub fn existing(&self, path: &str) -> AgentResult<Resolved<'_>> {
        let lexical = self.lexical(path)?;
        let (abs, missing) = self.resolve(path, &lexical, true)?;
        if missing > 0 {
            return Err(AgentError::not_found(format!("path {path}: No such file or directory")));
        }
        self.resolved(path, abs)
    }

    /// A path that may not exist yet; also returns how many trailing components are missing.
    pub fn creatable(&self, path: &str) -> AgentResult<(Resolved<'_>, usize)> {
        let lexical = self.lexical(path)?;
        let (abs, missing) = self.resolve(path, &lexical, true)?;
        Ok((self.resolved(path, abs)?, missing))
    }

    /// The entry `path` names itself (a symlink is not followed), under its resolved parent.
    pub fn entry(&self, path: &str) -> AgentResult<Resolved<'_>> {
        let lexical = self.lexical(path)?;
        let (abs, _) = self.resolve(path, &lexical, false)?;
        self.resolved(path, abs)
    }

    /// Checks what an open file really is: a symlink swapped in after resolution stays inside
    /// the root (cap-std), but could lead into /proc or another denied tree.
    pub fn verify_open(&self, requested: &str, file: &File) -> AgentResult<()> {
        use std::os::fd::AsRawFd;
        let real = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .map_err(|e| AgentError::other(format!("path {requested}: cannot verify the opened file: {e}")))?;
        self.root_of(requested, &real).map(|_| ())
    }

    pub fn is_root(&self, real: &Path) -> bool {
        self.roots.iter().any(|r| r.path == real)
    }
}

pub fn open_for_read(conf: &Confinement, path: &str) -> AgentResult<(File, u64)> {
    let at = conf.existing(path)?;
    let file = at.dir.open(at.rel_or_dot()).map_err(|e| AgentError::io(&format!("path {path}"), e))?.into_std();
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
    /// The target's directory (inside its root) and names relative to it.
    parent: Dir,
    name: PathBuf,
    temp: PathBuf,
    file: Option<File>,
    written: u64,
}

impl AtomicWrite {
    pub fn begin(conf: &Confinement, path: &str, mode: Option<u32>, create_parents: bool) -> AgentResult<Self> {
        let io = |e| AgentError::io(&format!("path {path}"), e);
        let (at, missing) = conf.creatable(path)?;
        if conf.is_root(&at.real) {
            return Err(AgentError::invalid(format!("path {path}: is a root directory")));
        }
        let parent_rel = at.rel.parent().map(Path::to_path_buf).unwrap_or_default();
        if missing > 1 {
            if !create_parents {
                return Err(AgentError::not_found(format!(
                    "path {path}: parent directory {} does not exist (set create_parents)",
                    at.real.parent().unwrap_or(Path::new("/")).display()
                )));
            }
            at.dir.create_dir_all(&parent_rel).map_err(io)?;
        }
        let parent = if parent_rel.as_os_str().is_empty() { at.dir.try_clone() } else { at.dir.open_dir(&parent_rel) }
            .map_err(io)?;
        let name = PathBuf::from(at.rel.file_name().expect("a non-root path has a name"));
        if parent.symlink_metadata(&name).is_ok_and(|m| m.is_dir()) {
            return Err(AgentError::invalid(format!("path {path}: is a directory")));
        }
        let existing_mode = parent.metadata(&name).ok().map(|m| m.mode());
        let temp = PathBuf::from(format!(".{}.orchard-{}", name.display(), crate::ids::nonce()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true).follow(FollowSymlinks::No);
        let file = parent.open_with(&temp, &options).map_err(io)?.into_std();
        let write = AtomicWrite { requested: path.to_string(), parent, name, temp, file: Some(file), written: 0 };
        let file = write.file.as_ref().expect("just set");
        conf.verify_open(path, file)?;
        let mode = mode.or(existing_mode).unwrap_or(0o644);
        file.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777)).map_err(io)?;
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
        self.parent
            .rename(&self.temp, &self.parent, &self.name)
            .map_err(|e| AgentError::io(&format!("path {}", self.requested), e))?;
        Ok(self.written)
    }
}

impl Drop for AtomicWrite {
    fn drop(&mut self) {
        if self.file.is_some() {
            let _ = self.parent.remove_file(&self.temp);
        }
    }
}

pub fn stat(conf: &Confinement, path: &str) -> AgentResult<FileEntry> {
    let at = conf.existing(path)?;
    let meta = at.dir.symlink_metadata(at.rel_or_dot()).map_err(|e| AgentError::io(&format!("path {path}"), e))?;
    Ok(entry(&at.real, &meta, None))
}

pub fn list(conf: &Confinement, path: &str) -> AgentResult<Listing> {
    let at = conf.existing(path)?;
    let io = |e| AgentError::io(&format!("path {path}"), e);
    let dir = at.dir.open_dir(at.rel_or_dot()).map_err(io)?;
    let mut entries = Vec::new();
    for item in dir.entries().map_err(io)? {
        let item = item.map_err(io)?;
        let name = item.file_name();
        if let Ok(meta) = item.metadata() {
            let link = meta.file_type().is_symlink().then(|| dir.read_link_contents(&name).ok()).flatten();
            entries.push(entry(&at.real.join(&name), &meta, link));
        }
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Listing { path: at.real.display().to_string(), entries })
}

pub fn remove(conf: &Confinement, path: &str, recursive: bool) -> AgentResult<()> {
    // Remove the named entry itself, never what a symlink points to.
    let at = conf.entry(path)?;
    if conf.is_root(&at.real) || at.rel.as_os_str().is_empty() {
        return Err(AgentError::invalid(format!("path {path}: is a root directory")));
    }
    let io = |e| AgentError::io(&format!("path {path}"), e);
    let meta = at.dir.symlink_metadata(&at.rel).map_err(io)?;
    let result = if meta.is_dir() {
        if recursive { at.dir.remove_dir_all(&at.rel) } else { at.dir.remove_dir(&at.rel) }
    } else {
        at.dir.remove_file(&at.rel)
    };
    result.map_err(io)
}

pub fn entry(path: &Path, meta: &cap_std::fs::Metadata, link_target: Option<PathBuf>) -> FileEntry {
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
        modified: meta.mtime() as f64 + meta.mtime_nsec() as f64 / 1e9,
        link_target: link_target.map(|t| t.display().to_string()),
    }
}
