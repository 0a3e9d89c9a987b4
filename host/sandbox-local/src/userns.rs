//! User namespaces for sandboxes: root inside is an unprivileged id range outside.
//!
//! Made by the sandbox's setup process (privileged, single-threaded) before the root is mounted,
//! so that the sandbox's lower layers can be id-mapped to it and bubblewrap can run inside it.

use std::os::fd::{AsRawFd, OwnedFd};

/// A new user namespace mapping ids `0..size` inside to `base..base+size` on the host, held by
/// the returned descriptor (no process needs to stay in it).
pub fn create(base: u32, size: u32) -> std::io::Result<OwnedFd> {
    let (ready_read, ready_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (done_read, done_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // SAFETY: called from a single-threaded process; the child only unshares, talks over its
    // pipes and exits.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            drop((ready_read, done_write));
            let code = match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER) {
                Ok(()) => {
                    let _ = nix::unistd::write(&ready_write, b"1");
                    // Stay in the namespace until the parent has mapped it and opened it.
                    let mut buf = [0u8; 1];
                    let _ = nix::unistd::read(&done_read, &mut buf);
                    0
                }
                Err(_) => 1,
            };
            // SAFETY: leaving the forked child without running destructors.
            unsafe { libc::_exit(code) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop((ready_write, done_read));
            let mut buf = [0u8; 1];
            let result = match nix::unistd::read(&ready_read, &mut buf) {
                Ok(1) => map_and_open(child.as_raw(), base, size),
                _ => Err(std::io::Error::other("could not create a user namespace")),
            };
            drop(done_write);
            let _ = nix::sys::wait::waitpid(child, None);
            result
        }
    }
}

fn map_and_open(pid: i32, base: u32, size: u32) -> std::io::Result<OwnedFd> {
    let map = format!("0 {base} {size}\n");
    std::fs::write(format!("/proc/{pid}/uid_map"), &map)?;
    std::fs::write(format!("/proc/{pid}/gid_map"), &map)?;
    let ns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
    debug_assert!(ns.as_raw_fd() >= 0);
    Ok(ns.into())
}
