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

/// How subagents are started: Kimi-CLI 1.x's `Agent {description, prompt, subagent_type}`, or
/// the earlier `Task {description, subagent_name, prompt}`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SubagentTool {
    Agent,
    Task,
}

impl SubagentTool {
    pub fn name(self) -> &'static str {
        match self {
            SubagentTool::Agent => "Agent",
            SubagentTool::Task => "Task",
        }
    }

    /// The subagent a call names (`None`: the default).
    pub fn requested(self, args: &Value) -> Option<String> {
        let key = match self {
            SubagentTool::Agent => "subagent_type",
            SubagentTool::Task => "subagent_name",
        };
        args.get(key).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string)
    }
}

/// Kimi-CLI 1.52's fifteen tools as it offers them (`release/tools.json`).
const RELEASE_TOOLS: &str = include_str!("../release/tools.json");

/// Tools Kimi-CLI offers that an evaluation cannot serve (no user, no web, no background tasks,
/// no plan mode): offered as Kimi-CLI offers them, answered with an error naming why.
pub const UNSERVED: [&str; 7] =
    ["AskUserQuestion", "TaskList", "TaskOutput", "TaskStop", "FetchURL", "ExitPlanMode", "EnterPlanMode"];

/// The tools an agent sees: Kimi-CLI's own, as its release offers them and in its order — each
/// when what it needs is there (`Shell`, `Glob`, `Grep` and the background and interactive ones
/// with the shell adapter's `bash`; `ReadFile` with `read_file`; `WriteFile` and
/// `StrReplaceFile` with `write_file`; the subagent tool when there are subagents), minus
/// `excluded` — then the run's other tools (an assistant task's `mail_search`…).
pub fn specs(run: &[ToolSpec], excluded: &[&str], subagents: &[(String, String)], form: SubagentTool) -> Vec<ToolSpec> {
    let has = |n: &str| run.iter().any(|t| t.name == n);
    let tools: Value = serde_json::from_str(RELEASE_TOOLS).expect("release/tools.json is JSON");
    let mut out = Vec::new();
    for function in tools.as_array().into_iter().flatten().map(|t| &t["function"]) {
        let name = function["name"].as_str().unwrap_or_default();
        let offered = match name {
            "Agent" => !subagents.is_empty(),
            "SetTodoList" => true,
            "ReadFile" => has("read_file"),
            "WriteFile" => has("write_file"),
            "StrReplaceFile" => has("read_file") && has("write_file"),
            _ => has("bash"),
        };
        if !offered {
            continue;
        }
        if name == "Agent" && form == SubagentTool::Task {
            out.push(task_spec(subagents));
        } else {
            out.push(ToolSpec {
                name: name.into(),
                description: function["description"].as_str().unwrap_or_default().into(),
                parameters: function["parameters"].to_string(),
            });
        }
    }
    out.retain(|t| !excluded.contains(&t.name.as_str()));
    out.extend(
        run.iter().filter(|t| !BACKING.contains(&t.name.as_str()) && !excluded.contains(&t.name.as_str())).cloned(),
    );
    out
}

/// The older subagent tool (`subagent_tool: "Task"`), from before Kimi-CLI's `Agent`.
fn task_spec(subagents: &[(String, String)]) -> ToolSpec {
    let list: Vec<String> = subagents.iter().map(|(n, d)| format!("- `{n}`: {d}")).collect();
    let description = format!(
        "Start a subagent instance for a focused subtask. It begins with a fresh context that holds none of your \
         history, and you see only its final message: give it a complete prompt, use it for narrow work that would \
         clutter your own context, and start several at once for independent subtasks.\n\n**Available subagents:**\n\n{}",
        list.join("\n")
    );
    spec(
        "Task",
        &description,
        json!({"type": "object", "properties": {
            "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
            "subagent_name": {"type": "string", "description": "The name of the specialized subagent to use for this task"},
            "prompt": {"type": "string", "description": "The task for the subagent, with all the background it needs: it cannot see your context."}},
            "required": ["description", "subagent_name", "prompt"]}),
    )
}

/// An argument of Kimi-CLI's tool that this port does not carry out, when the call sets it.
fn unsupported_argument(name: &str, args: &Value) -> Option<&'static str> {
    let set = |key: &str| args.get(key).is_some_and(|v| !v.is_null() && v != &Value::Bool(false));
    let keys: &[&'static str] = match name {
        "Shell" => &["run_in_background"],
        "Grep" => &["-B", "-A", "-C", "type", "head_limit", "offset", "multiline", "include_ignored"],
        _ => &[],
    };
    keys.iter().copied().find(|k| set(k))
}

use orchard_harness_kit::text::shell_quote as quote;

/// What a Kimi tool returns: a note for the model (shown in `<system>` tags, `ERROR:` first when
/// it failed) and the output.
pub struct KimiResult {
    pub message: String,
    pub output: String,
    pub is_error: bool,
}

fn ok(message: impl Into<String>, output: impl Into<String>) -> KimiResult {
    KimiResult { message: message.into(), output: output.into(), is_error: false }
}

fn error(message: impl Into<String>) -> KimiResult {
    KimiResult { message: message.into(), output: String::new(), is_error: true }
}

/// One run tool's answer: (text, is_error).
fn call(id: &str, name: &str, args: Value) -> (String, bool) {
    let call = ToolCall { id: id.into(), name: name.into(), arguments: args.to_string() };
    match tools::call(&call) {
        Ok(out) => (text_of(&out.content), out.is_error),
        Err(e) => (format!("{e:?}"), true),
    }
}

/// The shell adapter's `bash` answer (`exit code: N`, `stdout:`, `stderr:` sections) as
/// (exit code, timed out, stdout followed by stderr).
fn parse_bash(text: &str) -> (i64, bool, String) {
    let timed_out = text.starts_with("[command timed out");
    let code =
        text.lines().find_map(|l| l.strip_prefix("exit code: ")).and_then(|c| c.trim().parse().ok()).unwrap_or(-1);
    let body = text.split_once("exit code: ").map_or("", |(_, rest)| rest.split_once('\n').map_or("", |(_, b)| b));
    let (stdout, stderr) = match body.split_once("stderr:\n") {
        Some((out, err)) => (out, err),
        None => (body, ""),
    };
    (code, timed_out, format!("{}{stderr}", stdout.strip_prefix("stdout:\n").unwrap_or(stdout)))
}

fn absolute(path: &str, workdir: &str) -> String {
    if path.starts_with('/') { path.to_string() } else { format!("{}/{path}", workdir.trim_end_matches('/')) }
}

fn shell(id: &str, command: String, timeout: u64, workdir: &str) -> (i64, bool, String) {
    let (text, _) = call(id, "bash", json!({"command": command, "timeout": timeout, "cwd": workdir}));
    parse_bash(&text)
}

/// Carries out one of Kimi's file and shell tools; `None` when `name` is not one of them.
pub fn run(id: &str, name: &str, args: &Value, workdir: &str) -> Option<KimiResult> {
    if UNSERVED.contains(&name) {
        return Some(error(format!(
            "`{name}` is not available here: this run has no user, no web, no background tasks and no plan mode."
        )));
    }
    if let Some(unsupported) = unsupported_argument(name, args) {
        return Some(error(format!("`{unsupported}` is not supported here ({name}).")));
    }
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    Some(match name {
        "Shell" => {
            let timeout = args.get("timeout").and_then(Value::as_u64).unwrap_or(60);
            if s("command").trim().is_empty() {
                return Some(error("Command cannot be empty."));
            }
            let (code, timed_out, output) = shell(id, s("command"), timeout, workdir);
            match (timed_out, code) {
                (true, _) => {
                    KimiResult { message: format!("Command killed by timeout ({timeout}s)"), output, is_error: true }
                }
                (false, 0) => ok("Command executed successfully.", output),
                (false, code) => {
                    KimiResult { message: format!("Command failed with exit code: {code}."), output, is_error: true }
                }
            }
        }
        "ReadFile" => {
            let path = absolute(&s("path"), workdir);
            let (text, err) = call(id, "read_file", json!({"path": path}));
            if err {
                return Some(error(format!("`{}` does not exist or cannot be read: {text}", s("path"))));
            }
            let offset = args.get("line_offset").and_then(Value::as_i64).unwrap_or(1);
            let n = args.get("n_lines").and_then(Value::as_u64).unwrap_or(1000).clamp(1, 1000) as usize;
            let all: Vec<&str> = text.split_inclusive('\n').collect();
            let start = if offset < 0 {
                all.len().saturating_sub(offset.unsigned_abs() as usize) + 1
            } else {
                offset.max(1) as usize
            };
            let lines: Vec<String> =
                all.iter().enumerate().skip(start - 1).take(n).map(|(i, l)| format!("{:6}\t{l}", i + 1)).collect();
            let mut message = if lines.is_empty() {
                "No lines read from file.".to_string()
            } else {
                format!("{} lines read from file starting from line {start}.", lines.len())
            };
            message += &format!(" Total lines in file: {}.", all.len());
            if lines.len() < n {
                message += " End of file reached.";
            }
            ok(message, lines.concat())
        }
        "WriteFile" => {
            let path = absolute(&s("path"), workdir);
            let append = s("mode") == "append";
            let mut content = s("content");
            if append && let (old, false) = call(id, "read_file", json!({"path": path})) {
                content = old + &content;
            }
            match call(id, "write_file", json!({"path": path, "content": content})) {
                (text, true) => error(format!("Failed to write to {}. Error: {text}", s("path"))),
                _ => ok(
                    format!(
                        "File successfully {}. Current size: {} bytes.",
                        if append { "appended to" } else { "overwritten" },
                        content.len()
                    ),
                    "",
                ),
            }
        }
        "StrReplaceFile" => {
            let path = absolute(&s("path"), workdir);
            let (mut text, err) = call(id, "read_file", json!({"path": path}));
            if err {
                return Some(error(format!("`{}` does not exist.", s("path"))));
            }
            let edits = match args.get("edit") {
                Some(Value::Array(a)) => a.clone(),
                Some(one @ Value::Object(_)) => vec![one.clone()],
                _ => return Some(error("edit: an object {old, new} or a list of them")),
            };
            let mut replacements = 0;
            for e in &edits {
                let (old, new) = (e["old"].as_str().unwrap_or(""), e["new"].as_str().unwrap_or(""));
                if old.is_empty() || !text.contains(old) {
                    return Some(error("No replacements were made. The old string was not found in the file."));
                }
                if e["replace_all"].as_bool().unwrap_or(false) {
                    replacements += text.matches(old).count();
                    text = text.replace(old, new);
                } else {
                    replacements += 1;
                    text = text.replacen(old, new, 1);
                }
            }
            match call(id, "write_file", json!({"path": path, "content": text})) {
                (out, true) => error(format!("Failed to edit. Error: {out}")),
                _ => ok(
                    format!(
                        "File successfully edited. Applied {} edit(s) with {replacements} total replacement(s).",
                        edits.len()
                    ),
                    "",
                ),
            }
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
                "cd {} && shopt -s globstar nullglob dotglob && for p in {}; do {dirs}printf '%s\\n' \"$p\"; done | sort | head -1000",
                quote(&dir),
                s("pattern").split_whitespace().collect::<Vec<_>>().join(" ")
            );
            let (code, _, output) = shell(id, command, 60, workdir);
            if code != 0 {
                return Some(error(format!(
                    "`{}` is not a directory, or the pattern is invalid: {output}",
                    s("directory")
                )));
            }
            let found = output.lines().count();
            if found == 0 {
                ok(format!("No matches found for pattern `{}`.", s("pattern")), "")
            } else {
                ok(format!("Found {found} matches for pattern `{}`.", s("pattern")), output.trim_end())
            }
        }
        "Grep" => {
            let path = absolute(
                &Some(s("path")).filter(|p| !p.is_empty() && p != ".").unwrap_or_else(|| workdir.into()),
                workdir,
            );
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
            let (_, _, output) = shell(id, command, 60, workdir);
            if output.trim().is_empty() { ok("No matches found", "") } else { ok("", output) }
        }
        _ => return None,
    })
}
