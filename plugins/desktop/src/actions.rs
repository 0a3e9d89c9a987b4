//! OSWorld's `computer_13` action space, as its `desktop_env/actions.py` defines it:
//! `{"action_type": "CLICK", "parameters": {"button": "left", "x": 10, "y": 20, "num_clicks": 2}}`,
//! into the desktop's input events.

use serde_json::Value;

use crate::orchard::plugin::desktop::{Input, Point, PointerButton};

/// The action types, in OSWorld's order.
pub const ACTION_TYPES: [&str; 16] = [
    "MOVE_TO",
    "CLICK",
    "MOUSE_DOWN",
    "MOUSE_UP",
    "RIGHT_CLICK",
    "DOUBLE_CLICK",
    "DRAG_TO",
    "SCROLL",
    "TYPING",
    "PRESS",
    "KEY_DOWN",
    "KEY_UP",
    "HOTKEY",
    "WAIT",
    "FAIL",
    "DONE",
];

/// What an action comes to.
#[derive(Debug)]
pub enum Step {
    /// Input events to send.
    Events(Vec<Input>),
    /// Wait this many milliseconds.
    Wait(u64),
    /// The agent says the task is done (`true`) or cannot be done (`false`).
    End(bool),
}

/// Maps the model's point to the screen's pixels.
pub type Place<'a> = &'a dyn Fn(f64, f64) -> Result<Point, String>;

fn button(params: &Value) -> Result<PointerButton, String> {
    match params.get("button").and_then(Value::as_str).unwrap_or("left") {
        "left" => Ok(PointerButton::Left),
        "right" => Ok(PointerButton::Right),
        "middle" => Ok(PointerButton::Middle),
        other => Err(format!("button: {other:?} is not left, right or middle")),
    }
}

/// `x` and `y` when both are given; an error when only one is, or one is not a number.
fn point(params: &Value, place: Place) -> Result<Option<Point>, String> {
    match (params.get("x"), params.get("y")) {
        (None | Some(Value::Null), None | Some(Value::Null)) => Ok(None),
        (Some(x), Some(y)) => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => place(x, y).map(Some),
            _ => Err("x and y must be numbers".into()),
        },
        _ => Err("give both x and y, or neither".into()),
    }
}

fn needs_point(params: &Value, place: Place, action: &str) -> Result<Point, String> {
    point(params, place)?.ok_or_else(|| format!("{action} needs x and y"))
}

fn text<'a>(params: &'a Value, key: &str, action: &str) -> Result<&'a str, String> {
    params.get(key).and_then(Value::as_str).ok_or_else(|| format!("{action} needs {key} (a string)"))
}

fn int(params: &Value, key: &str) -> Result<i32, String> {
    match params.get(key) {
        None | Some(Value::Null) => Ok(0),
        Some(v) => v
            .as_f64()
            .filter(|n| n.fract() == 0.0 && n.abs() <= 10_000.0)
            .map(|n| n as i32)
            .ok_or_else(|| format!("{key}: expected a whole number, got {v}")),
    }
}

/// One `computer_13` action.
pub fn parse(action_type: &str, params: &Value, place: Place) -> Result<Step, String> {
    let at = |events: &mut Vec<Input>| -> Result<(), String> {
        if let Some(p) = point(params, place)? {
            events.push(Input::MoveTo(p));
        }
        Ok(())
    };
    let mut events = Vec::new();
    match action_type {
        "MOVE_TO" => events.push(Input::MoveTo(needs_point(params, place, "MOVE_TO")?)),
        "CLICK" => {
            at(&mut events)?;
            let count = match params.get("num_clicks") {
                None | Some(Value::Null) => 1,
                Some(n) => n.as_u64().filter(|n| (1..=3).contains(n)).ok_or("num_clicks: 1, 2 or 3")? as u8,
            };
            events.push(Input::Click((button(params)?, count)));
        }
        "MOUSE_DOWN" => events.push(Input::ButtonDown(button(params)?)),
        "MOUSE_UP" => events.push(Input::ButtonUp(button(params)?)),
        "RIGHT_CLICK" => {
            at(&mut events)?;
            events.push(Input::Click((PointerButton::Right, 1)));
        }
        "DOUBLE_CLICK" => {
            at(&mut events)?;
            events.push(Input::Click((PointerButton::Left, 2)));
        }
        "DRAG_TO" => {
            let to = needs_point(params, place, "DRAG_TO")?;
            events.push(Input::ButtonDown(PointerButton::Left));
            events.push(Input::MoveTo(to));
            events.push(Input::ButtonUp(PointerButton::Left));
        }
        "SCROLL" => {
            // pyautogui's sense (OSWorld runs `vscroll(dy)`): a positive dy scrolls up.
            let (dx, dy) = (int(params, "dx")?, int(params, "dy")?);
            if dx == 0 && dy == 0 {
                return Err("SCROLL needs dx or dy".into());
            }
            at(&mut events)?;
            events.push(Input::Scroll(Point { x: dx, y: -dy }));
        }
        "TYPING" => events.push(Input::TypeText(text(params, "text", "TYPING")?.to_string())),
        "PRESS" => events.push(Input::Press(vec![text(params, "key", "PRESS")?.to_string()])),
        "KEY_DOWN" => events.push(Input::KeyDown(text(params, "key", "KEY_DOWN")?.to_string())),
        "KEY_UP" => events.push(Input::KeyUp(text(params, "key", "KEY_UP")?.to_string())),
        "HOTKEY" => {
            let keys = params.get("keys").and_then(Value::as_array).ok_or("HOTKEY needs keys (a list of key names)")?;
            let keys: Option<Vec<String>> = keys.iter().map(|k| k.as_str().map(str::to_string)).collect();
            match keys {
                Some(k) if !k.is_empty() => events.push(Input::Press(k)),
                _ => return Err("HOTKEY needs keys (a list of key names)".into()),
            }
        }
        "WAIT" => {
            let seconds = params.get("seconds").and_then(Value::as_f64).unwrap_or(1.0);
            return Ok(Step::Wait((seconds.clamp(0.0, 30.0) * 1000.0) as u64));
        }
        "DONE" => return Ok(Step::End(true)),
        "FAIL" => return Ok(Step::End(false)),
        other => return Err(format!("action_type {other:?} is not one of {}", ACTION_TYPES.join(", "))),
    }
    Ok(Step::Events(events))
}
