//! The state directory: one server's at a time (a lock), its `run/` a tmpfs, its directories
//! reachable by the sandboxes' own users.

use orchard_sandbox::{Result, SandboxError};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

pub(crate) fn open_up(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                open_up(&entry.path());
            }
        }
    }
}

/// Mounts a tmpfs for the run directory, as /run is on most systems: the records, sockets and
/// logs of sandboxes are small files created and deleted at a high rate, which costs a journaled
/// disk filesystem dearly (ext4 scans its inode tables past recently deleted inodes), and none of
/// them needs to outlive a reboot (the sandboxes do not). Without root, a plain directory.
pub(crate) fn mount_run_dir(dir: &Path) {
    let _ = std::fs::create_dir_all(dir);
    if !nix::unistd::geteuid().is_root() || is_mount_point(dir) {
        return;
    }
    let mounted = nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV | nix::mount::MsFlags::MS_NOEXEC,
        Some("mode=0700,size=256m"),
    );
    if let Err(e) = mounted {
        tracing::warn!("cannot mount a tmpfs on {}: {e}; using the disk", dir.display());
    }
}

pub(crate) fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(dir), dir.parent().map(std::fs::metadata)) {
        (Ok(d), Some(Ok(p))) => d.dev() != p.dev(),
        _ => false,
    }
}

/// Takes the state directory for this process. Two hosts on one state directory would each take
/// the other's sandboxes for leftovers of a crash.
pub(crate) fn lock_state_dir(state_dir: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    let path = state_dir.join("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| SandboxError::backend(&path.display().to_string(), e))?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock).map_err(|_| {
        SandboxError::Backend(format!(
            "the state directory {} is in use by another orchard process; give this one its own with --state-dir",
            state_dir.display()
        ))
    })
}
