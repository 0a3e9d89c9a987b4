//! The X server and the window manager, as children of the desktop service.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::process::{Child, Command};

/// AT-SPI's bus launcher, where Debian puts it (at-spi2-core).
const AT_SPI_LAUNCHER: &str = "/usr/libexec/at-spi-bus-launcher";

/// How long the X server has to open its socket.
const START_WAIT: Duration = Duration::from_secs(15);

/// `WIDTHxHEIGHT[xDEPTH]`, each within what Xvfb can make.
pub fn parse_size(text: &str) -> Result<(u32, u32, u32), String> {
    let parts: Vec<&str> = text.split('x').collect();
    let number = |s: &str| s.parse::<u32>().map_err(|_| format!("{text:?}: {s:?} is not a number"));
    let (w, h, d) = match parts.as_slice() {
        [w, h] => (number(w)?, number(h)?, 24),
        [w, h, d] => (number(w)?, number(h)?, number(d)?),
        _ => return Err(format!("{text:?}: expected WIDTHxHEIGHT[xDEPTH]")),
    };
    if !(64..=8192).contains(&w) || !(64..=8192).contains(&h) {
        return Err(format!("{text:?}: width and height are 64 to 8192"));
    }
    if ![16, 24].contains(&d) {
        return Err(format!("{text:?}: depth is 16 or 24"));
    }
    Ok((w, h, d))
}

/// Whether process `pid` runs (a zombie, killed and not yet reaped, does not).
/// Whether `pid` is a live X server. A lock can name a pid of another pid namespace (a /tmp
/// shared between containers): a live process of ours that is not an X server is not its owner.
fn alive(pid: i32) -> bool {
    let running = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next().map(str::to_string)))
        .is_some_and(|state| state != "Z" && state != "X");
    let x_server =
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|comm| comm.trim_start().starts_with('X'));
    running && x_server
}

/// `command` made to die with this process (a SIGKILL to the service must not leave an X server).
fn dies_with_us(command: &mut Command) -> &mut Command {
    // SAFETY: prctl with integer arguments is async-signal-safe, as `pre_exec` requires.
    unsafe {
        command.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            Ok(())
        })
    }
}

/// Starts a session D-Bus for display `display` (apps reach the accessibility bus through it;
/// D-Bus activation starts `at-spi-bus-launcher` when the first asks). `None` when the image has
/// no `dbus-daemon` or it does not come up: the desktop then has no accessibility tree.
async fn session_bus(display: u32) -> Option<(Child, String)> {
    let dir = format!("/tmp/.orchard-desktop-{display}");
    std::fs::create_dir_all(&dir).ok()?;
    let socket = format!("{dir}/bus");
    let _ = std::fs::remove_file(&socket);
    let address = orchard_protocol::desktop_bus_address(display);
    let mut child = dies_with_us(&mut Command::new("dbus-daemon"))
        .args(["--session", "--nofork", "--nopidfile", &format!("--address={address}")])
        .env("DISPLAY", format!(":{display}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !std::path::Path::new(&socket).exists() {
        if child.try_wait().ok().flatten().is_some() || tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Some((child, address))
}

/// Waits (at most 5 s) until a window manager has set `_NET_SUPPORTING_WM_CHECK` on the root.
async fn wait_for_window_manager(display: u32) {
    let check = move || -> anyhow::Result<bool> {
        use x11rb::connection::Connection;
        use x11rb::protocol::xproto::{AtomEnum, ConnectionExt};
        let (conn, screen) = x11rb::connect(Some(&format!(":{display}")))?;
        let root = conn.setup().roots[screen].root;
        let atom = conn.intern_atom(false, b"_NET_SUPPORTING_WM_CHECK")?.reply()?.atom;
        let reply = conn.get_property(false, root, atom, AtomEnum::WINDOW, 0, 1)?.reply()?;
        Ok(reply.value32().and_then(|mut v| v.next()).is_some_and(|w| w != 0))
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if tokio::task::spawn_blocking(check).await.ok().and_then(Result::ok) == Some(true) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A running desktop: its X server and window manager, killed when dropped.
pub struct Desktop {
    display: u32,
    x_server: Child,
    _window_manager: Option<Child>,
    /// The session bus (for AT-SPI), when the image has `dbus-daemon`.
    bus: Option<(Child, String)>,
    /// The accessibility bus, started with the session bus rather than by the first app.
    _accessibility_bus: Option<Child>,
}

impl Desktop {
    pub async fn start(display: u32, width: u32, height: u32, depth: u32, wm: &str) -> anyhow::Result<Desktop> {
        let socket = format!("/tmp/.X11-unix/X{display}");
        let lock = format!("/tmp/.X{display}-lock");
        // A display whose X server lives is taken; one left by a killed server is cleared.
        let owner = std::fs::read_to_string(&lock).ok().and_then(|t| t.trim().parse::<i32>().ok());
        if let Some(pid) = owner {
            // A server killed with its desktop takes a moment to finish exiting.
            let until = tokio::time::Instant::now() + Duration::from_secs(5);
            while alive(pid) {
                if tokio::time::Instant::now() > until {
                    anyhow::bail!("display :{display} is taken (its X server, pid {pid}, runs)");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let _ = std::fs::remove_file(&socket);
        let _ = std::fs::remove_file(&lock);
        let mut x_server = dies_with_us(&mut Command::new("Xvfb"))
            .arg(format!(":{display}"))
            .args(["-screen", "0", &format!("{width}x{height}x{depth}"), "-nolisten", "tcp", "-noreset"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting Xvfb (is the xvfb package in the image?)")?;
        // The session bus needs no display: it starts while the X server does.
        let x_ready = async {
            let deadline = tokio::time::Instant::now() + START_WAIT;
            while !std::path::Path::new(&socket).exists() {
                if let Some(status) = x_server.try_wait()? {
                    anyhow::bail!("Xvfb :{display} exited at start: {status}");
                }
                if tokio::time::Instant::now() > deadline {
                    anyhow::bail!("Xvfb :{display} did not open {socket} within {START_WAIT:?}");
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok(())
        };
        let (x_ready, bus) = tokio::join!(x_ready, session_bus(display));
        x_ready?;
        // Started before any app: an app that finds no accessibility bus asks D-Bus to start
        // one and waits for it, which under load stalled apps for a minute.
        let accessibility_bus = match &bus {
            Some((_, address)) if std::path::Path::new(AT_SPI_LAUNCHER).exists() => {
                dies_with_us(&mut Command::new(AT_SPI_LAUNCHER))
                    .arg("--launch-immediately")
                    .env("DISPLAY", format!(":{display}"))
                    .env("DBUS_SESSION_BUS_ADDRESS", address)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .ok()
            }
            _ => None,
        };
        let window_manager = match wm {
            "none" => None,
            wm => dies_with_us(&mut Command::new(wm))
                .env("DISPLAY", format!(":{display}"))
                .envs(bus.as_ref().map(|(_, address)| ("DBUS_SESSION_BUS_ADDRESS", address.clone())))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .ok(),
        };
        if window_manager.is_some() {
            // Apps mapped before the window manager manages the screen would go undecorated and
            // unplaced: the desktop is ready once it says it runs (EWMH's supporting-WM check).
            wait_for_window_manager(display).await;
        }
        Ok(Desktop { display, x_server, _window_manager: window_manager, bus, _accessibility_bus: accessibility_bus })
    }

    /// What commands run on this desktop are given: `DISPLAY`, an `XAUTHORITY` and the session
    /// bus's address. The server takes local clients without a cookie, but python-xlib
    /// (pyautogui's) refuses to connect when the file is missing and, when it has no entry for
    /// this host and display, prints a warning into every command's output (OSWorld's client
    /// reads `platform` from that output): the file holds one entry, whose cookie the server
    /// does not check.
    pub fn env(&self) -> Vec<(String, String)> {
        let xauthority = orchard_protocol::desktop_xauthority(self.display);
        if let Some(dir) = std::path::Path::new(&xauthority).parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if std::fs::metadata(&xauthority).map(|m| m.len()).unwrap_or(0) == 0 {
            let _ = std::fs::write(&xauthority, xauthority_entry(self.display));
        }
        let mut env = vec![("DISPLAY".to_string(), self.name()), ("XAUTHORITY".to_string(), xauthority)];
        if let Some((_, address)) = &self.bus {
            env.push(("DBUS_SESSION_BUS_ADDRESS".into(), address.clone()));
        }
        env
    }

    /// `:N`.
    pub fn name(&self) -> String {
        format!(":{}", self.display)
    }

    /// Waits for the X server to exit; how it did.
    pub async fn x_server_exit(&mut self) -> String {
        match self.x_server.wait().await {
            Ok(status) => status.to_string(),
            Err(e) => e.to_string(),
        }
    }
}

/// One Xauthority entry (FamilyLocal, this host's name, `display`, MIT-MAGIC-COOKIE-1), as
/// libX11 and python-xlib look entries up for a local display.
fn xauthority_entry(display: u32) -> Vec<u8> {
    let host = nix::unistd::gethostname().map(|h| h.to_string_lossy().into_owned()).unwrap_or_default();
    let cookie: Vec<u8> = (0..16u8).map(|i| i.wrapping_mul(37).wrapping_add(display as u8)).collect();
    let mut out = 256u16.to_be_bytes().to_vec();
    for field in [host.as_bytes(), display.to_string().as_bytes(), b"MIT-MAGIC-COOKIE-1", &cookie] {
        out.extend((field.len() as u16).to_be_bytes());
        out.extend(field);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_read_and_bounded() {
        assert_eq!(parse_size("800x600"), Ok((800, 600, 24)));
        assert_eq!(parse_size("1920x1080x16"), Ok((1920, 1080, 16)));
        assert!(parse_size("800").is_err());
        assert!(parse_size("10x10").is_err());
        assert!(parse_size("800x600x8").is_err());
    }
}
