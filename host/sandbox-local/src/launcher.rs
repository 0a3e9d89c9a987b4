//! The launcher: a small helper process that forks bubblewrap for every sandbox.
//!
//! It is forked from the host before the host starts any thread, so it is a tiny copy of a tiny
//! process. Forking the host itself for each sandbox would copy its page tables and its
//! descriptor table (thousands of agent connections with a thousand sandboxes) and close every
//! one of those descriptors again at exec: work that grows with the number of sandboxes, which
//! made creating the thousandth sandbox much dearer than the first. A launcher fork costs the same
//! every time.
//!
//! Requests travel over a `SOCK_SEQPACKET` socket pair: a JSON message plus the descriptors the
//! sandbox needs (stdin with the token, the log, the agent's listening socket, bwrap's info pipe
//! and a second reader of it).
//! The launcher dies with the host (`PR_SET_PDEATHSIG`); the sandboxes it started do not.

use std::ffi::CString;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Mutex;

use nix::sys::socket::{AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType};
use serde::{Deserialize, Serialize};

/// What to start, and how to set it up between fork and exec.
#[derive(Debug, Serialize, Deserialize)]
pub struct Request {
    pub argv: Vec<String>,
    /// The sandbox's root, mounted in its private mount namespace.
    pub root: crate::rootfs::RootSpec,
    /// Contents of /etc/hosts, /etc/hostname and /etc/resolv.conf.
    pub etc_files: [String; 3],
    /// `cgroup.procs` files to join.
    pub cgroup_procs: Vec<PathBuf>,
    /// A network namespace to enter (`/run/netns/...`); without one the sandbox gets a new one
    /// with only loopback.
    pub netns: Option<PathBuf>,
    /// Not root: make a user namespace first so that the overlay can be mounted.
    pub rootless: bool,
    pub uid: u32,
    pub gid: u32,
    /// As root: the sandbox's own user namespace, its root mapped to host ids from this one on.
    pub id_base: Option<u32>,
}

/// Descriptors bubblewrap finds in the sandbox's start (its argv names them): the agent's socket
/// and bwrap's info pipe (3, 4: see [`Fds`]), then the ones the launcher's child opens.
pub const SECCOMP_FDS: [i32; 2] = [5, 6];
pub const ETC_FDS: [i32; 3] = [7, 8, 9];
/// A second read end of bwrap's info pipe, held by bwrap itself (see [`Fds::info_reader`]).
pub const INFO_READER_FD: i32 = 10;
/// Received descriptors are moved above every fixed one before they are put in place.
const SCRATCH_FD: i32 = 20;
/// Descriptors the child keeps for itself live above the scratch range, where putting the
/// others in place cannot close them.
const KEPT_FD: i32 = 64;

/// `fd` moved to a number at or above [`KEPT_FD`] (close-on-exec).
fn kept(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    let raw = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(KEPT_FD))?;
    // SAFETY: a descriptor fcntl just made for us.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

#[derive(Debug, Serialize, Deserialize)]
enum Reply {
    Started { pid: i32 },
    Failed { error: String },
}

/// Descriptors sent with a request, in this order (ours are closed once they are sent).
pub struct Fds {
    pub stdin: OwnedFd,
    pub log: OwnedFd,
    /// Becomes fd 3 in the sandbox: the agent's listening socket.
    pub listener: OwnedFd,
    /// Becomes fd 4: bwrap's `--info-fd`.
    pub info: OwnedFd,
    /// The info pipe's read end again, at [`INFO_READER_FD`]: while bwrap holds a reader its
    /// info write cannot fail. Without it, a host that dies before bwrap writes makes that write
    /// fail, bwrap's parent exits, and its child waits for the parent's go-ahead for ever — a
    /// sandbox that never reaches the agent, so no hard lifetime ends it. bwrap's parent closes
    /// it once it has written (it closes every extra descriptor); the agent closes its copy.
    pub info_reader: OwnedFd,
}

/// Descriptors a request carries.
const FD_COUNT: usize = 5;

/// The process that forks sandboxes: started before the host grows threads, so that each sandbox starts from a small single-threaded parent.
pub struct Launcher {
    /// Requests go to one thread that owns the socket and talks to the launcher in turn: no
    /// pile of blocked threads contending for a lock when a thousand sandboxes start at once.
    jobs: Mutex<std::sync::mpsc::Sender<Job>>,
    pid: i32,
}

struct Job {
    body: Vec<u8>,
    fds: [OwnedFd; FD_COUNT],
    reply: tokio::sync::oneshot::Sender<Result<Started, String>>,
}

/// A sandbox's start, as the launcher reports it: bubblewrap's future pid, and a pipe that
/// closes when the child has exec'd bubblewrap, or carries why its setup failed.
pub struct Started {
    pub pid: i32,
    pub setup: OwnedFd,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Launcher(pid {})", self.pid)
    }
}

const MAX_MESSAGE: usize = 256 * 1024;

impl Launcher {
    /// Forks the launcher.
    ///
    /// # Safety
    /// The calling process must have a single thread (call it before starting an async runtime or
    /// any thread): the child keeps running Rust code after the fork.
    pub unsafe fn start() -> std::io::Result<Launcher> {
        let (ours, theirs) =
            nix::sys::socket::socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?;
        // SAFETY: the caller guarantees a single-threaded process.
        match unsafe { nix::unistd::fork() }? {
            nix::unistd::ForkResult::Child => {
                drop(ours);
                serve(theirs)
            }
            nix::unistd::ForkResult::Parent { child } => {
                let (jobs, queue) = std::sync::mpsc::channel::<Job>();
                std::thread::Builder::new().name("launcher-client".into()).spawn(move || {
                    for job in queue {
                        let _ = job.reply.send(exchange(&ours, &job.body, &job.fds));
                    }
                })?;
                Ok(Launcher { jobs: Mutex::new(jobs), pid: child.as_raw() })
            }
        }
    }

    /// Starts a sandbox: forks its setup and returns at once (a fork of the launcher's time);
    /// `Started::setup` says when the setup is done.
    pub async fn launch(&self, request: &Request, fds: Fds) -> Result<Started, String> {
        let body = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        if body.len() > MAX_MESSAGE {
            return Err("launch request too large".into());
        }
        let (reply, answer) = tokio::sync::oneshot::channel();
        let job = Job { body, fds: [fds.stdin, fds.log, fds.listener, fds.info, fds.info_reader], reply };
        self.jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .send(job)
            .map_err(|_| "the launcher is gone".to_string())?;
        answer.await.map_err(|_| "the launcher is gone".to_string())?
    }
}

/// One request and its reply over the launcher's socket (the reply carries the setup pipe).
fn exchange(sock: &OwnedFd, body: &[u8], fds: &[OwnedFd; FD_COUNT]) -> Result<Started, String> {
    let raw = fds.each_ref().map(|fd| fd.as_raw_fd());
    let iov = [std::io::IoSlice::new(body)];
    nix::sys::socket::sendmsg::<()>(
        sock.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&raw)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| format!("launcher unreachable: {e}"))?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut cmsg = nix::cmsg_space!([RawFd; 1]);
    let (n, setup) = {
        let mut iov = [IoSliceMut::new(&mut buf)];
        let msg =
            nix::sys::socket::recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)
                .map_err(|e| format!("launcher unreachable: {e}"))?;
        let mut setup = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(received) = c {
                    // SAFETY: descriptors received with SCM_RIGHTS are new and ours.
                    setup = received.into_iter().next().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
                }
            }
        }
        (msg.bytes, setup)
    };
    if n == 0 {
        return Err("the launcher exited".into());
    }
    match serde_json::from_slice(&buf[..n]).map_err(|e| format!("launcher answer: {e}"))? {
        Reply::Started { pid } => Ok(Started { pid, setup: setup.ok_or("the launcher sent no setup pipe")? }),
        Reply::Failed { error } => Err(error),
    }
}

/// The launcher's main loop. Never returns.
fn serve(sock: OwnedFd) -> ! {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    close_all_but(sock.as_raw_fd());
    // Children are reaped by the kernel: the host watches them through pidfds.
    // SAFETY: ignoring SIGCHLD installs no handler.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) };
    let mut buf = vec![0u8; MAX_MESSAGE];
    // Docker's default profile, compiled once; a failure is reported with every launch.
    let seccomp = crate::seccomp::docker_default();
    loop {
        let mut cmsg = nix::cmsg_space!([RawFd; FD_COUNT]);
        let (n, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg =
                match nix::sys::socket::recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()) {
                    Ok(m) => m,
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(_) => std::process::exit(0),
                };
            let mut fds: Vec<OwnedFd> = Vec::new();
            if let Ok(cmsgs) = msg.cmsgs() {
                for c in cmsgs {
                    if let ControlMessageOwned::ScmRights(received) = c {
                        // SAFETY: descriptors received with SCM_RIGHTS are new and ours.
                        fds.extend(received.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                    }
                }
            }
            (msg.bytes, fds)
        };
        if n == 0 {
            std::process::exit(0);
        }
        let (reply, setup) = match (serde_json::from_slice::<Request>(&buf[..n]), fds.len()) {
            (Ok(request), FD_COUNT) => match seccomp
                .as_ref()
                .map_err(|e| format!("seccomp profile: {e}"))
                .and_then(|programs| spawn(&request, &fds, programs))
            {
                Ok((pid, setup)) => (Reply::Started { pid }, Some(setup)),
                Err(error) => (Reply::Failed { error }, None),
            },
            (Ok(_), got) => (Reply::Failed { error: format!("expected {FD_COUNT} descriptors, got {got}") }, None),
            (Err(e), _) => (Reply::Failed { error: format!("bad request: {e}") }, None),
        };
        drop(fds);
        let body = serde_json::to_vec(&reply).unwrap_or_default();
        let iov = [std::io::IoSlice::new(&body)];
        let raw: Vec<RawFd> = setup.iter().map(|fd| fd.as_raw_fd()).collect();
        let cmsgs = if raw.is_empty() { vec![] } else { vec![ControlMessage::ScmRights(&raw)] };
        let _ = nix::sys::socket::sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsgs, MsgFlags::empty(), None);
    }
}

fn close_all_but(keep: RawFd) {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    for fd in fds.into_iter().filter(|fd| *fd != keep) {
        // SAFETY: closing descriptors this fresh process inherited and does not use.
        unsafe { libc::close(fd) };
    }
    // 0, 1 and 2 on /dev/null, so that nothing we open lands there by accident.
    for _ in 0..3 {
        // SAFETY: plain open of a constant path.
        unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
    }
}

/// Forks one sandbox's setup, which ends in exec'ing bubblewrap, and returns at once with its
/// pid and the read end of its setup pipe. The launcher is single-threaded, so the child may
/// allocate.
fn spawn(request: &Request, fds: &[OwnedFd], seccomp: &[Vec<u8>]) -> Result<(i32, OwnedFd), String> {
    let cstr = |s: &str| CString::new(s).map_err(|_| format!("{s:?} contains a NUL byte"));
    let argv: Vec<CString> = request.argv.iter().map(|a| cstr(a)).collect::<Result<_, _>>()?;
    if argv.is_empty() {
        return Err("empty argv".into());
    }
    let (err_read, err_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let err_write = kept(err_write).map_err(|e| format!("pipe: {e}"))?;
    // SAFETY: the launcher is single-threaded; the child only sets itself up and execs.
    match unsafe { nix::unistd::fork() }.map_err(|e| format!("fork: {e}"))? {
        nix::unistd::ForkResult::Child => {
            drop(err_read);
            let error = child(request, fds, seccomp, &argv);
            let message = format!("cannot start {}: {error}", request.argv[0]);
            let _ = nix::unistd::write(&err_write, message.as_bytes());
            // SAFETY: leaving the forked child without running any destructor.
            unsafe { libc::_exit(127) }
        }
        nix::unistd::ForkResult::Parent { child } => Ok((child.as_raw(), err_read)),
    }
}

/// Sets the child up (cgroups, network, mounts, descriptors) and execs; returns only on failure.
fn child(request: &Request, fds: &[OwnedFd], seccomp: &[Vec<u8>], argv: &[CString]) -> std::io::Error {
    let result = (|| -> std::io::Result<()> {
        use nix::sched::{CloneFlags, unshare};
        let step = |what: &'static str| move |e: nix::errno::Errno| std::io::Error::other(format!("{what}: {e}"));
        // SIGCHLD was ignored in the launcher: our own helpers must be waited for.
        // SAFETY: restoring the default disposition.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
        // Moving into a cgroup waits for an RCU grace period (milliseconds on cgroup v1): a
        // helper moves us while we set up, and we wait for it before anything is started.
        let joiner = join_cgroups_in_background(&request.cgroup_procs)?;
        // The user namespace exists before the root is mounted: its lower layers are id-mapped
        // to it.
        let userns = match request.id_base {
            Some(base) => Some(crate::userns::create(base, crate::ids::ID_RANGE).and_then(kept)?),
            None => None,
        };
        let userns = userns.as_ref();
        if request.rootless {
            // Root in a user namespace of our own, so that the overlay can be mounted.
            unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).map_err(step("unshare"))?;
            std::fs::write("/proc/self/setgroups", "deny")?;
            std::fs::write("/proc/self/uid_map", format!("0 {} 1", request.uid))?;
            std::fs::write("/proc/self/gid_map", format!("0 {} 1", request.gid))?;
        }
        match &request.netns {
            Some(netns) => {
                let ns = std::fs::File::open(netns)?;
                nix::sched::setns(ns, CloneFlags::CLONE_NEWNET).map_err(step("entering the network namespace"))?;
            }
            None => {
                unshare(CloneFlags::CLONE_NEWNET).map_err(step("unsharing the network"))?;
                crate::network::loopback_up()?;
            }
        }
        if !request.rootless {
            // The namespace belongs to the host's user namespace, not the sandbox's: the
            // sandbox's root may bind low ports and ping, as in Docker, but not reconfigure it.
            crate::network::sandbox_sysctls();
            unshare(CloneFlags::CLONE_NEWNS).map_err(step("unshare"))?;
        }
        // The root lives in this private mount namespace, and dies with the sandbox.
        use nix::mount::{MsFlags, mount};
        mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
            .map_err(step("making mounts private"))?;
        crate::rootfs::mount_root(&request.root, userns)?;
        if let Some(joiner) = joiner {
            match nix::sys::wait::waitpid(joiner, None).map_err(step("joining the cgroups"))? {
                nix::sys::wait::WaitStatus::Exited(_, 0) => {}
                other => return Err(std::io::Error::other(format!("joining the sandbox's cgroups failed: {other:?}"))),
            }
        }
        // What bubblewrap reads by descriptor, at the numbers its argv names.
        let mut extra: Vec<(OwnedFd, i32)> = Vec::new();
        for (program, fd) in seccomp.iter().zip(crate::launcher::SECCOMP_FDS) {
            extra.push((memfd_with(program)?, fd));
        }
        for (text, fd) in request.etc_files.iter().zip(ETC_FDS) {
            extra.push((memfd_with(text.as_bytes())?, fd));
        }
        if let Some(userns) = userns {
            // Into the sandbox's user namespace, as its root: bubblewrap makes the rest of the
            // sandbox from there, so every namespace it creates belongs to the sandbox's.
            nix::sched::setns(userns, CloneFlags::CLONE_NEWUSER).map_err(step("entering the user namespace"))?;
            nix::unistd::setgroups(&[]).map_err(step("setgroups"))?;
            nix::unistd::setresgid(0.into(), 0.into(), 0.into()).map_err(step("setresgid"))?;
            nix::unistd::setresuid(0.into(), 0.into(), 0.into()).map_err(step("setresuid"))?;
        }
        // Received and opened descriptors may sit anywhere below: move them out of the way,
        // then into place.
        let wanted = [(0, &fds[0]), (1, &fds[1]), (2, &fds[1]), (3, &fds[2]), (4, &fds[3]), (INFO_READER_FD, &fds[4])]
            .into_iter()
            .chain(extra.iter().map(|(fd, n)| (*n, fd)));
        let mut high = Vec::new();
        for (target, fd) in wanted {
            let moved =
                nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(SCRATCH_FD)).map_err(step("dup"))?;
            high.push((target, moved));
        }
        for (target, source) in high {
            // SAFETY: dup2 on descriptors we hold; the result clears CLOEXEC on the target.
            if unsafe { libc::dup2(source, target) } < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        // The originals may have had the numbers now in use: never close them here (they are
        // close-on-exec, so exec drops whichever are not in place).
        for (fd, _) in extra {
            std::mem::forget(fd);
        }
        // Terminal signals aimed at the host must not reach its sandboxes.
        nix::unistd::setpgid(nix::unistd::Pid::from_raw(0), nix::unistd::Pid::from_raw(0)).map_err(step("setpgid"))?;
        Ok(())
    })();
    if let Err(e) = result {
        return e;
    }
    match nix::unistd::execvp(&argv[0], argv) {
        Err(e) => std::io::Error::other(format!("exec: {e}")),
    }
}

/// Forks a helper that writes our pid into each `cgroup.procs`; `None` when there are none.
fn join_cgroups_in_background(procs: &[PathBuf]) -> std::io::Result<Option<nix::unistd::Pid>> {
    if procs.is_empty() {
        return Ok(None);
    }
    let me = std::process::id().to_string();
    // SAFETY: the caller is single-threaded; the helper only writes files and exits.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Child => {
            let ok = procs.iter().all(|p| std::fs::write(p, &me).is_ok());
            // SAFETY: leaving the helper without running destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) }
        }
        nix::unistd::ForkResult::Parent { child } => Ok(Some(child)),
    }
}

/// A memory file holding `bytes`, positioned at its start.
fn memfd_with(bytes: &[u8]) -> std::io::Result<OwnedFd> {
    let fd = nix::sys::memfd::memfd_create(c"orchard", nix::sys::memfd::MFdFlags::MFD_CLOEXEC)?;
    let mut file = std::fs::File::from(fd);
    use std::io::{Seek, Write};
    file.write_all(bytes)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    Ok(file.into())
}
