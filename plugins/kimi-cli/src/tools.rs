//! Kimi-CLI's tools as its model sees them — `Shell`, `ReadFile`, `WriteFile`, `StrReplaceFile`,
//! `Glob`, `Grep`, `SetTodoList`, `Task` — carried out through the run's adapters: the shell
//! adapter's `bash`, `read_file` and `write_file`. A Kimi tool is offered when what it needs is
//! there; the adapters' own tools it stands for are not shown; any other tool of the run (an
//! assistant task's `mail_search`…) is offered under its own name.

use orchard_harness_kit::orchard::plugin::tools;
use orchard_harness_kit::{ToolCall, ToolSpec, text_of};
use serde_json::{Value, json};

/// The run's tools Kimi's own stand for.
const BACKING: &[&str] = &[
    "bash",
    "bash_session",
    "background_start",
    "background_log",
    "background_signal",
    "read_file",
    "write_file",
    "str_replace_editor",
];

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.to_string() }
}

/// The tools an agent sees: Kimi's (those the run can carry out, minus `excluded`), then the
/// run's other tools. `Task` and `SetTodoList` are the harness's own.
pub fn specs(run: &[ToolSpec], excluded: &[&str], subagents: &[(String, String)]) -> Vec<ToolSpec> {
    let has = |n: &str| run.iter().any(|t| t.name == n);
    let mut out = Vec::new();
    if !subagents.is_empty() {
        let list: Vec<String> = subagents.iter().map(|(n, d)| format!("- `{n}`: {d}")).collect();
        out.push(spec(
            "Task",
            &format!(
                "Spawn a subagent to perform a specific task. It starts with a fresh context that has none of your \
                 history, and you see only its final message: use it for narrow, self-contained subtasks that would \
                 clutter your own context, or run several at once for independent subtasks.\n\n**Available Subagents:**\n\n{}",
                list.join("\n")
            ),
            json!({"type": "object", "properties": {
                "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
                "subagent_name": {"type": "string", "description": "The name of the specialized subagent to use for this task"},
                "prompt": {"type": "string", "description": "The task for the subagent to perform. You must provide a detailed prompt with all necessary background information because the subagent cannot see anything in your context."}},
                "required": ["description", "subagent_name", "prompt"]}),
        ));
    }
    out.push(spec(
        "SetTodoList",
        "Update the whole todo list: every item with its status. Use it to plan and track multi-step work.",
        json!({"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object", "properties": {
            "title": {"type": "string", "minLength": 1}, "status": {"type": "string", "enum": ["pending", "in_progress", "done"]}},
            "required": ["title", "status"]}}}, "required": ["todos"]}),
    ));
    if has("bash") {
        out.push(spec(
            "Shell",
            "Execute a bash command. Each call runs in a fresh shell; the output (stdout and stderr) and the exit code \
             come back. Use it to run programs, tests and scripts.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to execute."},
                "timeout": {"type": "integer", "description": "Seconds to wait before the command is killed (default 60).", "default": 60}},
                "required": ["command"]}),
        ));
    }
    if has("read_file") {
        out.push(spec(
            "ReadFile",
            "Read a text file. Lines come numbered; use line_offset and n_lines to read part of a long file.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "The path of the file (absolute, or relative to the working directory)."},
                "line_offset": {"type": "integer", "description": "The line to start from (1-based).", "default": 1},
                "n_lines": {"type": "integer", "description": "How many lines to read.", "default": 1000}},
                "required": ["path"]}),
        ));
    }
    if has("bash") {
        out.push(spec(
            "Glob",
            "Find files and directories whose paths match a glob pattern (`**` matches any depth).",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string", "description": "The glob pattern, e.g. src/**/*.py"},
                "directory": {"type": "string", "description": "Where to search (default: the working directory)."},
                "include_dirs": {"type": "boolean", "default": true}}, "required": ["pattern"]}),
        ));
        out.push(spec(
            "Grep",
            "Search file contents with a regular expression (extended syntax), recursively.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"}, "path": {"type": "string", "description": "File or directory (default: the working directory)."},
                "glob": {"type": "string", "description": "Only files matching this glob, e.g. *.py"},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count_matches"], "default": "files_with_matches"},
                "-i": {"type": "boolean", "description": "Case-insensitive."}}, "required": ["pattern"]}),
        ));
    }
    if has("write_file") {
        out.push(spec(
            "WriteFile",
            "Write a file (created with its parent directories), overwriting it or appending to it.",
            json!({"type": "object", "properties": {
                "path": {"type": "string"}, "content": {"type": "string"},
                "mode": {"type": "string", "enum": ["overwrite", "append"], "default": "overwrite"}},
                "required": ["path", "content"]}),
        ));
    }
    if has("read_file") && has("write_file") {
        out.push(spec(
            "StrReplaceFile",
            "Replace strings in a file. Each edit's `old` must occur in the file (exactly once unless replace_all).",
            json!({"type": "object", "properties": {
                "path": {"type": "string"},
                "edit": {"description": "One edit or a list of edits.", "anyOf": [
                    {"type": "object", "properties": {"old": {"type": "string"}, "new": {"type": "string"}, "replace_all": {"type": "boolean", "default": false}}, "required": ["old", "new"]},
                    {"type": "array", "items": {"type": "object", "properties": {"old": {"type": "string"}, "new": {"type": "string"}, "replace_all": {"type": "boolean", "default": false}}, "required": ["old", "new"]}}]}},
                "required": ["path", "edit"]}),
        ));
    }
    out.retain(|t| !excluded.contains(&t.name.as_str()));
    out.extend(
        run.iter().filter(|t| !BACKING.contains(&t.name.as_str()) && !excluded.contains(&t.name.as_str())).cloned(),
    );
    out
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The result of one run tool: (text, is_error).
fn call(id: &str, name: &str, args: Value) -> (String, bool) {
    let call = ToolCall { id: id.into(), name: name.into(), arguments: args.to_string() };
    match tools::call(&call) {
        Ok(out) => (text_of(&out.content), out.is_error),
        Err(e) => (format!("{e:?}"), true),
    }
}

fn absolute(path: &str, workdir: &str) -> String {
    if path.starts_with('/') { path.to_string() } else { format!("{}/{path}", workdir.trim_end_matches('/')) }
}

/// Carries out one of Kimi's file and shell tools: (text for the model, is_error); `None` when
/// `name` is not one of them.
pub fn run(id: &str, name: &str, args: &Value, workdir: &str) -> Option<(String, bool)> {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some(match name {
        "Shell" => {
            let timeout = args.get("timeout").and_then(Value::as_u64).unwrap_or(60);
            call(id, "bash", json!({"command": s("command"), "timeout": timeout, "cwd": workdir}))
        }
        "ReadFile" => {
            let (text, err) = call(id, "read_file", json!({"path": absolute(&s("path"), workdir)}));
            if err {
                return Some((text, true));
            }
            let offset = args.get("line_offset").and_then(Value::as_u64).unwrap_or(1).max(1) as usize;
            let n = args.get("n_lines").and_then(Value::as_u64).unwrap_or(1000) as usize;
            let lines: Vec<String> =
                text.lines().enumerate().skip(offset - 1).take(n).map(|(i, l)| format!("{:>6}\t{l}", i + 1)).collect();
            (lines.join("\n"), false)
        }
        "WriteFile" => {
            let path = absolute(&s("path"), workdir);
            let mut content = s("content");
            if s("mode") == "append" {
                let (old, err) = call(id, "read_file", json!({"path": path}));
                if !err {
                    content = old + &content;
                }
            }
            let (text, err) = call(id, "write_file", json!({"path": path, "content": content}));
            if err { (text, true) } else { (format!("File successfully written to {path}"), false) }
        }
        "StrReplaceFile" => {
            let path = absolute(&s("path"), workdir);
            let (mut text, err) = call(id, "read_file", json!({"path": path}));
            if err {
                return Some((text, true));
            }
            let edits = match args.get("edit") {
                Some(Value::Array(a)) => a.clone(),
                Some(one @ Value::Object(_)) => vec![one.clone()],
                _ => return Some(("edit: an object {old, new} or a list of them".into(), true)),
            };
            for e in &edits {
                let (old, new) = (e["old"].as_str().unwrap_or(""), e["new"].as_str().unwrap_or(""));
                let found = if old.is_empty() { 0 } else { text.matches(old).count() };
                if found == 0 {
                    return Some((format!("No replacements were made: `old` was not found in {path}"), true));
                }
                if found > 1 && !e["replace_all"].as_bool().unwrap_or(false) {
                    return Some((
                        format!("`old` occurs {found} times in {path}; give more context or set replace_all"),
                        true,
                    ));
                }
                text = text.replace(old, new);
            }
            let (out, err) = call(id, "write_file", json!({"path": path, "content": text}));
            if err { (out, true) } else { (format!("File successfully edited ({} edit(s))", edits.len()), false) }
        }
        "Glob" => {
            let dir =
                absolute(&Some(s("directory")).filter(|d| !d.is_empty()).unwrap_or_else(|| workdir.into()), workdir);
            let dirs = if args.get("include_dirs").and_then(Value::as_bool).unwrap_or(true) {
                ""
            } else {
                "[ -d \"$p\" ] && continue; "
            };
            let command = format!(
                "cd {} && shopt -s globstar nullglob dotglob && for p in {}; do {dirs}printf '%s\\n' \"$p\"; done | head -1000",
                quote(&dir),
                s("pattern").split_whitespace().collect::<Vec<_>>().join(" ")
            );
            let (out, err) = call(id, "bash", json!({"command": command, "timeout": 60}));
            if !err && out.trim().is_empty() { ("No matches found".into(), false) } else { (out, err) }
        }
        "Grep" => {
            let path = absolute(&Some(s("path")).filter(|p| !p.is_empty()).unwrap_or_else(|| workdir.into()), workdir);
            let mode = match s("output_mode").as_str() {
                "content" => "-n",
                "count_matches" => "-c",
                _ => "-l",
            };
            let case = if args.get("-i").and_then(Value::as_bool).unwrap_or(false) { " -i" } else { "" };
            let include = Some(s("glob"))
                .filter(|g| !g.is_empty())
                .map(|g| format!(" --include={}", quote(&g)))
                .unwrap_or_default();
            let command =
                format!("grep -rE {mode}{case}{include} -e {} {} | head -1000", quote(&s("pattern")), quote(&path));
            let (out, err) = call(id, "bash", json!({"command": command, "timeout": 60}));
            if out.trim().is_empty() || out.contains("exit code: 1") && !out.contains(':') {
                ("No matches found".into(), false)
            } else {
                (out, err)
            }
        }
        _ => return None,
    })
}
