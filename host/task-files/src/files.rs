//! Confined, bounded reads of a task folder.

use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions};

/// A failed read of a task folder; every variant names the path relative to the root.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file is over the read limit.
    #[error("{path}: larger than {limit} bytes")]
    TooLarge {
        /// The file, relative to the root.
        path: String,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The path (or a link on the way) leads outside the root, or to nothing.
    #[error("{path}: {reason}")]
    Unreadable {
        /// The path, relative to the root.
        path: String,
        /// Why it could not be read.
        reason: String,
    },
}

/// Files under one root, every path resolved beneath it.
///
/// `base` is where the task folder sits inside the root: a task may reach its siblings (shared
/// environments are links to `../other/environment`), never above the root.
#[derive(Debug, Clone)]
pub struct TaskFiles {
    root: Arc<Dir>,
    base: PathBuf,
    label: String,
}

/// cap-std takes no empty paths: `.` for the root itself.
fn dot(path: &Path) -> &Path {
    if path.as_os_str().is_empty() { Path::new(".") } else { path }
}

/// The error text of an I/O failure, without anything the OS might say about the host.
fn reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        // cap-std's answer to a path (or link) leading out of the root.
        std::io::ErrorKind::PermissionDenied => "leads outside the task folders, or is not readable".into(),
        _ if e.raw_os_error() == Some(40) => "too many levels of links".into(),
        _ if e.raw_os_error() == Some(18) || e.raw_os_error() == Some(1) => "leads outside the task folders".into(),
        _ => e.kind().to_string(),
    }
}

impl TaskFiles {
    /// Opens `root` (a path of the operator's choosing); errors and labels call it `label`.
    pub fn open(root: &Path, label: impl Into<String>) -> std::io::Result<TaskFiles> {
        let dir = Dir::open_ambient_dir(root, ambient_authority())?;
        Ok(TaskFiles { root: Arc::new(dir), base: PathBuf::new(), label: label.into() })
    }

    /// The same root, based at `rel` (a task folder inside it). `rel` may not climb.
    pub fn at(&self, rel: &Path) -> Result<TaskFiles, FileError> {
        if rel.components().any(|c| !matches!(c, Component::Normal(_) | Component::CurDir)) {
            return Err(self.unreadable(rel, "is not a plain relative path"));
        }
        Ok(TaskFiles { root: self.root.clone(), base: self.base.join(rel), label: self.label.clone() })
    }

    /// A new root at the folder `rel` (resolved beneath this one): what is read through it
    /// stays beneath that folder (a Dockerfile's build context).
    pub fn confine(&self, rel: &Path) -> Result<TaskFiles, FileError> {
        let path = self.base.join(rel);
        let dir = self.root.open_dir(dot(&path)).map_err(|e| self.unreadable(rel, &reason(&e)))?;
        Ok(TaskFiles { root: Arc::new(dir), base: PathBuf::new(), label: self.display(rel) })
    }

    /// How errors name `rel`: the root's label and the path beneath it.
    pub fn display(&self, rel: &Path) -> String {
        let inner = self.base.join(rel);
        let inner = inner.to_string_lossy();
        match (self.label.is_empty(), inner.is_empty()) {
            (true, _) => inner.into_owned(),
            (false, true) => self.label.clone(),
            (false, false) => format!("{}/{inner}", self.label.trim_end_matches('/')),
        }
    }

    /// The task folder's own name (the last part of its base), if it has one.
    pub fn name(&self) -> Option<String> {
        self.base.file_name().map(|n| n.to_string_lossy().into_owned())
    }

    fn unreadable(&self, rel: &Path, why: &str) -> FileError {
        FileError::Unreadable { path: self.display(rel), reason: why.to_string() }
    }

    fn metadata(&self, rel: &Path) -> Option<cap_std::fs::Metadata> {
        self.root.metadata(dot(&self.base.join(rel))).ok()
    }

    /// Whether `rel` is a file (following links, beneath the root).
    pub fn is_file(&self, rel: &Path) -> bool {
        self.metadata(rel).is_some_and(|m| m.is_file())
    }

    /// Whether `rel` is a folder (following links, beneath the root).
    pub fn is_dir(&self, rel: &Path) -> bool {
        self.metadata(rel).is_some_and(|m| m.is_dir())
    }

    /// Whether `rel` exists beneath the root (a file or a folder).
    pub fn exists(&self, rel: &Path) -> bool {
        self.metadata(rel).is_some()
    }

    /// The permission bits of the file `rel`.
    pub fn mode(&self, rel: &Path) -> Option<u32> {
        use cap_std::fs::PermissionsExt;
        self.metadata(rel).map(|m| m.permissions().mode() & 0o7777)
    }

    /// The names of the folders directly in the base (links to folders beneath the root count).
    pub fn folders(&self) -> Result<Vec<String>, FileError> {
        let entries = self.root.read_dir(dot(&self.base)).map_err(|e| self.unreadable(Path::new(""), &reason(&e)))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| self.is_dir(Path::new(name)))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The names of the files directly in folder `rel`, sorted.
    pub fn files_in(&self, rel: &Path) -> Vec<String> {
        let Ok(entries) = self.root.read_dir(dot(&self.base.join(rel))) else { return Vec::new() };
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| self.is_file(&rel.join(name)))
            .collect();
        names.sort();
        names
    }

    /// The file `rel`, at most `limit` bytes; `None` when there is no such file.
    pub fn read(&self, rel: &Path, limit: u64) -> Result<Option<Vec<u8>>, FileError> {
        let mut file = match self.root.open(dot(&self.base.join(rel))) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(self.unreadable(rel, &reason(&e))),
        };
        let meta = file.metadata().map_err(|e| self.unreadable(rel, &reason(&e)))?;
        if !meta.is_file() {
            return Err(self.unreadable(rel, "is not a file"));
        }
        if meta.len() > limit {
            return Err(FileError::TooLarge { path: self.display(rel), limit });
        }
        let mut bytes = Vec::with_capacity(meta.len() as usize);
        // The size may change under us: never more than the limit (and one byte to tell).
        (&mut file).take(limit + 1).read_to_end(&mut bytes).map_err(|e| self.unreadable(rel, &reason(&e)))?;
        if bytes.len() as u64 > limit {
            return Err(FileError::TooLarge { path: self.display(rel), limit });
        }
        Ok(Some(bytes))
    }

    /// The text file `rel` (UTF-8), at most `limit` bytes; `None` when there is no such file.
    pub fn read_string(&self, rel: &Path, limit: u64) -> Result<Option<String>, FileError> {
        match self.read(rel, limit)? {
            None => Ok(None),
            Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|_| self.unreadable(rel, "is not UTF-8 text")),
        }
    }

    /// The folder `rel` as a tar archive (symlinks kept as links, never followed), at most
    /// `limit` bytes of file content in all.
    pub fn pack(&self, rel: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
        let top = self.root.open_dir(dot(&self.base.join(rel))).map_err(|e| self.unreadable(rel, &reason(&e)))?;
        let mut builder = tar::Builder::new(Vec::new());
        let mut budget = limit;
        append_dir(&mut builder, &top, Path::new("."), 0, &mut budget).map_err(|e| match e {
            PackError::TooLarge => FileError::TooLarge { path: self.display(rel), limit },
            PackError::Io(e) => self.unreadable(rel, &reason(&e)),
            PackError::TooDeep => self.unreadable(rel, "holds folders nested too deep"),
        })?;
        builder.into_inner().map_err(|e| self.unreadable(rel, &reason(&e)))
    }
}

enum PackError {
    TooLarge,
    TooDeep,
    Io(std::io::Error),
}

impl From<std::io::Error> for PackError {
    fn from(e: std::io::Error) -> Self {
        PackError::Io(e)
    }
}

/// Deeper than this is a loop or an attack.
const MAX_DEPTH: usize = 64;

fn append_dir(
    builder: &mut tar::Builder<Vec<u8>>,
    dir: &Dir,
    name: &Path,
    depth: usize,
    budget: &mut u64,
) -> Result<(), PackError> {
    use cap_std::fs::PermissionsExt;
    if depth > MAX_DEPTH {
        return Err(PackError::TooDeep);
    }
    let meta = dir.dir_metadata()?;
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Directory);
    header.set_mode(meta.permissions().mode() & 0o777);
    header.set_size(0);
    builder.append_data(&mut header, name, std::io::empty())?;
    let mut children: Vec<_> = dir.entries()?.filter_map(Result::ok).map(|e| e.file_name()).collect();
    children.sort();
    for child in children {
        let path = name.join(&child);
        let Ok(meta) = dir.symlink_metadata(&child) else { continue };
        let kind = meta.file_type();
        let mut header = tar::Header::new_gnu();
        header.set_mode(meta.permissions().mode() & 0o777);
        if kind.is_dir() {
            // Not followed if it became a link since it was listed.
            let sub = dir.open_dir_nofollow(&child)?;
            append_dir(builder, &sub, &path, depth + 1, budget)?;
        } else if kind.is_symlink() {
            // Kept as a link: inside the sandbox it resolves in the sandbox's own tree.
            let target = dir.read_link_contents(&child)?;
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            builder.append_link(&mut header, &path, &target)?;
        } else if kind.is_file() {
            let mut options = OpenOptions::new();
            options.read(true).follow(FollowSymlinks::No);
            let file = dir.open_with(&child, &options)?.into_std();
            // The size of what was opened, not of what was listed.
            let size = file.metadata()?.len();
            if size > *budget {
                return Err(PackError::TooLarge);
            }
            *budget -= size;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_size(size);
            builder.append_data(&mut header, &path, file.take(size))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, TaskFiles) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("t1/tests")).unwrap();
        std::fs::create_dir_all(root.join("shared/environment")).unwrap();
        std::fs::write(root.join("t1/instruction.md"), "do it").unwrap();
        std::fs::write(root.join("t1/tests/test.sh"), "exit 0").unwrap();
        std::fs::write(root.join("shared/environment/Dockerfile"), "FROM x").unwrap();
        std::fs::write(tmp.path().join("secret"), "host secret").unwrap();
        symlink("../shared/environment", root.join("t1/environment")).unwrap();
        let files = TaskFiles::open(&root, "upload").unwrap();
        (tmp, files)
    }

    #[test]
    fn links_between_tasks_inside_the_root_are_followed() {
        let (_tmp, files) = tree();
        let t1 = files.at(Path::new("t1")).unwrap();
        assert_eq!(t1.read_string(Path::new("environment/Dockerfile"), 100).unwrap().unwrap(), "FROM x");
        assert!(t1.is_dir(Path::new("environment")));
        let env = t1.confine(Path::new("environment")).unwrap();
        assert!(env.is_file(Path::new("Dockerfile")));
        assert!(!env.exists(Path::new("../../t1/instruction.md")), "a build context is its own root");
    }

    #[test]
    fn a_chain_of_links_never_reads_above_the_root() {
        let (tmp, files) = tree();
        let root = tmp.path().join("root");
        // Each link alone looks harmless by its text; together they reach the host's file.
        symlink("..", root.join("t1/up")).unwrap();
        symlink("up/t1/up/../../secret", root.join("t1/task.toml")).unwrap();
        symlink("../../secret", root.join("t1/direct")).unwrap();
        symlink(tmp.path().join("secret"), root.join("t1/absolute")).unwrap();
        symlink("up/..", root.join("t1/solution")).unwrap();
        let t1 = files.at(Path::new("t1")).unwrap();
        for name in ["task.toml", "direct", "absolute"] {
            let err = t1.read_string(Path::new(name), 1000).unwrap_err().to_string();
            assert!(!err.contains("host secret"), "{err}");
            assert!(!err.contains(&tmp.path().display().to_string()), "names a server path: {err}");
            assert!(err.starts_with(&format!("upload/t1/{name}")), "{err}");
        }
        assert!(t1.pack(Path::new("solution"), 1 << 20).is_err(), "a folder link above the root is packed");
        assert!(files.at(Path::new("../root")).is_err());
    }

    #[test]
    fn reads_and_packs_are_bounded() {
        let (_tmp, files) = tree();
        let t1 = files.at(Path::new("t1")).unwrap();
        assert!(matches!(t1.read(Path::new("instruction.md"), 3), Err(FileError::TooLarge { limit: 3, .. })));
        assert!(t1.read(Path::new("missing.md"), 3).unwrap().is_none());
        assert!(matches!(t1.pack(Path::new("tests"), 3), Err(FileError::TooLarge { .. })));
        let tar = t1.pack(Path::new("tests"), 100).unwrap();
        let names: Vec<String> = tar::Archive::new(&tar[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, [".", "test.sh"]);
    }
}
