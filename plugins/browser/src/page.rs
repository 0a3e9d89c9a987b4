//! What every mode shares: DevTools calls on the tab, waiting for pages, keys, the mouse, and
//! the observation each tool answers with.

use std::cell::RefCell;

use base64::Engine;
use serde_json::{Value, json};

use crate::orchard::plugin::browser::{PageEvent, Session};
use crate::orchard::plugin::types::{ContentPart, Error, Image, ToolOutput};
use crate::settings::Settings;

thread_local! {
    static TAB: RefCell<Option<Session>> = const { RefCell::new(None) };
}

/// Runs `f` on the rollout's tab, opening it at the first call.
pub fn with_tab<T>(f: impl FnOnce(&Session) -> Result<T, Error>) -> Result<T, Error> {
    TAB.with(|cell| {
        let mut tab = cell.borrow_mut();
        if tab.is_none() {
            *tab = Some(Session::open()?);
        }
        f(tab.as_ref().expect("opened above"))
    })
}

pub fn cdp(tab: &Session, method: &str, params: Value) -> Result<Value, Error> {
    Ok(serde_json::from_str(&tab.cdp(method, &params.to_string())?).unwrap_or(Value::Null))
}

/// Evaluates `expression` in the page and returns its value.
pub fn eval(tab: &Session, expression: &str) -> Result<Value, Error> {
    let v =
        cdp(tab, "Runtime.evaluate", json!({"expression": expression, "returnByValue": true, "awaitPromise": true}))?;
    if let Some(e) = v["exceptionDetails"]["exception"]["description"].as_str() {
        return Err(Error::Other(format!("the page's script failed: {e}")));
    }
    Ok(v["result"]["value"].clone())
}

pub fn pause(ms: u64) {
    std::thread::sleep(std::time::Duration::from_millis(ms));
}

/// Waits until the document has loaded, at most `seconds`: a moment first, for a navigation the
/// action may have started, then until the (new) page says it is complete. A page between two
/// documents answers nothing for a while: that is waited out too.
pub fn settle(tab: &Session, seconds: f64) {
    pause(150);
    let rounds = (seconds * 10.0).ceil() as u32;
    for _ in 0..rounds {
        match eval(tab, "document.readyState") {
            Ok(state) if state == "complete" => return,
            // A page that does not answer at all (a script that never yields) is not waited
            // for again and again: the observation says so.
            Err(Error::Timeout(_)) => return,
            _ => {}
        }
        pause(100);
    }
}

/// The viewport in CSS pixels.
pub fn viewport(tab: &Session) -> Result<(f64, f64), Error> {
    let v = eval(tab, "[window.innerWidth, window.innerHeight]")?;
    Ok((v[0].as_f64().unwrap_or(1280.0), v[1].as_f64().unwrap_or(800.0)))
}

pub fn mouse(tab: &Session, kind: &str, x: f64, y: f64, extra: Value) -> Result<(), Error> {
    let mut params = json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1});
    if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
        p.extend(e.clone());
    }
    cdp(tab, "Input.dispatchMouseEvent", params).map(|_| ())
}

/// A real click (move, press, release) at a point of the viewport.
pub fn click_at(tab: &Session, x: f64, y: f64) -> Result<(), Error> {
    mouse(tab, "mouseMoved", x, y, json!({}))?;
    mouse(tab, "mousePressed", x, y, json!({}))?;
    mouse(tab, "mouseReleased", x, y, json!({}))
}

/// The mouse wheel at a point: `up` or `down` by most of a screen.
pub fn wheel(tab: &Session, x: f64, y: f64, direction: &str) -> Result<(), Error> {
    let (_, h) = viewport(tab)?;
    let dy = if direction == "up" { -0.8 * h } else { 0.8 * h };
    mouse(tab, "mouseWheel", x, y, json!({"deltaX": 0, "deltaY": dy}))?;
    pause(200);
    Ok(())
}

/// `Enter`, `Tab`, `ctrl+a`...: one key with its modifiers.
pub fn press(tab: &Session, combo: &str) -> Result<(), Error> {
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
    // A chord with ctrl types nothing; ctrl+a is the editing command, which headless Chromium
    // does not bind to the key by itself.
    let text = if modifiers & 2 != 0 { "" } else { text };
    let commands = if modifiers & 2 != 0 && code.eq_ignore_ascii_case("a") { json!(["selectAll"]) } else { json!([]) };
    cdp(
        tab,
        "Input.dispatchKeyEvent",
        json!({"type": "keyDown", "key": code, "code": code, "text": text, "modifiers": modifiers, "commands": commands}),
    )?;
    cdp(tab, "Input.dispatchKeyEvent", json!({"type": "keyUp", "key": code, "code": code, "modifiers": modifiers}))?;
    Ok(())
}

/// Picks the option of a focused `<select>` whose text starts with `text` (or whose value is it);
/// `null` when the focus is not on a select.
const PICK_JS: &str = r#"((want) => {
  let e = document.activeElement;
  while (e && e.shadowRoot && e.shadowRoot.activeElement) e = e.shadowRoot.activeElement;
  if (!e || e.tagName !== 'SELECT') return null;
  want = want.trim().toLowerCase();
  const o = [...e.options].find(o => o.text.trim().toLowerCase().startsWith(want) || o.value.toLowerCase() === want);
  if (!o) return {missing: [...e.options].map(o => o.text.trim())};
  e.value = o.value;
  e.dispatchEvent(new Event('input', {bubbles: true}));
  e.dispatchEvent(new Event('change', {bubbles: true}));
  return {picked: o.text.trim()};
})"#;

/// Replaces what the focused field holds with `text` (select all, type), then Enter if asked.
/// On a dropdown (`<select>`), picks the option `text` names instead.
pub fn replace_text(tab: &Session, text: &str, submit: bool) -> Result<(), Error> {
    let picked = eval(tab, &format!("{PICK_JS}({})", Value::from(text)))?;
    if let Some(options) = picked.get("missing") {
        return Err(Error::InvalidInput(format!("the dropdown has no option {text:?} (its options: {options})")));
    }
    if !picked.is_null() {
        // The dropdown's own popup (opened by the click that focused it) is closed.
        press(tab, "Escape")?;
        return Ok(());
    }
    press(tab, "ctrl+a")?;
    cdp(tab, "Input.insertText", json!({"text": text}))?;
    if submit {
        press(tab, "Enter")?;
        settle(tab, 5.0);
    }
    Ok(())
}

/// Goes to the previous page of the tab's history.
pub fn back(tab: &Session) -> Result<bool, Error> {
    let history = cdp(tab, "Page.getNavigationHistory", json!({}))?;
    let current = history["currentIndex"].as_i64().unwrap_or(0);
    if current <= 0 {
        return Ok(false);
    }
    let entry = &history["entries"][(current - 1) as usize]["id"];
    cdp(tab, "Page.navigateToHistoryEntry", json!({"entryId": entry}))?;
    settle(tab, 10.0);
    Ok(true)
}

/// Opens `url` in the tab; the page's own error text when it could not.
pub fn goto(tab: &Session, url: &str) -> Result<Option<String>, Error> {
    let nav = cdp(tab, "Page.navigate", json!({"url": url}))?;
    if let Some(e) = nav["errorText"].as_str() {
        return Ok(Some(e.to_string()));
    }
    settle(tab, 10.0);
    Ok(None)
}

/// The viewport as an image, scaled down to `settings.screenshot_width` when it is wider.
pub fn screenshot(tab: &Session, settings: &Settings) -> Result<Image, Error> {
    let (w, h) = viewport(tab)?;
    let scale = match settings.screenshot_width {
        Some(max) if (max as f64) < w => max as f64 / w,
        _ => 1.0,
    };
    let jpeg = settings.jpeg_quality.is_some();
    if scale == 1.0 && !jpeg {
        // The host's own screenshot: recorded as such in the trajectory.
        return Ok(Image { media_type: "image/png".into(), data: tab.screenshot()? });
    }
    let mut params = json!({"format": if jpeg { "jpeg" } else { "png" }});
    if let Some(q) = settings.jpeg_quality {
        params["quality"] = json!(q);
    }
    if scale < 1.0 {
        params["clip"] = json!({"x": 0, "y": 0, "width": w, "height": h, "scale": scale});
    }
    let shot = cdp(tab, "Page.captureScreenshot", params)?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(shot["data"].as_str().unwrap_or_default())
        .map_err(|e| Error::Other(format!("the screenshot is not base64: {e}")))?;
    Ok(Image { media_type: if jpeg { "image/jpeg".into() } else { "image/png".into() }, data })
}

/// What the page did unasked since the last look, as lines for the model. A page that opened a
/// new tab is followed in this one (the driver browses one tab, as WebVoyager does).
pub fn page_events(tab: &Session) -> Result<Vec<String>, Error> {
    let mut said = Vec::new();
    for event in tab.events() {
        match event {
            PageEvent::Dialog(d) => said.push(format!("A dialog was dismissed ({d}).")),
            PageEvent::Download(u) => said.push(format!("A download was refused: {u}")),
            PageEvent::Popup(u) => {
                said.push(format!("The page opened a new tab at {u}; it is opened in this one instead."));
                if let Some(e) = goto(tab, &u)? {
                    said.push(format!("It could not be opened: {e}"));
                }
            }
        }
    }
    Ok(said)
}

/// The answer every tool gives: what happened, the page's events, URL and title, the mode's
/// text (marks or the accessibility tree), and a screenshot when the mode shows one. Tried again
/// for a few seconds while a page is between documents.
pub fn observe(
    tab: &Session,
    settings: &Settings,
    said: &str,
    mut extra: impl FnMut(&Session) -> Result<String, Error>,
) -> Result<ToolOutput, Error> {
    let events = page_events(tab)?;
    let mut last = None;
    for _ in 0..30 {
        match look(tab, settings, said, &events, &mut extra) {
            Ok(out) => return Ok(out),
            Err(Error::Timeout(m)) => {
                return Err(Error::Timeout(format!("the page is not responding (a script that never yields?): {m}")));
            }
            Err(e) => last = Some(e),
        }
        pause(100);
    }
    Err(last.unwrap_or_else(|| Error::Other("the page did not settle".into())))
}

fn look(
    tab: &Session,
    settings: &Settings,
    said: &str,
    events: &[String],
    extra: &mut impl FnMut(&Session) -> Result<String, Error>,
) -> Result<ToolOutput, Error> {
    let url = eval(tab, "location.href")?;
    let title = eval(tab, "document.title")?;
    let mut text = said.to_string();
    for e in events {
        text.push('\n');
        text.push_str(e);
    }
    text.push_str(&format!("\nURL: {}\nTitle: {}", url.as_str().unwrap_or(""), title.as_str().unwrap_or("")));
    // The mode's text is taken before the screenshot: marks are drawn for it.
    let listing = extra(tab)?;
    let mut content = Vec::new();
    if settings.screenshots {
        content.push(ContentPart::Image(screenshot(tab, settings)?));
    }
    if !listing.is_empty() {
        text.push('\n');
        text.push_str(&listing);
    }
    content.insert(0, ContentPart::Text(text));
    Ok(ToolOutput { content, is_error: false })
}

pub fn text_error(message: String) -> ToolOutput {
    ToolOutput { content: vec![ContentPart::Text(message)], is_error: true }
}
