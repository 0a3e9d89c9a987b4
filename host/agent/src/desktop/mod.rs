//! `orchard-agent desktop`: a desktop inside the sandbox, and the service that drives it.
//!
//! Starts a real X server (Xvfb) of the size asked, a window manager (openbox, when the image
//! has it), and serves OSWorld's controller protocol (`osworld`) so that OSWorld's own client
//! (`desktop_env`'s `PythonController`) drives it unchanged: screenshots, commands and scripts
//! run on the display, files, the screen's size, the pointer, directory trees.
//!
//! Invariants: the X server and the window manager are this process's children and die with it
//! (a crashed X server ends the service with an error naming it); every request body is bounded
//! (`MAX_BODY`); every command has a timeout; nothing listens beyond the address given (the
//! sandbox's loopback by default).

mod display;
mod input;
mod keys;
mod osworld;
mod own;
mod screen;
mod setup;
mod vnc;
mod windows;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "orchard-agent desktop", about = "Runs an X desktop and serves OSWorld's controller protocol")]
pub struct DesktopArgs {
    /// Address to listen on (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Where to write the port once listening (written whole, then renamed into place).
    #[arg(long)]
    port_file: Option<PathBuf>,
    /// The X display number.
    #[arg(long, default_value_t = 99)]
    display: u32,
    /// Width x height x depth of the screen.
    #[arg(long, default_value = "1280x800x24", value_parser = display::parse_size)]
    size: (u32, u32, u32),
    /// The window manager to start (`none` for none); skipped when the image lacks it.
    #[arg(long, default_value = "openbox")]
    window_manager: String,
}

fn grader_socket(port: u16) -> anyhow::Result<tokio::net::UnixListener> {
    use std::os::linux::net::SocketAddrExt;
    let name = orchard_protocol::grader_socket_name(port);
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())?;
    let listener = std::os::unix::net::UnixListener::bind_addr(&addr)?;
    listener.set_nonblocking(true)?;
    Ok(tokio::net::UnixListener::from_std(listener)?)
}

/// Runs the desktop until it is killed or its X server dies; the exit status.
pub fn main(args: Vec<String>) -> anyhow::Result<i32> {
    let args = DesktopArgs::try_parse_from(args)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(run(args))
}

async fn run(args: DesktopArgs) -> anyhow::Result<i32> {
    let (width, height, depth) = args.size;
    let mut desktop =
        display::Desktop::start(args.display, width, height, depth, &args.window_manager).await.context("desktop")?;
    let listener = tokio::net::TcpListener::bind(args.listen).await.context("desktop: listening")?;
    let port = listener.local_addr()?.port();
    if let Some(file) = &args.port_file {
        let tmp = file.with_extension("partial");
        std::fs::write(&tmp, port.to_string()).context("desktop: writing the port file")?;
        std::fs::rename(&tmp, file).context("desktop: writing the port file")?;
    }
    let state = Arc::new(osworld::Service {
        display: desktop.name(),
        width,
        height,
        env: desktop.env(),
        keyboard: Default::default(),
        vnc: Default::default(),
    });
    let app = osworld::router(state);
    // The grader's door: the same routes on the abstract socket `orchard-grader-PORT`, which the
    // agent checks is held by this very process before a grader reads the desktop through it.
    let door = grader_socket(port).context("desktop: the grader socket")?;
    tokio::select! {
        served = axum::serve(listener, app.clone()) => {
            served.context("desktop: serving")?;
            Ok(0)
        }
        served = axum::serve(door, app) => {
            served.context("desktop: serving the grader socket")?;
            Ok(0)
        }
        died = desktop.x_server_exit() => {
            anyhow::bail!("desktop: the X server (Xvfb {}) exited: {died}", desktop.name())
        }
    }
}
