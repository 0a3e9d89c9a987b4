//! The `browser` driver. Three observation/action modes, chosen by its configuration
//! (`--tool-config browser='{"mode": "marks"}'`, or a task's `[metadata.tool_config.browser]`):
//!
//! - `coords` (default, for models that point, e.g. Qwen3-VL's 0–1000 grid): `goto(url)`,
//!   `click(x, y)`, `type(text, submit)`, `key(keys)`, `scroll(x, y, direction)`, `back`,
//!   `wait(seconds)`, `screenshot`, `answer(text)`.
//! - `marks` (WebVoyager's set-of-marks): numbered boxes on the interactive elements plus their
//!   list `[i]: <tag> "text"`; `click(id)`, `type(id, text)` (select all, type, Enter),
//!   `scroll(target = id | "window", direction)`, `key`, `goto`, `back`, `wait`, `answer`.
//! - `ax`: the accessibility tree as text (`[id] role "name"`), no screenshot unless
//!   `screenshots = true`; the same actions as `marks`.
//!
//! Every tool answers with the URL and title, what the page did unasked (dialogs dismissed,
//! popups followed in this tab, downloads refused) and, but in `ax` mode, a screenshot (scaled to
//! `screenshot_width`, JPEG at `jpeg_quality` if set); lists are capped (`max_elements`,
//! `max_text`) with a note. One tab per rollout, opened at the first call.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "browser-driver" });

mod ax;
mod marks;
mod page;
mod settings;

use std::sync::OnceLock;

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::browser::Session;
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use page::{observe, text_error};
use serde_json::{Value, json};
use settings::{Mode, Settings};

struct Driver;

/// The grid coordinates are on: 0..=1000 on both axes, whatever the viewport.
const GRID: f64 = 1000.0;

fn settings() -> &'static Result<Settings, String> {
    static SETTINGS: OnceLock<Result<Settings, String>> = OnceLock::new();
    SETTINGS.get_or_init(|| Settings::parse(&orchard::plugin::config::get()))
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.to_string() }
}

/// A capped list for the model: `header`, the lines that fit in `max_text` characters, and a
/// note of how many of `total` were left out.
pub(crate) fn listing(header: &str, lines: &[String], total: usize, max_text: usize, empty: &str) -> String {
    if lines.is_empty() {
        return format!("{header} {empty}");
    }
    let mut out = header.to_string();
    let mut shown = 0;
    for line in lines {
        if out.len() + line.len() + 1 > max_text {
            break;
        }
        out.push('\n');
        out.push_str(line);
        shown += 1;
    }
    if shown < total {
        out.push_str(&format!("\n… {} more not listed (scroll, or act on what is listed)", total - shown));
    }
    out
}

/// The mode's text for an observation (marks are drawn for the screenshot that follows).
fn listing_for(tab: &Session, s: &Settings) -> Result<String, Error> {
    match s.mode {
        Mode::Coords => Ok(String::new()),
        Mode::Marks => marks::mark(tab, s),
        Mode::Ax => ax::tree(tab, s),
    }
}

fn look(tab: &Session, s: &Settings, said: &str) -> Result<ToolOutput, Error> {
    let out = observe(tab, s, said, |tab| listing_for(tab, s));
    if s.mode == Mode::Marks {
        marks::unmark(tab);
    }
    out
}

/// Where an action in `marks` or `ax` mode lands: element `id`'s centre.
fn element_centre(tab: &Session, s: &Settings, args: &Value) -> Result<Result<(f64, f64), String>, Error> {
    match s.mode {
        Mode::Ax => ax::centre(tab, args),
        _ => Ok(marks::centre(args)),
    }
}

/// One tool call on the tab.
fn act(tab: &Session, s: &Settings, name: &str, args: &Value) -> Result<ToolOutput, Error> {
    let num = |k: &str| args[k].as_f64();
    let on_grid = |v: Option<f64>, k: &str| match v {
        Some(v) if (0.0..=GRID).contains(&v) => Ok(v),
        _ => Err(format!("{k} must be a number from 0 to {GRID}")),
    };
    let by_id = s.mode != Mode::Coords;
    match name {
        "goto" => {
            let Some(url) = args["url"].as_str() else { return Ok(text_error("goto needs a url".into())) };
            // Pages only: a `javascript:` URL would run the model's script in the page (a task's
            // own scoring included), `file:` would read the browser's machine.
            let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
            if !matches!(scheme.as_str(), "http" | "https") && url != "about:blank" {
                return Ok(text_error(format!("goto opens http(s) pages only, not {url:?}")));
            }
            if let Some(e) = page::goto(tab, url)? {
                return Ok(text_error(format!("could not open {url}: {e}")));
            }
            look(tab, s, &format!("opened {url}"))
        }
        "click" if by_id => {
            let (x, y) = match element_centre(tab, s, args)? {
                Ok(c) => c,
                Err(e) => return Ok(text_error(e)),
            };
            page::click_at(tab, x, y)?;
            page::settle(tab, 5.0);
            look(tab, s, &format!("clicked [{}]", args["id"]))
        }
        "click" => {
            let (x, y) = match (on_grid(num("x"), "x"), on_grid(num("y"), "y")) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => return Ok(text_error(e)),
            };
            let (w, h) = page::viewport(tab)?;
            page::click_at(tab, x / GRID * w, y / GRID * h)?;
            page::settle(tab, 5.0);
            look(tab, s, &format!("clicked at ({x}, {y})"))
        }
        "type" if by_id => {
            let text = args["text"].as_str().unwrap_or_default();
            let placed = match s.mode {
                Mode::Ax => ax::focus(tab, args)?,
                _ => match marks::centre(args) {
                    Ok((x, y)) => {
                        page::click_at(tab, x, y)?;
                        Ok(())
                    }
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = placed {
                return Ok(text_error(e));
            }
            page::replace_text(tab, text, args["submit"].as_bool().unwrap_or(true))?;
            look(tab, s, &format!("typed {text:?} into [{}]", args["id"]))
        }
        "type" => {
            let text = args["text"].as_str().unwrap_or_default();
            page::cdp(tab, "Input.insertText", json!({"text": text}))?;
            if args["submit"].as_bool().unwrap_or(false) {
                page::press(tab, "Enter")?;
                page::settle(tab, 5.0);
            }
            look(tab, s, &format!("typed {text:?}"))
        }
        "key" => {
            let keys = args["keys"].as_str().unwrap_or_default();
            for combo in keys.split_whitespace() {
                page::press(tab, combo)?;
            }
            page::settle(tab, 5.0);
            look(tab, s, &format!("pressed {keys}"))
        }
        "scroll" => {
            let direction = args["direction"].as_str().unwrap_or("down");
            let (w, h) = page::viewport(tab)?;
            let (x, y) = if by_id && !args["target"].is_null() && args["target"] != "window" {
                let id_args = json!({"id": args["target"].as_u64().or_else(|| args["target"].as_str()?.parse().ok())});
                match element_centre(tab, s, &id_args)? {
                    Ok(c) => c,
                    Err(e) => return Ok(text_error(e)),
                }
            } else if by_id {
                (w / 2.0, h / 2.0)
            } else {
                let x = on_grid(num("x").or(Some(500.0)), "x").unwrap_or(500.0) / GRID * w;
                let y = on_grid(num("y").or(Some(500.0)), "y").unwrap_or(500.0) / GRID * h;
                (x, y)
            };
            page::wheel(tab, x, y, direction)?;
            look(tab, s, &format!("scrolled {direction}"))
        }
        "back" => {
            let went = page::back(tab)?;
            look(tab, s, if went { "went back" } else { "there is no previous page" })
        }
        "wait" => {
            let seconds = num("seconds").unwrap_or(1.0).clamp(0.0, 10.0);
            page::pause((seconds * 1000.0) as u64);
            look(tab, s, &format!("waited {seconds} s"))
        }
        "screenshot" => look(tab, s, "the page"),
        other => Ok(text_error(format!("no tool named {other:?}"))),
    }
}

fn object(properties: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": properties, "required": required})
}

fn tools(mode: Mode) -> Vec<ToolSpec> {
    let goto = spec("goto", "Open a URL in the tab.", object(json!({"url": {"type": "string"}}), &["url"]));
    let key = spec(
        "key",
        "Press keys, e.g. \"Enter\", \"Tab\", \"ctrl+a\" (several separated by spaces).",
        object(json!({"keys": {"type": "string"}}), &["keys"]),
    );
    let common = [
        spec("back", "Go back to the previous page.", object(json!({}), &[])),
        spec("wait", "Wait for the page (at most 10 s).", object(json!({"seconds": {"type": "number"}}), &[])),
        spec("screenshot", "Look at the page again.", object(json!({}), &[])),
        spec("answer", "Give the final answer to the task.", object(json!({"text": {"type": "string"}}), &["text"])),
    ];
    let mut out = match mode {
        Mode::Coords => {
            let xy = |what: &str| {
                json!({
                    "x": {"type": "number", "description": format!("{what}, 0 (left) to 1000 (right)")},
                    "y": {"type": "number", "description": format!("{what}, 0 (top) to 1000 (bottom)")}})
            };
            let mut scroll = xy("Where to scroll");
            scroll["direction"] = json!({"type": "string", "enum": ["up", "down"]});
            vec![
                goto,
                spec(
                    "click",
                    "Click at a point of the screenshot, on a 0-1000 grid.",
                    object(xy("The point"), &["x", "y"]),
                ),
                spec(
                    "type",
                    "Type text where the focus is; submit presses Enter after it.",
                    object(json!({"text": {"type": "string"}, "submit": {"type": "boolean"}}), &["text"]),
                ),
                key,
                spec(
                    "scroll",
                    "Scroll the page (or the element under the point) up or down.",
                    object(scroll, &["direction"]),
                ),
            ]
        }
        Mode::Marks | Mode::Ax => {
            let what = if mode == Mode::Marks {
                "element (its number on the screenshot)"
            } else {
                "node (its [id] in the tree)"
            };
            let id = json!({"type": "integer", "description": format!("The {what}")});
            vec![
                goto,
                spec("click", &format!("Click an {what}."), object(json!({"id": id}), &["id"])),
                spec(
                    "type",
                    &format!("Replace the text of an {what} with `text`, then press Enter unless submit is false."),
                    object(
                        json!({"id": id, "text": {"type": "string"}, "submit": {"type": "boolean"}}),
                        &["id", "text"],
                    ),
                ),
                key,
                spec(
                    "scroll",
                    "Scroll the window, or the element `target`, up or down.",
                    object(
                        json!({"target": {"description": "\"window\" or an element's number", "type": ["integer", "string"]},
                               "direction": {"type": "string", "enum": ["up", "down"]}}),
                        &["direction"],
                    ),
                ),
            ]
        }
    };
    out.extend(common);
    out
}

impl Guest for Driver {
    fn list() -> Vec<ToolSpec> {
        tools(settings().as_ref().map(|s| s.mode).unwrap_or(Mode::Coords))
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let s = match settings() {
            Ok(s) => s,
            Err(e) => return Err(Error::InvalidInput(format!("the browser driver's configuration: {e}"))),
        };
        let args: Value =
            match serde_json::from_str(if call.arguments.trim().is_empty() { "{}" } else { &call.arguments }) {
                Ok(v) => v,
                Err(e) => return Ok(text_error(format!("the arguments are not JSON: {e}"))),
            };
        if call.name == "answer" {
            let text = args["text"].as_str().unwrap_or_default();
            return Ok(ToolOutput { content: vec![ContentPart::Text(format!("ANSWER: {text}"))], is_error: false });
        }
        match page::with_tab(|tab| act(tab, s, &call.name, &args)) {
            Ok(out) => Ok(out),
            // A browser that is gone or never started is the run's problem, not the model's.
            Err(Error::Unavailable(m)) => Err(Error::Unavailable(m)),
            // The browser's other errors are the model's to see (a refused call, a timeout).
            Err(e) => Ok(text_error(format!("{e:?}"))),
        }
    }
}

export!(Driver);
