//! Forking a sandbox: new sandboxes whose root starts as the source's is at that moment.
//!
//! The source's processes are frozen (its freezer cgroup), its writable layer — the overlay's
//! upper directory, everything it changed relative to the image — is copied (`cp --reflink=auto`:
//! a clone of extents where the filesystem shares them, a copy elsewhere), and it is thawed; the
//! freeze lasts only that copy. Each child is then created from the source's own spec with that
//! copy as its upper directory, its files' owners moved from the source's id range to its own.
//! Processes are not carried: a child starts as a fresh sandbox of the spec does (its image's
//! entrypoint runs again), with the source's files.
//!
//! A sandbox with a disk limit keeps its layer in a filesystem image mounted only in the mount
//! namespace its launcher made: the copy reads it there (through the root of the sandbox's
//! outer bubblewrap process, which lives in that namespace), and a child's copy is written into
//! its own image once that is mounted. Where no freezer exists, forks go by tar through the
//! agents (`orchard_sandbox::fork_by_tar`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A copied layer waiting for its child's launch.
pub(crate) struct Seed {
    pub upper: PathBuf,
    /// Host id of root in the source (its files are owned from here on).
    pub from_base: Option<u32>,
}

/// The upper directory of a sandbox whose layer is inside its disk image, as the host reaches
/// it: under the root of the process that launched the sandbox's pid 1 (bubblewrap's outer
/// half, in the launcher's mount namespace where the image is mounted).
pub(crate) fn upper_in_disk(record: &crate::record::Record, dir: &Path) -> Result<PathBuf, String> {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", record.init_pid))
        .map_err(|e| format!("the sandbox's pid 1 ({}): {e}", record.init_pid))?;
    // `pid (comm) state ppid ...`: comm may hold spaces; ppid follows the last ')'.
    let ppid: i32 = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1))
        .and_then(|p| p.parse().ok())
        .ok_or("the sandbox's pid 1 has no parent")?;
    let upper =
        PathBuf::from(format!("/proc/{ppid}/root")).join(dir.strip_prefix("/").unwrap_or(dir)).join("disk/upper");
    if !upper.is_dir() {
        return Err(format!("the sandbox's layer is not where it should be ({})", upper.display()));
    }
    Ok(upper)
}

/// Copies `src` to `dst` with ownership, modes, times, xattrs (overlay's whiteouts and opaque
/// markers) and device nodes, cloning extents where the filesystem can.
pub(crate) fn copy_tree(src: &Path, dst: &Path) -> Result<(), String> {
    let out = std::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--no-target-directory"])
        .arg(src)
        .arg(dst)
        .output()
        .map_err(|e| format!("running cp: {e}"))?;
    if !out.status.success() {
        return Err(format!("copying {}: {}", src.display(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Freezes the source, copies its upper directory to `dst`, thaws it; returns how long the
/// source was frozen.
pub(crate) fn snapshot(
    cgroups: &crate::cgroup::Layout,
    dirs: &[PathBuf],
    upper: &Path,
    dst: &Path,
) -> Result<Duration, String> {
    let started = Instant::now();
    cgroups.freeze(dirs, true)?;
    let copied = copy_tree(upper, dst);
    // Thawed whatever the copy did.
    let thawed = cgroups.freeze(dirs, false);
    let frozen = started.elapsed();
    copied?;
    thawed?;
    Ok(frozen)
}

/// Moves every file's owner and group from the range at `from` to the range at `to` (files
/// whose ids are outside the source's range — the overflow id — are left as they are).
pub(crate) fn shift_owners(root: &Path, from: u32, to: u32) -> Result<(), String> {
    if from == to {
        return Ok(());
    }
    let range = from..from + crate::ids::ID_RANGE;
    let shift = |id: u32| if range.contains(&id) { id - from + to } else { id };
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let (uid, gid) = (shift(meta.uid()), shift(meta.gid()));
        if (uid, gid) != (meta.uid(), meta.gid()) {
            // lchown clears set-id bits on regular files: put them back.
            let mode = meta.mode() & 0o7777;
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid)).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.file_type().is_file() && mode & 0o6000 != 0 {
                let _ = std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode));
            }
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).map_err(|e| format!("{}: {e}", path.display()))? {
                stack.push(entry.map_err(|e| format!("{}: {e}", path.display()))?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_move_between_ranges_and_outsiders_stay() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("upper");
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/f"), "x").unwrap();
        std::os::unix::fs::symlink("f", root.join("a/b/link")).unwrap();
        let from = crate::ids::host_id_base(3);
        let to = crate::ids::host_id_base(5);
        for p in ["", "a", "a/b", "a/b/f"] {
            std::os::unix::fs::chown(root.join(p), Some(from + 1000), Some(from)).unwrap();
        }
        std::os::unix::fs::lchown(root.join("a/b/link"), Some(from), Some(from)).unwrap();
        let copy = dir.path().join("copy");
        copy_tree(&root, &copy).unwrap();
        shift_owners(&copy, from, to).unwrap();
        let m = std::fs::metadata(copy.join("a/b/f")).unwrap();
        assert_eq!((m.uid(), m.gid()), (to + 1000, to));
        let l = std::fs::symlink_metadata(copy.join("a/b/link")).unwrap();
        assert_eq!((l.uid(), l.gid()), (to, to));
        assert_eq!(std::fs::read_to_string(copy.join("a/b/f")).unwrap(), "x");
        // The source is untouched.
        assert_eq!(std::fs::metadata(root.join("a/b/f")).unwrap().uid(), from + 1000);
    }
}
