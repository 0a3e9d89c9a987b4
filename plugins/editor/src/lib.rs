//! The `editor` tool adapter: `str_replace_editor`, the file editor of SWE-agent and OpenHands,
//! with their semantics:
//!
//! - `view {path, view_range?}`: a file with line numbers (`cat -n`), or a directory two levels
//!   deep (hidden entries left out);
//! - `create {path, file_text}`: refuses to overwrite an existing file;
//! - `str_replace {path, old_str, new_str}`: `old_str` must occur exactly once; absent or repeated
//!   is an error that says so (with the lines of every occurrence);
//! - `insert {path, insert_line, new_str}`: after line `insert_line` (0: at the top);
//! - `undo_edit {path}`: reverts the last edit of that file (history kept for the run).
//!
//! Paths must be absolute. The pure editing rules live in [`edit`], tested on their own.

wit_bindgen::generate!({ path: "../../wit/0.2.0", world: "tool-adapter" });

pub mod edit;

use std::cell::RefCell;
use std::collections::HashMap;

use exports::orchard::plugin::tools::Guest;
use orchard::plugin::sandbox::{self, EntryKind};
use orchard::plugin::types::{ContentPart, Error, ToolCall, ToolOutput, ToolSpec};
use serde_json::Value;

struct Editor;

thread_local! {
    /// Earlier contents of each edited file, newest last (one history per rollout).
    static HISTORY: RefCell<HashMap<String, Vec<String>>> = RefCell::new(HashMap::new());
}

const SCHEMA: &str = r#"{"type":"object","properties":{
"command":{"type":"string","enum":["view","create","str_replace","insert","undo_edit"],"description":"The command to run."},
"path":{"type":"string","description":"Absolute path to a file or directory."},
"file_text":{"type":"string","description":"For create: the content of the new file."},
"old_str":{"type":"string","description":"For str_replace: the exact text to replace; must occur exactly once."},
"new_str":{"type":"string","description":"For str_replace: the replacement; for insert: the text to insert."},
"insert_line":{"type":"integer","description":"For insert: the line after which to insert (0 for the top)."},
"view_range":{"type":"array","items":{"type":"integer"},"description":"For view: [start, end] line numbers, end -1 for the end of the file."}},
"required":["command","path"]}"#;

fn ok(text: String) -> Result<ToolOutput, Error> {
    Ok(ToolOutput { content: vec![ContentPart::Text(text)], is_error: false })
}

fn fail(text: String) -> Result<ToolOutput, Error> {
    Ok(ToolOutput { content: vec![ContentPart::Text(text)], is_error: true })
}

fn read(path: &str) -> Result<Option<String>, Error> {
    match sandbox::read_file(path) {
        Ok(bytes) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        Err(Error::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

fn is_dir(path: &str) -> bool {
    sandbox::list_dir(path).is_ok()
}

/// Directory view: two levels, hidden entries left out.
fn view_dir(path: &str) -> Result<String, Error> {
    let mut lines = vec![
        format!("Here are the files and directories up to 2 levels deep in {path}, excluding hidden items:"),
        path.to_string(),
    ];
    let base = path.trim_end_matches('/');
    for e in sandbox::list_dir(path)? {
        if e.name.starts_with('.') {
            continue;
        }
        let child = format!("{base}/{}", e.name);
        lines.push(child.clone());
        if e.kind == EntryKind::Directory
            && let Ok(inner) = sandbox::list_dir(&child)
        {
            for g in inner.into_iter().filter(|g| !g.name.starts_with('.')) {
                lines.push(format!("{child}/{}", g.name));
            }
        }
    }
    Ok(lines.join("\n") + "\n")
}

impl Guest for Editor {
    fn list() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "str_replace_editor".into(),
            description: "View, create and edit files. `view` shows a file with line numbers or lists a directory; \
                          `create` writes a new file; `str_replace` replaces `old_str`, which must occur exactly once, \
                          with `new_str`; `insert` adds `new_str` after line `insert_line`; `undo_edit` reverts the \
                          last edit of a file."
                .into(),
            parameters: SCHEMA.split_whitespace().collect::<Vec<_>>().join(" "),
        }]
    }

    fn call(call: ToolCall) -> Result<ToolOutput, Error> {
        if call.name != "str_replace_editor" {
            return Err(Error::NotFound(format!(
                "no tool named {:?} (this adapter has str_replace_editor)",
                call.name
            )));
        }
        let args: Value = serde_json::from_str(&call.arguments)
            .map_err(|e| Error::InvalidInput(format!("str_replace_editor: arguments are not JSON: {e}")))?;
        let arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_string);
        let Some(command) = arg("command") else {
            return fail("Parameter `command` is required (view, create, str_replace, insert, undo_edit).".into());
        };
        let Some(path) = arg("path") else {
            return fail(format!("Parameter `path` is required for command: {command}."));
        };
        if !path.starts_with('/') {
            return fail(format!("The path {path} is not an absolute path, it should start with `/`."));
        }
        match command.as_str() {
            "view" => {
                if is_dir(&path) {
                    if args.get("view_range").is_some() {
                        return fail(
                            "The `view_range` parameter is not allowed when `path` points to a directory.".into(),
                        );
                    }
                    return ok(view_dir(&path)?);
                }
                let Some(text) = read(&path)? else {
                    return fail(format!("The path {path} does not exist. Please provide a valid path."));
                };
                let range = args
                    .get("view_range")
                    .and_then(Value::as_array)
                    .map(|r| r.iter().filter_map(Value::as_i64).collect::<Vec<_>>());
                match edit::view(&text, &path, range.as_deref()) {
                    Ok(v) => ok(v),
                    Err(e) => fail(e),
                }
            }
            "create" => {
                let Some(file_text) = arg("file_text") else {
                    return fail("Parameter `file_text` is required for command: create.".into());
                };
                if read(&path)?.is_some() || is_dir(&path) {
                    return fail(format!(
                        "File already exists at: {path}. Cannot overwrite files using command `create`."
                    ));
                }
                sandbox::write_file(&path, file_text.as_bytes())?;
                HISTORY.with(|h| h.borrow_mut().entry(path.clone()).or_default().push(String::new()));
                ok(format!("File created successfully at: {path}"))
            }
            "str_replace" | "insert" | "undo_edit" => {
                let Some(text) = read(&path)? else {
                    return fail(format!("The path {path} does not exist. Please provide a valid path."));
                };
                if command == "undo_edit" {
                    let Some(previous) = HISTORY.with(|h| h.borrow_mut().get_mut(&path).and_then(Vec::pop)) else {
                        return fail(format!("No edit history found for {path}."));
                    };
                    sandbox::write_file(&path, previous.as_bytes())?;
                    return ok(format!(
                        "Last edit to {path} undone successfully. {}",
                        edit::view(&previous, &path, None).unwrap_or_default()
                    ));
                }
                let outcome = if command == "str_replace" {
                    let Some(old) = arg("old_str") else {
                        return fail("Parameter `old_str` is required for command: str_replace.".into());
                    };
                    edit::str_replace(&text, &path, &old, &arg("new_str").unwrap_or_default())
                } else {
                    let Some(line) = args.get("insert_line").and_then(Value::as_i64) else {
                        return fail("Parameter `insert_line` is required for command: insert.".into());
                    };
                    let Some(new) = arg("new_str") else {
                        return fail("Parameter `new_str` is required for command: insert.".into());
                    };
                    edit::insert(&text, &path, line, &new)
                };
                match outcome {
                    Ok((updated, message)) => {
                        sandbox::write_file(&path, updated.as_bytes())?;
                        HISTORY.with(|h| h.borrow_mut().entry(path.clone()).or_default().push(text));
                        ok(message)
                    }
                    Err(e) => fail(e),
                }
            }
            other => fail(format!(
                "Unrecognized command {other}. The allowed commands for the str_replace_editor tool are: view, create, str_replace, insert, undo_edit"
            )),
        }
    }
}

export!(Editor);
