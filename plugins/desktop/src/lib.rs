//! The `desktop` driver: the rollout's X desktop in the action spaces computer-use models are
//! trained on (OSWorld's), chosen by its configuration (`--tool-config desktop='{...}'` or a
//! task's `[metadata.tool_config.desktop]`):
//!
//! - `action_space = "computer_13"` (default): one `computer` tool taking OSWorld's
//!   `{"action_type": "CLICK", "parameters": {...}}` (MOVE_TO, CLICK, MOUSE_DOWN, MOUSE_UP,
//!   RIGHT_CLICK, DOUBLE_CLICK, DRAG_TO, SCROLL, TYPING, PRESS, KEY_DOWN, KEY_UP, HOTKEY,
//!   WAIT, FAIL, DONE);
//! - `action_space = "pyautogui"`: one `pyautogui` tool taking Python code, run on the
//!   desktop inside the sandbox with `pyautogui` imported (the image must have it); the code
//!   `WAIT`, `DONE` or `FAIL` alone is that special action, as in OSWorld.
//!
//! `coordinates = "grid"` reads every point on a 0-1000 grid (Qwen-VL's) instead of pixels: the
//! computer_13 actions' points, and pyautogui's absolute pointer functions (moves, clicks,
//! presses, drags, scrolls' `x`/`y`). Every call answers with the observation
//! after it (`observation` = `screenshot` | `a11y_tree` | `screenshot_a11y_tree`), the screenshot
//! scaled to `screenshot_width` and JPEG at `jpeg_quality` when set, the tree capped at
//! `max_elements` nodes and `max_text` characters; `observe` looks without acting.

wit_bindgen::generate!({ path: "../../wit/0.3.0", world: "desktop-driver" });

mod actions;
mod settings;

use std::sync::OnceLock;

use actions::Step;
use exports::orchard::plugin::tools::Guest;
use orchard::plugin::desktop::{self, Point, Shot};
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::{Value, json};
use settings::{ActionSpace, Coordinates, Settings};

struct Driver;

/// The grid's side when `coordinates = "grid"`.
const GRID: f64 = 1000.0;

fn settings() -> &'static Result<Settings, String> {
    static SETTINGS: OnceLock<Result<Settings, String>> = OnceLock::new();
    SETTINGS.get_or_init(|| Settings::parse(&orchard::plugin::config::get()))
}

fn screen() -> Result<(u32, u32), Error> {
    static SIZE: OnceLock<(u32, u32)> = OnceLock::new();
    if let Some(s) = SIZE.get() {
        return Ok(*s);
    }
    let s = desktop::size()?;
    Ok(*SIZE.get_or_init(|| (s.width, s.height)))
}

fn text(t: String) -> ContentPart {
    ContentPart::Text(t)
}

fn said(t: String, is_error: bool) -> ToolOutput {
    ToolOutput { content: vec![text(t)], is_error }
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.to_string() }
}

fn tools(s: &Settings) -> Vec<ToolSpec> {
    let unit = match s.coordinates {
        Coordinates::Absolute => "screen pixels from the top-left corner",
        Coordinates::Grid => "a 0-1000 grid over the screen on both axes (500, 500 is the centre)",
    };
    let act = match s.action_space {
        ActionSpace::Computer13 => spec(
            "computer",
            &format!(
                "Act on the desktop with one of OSWorld's computer_13 actions; answers with the desktop after \
                 it. Points are in {unit}. Parameters by action_type: MOVE_TO {{x, y}}; CLICK {{button?, x?, y?, \
                 num_clicks?}}; MOUSE_DOWN/MOUSE_UP {{button?}}; RIGHT_CLICK/DOUBLE_CLICK {{x?, y?}}; DRAG_TO {{x, \
                 y}}; SCROLL {{dx?, dy? (positive dy scrolls up)}}; TYPING {{text}}; PRESS/KEY_DOWN/KEY_UP {{key}}; \
                 HOTKEY {{keys: [..]}}; WAIT {{seconds?}}; DONE when the task is done; FAIL when it cannot be done. \
                 Keys are pyautogui's names (enter, ctrl, shift, alt, tab, esc, f5, a...)."
            ),
            json!({
                "type": "object",
                "properties": {
                    "action_type": {"type": "string", "enum": actions::ACTION_TYPES},
                    "parameters": {"type": "object"}
                },
                "required": ["action_type"]
            }),
        ),
        ActionSpace::Pyautogui => spec(
            "pyautogui",
            &format!(
                "Run Python code on the desktop with pyautogui imported (points are in {unit}), e.g. \
                 `pyautogui.click(100, 200); pyautogui.write('hi')`; answers with the desktop after it. The code \
                 WAIT, DONE (the task is done) or FAIL (it cannot be done) alone is that action."
            ),
            json!({"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}),
        ),
    };
    vec![act, spec("observe", "Look at the desktop without acting.", json!({"type": "object", "properties": {}}))]
}

/// The model's point on the screen.
fn place(s: &Settings, x: f64, y: f64) -> Result<Point, String> {
    let (w, h) = screen().map_err(|e| format!("{e:?}"))?;
    let (px, py) = match s.coordinates {
        Coordinates::Absolute => (x, y),
        Coordinates::Grid => {
            if !(0.0..=GRID).contains(&x) || !(0.0..=GRID).contains(&y) {
                return Err(format!("({x}, {y}) is off the 0-1000 grid"));
            }
            (x / GRID * (w as f64 - 1.0), y / GRID * (h as f64 - 1.0))
        }
    };
    if px < 0.0 || py < 0.0 || px >= w as f64 || py >= h as f64 {
        return Err(format!("({x}, {y}) is off the {w}x{h} screen"));
    }
    Ok(Point { x: px.round() as i32, y: py.round() as i32 })
}

/// Caps the tree at `max_text` characters, on a line boundary.
fn capped(tree: String, max_text: usize) -> String {
    if tree.len() <= max_text {
        return tree;
    }
    let mut cut = max_text;
    while !tree.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = &tree[..cut];
    let head = head.rfind('\n').map_or(head, |i| &head[..i]);
    format!("{head}\n<!-- … {} more characters not shown -->", tree.len() - head.len())
}

/// What the desktop looks like now, after `note`.
fn observe(s: &Settings, note: String) -> Result<ToolOutput, Error> {
    std::thread::sleep(std::time::Duration::from_millis(s.settle_ms));
    let mut content = vec![];
    let mut header = note;
    if let Ok(windows) = desktop::windows() {
        let focused = windows.iter().rev().find(|w| w.focused).or(windows.last());
        if let Some(w) = focused {
            header.push_str(&format!("\nFocused window: {:?} ({})", w.title, w.class));
        }
    }
    content.push(text(header));
    if s.observation.tree {
        let tree = match desktop::accessibility(s.max_elements) {
            Ok(t) => capped(t, s.max_text),
            Err(e) => format!("(no accessibility tree: {})", error_text(&e)),
        };
        content.push(text(format!("Accessibility tree:\n{tree}")));
    }
    if s.observation.screenshot {
        let image = desktop::screenshot(Shot { max_width: s.screenshot_width, jpeg_quality: s.jpeg_quality })?;
        content.push(ContentPart::Image(image));
    }
    Ok(ToolOutput { content, is_error: false })
}

fn error_text(e: &Error) -> String {
    match e {
        Error::InvalidInput(m)
        | Error::NotFound(m)
        | Error::Timeout(m)
        | Error::Denied(m)
        | Error::Unavailable(m)
        | Error::Other(m) => m.clone(),
    }
}

fn end(done: bool) -> ToolOutput {
    said(
        if done {
            "DONE: the task is marked done. Reply without a tool call to finish.".into()
        } else {
            "FAIL: the task is marked infeasible. Reply without a tool call to finish.".into()
        },
        false,
    )
}

fn computer(s: &Settings, args: &Value) -> Result<ToolOutput, Error> {
    let Some(action_type) = args.get("action_type").and_then(Value::as_str) else {
        return Ok(said(format!("computer needs action_type, one of {}", actions::ACTION_TYPES.join(", ")), true));
    };
    let params = args.get("parameters").cloned().unwrap_or(json!({}));
    let step = match actions::parse(action_type, &params, &|x, y| place(s, x, y)) {
        Ok(step) => step,
        Err(e) => return Ok(said(format!("{action_type}: {e}"), true)),
    };
    match step {
        Step::End(done) => Ok(end(done)),
        Step::Wait(ms) => {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            observe(s, format!("waited {:.1} s", ms as f64 / 1000.0))
        }
        Step::Events(events) => match desktop::act(&events) {
            Ok(()) => observe(s, format!("{action_type} {params}")),
            Err(Error::InvalidInput(m)) => Ok(said(format!("{action_type}: {m}"), true)),
            Err(e) => Err(e),
        },
    }
}

/// OSWorld's prelude for pyautogui code.
const PRELUDE: &str = "import pyautogui; import time; pyautogui.FAILSAFE = False\n";

/// With `coordinates = "grid"`: pyautogui's pointer functions take points on the 0-1000 grid
/// (scaled to the screen; a point off the grid raises naming it). Absolute moves, clicks,
/// presses, drags and scrolls' `x`/`y`; relative moves stay in pixels.
const GRID_PRELUDE: &str = r#"_orchard_w, _orchard_h = pyautogui.size()
def _orchard_point(x, y):
    if not (0 <= x <= 1000 and 0 <= y <= 1000):
        raise ValueError(f"({x}, {y}) is off the 0-1000 grid")
    return round(x / 1000 * (_orchard_w - 1)), round(y / 1000 * (_orchard_h - 1))
def _orchard_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)
def _orchard_on_grid(f, first):
    def g(*args, **kw):
        args = list(args)
        if len(args) > first and isinstance(args[first], (tuple, list)) and len(args[first]) >= 2:
            args[first] = _orchard_point(args[first][0], args[first][1])
        elif len(args) > first + 1 and _orchard_number(args[first]) and _orchard_number(args[first + 1]):
            args[first], args[first + 1] = _orchard_point(args[first], args[first + 1])
        elif kw.get("x") is not None and kw.get("y") is not None:
            kw["x"], kw["y"] = _orchard_point(kw["x"], kw["y"])
        return f(*args, **kw)
    return g
for _orchard_name in ("moveTo", "click", "doubleClick", "tripleClick", "rightClick", "middleClick", "mouseDown", "mouseUp", "dragTo"):
    setattr(pyautogui, _orchard_name, _orchard_on_grid(getattr(pyautogui, _orchard_name), 0))
for _orchard_name in ("scroll", "hscroll", "vscroll"):
    setattr(pyautogui, _orchard_name, _orchard_on_grid(getattr(pyautogui, _orchard_name), 1))
"#;

fn pyautogui(s: &Settings, args: &Value) -> Result<ToolOutput, Error> {
    let Some(code) = args.get("code").and_then(Value::as_str) else {
        return Ok(said("pyautogui needs code (a string of Python)".into(), true));
    };
    match code.trim() {
        "DONE" => return Ok(end(true)),
        "FAIL" => return Ok(end(false)),
        "WAIT" => {
            std::thread::sleep(std::time::Duration::from_secs(1));
            return observe(s, "waited 1 s".into());
        }
        _ => {}
    }
    let grid = if s.coordinates == Coordinates::Grid { GRID_PRELUDE } else { "" };
    let (status, output) = desktop::run_python(&format!("{PRELUDE}{grid}{code}"), Some(60_000))?;
    let mut out = observe(s, if status == 0 { "the code ran".into() } else { format!("the code exited {status}") })?;
    if !output.trim().is_empty() {
        let shown: String = output.chars().take(4000).collect();
        out.content.insert(1, text(format!("Output:\n{shown}")));
    }
    out.is_error = status != 0;
    Ok(out)
}

impl Guest for Driver {
    fn list() -> Vec<ToolSpec> {
        match settings() {
            Ok(s) => tools(s),
            Err(_) => tools(&Settings::parse("{}").unwrap_or_else(|_| unreachable!("the defaults parse"))),
        }
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let s = settings().as_ref().map_err(|e| Error::InvalidInput(e.clone()))?;
        let args: Value =
            match serde_json::from_str(if call.arguments.trim().is_empty() { "{}" } else { &call.arguments }) {
                Ok(v) => v,
                Err(e) => return Ok(said(format!("the arguments are not JSON: {e}"), true)),
            };
        match (call.name.as_str(), s.action_space) {
            ("computer", ActionSpace::Computer13) => computer(s, &args),
            ("pyautogui", ActionSpace::Pyautogui) => pyautogui(s, &args),
            ("observe", _) => observe(s, "the desktop now".into()),
            (other, _) => Err(Error::NotFound(format!(
                "no tool {other:?} in the desktop driver's {:?} action space",
                s.action_space
            ))),
        }
    }
}

export!(Driver);
