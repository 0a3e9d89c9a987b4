//! The `browser` driver, `coords` mode (for models that point, e.g. Qwen3-VL's 0–1000 grid):
//! `goto(url)`, `click(x, y)`, `type(text, submit)`, `key(keys)`, `scroll(x, y, direction)`,
//! `back`, `wait(seconds)`, `screenshot`, `answer(text)`. Every tool answers with a screenshot
//! of the viewport plus the page's URL and title, so that judges can read the trajectory's
//! images. One tab per rollout, opened at the first call (the host starts the browser in the
//! sandbox's network).

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "browser-driver" });

use std::cell::RefCell;

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::browser::Session;
use orchard::plugin::types::{ContentPart, Error, Image, ToolCall, ToolOutput, ToolSpec};
use serde_json::{Value, json};

struct Driver;

thread_local! {
    static TAB: RefCell<Option<Session>> = const { RefCell::new(None) };
}

/// The grid coordinates are on: 0..=1000 on both axes, whatever the viewport.
const GRID: f64 = 1000.0;

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.to_string() }
}

fn with_tab<T>(f: impl FnOnce(&Session) -> Result<T, Error>) -> Result<T, Error> {
    TAB.with(|cell| {
        let mut tab = cell.borrow_mut();
        if tab.is_none() {
            *tab = Some(Session::open()?);
        }
        f(tab.as_ref().expect("opened above"))
    })
}

fn cdp(tab: &Session, method: &str, params: Value) -> Result<Value, Error> {
    Ok(serde_json::from_str(&tab.cdp(method, &params.to_string())?).unwrap_or(Value::Null))
}

fn eval(tab: &Session, expression: &str) -> Result<Value, Error> {
    let v =
        cdp(tab, "Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}))?;
    Ok(v["result"]["value"].clone())
}

fn pause(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

/// Waits until the document has loaded, at most `seconds`: a moment first, for a navigation the
/// action may have started, then until the (new) page says it is complete. A page between two
/// documents answers nothing for a while: that is waited out too.
fn settle(tab: &Session, seconds: f64) -> Result<(), Error> {
    pause(150);
    let rounds = (seconds * 10.0).ceil() as u32;
    for _ in 0..rounds {
        if let Ok(state) = eval(tab, "document.readyState")
            && state == "complete"
        {
            return Ok(());
        }
        pause(100);
    }
    Ok(())
}

fn viewport(tab: &Session) -> Result<(f64, f64), Error> {
    let v = eval(tab, "[window.innerWidth, window.innerHeight]")?;
    Ok((v[0].as_f64().unwrap_or(1280.0), v[1].as_f64().unwrap_or(800.0)))
}

/// The answer every tool gives: what happened, the URL and title, and a screenshot (tried again
/// for a few seconds while a page is between documents).
fn observe(tab: &Session, said: &str) -> Result<ToolOutput, Error> {
    let mut last = None;
    for _ in 0..30 {
        match look(tab, said) {
            Ok(out) => return Ok(out),
            Err(e) => last = Some(e),
        }
        pause(100);
    }
    Err(last.unwrap_or_else(|| Error::Other("the page did not settle".into())))
}

fn look(tab: &Session, said: &str) -> Result<ToolOutput, Error> {
    let url = eval(tab, "location.href")?;
    let title = eval(tab, "document.title")?;
    let png = tab.screenshot()?;
    Ok(ToolOutput {
        content: vec![
            ContentPart::Text(format!(
                "{said}\nURL: {}\nTitle: {}",
                url.as_str().unwrap_or(""),
                title.as_str().unwrap_or("")
            )),
            ContentPart::Image(Image { media_type: "image/png".into(), data: png }),
        ],
        is_error: false,
    })
}

fn text_error(message: String) -> ToolOutput {
    ToolOutput { content: vec![ContentPart::Text(message)], is_error: true }
}

fn mouse(tab: &Session, kind: &str, x: f64, y: f64, extra: Value) -> Result<(), Error> {
    let mut params = json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    cdp(tab, "Input.dispatchMouseEvent", params).map(|_| ())
}

/// `Enter`, `Tab`, `ctrl+a`...: one key with its modifiers.
fn press(tab: &Session, combo: &str) -> Result<(), Error> {
    let mut modifiers = 0;
    let mut key = "";
    for part in combo.split('+') {
        match part.trim().to_ascii_lowercase().as_str() {
            "alt" => modifiers |= 1,
            "ctrl" | "control" => modifiers |= 2,
            "meta" | "cmd" => modifiers |= 4,
            "shift" => modifiers |= 8,
            _ => key = part.trim(),
        }
    }
    let (code, text) = match key.to_ascii_lowercase().as_str() {
        "enter" | "return" => ("Enter", "\r"),
        "tab" => ("Tab", "\t"),
        "escape" | "esc" => ("Escape", ""),
        "backspace" => ("Backspace", ""),
        "arrowdown" | "down" => ("ArrowDown", ""),
        "arrowup" | "up" => ("ArrowUp", ""),
        "pagedown" => ("PageDown", ""),
        "pageup" => ("PageUp", ""),
        _ => (key, key),
    };
    // A chord with ctrl types nothing (ctrl+a selects; it does not write an "a").
    let text = if modifiers & 2 != 0 { "" } else { text };
    cdp(
        tab,
        "Input.dispatchKeyEvent",
        json!({"type": "keyDown", "key": code, "code": code, "text": text, "modifiers": modifiers}),
    )?;
    cdp(tab, "Input.dispatchKeyEvent", json!({"type": "keyUp", "key": code, "code": code, "modifiers": modifiers}))?;
    Ok(())
}

/// One tool call on the tab.
fn act(tab: &Session, name: &str, args: &Value) -> Result<ToolOutput, Error> {
    let num = |k: &str| args[k].as_f64();
    let on_grid = |v: Option<f64>, k: &str| match v {
        Some(v) if (0.0..=GRID).contains(&v) => Ok(v),
        _ => Err(format!("{k} must be a number from 0 to {GRID}")),
    };
    match name {
        "goto" => {
            let Some(url) = args["url"].as_str() else { return Ok(text_error("goto needs a url".into())) };
            let nav = cdp(tab, "Page.navigate", json!({"url": url}))?;
            if let Some(e) = nav["errorText"].as_str() {
                return Ok(text_error(format!("could not open {url}: {e}")));
            }
            settle(tab, 10.0)?;
            observe(tab, &format!("opened {url}"))
        }
        "click" => {
            let (x, y) = match (on_grid(num("x"), "x"), on_grid(num("y"), "y")) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => return Ok(text_error(e)),
            };
            let (w, h) = viewport(tab)?;
            let (px, py) = (x / GRID * w, y / GRID * h);
            mouse(tab, "mouseMoved", px, py, json!({}))?;
            mouse(tab, "mousePressed", px, py, json!({}))?;
            mouse(tab, "mouseReleased", px, py, json!({}))?;
            settle(tab, 5.0)?;
            observe(tab, &format!("clicked at ({x}, {y})"))
        }
        "type" => {
            let text = args["text"].as_str().unwrap_or_default();
            cdp(tab, "Input.insertText", json!({"text": text}))?;
            if args["submit"].as_bool().unwrap_or(false) {
                press(tab, "Enter")?;
                settle(tab, 5.0)?;
            }
            observe(tab, &format!("typed {text:?}"))
        }
        "key" => {
            let keys = args["keys"].as_str().unwrap_or_default();
            for combo in keys.split_whitespace() {
                press(tab, combo)?;
            }
            settle(tab, 5.0)?;
            observe(tab, &format!("pressed {keys}"))
        }
        "scroll" => {
            let (w, h) = viewport(tab)?;
            let x = on_grid(num("x").or(Some(500.0)), "x").unwrap_or(500.0) / GRID * w;
            let y = on_grid(num("y").or(Some(500.0)), "y").unwrap_or(500.0) / GRID * h;
            let dy = match args["direction"].as_str().unwrap_or("down") {
                "up" => -0.8 * h,
                _ => 0.8 * h,
            };
            mouse(tab, "mouseWheel", x, y, json!({"deltaX": 0, "deltaY": dy}))?;
            pause(200);
            observe(tab, "scrolled")
        }
        "back" => {
            let history = cdp(tab, "Page.getNavigationHistory", json!({}))?;
            let current = history["currentIndex"].as_i64().unwrap_or(0);
            if current == 0 {
                return observe(tab, "there is no previous page");
            }
            let entry = &history["entries"][(current - 1) as usize]["id"];
            cdp(tab, "Page.navigateToHistoryEntry", json!({"entryId": entry}))?;
            settle(tab, 10.0)?;
            observe(tab, "went back")
        }
        "wait" => {
            let seconds = num("seconds").unwrap_or(1.0).clamp(0.0, 10.0);
            pause((seconds * 1000.0) as u64);
            observe(tab, &format!("waited {seconds} s"))
        }
        "screenshot" => observe(tab, "the page"),
        other => Ok(text_error(format!("no tool named {other:?}"))),
    }
}

impl Guest for Driver {
    fn list() -> Vec<ToolSpec> {
        let xy = |what: &str| {
            json!({"type": "object", "properties": {
                "x": {"type": "number", "description": format!("{what}, 0 (left) to 1000 (right)")},
                "y": {"type": "number", "description": format!("{what}, 0 (top) to 1000 (bottom)")}},
                "required": ["x", "y"]})
        };
        let mut scroll = xy("Where to scroll");
        scroll["properties"]["direction"] = json!({"type": "string", "enum": ["up", "down"]});
        scroll["required"] = json!(["direction"]);
        vec![
            spec(
                "goto",
                "Open a URL in the tab.",
                json!({"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}),
            ),
            spec("click", "Click at a point of the screenshot, on a 0-1000 grid.", xy("The point")),
            spec(
                "type",
                "Type text where the focus is; submit presses Enter after it.",
                json!({"type": "object", "properties": {"text": {"type": "string"}, "submit": {"type": "boolean"}}, "required": ["text"]}),
            ),
            spec(
                "key",
                "Press keys, e.g. \"Enter\", \"Tab\", \"ctrl+a\" (several separated by spaces).",
                json!({"type": "object", "properties": {"keys": {"type": "string"}}, "required": ["keys"]}),
            ),
            spec("scroll", "Scroll the page (or the element under the point) up or down.", scroll),
            spec("back", "Go back to the previous page.", json!({"type": "object"})),
            spec(
                "wait",
                "Wait for the page (at most 10 s).",
                json!({"type": "object", "properties": {"seconds": {"type": "number"}}}),
            ),
            spec("screenshot", "Look at the page.", json!({"type": "object"})),
            spec(
                "answer",
                "Give the final answer to the task.",
                json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
            ),
        ]
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        let args: Value =
            match serde_json::from_str(if call.arguments.trim().is_empty() { "{}" } else { &call.arguments }) {
                Ok(v) => v,
                Err(e) => return Ok(text_error(format!("the arguments are not JSON: {e}"))),
            };
        if call.name == "answer" {
            let text = args["text"].as_str().unwrap_or_default();
            return Ok(ToolOutput { content: vec![ContentPart::Text(format!("ANSWER: {text}"))], is_error: false });
        }
        match with_tab(|tab| act(tab, &call.name, &args)) {
            Ok(out) => Ok(out),
            // The browser's errors are the model's to see (a refused call, a timeout).
            Err(Error::Unavailable(m)) => Err(Error::Unavailable(m)),
            Err(e) => Ok(text_error(format!("{e:?}"))),
        }
    }
}

export!(Driver);
