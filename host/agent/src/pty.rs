//! Pseudo-terminals: a process started on a fresh pty as a session leader, and async I/O on the
//! master side. Used by persistent shell sessions and by the PTY WebSocket.

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use nix::sys::termios::{self, LocalFlags, SetArg};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use crate::error::{AgentError, AgentResult};
use crate::reaper::{ExitInfo, Reaper};

pub struct PtyMaster {
    fd: AsyncFd<OwnedFd>,
}

pub struct PtyChild {
    pub master: PtyMaster,
    pub pid: i32,
    pub exit: oneshot::Receiver<ExitInfo>,
}

fn pty_err(what: &str) -> impl Fn(nix::Error) -> AgentError + '_ {
    move |e| AgentError::other(format!("pty: {what}: {e}"))
}

/// Starts `command` as a session leader whose controlling terminal is a new pty.
pub fn spawn(reaper: &Reaper, mut command: Command, rows: u16, cols: u16, echo: bool) -> AgentResult<PtyChild> {
    let size = nix::pty::Winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    let pty = nix::pty::openpty(Some(&size), None).map_err(pty_err("openpty"))?;
    if !echo {
        let mut attrs = termios::tcgetattr(&pty.slave).map_err(pty_err("tcgetattr"))?;
        attrs.local_flags.remove(LocalFlags::ECHO | LocalFlags::ECHONL);
        termios::tcsetattr(&pty.slave, SetArg::TCSANOW, &attrs).map_err(pty_err("tcsetattr"))?;
    }
    let slave = || pty.slave.try_clone().map(Stdio::from).map_err(|e| AgentError::other(format!("pty: {e}")));
    command.stdin(slave()?).stdout(slave()?).stderr(slave()?);
    // SAFETY: only async-signal-safe calls (setsid, ioctl) between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (child, exit) =
        reaper.spawn(&mut command).map_err(|e| AgentError::io("cannot start the process on a pty", e))?;
    drop(command);
    drop(pty.slave);
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    let flags = fcntl(&pty.master, FcntlArg::F_GETFL).map_err(pty_err("fcntl"))?;
    fcntl(&pty.master, FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK))
        .map_err(pty_err("fcntl"))?;
    // SAFETY: the OwnedFd is moved into the AsyncFd and stays open until the AsyncFd drops it.
    let fd = unsafe { AsyncFd::register(pty.master) }.map_err(|e| AgentError::other(format!("pty: {e}")))?;
    Ok(PtyChild { master: PtyMaster { fd }, pid: child.id() as i32, exit })
}

impl PtyMaster {
    /// Reads what the terminal has. `Ok(0)` or an error (EIO) means the slave side is closed.
    pub async fn read(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| nix::unistd::read(fd.get_ref(), buf).map_err(std::io::Error::from)) {
                Ok(result) => return result,
                Err(_would_block) => continue,
            }
        }
    }

    pub async fn write_all(&self, mut bytes: &[u8]) -> std::io::Result<()> {
        while !bytes.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), bytes).map_err(std::io::Error::from)) {
                Ok(Ok(n)) => bytes = &bytes[n..],
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    pub fn resize(&self, rows: u16, cols: u16) -> AgentResult<()> {
        use std::os::fd::AsRawFd;
        let size = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: TIOCSWINSZ reads a winsize from a valid pointer.
        if unsafe { libc::ioctl(self.fd.get_ref().as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
            return Err(AgentError::other(format!("pty: resize: {}", std::io::Error::last_os_error())));
        }
        Ok(())
    }

    /// Drops input written to the terminal that nothing has read yet (typed-ahead text of an
    /// interrupted command must not become the shell's next command, nor eat our sync line).
    pub fn discard_input(&self) {
        // On a pty master, the output queue is the slave's unread input.
        let _ = nix::sys::termios::tcflush(self.fd.get_ref().as_fd(), nix::sys::termios::FlushArg::TCOFLUSH);
    }

    /// The terminal's foreground process group, if any.
    pub fn foreground_group(&self) -> Option<i32> {
        nix::unistd::tcgetpgrp(self.fd.get_ref().as_fd()).ok().map(|p| p.as_raw()).filter(|p| *p > 0)
    }
}
