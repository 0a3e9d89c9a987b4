//! What is on the desktop beyond pixels: its top-level windows (EWMH, as the window manager
//! keeps them) and the clipboard's text (the `CLIPBOARD` selection, asked of its owner).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use orchard_protocol::DesktopWindow;
use x11rb::connection::Connection;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{AtomEnum, ConnectionExt, CreateWindowAux, EventMask, WindowClass};
use x11rb::rust_connection::RustConnection;

/// How long the clipboard's owner has to answer.
const CLIPBOARD_WAIT: Duration = Duration::from_secs(2);
/// The most clipboard text read.
const MAX_CLIPBOARD: u32 = 4 * 1024 * 1024;

fn atom(conn: &RustConnection, name: &str) -> anyhow::Result<u32> {
    Ok(conn.intern_atom(false, name.as_bytes())?.reply()?.atom)
}

fn text_property(conn: &RustConnection, window: u32, property: u32, kind: u32) -> anyhow::Result<Option<Vec<u8>>> {
    let reply = conn.get_property(false, window, property, kind, 0, 1 << 16)?.reply()?;
    Ok((reply.type_ != 0).then_some(reply.value))
}

/// A top-level window as found: its id beside what [`DesktopWindow`] tells.
struct Found {
    id: u32,
    window: DesktopWindow,
}

/// The top-level windows, bottom first (`_NET_CLIENT_LIST_STACKING`, else the root's mapped
/// children that have a name).
pub fn list(display: &str) -> anyhow::Result<Vec<DesktopWindow>> {
    let (conn, screen) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
    Ok(top_level(&conn, screen)?.into_iter().map(|f| f.window).collect())
}

fn top_level(conn: &RustConnection, screen: usize) -> anyhow::Result<Vec<Found>> {
    let root = conn.setup().roots[screen].root;
    let utf8 = atom(conn, "UTF8_STRING")?;
    let net_name = atom(conn, "_NET_WM_NAME")?;
    let stacking = atom(conn, "_NET_CLIENT_LIST_STACKING")?;
    let active_atom = atom(conn, "_NET_ACTIVE_WINDOW")?;
    let active = conn
        .get_property(false, root, active_atom, AtomEnum::WINDOW, 0, 1)?
        .reply()?
        .value32()
        .and_then(|mut v| v.next())
        .unwrap_or(0);
    let focus = if active != 0 { active } else { conn.get_input_focus()?.reply()?.focus };
    let managed: Vec<u32> = conn
        .get_property(false, root, stacking, AtomEnum::WINDOW, 0, 4096)?
        .reply()?
        .value32()
        .map(|v| v.collect())
        .unwrap_or_default();
    let windows = if managed.is_empty() {
        let mut mapped = Vec::new();
        for w in conn.query_tree(root)?.reply()?.children {
            if conn.get_window_attributes(w)?.reply()?.map_state == x11rb::protocol::xproto::MapState::VIEWABLE {
                mapped.push(w);
            }
        }
        mapped
    } else {
        managed
    };
    let mut out = Vec::new();
    for w in windows {
        let title = match text_property(conn, w, net_name, utf8)? {
            Some(t) => t,
            None => text_property(conn, w, AtomEnum::WM_NAME.into(), AtomEnum::ANY.into())?.unwrap_or_default(),
        };
        let class = text_property(conn, w, AtomEnum::WM_CLASS.into(), AtomEnum::STRING.into())?.unwrap_or_default();
        // WM_CLASS is "instance\0class\0".
        let class = class.split(|b| *b == 0).nth(1).unwrap_or_default();
        // Override-redirect helpers and the like, with neither.
        if title.is_empty() && class.is_empty() {
            continue;
        }
        out.push(Found {
            id: w,
            window: DesktopWindow {
                title: String::from_utf8_lossy(&title).into_owned(),
                class: String::from_utf8_lossy(class).into_owned(),
                focused: w == focus,
            },
        });
    }
    Ok(out)
}

/// How a window is picked by name, as OSWorld's setup steps say it.
#[derive(Debug, Clone, Copy)]
pub struct Pick {
    /// The whole title (or class) rather than a part of it.
    pub strict: bool,
    /// By `WM_CLASS` rather than by title.
    pub by_class: bool,
}

/// What a window manager is asked to do with a window.
#[derive(Debug, Clone, Copy)]
pub enum Request {
    /// `_NET_ACTIVE_WINDOW`: raise and focus it.
    Activate,
    /// `_NET_CLOSE_WINDOW`: ask it to close, as its close button does.
    Close,
}

/// Sends `request` for the topmost window `name` picks; `false` when none matches.
pub fn request(display: &str, name: &str, pick: Pick, request: Request) -> anyhow::Result<bool> {
    use x11rb::protocol::xproto::ClientMessageEvent;
    let (conn, screen) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
    let root = conn.setup().roots[screen].root;
    let matches = |text: &str| if pick.strict { text == name } else { text.contains(name) };
    let Some(found) = top_level(&conn, screen)?
        .into_iter()
        .rev()
        .find(|f| matches(if pick.by_class { &f.window.class } else { &f.window.title }))
    else {
        return Ok(false);
    };
    let (message, data) = match request {
        // Source 2: a pager, which window managers obey without focus-stealing checks.
        Request::Activate => (atom(&conn, "_NET_ACTIVE_WINDOW")?, [2, x11rb::CURRENT_TIME, 0, 0, 0]),
        Request::Close => (atom(&conn, "_NET_CLOSE_WINDOW")?, [x11rb::CURRENT_TIME, 2, 0, 0, 0]),
    };
    let event = ClientMessageEvent::new(32, found.id, message, data);
    conn.send_event(false, root, EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY, event)?;
    conn.flush()?;
    Ok(true)
}

/// The `CLIPBOARD` selection as text; empty when no one owns it.
pub fn clipboard(display: &str) -> anyhow::Result<String> {
    let (conn, screen) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
    let root = conn.setup().roots[screen].root;
    let selection = atom(&conn, "CLIPBOARD")?;
    if conn.get_selection_owner(selection)?.reply()?.owner == 0 {
        return Ok(String::new());
    }
    let utf8 = atom(&conn, "UTF8_STRING")?;
    let target = atom(&conn, "ORCHARD_CLIPBOARD")?;
    let window = conn.generate_id()?;
    conn.create_window(
        0,
        window,
        root,
        0,
        0,
        1,
        1,
        0,
        WindowClass::INPUT_ONLY,
        0,
        &CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
    )?;
    conn.convert_selection(window, selection, utf8, target, x11rb::CURRENT_TIME)?;
    conn.flush()?;
    let deadline = Instant::now() + CLIPBOARD_WAIT;
    loop {
        if let Some(event) = conn.poll_for_event()? {
            if let Event::SelectionNotify(n) = event {
                if n.property == 0 {
                    return Ok(String::new());
                }
                let reply = conn.get_property(true, window, target, AtomEnum::ANY, 0, MAX_CLIPBOARD / 4)?.reply()?;
                if reply.bytes_after > 0 {
                    bail!("the clipboard holds more than {MAX_CLIPBOARD} bytes");
                }
                return Ok(String::from_utf8_lossy(&reply.value).into_owned());
            }
            continue;
        }
        if Instant::now() > deadline {
            bail!("the clipboard's owner did not answer within {CLIPBOARD_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}
