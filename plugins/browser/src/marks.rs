//! `marks` mode (WebVoyager's set-of-marks): numbered boxes drawn on the interactive elements in
//! view — in every same-origin frame and open shadow root — and their list `[i]: <tag> "text"`.
//! Actions name an element by its number; they act at its centre with real input events.

use std::cell::RefCell;

use serde_json::Value;

use crate::orchard::plugin::browser::Session;
use crate::orchard::plugin::types::Error;
use crate::page::eval;
use crate::settings::Settings;

thread_local! {
    /// The centres (CSS pixels of the viewport) of the elements last listed, by number.
    static MARKS: RefCell<Vec<(f64, f64)>> = const { RefCell::new(Vec::new()) };
}

/// Finds the elements, draws their boxes, and answers `{marks: [{x, y, w, h, label}], total}`.
/// Elements out of view, hidden, disabled or covered by another element are left out.
const MARK_JS: &str = r#"(() => {
  const MAX = __MAX__;
  document.querySelectorAll('[data-orchard-marks]').forEach(e => e.remove());
  const SEL = 'a[href],button,input,select,textarea,summary,details,label[for],[role=button],[role=link],' +
    '[role=checkbox],[role=radio],[role=tab],[role=menuitem],[role=option],[role=combobox],[role=textbox],' +
    '[role=searchbox],[role=switch],[role=slider],[onclick],[contenteditable=""],[contenteditable=true],' +
    '[tabindex]:not([tabindex="-1"])';
  const found = [];
  const visible = (el, r) => {
    if (r.width < 2 || r.height < 2) return false;
    const st = el.ownerDocument.defaultView.getComputedStyle(el);
    return st.visibility !== 'hidden' && st.display !== 'none' && st.opacity !== '0';
  };
  const uncovered = (el, r) => {
    const root = el.getRootNode();
    const at = root.elementFromPoint ? root.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2) : null;
    return !at || at === el || el.contains(at) || at.contains(el) || (at.shadowRoot && at.shadowRoot.contains(el));
  };
  const walk = (root, ox, oy) => {
    for (const el of root.querySelectorAll('*')) {
      if (el.shadowRoot) walk(el.shadowRoot, ox, oy);
      if (el.tagName === 'IFRAME' || el.tagName === 'FRAME') {
        let doc = null;
        try { doc = el.contentDocument; } catch (e) {}
        if (doc) { const r = el.getBoundingClientRect(); walk(doc, ox + r.left + el.clientLeft, oy + r.top + el.clientTop); }
        continue;
      }
      if (!el.matches(SEL) || el.disabled || el.type === 'hidden') continue;
      const r = el.getBoundingClientRect();
      const x = ox + r.left, y = oy + r.top;
      if (x + r.width <= 0 || y + r.height <= 0 || x >= innerWidth || y >= innerHeight) continue;
      if (!visible(el, r) || !uncovered(el, r)) continue;
      if (found.some(f => f.el.contains(el) && f.el !== el && f.el.tagName === 'A')) continue;
      found.push({el, x, y, w: r.width, h: r.height});
    }
  };
  walk(document, 0, 0);
  const layer = document.createElement('div');
  layer.setAttribute('data-orchard-marks', '');
  layer.style.cssText = 'position:fixed;left:0;top:0;width:0;height:0;z-index:2147483647;pointer-events:none';
  const marks = [];
  found.slice(0, MAX).forEach((f, i) => {
    const el = f.el, tag = el.tagName.toLowerCase();
    const kind = tag === 'input' ? `input type=${el.type || 'text'}` : tag;
    const said = (el.getAttribute('aria-label') || (tag === 'input' || tag === 'textarea' ? (el.value || el.placeholder || el.name) : '') ||
      el.innerText || el.title || el.alt || el.getAttribute('placeholder') || '').replace(/\s+/g, ' ').trim().slice(0, 80);
    const color = `hsl(${(i * 47) % 360}, 90%, 40%)`;
    const box = document.createElement('div');
    box.style.cssText = `position:fixed;left:${f.x}px;top:${f.y}px;width:${f.w}px;height:${f.h}px;border:2px solid ${color};box-sizing:border-box`;
    const tag_ = document.createElement('div');
    tag_.textContent = String(i);
    tag_.style.cssText = `position:absolute;left:-2px;top:-16px;background:${color};color:#fff;font:bold 12px/14px sans-serif;padding:0 3px`;
    box.appendChild(tag_);
    layer.appendChild(box);
    marks.push({x: f.x + f.w / 2, y: f.y + f.h / 2, label: `[${i}]: <${kind}> "${said}"`});
  });
  (document.body || document.documentElement).appendChild(layer);
  return {marks, total: found.length};
})()"#;

const UNMARK_JS: &str = "document.querySelectorAll('[data-orchard-marks]').forEach(e => e.remove())";

/// Draws the marks and answers their list (capped, with a note of what was left out).
pub fn mark(tab: &Session, settings: &Settings) -> Result<String, Error> {
    let found = eval(tab, &MARK_JS.replace("__MAX__", &settings.max_elements.to_string()))?;
    let marks = found["marks"].as_array().cloned().unwrap_or_default();
    let total = found["total"].as_u64().unwrap_or(marks.len() as u64) as usize;
    let centres = marks.iter().map(|m| (m["x"].as_f64().unwrap_or(0.0), m["y"].as_f64().unwrap_or(0.0))).collect();
    MARKS.with(|m| *m.borrow_mut() = centres);
    let labels: Vec<String> = marks.iter().filter_map(|m| m["label"].as_str().map(String::from)).collect();
    Ok(crate::listing(
        "Elements (numbered boxes on the screenshot):",
        &labels,
        total,
        settings.max_text,
        "no interactive element in view",
    ))
}

/// Takes the boxes off the page again (after the screenshot).
pub fn unmark(tab: &Session) {
    let _ = eval(tab, UNMARK_JS);
}

/// The centre of element `id` as last listed.
pub fn centre(args: &Value) -> Result<(f64, f64), String> {
    let id = args["id"].as_u64().ok_or("id: the number of an element in the last list")?;
    MARKS.with(|m| {
        m.borrow().get(id as usize).copied().ok_or_else(|| {
            format!("no element [{id}] in the last list ({} listed); look again with screenshot", m.borrow().len())
        })
    })
}
