//! The desktop service's own routes (`orchard-agent desktop`, beside OSWorld's protocol), which
//! the host reaches through the agent's `POST /http` to the service's port on the sandbox's
//! loopback, and `POST /desktop` that starts the service.

use serde::{Deserialize, Serialize};

/// The X display every sandbox's desktop runs on (the sandbox's own: each has its own `/tmp`
/// and network namespace).
pub const DESKTOP_DISPLAY: u32 = 99;

/// The session D-Bus of the desktop on display `display` (apps expose their accessibility
/// tree over it): what `DBUS_SESSION_BUS_ADDRESS` says to the commands run on the desktop.
pub fn desktop_bus_address(display: u32) -> String {
    format!("unix:path=/tmp/.orchard-desktop-{display}/bus")
}

/// The (empty) X authority file of the desktop on display `display`: what `XAUTHORITY` says to
/// the commands run on it.
pub fn desktop_xauthority(display: u32) -> String {
    format!("/tmp/.orchard-desktop-{display}/Xauthority")
}

/// Body of the agent's `POST /desktop`: start the desktop service in the sandbox (the agent's
/// own binary in its `desktop` mode, as a background process; answered with its
/// [`crate::ProcessInfo`]).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DesktopStart {
    /// The port on the sandbox's loopback.
    pub port: u16,
    /// The screen's width in pixels.
    pub width: u32,
    /// The screen's height in pixels.
    pub height: u32,
    /// Bits per pixel: 16 or 24.
    pub depth: u32,
    /// The X display number.
    #[serde(default = "default_display")]
    pub display: u32,
    /// The window manager program, `none` for none.
    #[serde(default)]
    pub window_manager: Option<String>,
}

fn default_display() -> u32 {
    DESKTOP_DISPLAY
}

/// A pointer button.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PointerButton {
    /// Button 1.
    Left,
    /// Button 2.
    Middle,
    /// Button 3.
    Right,
}

/// One input event, as `POST /orchard/input` takes them (`{"events": [...]}`): keys by their
/// pyautogui names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
#[allow(missing_docs)] // the fields are named by the variants' docs
pub enum DesktopInput {
    /// The pointer moves to `(x, y)`.
    MoveTo { x: i32, y: i32 },
    /// A button goes down.
    ButtonDown { button: PointerButton },
    /// A button comes up.
    ButtonUp { button: PointerButton },
    /// A button clicked `count` (1 to 3) times.
    Click { button: PointerButton, count: u8 },
    /// Wheel clicks: positive `y` down, positive `x` right.
    Scroll { x: i32, y: i32 },
    /// Text typed character by character.
    TypeText { text: String },
    /// A key held down.
    KeyDown { key: String },
    /// A key let go.
    KeyUp { key: String },
    /// A chord: down in order, up in reverse.
    Press { keys: Vec<String> },
}

/// Body of `POST /orchard/input`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DesktopInputs {
    /// In order.
    pub events: Vec<DesktopInput>,
}

/// A top-level window, as `GET /orchard/windows` lists them (bottom first).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DesktopWindow {
    /// `_NET_WM_NAME` or `WM_NAME`.
    pub title: String,
    /// `WM_CLASS`'s class part.
    pub class: String,
    /// Whether it has the input focus.
    pub focused: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_externally_tagged_and_strict() {
        let text = r#"{"events":[{"move_to":{"x":3,"y":4}},{"press":{"keys":["ctrl","s"]}}]}"#;
        let parsed: DesktopInputs = serde_json::from_str(text).unwrap();
        assert_eq!(parsed.events[0], DesktopInput::MoveTo { x: 3, y: 4 });
        assert_eq!(serde_json::to_string(&parsed).unwrap(), text);
        assert!(serde_json::from_str::<DesktopInputs>(r#"{"events":[{"move_to":{"x":1,"y":2,"z":3}}]}"#).is_err());
        assert!(serde_json::from_str::<DesktopInputs>(r#"{"events":[{"jump":{}}]}"#).is_err());
        assert!(serde_json::from_str::<DesktopStart>(r#"{"port":1,"width":2,"height":3,"depth":24,"x":1}"#).is_err());
    }
}
