//! The fake sandbox's filesystem: a tree of files and directories in memory.
//!
//! Invariants: every key is an absolute, normalised path (no `.`, `..`, empty or trailing
//! components); every entry's parent directory exists (`/` always does); a path `..` would
//! lead above `/` stays at `/`, as the kernel resolves it inside a chroot. The total of the
//! files' bytes never exceeds the sandbox's disk limit.

use std::collections::BTreeMap;

use bytes::Bytes;
use orchard_protocol::{ErrorKind, FileEntry, FileKind};

/// One entry.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    File { data: Bytes, mode: u32, modified: f64 },
    Dir { mode: u32, modified: f64 },
}

/// Why a file operation was refused, in the agent's own terms.
#[derive(Debug, Clone, PartialEq)]
pub struct FsError {
    /// The agent's error kind for it.
    pub kind: ErrorKind,
    /// What was wrong, naming the path.
    pub message: String,
}

fn refuse(kind: ErrorKind, message: String) -> FsError {
    FsError { kind, message }
}

/// The files of one fake sandbox.
#[derive(Debug, Clone)]
pub struct MemFs {
    nodes: BTreeMap<String, Node>,
    limit: Option<u64>,
}

/// `path` made absolute (against `cwd`) and normalised.
pub fn normalise(path: &str, cwd: &str) -> String {
    let joined = if path.starts_with('/') { path.to_string() } else { format!("{cwd}/{path}") };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl MemFs {
    /// An empty tree holding `/` and the directories every image has (`/tmp`, `/workspace`,
    /// `/root`), with at most `limit` bytes of files.
    pub fn new(limit: Option<u64>) -> Self {
        let mut fs = MemFs { nodes: BTreeMap::new(), limit };
        for dir in ["/", "/tmp", "/workspace", "/root"] {
            fs.nodes.insert(dir.to_string(), Node::Dir { mode: 0o755, modified: now() });
        }
        fs
    }

    fn used(&self) -> u64 {
        self.nodes.values().map(|n| if let Node::File { data, .. } = n { data.len() as u64 } else { 0 }).sum()
    }

    /// Creates `path` and its missing parents as directories.
    pub fn mkdir_all(&mut self, path: &str) -> Result<(), FsError> {
        let path = normalise(path, "/");
        let mut at = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            at = format!("{at}/{part}");
            match self.nodes.get(&at) {
                Some(Node::Dir { .. }) => {}
                Some(Node::File { .. }) => {
                    return Err(refuse(ErrorKind::InvalidInput, format!("{at}: not a directory")));
                }
                None => {
                    self.nodes.insert(at.clone(), Node::Dir { mode: 0o755, modified: now() });
                }
            }
        }
        Ok(())
    }

    /// Writes a whole file, replacing what was there.
    pub fn write(&mut self, path: &str, data: Bytes, mode: Option<u32>, create_parents: bool) -> Result<u64, FsError> {
        let path = normalise(path, "/");
        if matches!(self.nodes.get(&path), Some(Node::Dir { .. })) {
            return Err(refuse(ErrorKind::InvalidInput, format!("{path}: is a directory")));
        }
        let dir = parent(&path).to_string();
        match self.nodes.get(&dir) {
            Some(Node::Dir { .. }) => {}
            Some(Node::File { .. }) => return Err(refuse(ErrorKind::InvalidInput, format!("{dir}: not a directory"))),
            None if create_parents => self.mkdir_all(&dir)?,
            None => return Err(refuse(ErrorKind::NotFound, format!("{dir}: no such directory"))),
        }
        let replaced = match self.nodes.get(&path) {
            Some(Node::File { data, .. }) => data.len() as u64,
            _ => 0,
        };
        if let Some(limit) = self.limit
            && self.used() - replaced + data.len() as u64 > limit
        {
            return Err(refuse(ErrorKind::InvalidInput, format!("{path}: no space left on device ({limit} bytes)")));
        }
        let size = data.len() as u64;
        let mode = mode.unwrap_or(0o644);
        self.nodes.insert(path, Node::File { data, mode, modified: now() });
        Ok(size)
    }

    /// A file's bytes.
    pub fn read(&self, path: &str) -> Result<Bytes, FsError> {
        let path = normalise(path, "/");
        match self.nodes.get(&path) {
            Some(Node::File { data, .. }) => Ok(data.clone()),
            Some(Node::Dir { .. }) => Err(refuse(ErrorKind::InvalidInput, format!("{path}: is a directory"))),
            None => Err(refuse(ErrorKind::NotFound, format!("{path}: no such file"))),
        }
    }

    /// Whether anything is at `path`.
    pub fn exists(&self, path: &str) -> bool {
        self.nodes.contains_key(&normalise(path, "/"))
    }

    /// One entry's metadata.
    pub fn stat(&self, path: &str) -> Result<FileEntry, FsError> {
        let path = normalise(path, "/");
        let node = self.nodes.get(&path).ok_or_else(|| refuse(ErrorKind::NotFound, format!("{path}: not found")))?;
        Ok(entry(&path, node))
    }

    /// The entries directly inside a directory, by name.
    pub fn list(&self, path: &str) -> Result<Vec<FileEntry>, FsError> {
        let path = normalise(path, "/");
        match self.nodes.get(&path) {
            Some(Node::Dir { .. }) => {}
            Some(Node::File { .. }) => return Err(refuse(ErrorKind::InvalidInput, format!("{path}: not a directory"))),
            None => return Err(refuse(ErrorKind::NotFound, format!("{path}: not found"))),
        }
        Ok(self.children(&path).map(|(p, n)| entry(p, n)).collect())
    }

    fn children<'a>(&'a self, dir: &'a str) -> impl Iterator<Item = (&'a String, &'a Node)> + 'a {
        let prefix = if dir == "/" { "/".to_string() } else { format!("{dir}/") };
        self.nodes
            .range(prefix.clone()..)
            .take_while({
                let prefix = prefix.clone();
                move |(p, _)| p.starts_with(&prefix)
            })
            .filter(move |(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains('/'))
    }

    /// Every path at or beneath `path`, parents before children.
    pub fn walk(&self, path: &str) -> Vec<String> {
        let path = normalise(path, "/");
        let prefix = if path == "/" { "/".to_string() } else { format!("{path}/") };
        self.nodes.keys().filter(|p| **p == path || p.starts_with(&prefix)).cloned().collect()
    }

    /// Removes a file, or a directory (`recursive` for one with entries). `/` stays.
    pub fn remove(&mut self, path: &str, recursive: bool) -> Result<(), FsError> {
        let path = normalise(path, "/");
        if path == "/" {
            return Err(refuse(ErrorKind::Denied, "/: the root cannot be removed".into()));
        }
        match self.nodes.get(&path) {
            None => return Err(refuse(ErrorKind::NotFound, format!("{path}: not found"))),
            Some(Node::Dir { .. }) if !recursive && self.children(&path).next().is_some() => {
                return Err(refuse(ErrorKind::InvalidInput, format!("{path}: directory not empty")));
            }
            _ => {}
        }
        for p in self.walk(&path) {
            self.nodes.remove(&p);
        }
        Ok(())
    }

    pub(crate) fn node(&self, path: &str) -> Option<&Node> {
        self.nodes.get(&normalise(path, "/"))
    }
}

fn entry(path: &str, node: &Node) -> FileEntry {
    let name = path.rsplit('/').next().filter(|n| !n.is_empty()).unwrap_or("/").to_string();
    let (kind, size, mode, modified) = match node {
        Node::File { data, mode, modified } => (FileKind::File, data.len() as u64, *mode, *modified),
        Node::Dir { mode, modified } => (FileKind::Directory, 0, *mode, *modified),
    };
    FileEntry { name, path: path.to_string(), kind, size, mode, modified, link_target: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_dot_stays_beneath_the_root() {
        assert_eq!(normalise("../../etc/passwd", "/workspace"), "/etc/passwd");
        assert_eq!(normalise("/a/./b/../c/", "/"), "/a/c");
    }

    #[test]
    fn a_write_needs_its_directory_unless_asked_to_make_it() {
        let mut fs = MemFs::new(None);
        let e = fs.write("/a/b/c.txt", Bytes::from_static(b"x"), None, false).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotFound);
        fs.write("/a/b/c.txt", Bytes::from_static(b"x"), None, true).unwrap();
        assert_eq!(fs.list("/a").unwrap().len(), 1);
        assert_eq!(fs.read("/a/b/c.txt").unwrap(), "x");
    }

    #[test]
    fn the_disk_limit_counts_every_file() {
        let mut fs = MemFs::new(Some(10));
        fs.write("/tmp/a", Bytes::from(vec![0; 6]), None, false).unwrap();
        let e = fs.write("/tmp/b", Bytes::from(vec![0; 6]), None, false).unwrap_err();
        assert!(e.message.contains("no space"), "{e:?}");
        // Replacing a file counts only the difference.
        fs.write("/tmp/a", Bytes::from(vec![0; 10]), None, false).unwrap();
    }

    #[test]
    fn removing_a_full_directory_needs_recursive() {
        let mut fs = MemFs::new(None);
        fs.write("/workspace/x/y", Bytes::new(), None, true).unwrap();
        assert!(fs.remove("/workspace/x", false).is_err());
        fs.remove("/workspace/x", true).unwrap();
        assert!(!fs.exists("/workspace/x/y"));
        assert!(fs.remove("/", true).is_err());
    }
}
