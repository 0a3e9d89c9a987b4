//! The accessibility-tree text mode (`[id] role "name"`), for text-only models: Chromium's own
//! tree of the page (`Accessibility.getFullAXTree`), ignored and purely structural nodes left out.
//! Actions name a node by its id and act on its DOM node (scrolled into view, clicked at its
//! centre with real input events, or focused for typing).

use std::cell::RefCell;
use std::collections::HashMap;

use serde_json::{Value, json};

use crate::orchard::plugin::browser::Session;
use crate::orchard::plugin::types::Error;
use crate::page::cdp;
use crate::settings::Settings;

thread_local! {
    /// The DOM nodes (backend ids) of the nodes last listed, by id.
    static NODES: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Roles that carry nothing for the model by themselves.
const SKIPPED: [&str; 9] = [
    "generic",
    "none",
    "InlineTextBox",
    "LineBreak",
    "RootWebArea",
    "presentation",
    "group",
    "LayoutTable",
    "paragraph",
];

/// The page's tree as lines, capped, with a note of what was left out.
pub fn tree(tab: &Session, settings: &Settings) -> Result<String, Error> {
    let answer = cdp(tab, "Accessibility.getFullAXTree", json!({}))?;
    let nodes = in_document_order(answer["nodes"].as_array().cloned().unwrap_or_default());
    let field = |n: &Value, key: &str| -> Option<(String, String)> {
        Some((
            n["nodeId"].as_str()?.to_string(),
            n[key]["value"].as_str().or(n[key].as_str()).unwrap_or("").to_string(),
        ))
    };
    let names: HashMap<String, String> = nodes.iter().filter_map(|n| field(n, "name")).collect();
    let roles: HashMap<String, String> = nodes.iter().filter_map(|n| field(n, "role")).collect();
    let parents: HashMap<String, String> = nodes.iter().filter_map(|n| field(n, "parentId")).collect();
    let mut lines = Vec::new();
    let mut ids = Vec::new();
    let mut total = 0;
    for n in &nodes {
        let role = n["role"]["value"].as_str().unwrap_or("");
        let name = n["name"]["value"].as_str().unwrap_or("").split_whitespace().collect::<Vec<_>>().join(" ");
        if n["ignored"].as_bool().unwrap_or(false) || SKIPPED.contains(&role) || role.is_empty() {
            continue;
        }
        // Containers without a name say nothing their children do not.
        if name.is_empty() && CONTAINERS.contains(&role) {
            continue;
        }
        // Text that only repeats its parent's name (a link's or a button's) is said once.
        let parent_id = n["parentId"].as_str().unwrap_or("");
        let parent = names.get(parent_id).map(String::as_str).unwrap_or("");
        // A field's own text is its value, shown with the field (it sits a level or two down).
        let in_field =
            std::iter::successors(Some(parent_id.to_string()), |id| parents.get(id).cloned()).take(4).any(|id| {
                matches!(roles.get(&id).map(String::as_str), Some("textbox" | "searchbox" | "combobox" | "spinbutton"))
            });
        if role == "StaticText"
            && (name.is_empty() || in_field || parent.split_whitespace().collect::<Vec<_>>().join(" ") == name)
        {
            continue;
        }
        total += 1;
        if lines.len() >= settings.max_elements {
            continue;
        }
        let Some(backend) = n["backendDOMNodeId"].as_u64() else { continue };
        let mut line = format!("[{}] {role} {:?}", ids.len(), clip(&name, 120));
        for (prop, shown) in
            [("checked", "checked"), ("disabled", "disabled"), ("expanded", "expanded"), ("focused", "focused")]
        {
            if let Some(p) = n["properties"].as_array().and_then(|ps| ps.iter().find(|p| p["name"] == prop))
                && (p["value"]["value"] == true || p["value"]["value"] == "true")
            {
                line.push_str(&format!(" {shown}"));
            }
        }
        if let Some(v) = n["value"]["value"].as_str().filter(|v| !v.is_empty()) {
            line.push_str(&format!(" value={:?}", clip(v, 80)));
        }
        ids.push(backend);
        lines.push(line);
    }
    NODES.with(|m| *m.borrow_mut() = ids);
    Ok(crate::listing("The page (accessibility tree):", &lines, total, settings.max_text, "the page is empty"))
}

/// Roles listed only when they have a name.
const CONTAINERS: [&str; 11] =
    ["form", "list", "listitem", "section", "region", "table", "row", "cell", "LabelText", "Canvas", "image"];

/// The tree's nodes depth first from its roots (Chromium's flat list is not in document order).
fn in_document_order(nodes: Vec<Value>) -> Vec<Value> {
    let index: std::collections::HashMap<String, usize> =
        nodes.iter().enumerate().filter_map(|(i, n)| Some((n["nodeId"].as_str()?.to_string(), i))).collect();
    let mut order = Vec::with_capacity(nodes.len());
    let mut seen = vec![false; nodes.len()];
    let mut stack: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i]["parentId"].as_str().is_none_or(|p| !index.contains_key(p)))
        .rev()
        .collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        order.push(i);
        let children = nodes[i]["childIds"].as_array().cloned().unwrap_or_default();
        stack.extend(children.iter().rev().filter_map(|c| index.get(c.as_str()?)).copied());
    }
    // Anything unreachable from a root keeps its place at the end.
    order.extend((0..nodes.len()).filter(|&i| !seen[i]));
    let mut slots: Vec<Option<Value>> = nodes.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { format!("{}…", s.chars().take(n).collect::<String>()) }
}

fn node(args: &Value) -> Result<u64, String> {
    let id = args["id"].as_u64().ok_or("id: the number of a node in the last tree")?;
    NODES.with(|m| {
        m.borrow().get(id as usize).copied().ok_or_else(|| {
            format!("no node [{id}] in the last tree ({} listed); look again with screenshot", m.borrow().len())
        })
    })
}

/// The centre of node `id`, scrolled into view first.
pub fn centre(tab: &Session, args: &Value) -> Result<Result<(f64, f64), String>, Error> {
    let backend = match node(args) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    let _ = cdp(tab, "DOM.scrollIntoViewIfNeeded", json!({"backendNodeId": backend}));
    let quads = match cdp(tab, "DOM.getContentQuads", json!({"backendNodeId": backend})) {
        Ok(q) => q,
        Err(_) => return Ok(Err("that node has no box on the page (hidden or gone)".into())),
    };
    let Some(q) = quads["quads"][0].as_array().filter(|q| q.len() == 8) else {
        return Ok(Err("that node has no box on the page (hidden or gone)".into()));
    };
    let v: Vec<f64> = q.iter().map(|c| c.as_f64().unwrap_or(0.0)).collect();
    Ok(Ok(((v[0] + v[2] + v[4] + v[6]) / 4.0, (v[1] + v[3] + v[5] + v[7]) / 4.0)))
}

/// Focuses node `id` (for typing into it).
pub fn focus(tab: &Session, args: &Value) -> Result<Result<(), String>, Error> {
    let backend = match node(args) {
        Ok(b) => b,
        Err(e) => return Ok(Err(e)),
    };
    Ok(cdp(tab, "DOM.focus", json!({"backendNodeId": backend}))
        .map(|_| ())
        .map_err(|e| format!("cannot type there: {e:?}")))
}
