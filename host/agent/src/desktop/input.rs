//! Input through the X server's XTEST extension, as a person's: the pointer, its buttons and
//! wheel, keys by name, and text typed character by character.
//!
//! A character the keyboard map lacks (most of Unicode) is typed by binding its keysym to a
//! spare keycode first, as xdotool does; the spare codes are used in turn and left bound, so
//! an app that reads the map late still sees the character it was sent.

use std::collections::HashMap;

use anyhow::{Context, bail};
use orchard_protocol::{DesktopInput, PointerButton};
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{self, ConnectionExt as _};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::RustConnection;

use super::keys;

const SHIFT_L: u32 = 0xffe1;
/// At most this many characters typed in one event list (a bound on a request's work).
const MAX_TYPED: usize = 100_000;

/// An open connection to the display, with its keyboard map.
pub struct Keyboard {
    conn: RustConnection,
    root: xproto::Window,
    /// Keysym → (keycode, whether Shift is needed).
    codes: HashMap<u32, (u8, bool)>,
    /// Keycodes with nothing bound, for characters the map lacks.
    spare: Vec<u8>,
    next_spare: usize,
    keysyms_per_code: u8,
}

impl Keyboard {
    /// Connects to `display` and reads its keyboard map.
    pub fn open(display: &str) -> anyhow::Result<Keyboard> {
        let (conn, screen) = x11rb::connect(Some(display)).with_context(|| format!("connecting to {display}"))?;
        let root = conn.setup().roots[screen].root;
        let (min, max) = (conn.setup().min_keycode, conn.setup().max_keycode);
        conn.xtest_get_version(2, 2)?.reply().context("the X server has no XTEST extension")?;
        let map = conn.get_keyboard_mapping(min, max - min + 1)?.reply()?;
        let per = map.keysyms_per_keycode;
        let mut codes = HashMap::new();
        let mut spare = Vec::new();
        for (i, syms) in map.keysyms.chunks(per.max(1) as usize).enumerate() {
            let code = min + i as u8;
            if syms.iter().all(|s| *s == 0) {
                spare.push(code);
                continue;
            }
            for (level, sym) in syms.iter().take(2).enumerate() {
                if *sym != 0 {
                    codes.entry(*sym).or_insert((code, level == 1));
                }
            }
        }
        Ok(Keyboard { conn, root, codes, spare, next_spare: 0, keysyms_per_code: per })
    }

    /// Sends `events` in order and waits until the server has taken them; the first that fails
    /// stops the rest, named by its index.
    pub fn send(&mut self, events: &[DesktopInput]) -> anyhow::Result<()> {
        let typed: usize = events
            .iter()
            .map(|e| match e {
                DesktopInput::TypeText { text } => text.chars().count(),
                _ => 0,
            })
            .sum();
        if typed > MAX_TYPED {
            bail!("{typed} characters to type: at most {MAX_TYPED} at once");
        }
        for (i, event) in events.iter().enumerate() {
            self.one(event).with_context(|| format!("event {i} ({})", describe(event)))?;
        }
        // A round trip: every event above has been handled by the server.
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    fn one(&mut self, event: &DesktopInput) -> anyhow::Result<()> {
        match event {
            DesktopInput::MoveTo { x, y } => self.motion(*x, *y),
            DesktopInput::ButtonDown { button } => self.button(*button, true),
            DesktopInput::ButtonUp { button } => self.button(*button, false),
            DesktopInput::Click { button, count } => {
                if !(1..=3).contains(count) {
                    bail!("a click is 1 to 3 presses, not {count}");
                }
                for _ in 0..*count {
                    self.button(*button, true)?;
                    self.button(*button, false)?;
                }
                Ok(())
            }
            DesktopInput::Scroll { x, y } => {
                for (amount, less, more) in [(*y, 4u8, 5u8), (*x, 6, 7)] {
                    let detail = if amount < 0 { less } else { more };
                    for _ in 0..amount.unsigned_abs().min(200) {
                        self.fake(xproto::BUTTON_PRESS_EVENT, detail)?;
                        self.fake(xproto::BUTTON_RELEASE_EVENT, detail)?;
                    }
                }
                Ok(())
            }
            DesktopInput::TypeText { text } => {
                for c in text.chars() {
                    self.tap(keys::char_keysym(c))?;
                }
                Ok(())
            }
            DesktopInput::KeyDown { key } => self.key(named(key)?, true),
            DesktopInput::KeyUp { key } => self.key(named(key)?, false),
            DesktopInput::Press { keys } => {
                let syms = keys.iter().map(|k| named(k)).collect::<anyhow::Result<Vec<_>>>()?;
                if syms.is_empty() {
                    bail!("no keys to press");
                }
                if let [only] = syms.as_slice() {
                    return self.tap(*only);
                }
                for sym in &syms {
                    self.key(*sym, true)?;
                }
                for sym in syms.iter().rev() {
                    self.key(*sym, false)?;
                }
                Ok(())
            }
        }
    }

    fn fake(&self, kind: u8, detail: u8) -> anyhow::Result<()> {
        self.conn.xtest_fake_input(kind, detail, 0, self.root, 0, 0, 0)?;
        Ok(())
    }

    fn motion(&self, x: i32, y: i32) -> anyhow::Result<()> {
        let clamp = |v: i32| v.clamp(i16::MIN as i32, i16::MAX as i32) as i16;
        self.conn.xtest_fake_input(xproto::MOTION_NOTIFY_EVENT, 0, 0, self.root, clamp(x), clamp(y), 0)?;
        Ok(())
    }

    fn button(&self, button: PointerButton, down: bool) -> anyhow::Result<()> {
        let detail = match button {
            PointerButton::Left => 1,
            PointerButton::Middle => 2,
            PointerButton::Right => 3,
        };
        self.fake(if down { xproto::BUTTON_PRESS_EVENT } else { xproto::BUTTON_RELEASE_EVENT }, detail)
    }

    /// A key down or up by keysym (no Shift added: a chord says what it holds).
    fn key(&mut self, sym: u32, down: bool) -> anyhow::Result<()> {
        let (code, _) = self.code(sym)?;
        self.fake(if down { xproto::KEY_PRESS_EVENT } else { xproto::KEY_RELEASE_EVENT }, code)
    }

    /// The key that makes `sym` pressed and let go, with Shift held where the map needs it.
    fn tap(&mut self, sym: u32) -> anyhow::Result<()> {
        let (code, shift) = self.code(sym)?;
        let shift_code = if shift { Some(self.code(SHIFT_L)?.0) } else { None };
        if let Some(s) = shift_code {
            self.fake(xproto::KEY_PRESS_EVENT, s)?;
        }
        self.fake(xproto::KEY_PRESS_EVENT, code)?;
        self.fake(xproto::KEY_RELEASE_EVENT, code)?;
        if let Some(s) = shift_code {
            self.fake(xproto::KEY_RELEASE_EVENT, s)?;
        }
        Ok(())
    }

    /// The keycode for `sym`, binding a spare one when the map lacks it.
    fn code(&mut self, sym: u32) -> anyhow::Result<(u8, bool)> {
        if let Some(found) = self.codes.get(&sym) {
            return Ok(*found);
        }
        if self.spare.is_empty() {
            bail!("keysym {sym:#x} is not on the keyboard and no keycode is free to bind it");
        }
        let code = self.spare[self.next_spare % self.spare.len()];
        self.next_spare += 1;
        // Forget what this spare code typed before.
        self.codes.retain(|_, (c, _)| *c != code);
        let syms = vec![sym; self.keysyms_per_code.max(1) as usize];
        self.conn.change_keyboard_mapping(1, code, self.keysyms_per_code.max(1), &syms)?;
        // Clients must see the new map before the key that uses it.
        self.conn.get_input_focus()?.reply()?;
        self.codes.insert(sym, (code, false));
        Ok((code, false))
    }
}

fn named(key: &str) -> anyhow::Result<u32> {
    keys::keysym(key)
        .ok_or_else(|| anyhow::anyhow!("{key:?} is not a key name (pyautogui's names: enter, ctrl, f5, a...)"))
}

fn describe(event: &DesktopInput) -> String {
    let text = serde_json::to_string(event).unwrap_or_default();
    text.chars().take(80).collect()
}
