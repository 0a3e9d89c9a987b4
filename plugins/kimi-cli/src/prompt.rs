//! Kimi-CLI's system prompt: a template with `${NAME}` variables and `{% if NAME %}…{% endif %}`
//! blocks (also `{% if NAME == "value" %}`), rendered as Kimi-CLI renders its `system.md`. The
//! default template is ours, in the shape of Kimi-CLI's (role, prompt and tool use, coding and
//! research guidelines, working environment, project information); `system_prompt_template`
//! takes the text of your own copy of Kimi-CLI's `system.md` instead. The default names only the
//! tools the model was given ([`tool_variables`]): on a task without a shell, no `Shell`.

use std::collections::BTreeMap;

pub const DEFAULT_TEMPLATE: &str = "\
You are Kimi Code CLI, an interactive general AI agent working on a user's computer.

Your main job is to help with software engineering and other tasks by acting: use the tools you have to make real \
changes, and answer questions when you are asked them. Follow these instructions and the user's requirements closely.

${ROLE_ADDITIONAL}

# Prompt and Tool Use

Read the user's request and do what it asks. Simple greetings and questions that need nothing from the working \
directory or the internet may be answered directly; for everything else, act with tools. When a request could be a \
question or a task, treat it as a task.

When the request involves creating, changing or running code or files, make the changes with the tools\
{% if KIMI_CHANGE_TOOLS %} (${KIMI_CHANGE_TOOLS}){% endif %} instead of describing them. Do not explain tool calls: they \
speak for themselves. Follow each tool's description and parameters.

If the `Task` tool is available, you can hand a narrow, self-contained subtask to a subagent. A subagent starts with \
a fresh context and sees nothing of yours, so give it every piece of context it needs; you will only see its final \
message.

You may make several tool calls in one response; when calls do not depend on each other, make them together.

Tool results come back in tool messages. Decide from them whether to go on, to report that the task is done or has \
failed, or to ask for more information.

The system may add information wrapped in `<system>` tags to user or tool messages; take it into account.

Answer in the same language as the user unless told otherwise.

# General Guidelines for Coding

- Understand the requirements and the existing code{% if KIMI_READ_TOOLS %} (read it with ${KIMI_READ_TOOLS}){% endif %} before changing it.
- For a bug, find the root cause from the errors or failing tests, fix it, and make sure the tests pass.
- Make minimal changes and follow the project's style.{% if KIMI_SHELL_TOOL %} Run the code and the tests with `Shell` after changing it.{% endif %}
- Do not commit, push, reset or otherwise change git history unless asked.

# General Guidelines for Research and Data Processing

- Understand what is asked before starting; plan deep or wide research before doing it.
- Check generated files by reading them back.
- Do not install or delete anything outside the working directory without asking.

# Working Environment

## Operating System

You are running on **${KIMI_OS}**.{% if KIMI_SHELL_TOOL %} The Shell tool runs commands with **${KIMI_SHELL}**.{% endif %}

## Date and Time

The current date and time in ISO format is `${KIMI_NOW}`. Use it as a reference.

## Working Directory

The current working directory is `${KIMI_WORK_DIR}`: treat it as the project root. Relative paths are relative to it; \
use absolute paths where a tool asks for them.

Its listing:

```
${KIMI_WORK_DIR_LS}
```
{% if KIMI_ADDITIONAL_DIRS_INFO %}
## Additional Directories

${KIMI_ADDITIONAL_DIRS_INFO}
{% endif %}
# Project Information

`AGENTS.md` files hold what agents need to know about a project (building, testing, conventions). Their merged \
instructions:

`````````
${KIMI_AGENTS_MD}
`````````

# Skills

${KIMI_SKILLS}

# Ultimate Reminders

- Stay on the user's task; do what was asked and no more.
- Never invent results: base every claim on what the tools returned.
- Be careful: actions on the user's system take effect at once.
";

/// The variables that name the model's own tools in the default template: `KIMI_CHANGE_TOOLS`
/// (`WriteFile`, `StrReplaceFile`, `Shell` among those given), `KIMI_READ_TOOLS` (`ReadFile`,
/// `Glob`, `Grep`) and `KIMI_SHELL_TOOL` (set when `Shell` is); empty when none is given.
pub fn tool_variables<'a>(given: impl IntoIterator<Item = &'a str>) -> BTreeMap<&'static str, String> {
    let given: Vec<&str> = given.into_iter().collect();
    let list = |names: &[&str]| {
        let present: Vec<String> = names.iter().filter(|n| given.contains(n)).map(|n| format!("`{n}`")).collect();
        match present.as_slice() {
            [] => String::new(),
            [one] => one.clone(),
            [init @ .., last] => format!("{} and {last}", init.join(", ")),
        }
    };
    [
        ("KIMI_CHANGE_TOOLS", list(&["WriteFile", "StrReplaceFile", "Shell"])),
        ("KIMI_READ_TOOLS", list(&["ReadFile", "Glob", "Grep"])),
        ("KIMI_SHELL_TOOL", if given.contains(&"Shell") { "Shell".to_string() } else { String::new() }),
    ]
    .into()
}

/// What a subagent is told on top of the template (Kimi-CLI's `coder` subagent's
/// `ROLE_ADDITIONAL`, in our words).
pub const SUBAGENT_ROLE: &str = "You are running as a subagent. Every `user` message comes from the main agent, which \
cannot see your context: it sees only your last message when you finish. Treat the main agent as your caller; do not \
ask the end user questions. If something is unclear, say so in your final summary to the main agent.";

/// The working directory's first two levels as a tree (`├──`, `└──`), from `find -printf '%y %P'`
/// lines (`d src`, `f src/a.py`): what the template's `KIMI_WORK_DIR_LS` shows.
pub fn tree(find_lines: &str) -> String {
    let mut top: Vec<(String, Vec<String>)> = Vec::new();
    let mut entries: Vec<&str> = find_lines.lines().filter_map(|l| l.get(2..)).filter(|p| !p.is_empty()).collect();
    entries.sort();
    for path in entries {
        match path.split_once('/') {
            None => top.push((path.to_string(), Vec::new())),
            Some((dir, child)) => match top.iter_mut().find(|(name, _)| name == dir) {
                Some((_, children)) => children.push(child.to_string()),
                None => top.push((dir.to_string(), vec![child.to_string()])),
            },
        }
    }
    let mut out = Vec::new();
    for (i, (name, children)) in top.iter().enumerate() {
        let last = i + 1 == top.len();
        out.push(format!("{}{name}", if last { "└── " } else { "├── " }));
        for (j, child) in children.iter().enumerate() {
            let lead = if last { "    " } else { "│   " };
            out.push(format!("{lead}{}{child}", if j + 1 == children.len() { "└── " } else { "├── " }));
        }
    }
    out.join("\n")
}

/// Renders `${NAME}` and `{% if … %}…{% endif %}` (no nesting); unknown variables become empty.
pub fn render(template: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("{%") {
        out += &substitute(&rest[..start], vars);
        let Some(end) = rest[start..].find("%}").map(|e| start + e + 2) else {
            out += &substitute(&rest[start..], vars);
            return out;
        };
        let tag = rest[start + 2..end - 2].trim_matches(|c: char| c == '+' || c == '-' || c.is_whitespace());
        rest = &rest[end..];
        if let Some(condition) = tag.strip_prefix("if ") {
            let (body, after) = match rest.find("{%").and_then(|i| {
                let close = rest[i..].find("%}")? + i + 2;
                rest[i + 2..close - 2]
                    .trim_matches(|c: char| c == '+' || c == '-' || c.is_whitespace())
                    .eq("endif")
                    .then_some((i, close))
            }) {
                Some((i, close)) => (&rest[..i], &rest[close..]),
                None => (rest, ""),
            };
            if holds(condition.trim(), vars) {
                out += &substitute(body, vars);
            }
            rest = after;
        }
        // Any other tag (an `endif` without its `if`, a comment) renders as nothing.
    }
    out += &substitute(rest, vars);
    out
}

fn holds(condition: &str, vars: &BTreeMap<&str, String>) -> bool {
    match condition.split_once("==") {
        Some((name, value)) => vars.get(name.trim()).is_some_and(|v| v == value.trim().trim_matches('"')),
        None => vars.get(condition).is_some_and(|v| !v.trim().is_empty()),
    }
}

fn substitute(text: &str, vars: &BTreeMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(i) = rest.find("${") {
        out += &rest[..i];
        match rest[i..].find('}') {
            Some(j) => {
                let name = &rest[i + 2..i + j];
                out += vars.get(name).map(String::as_str).unwrap_or("");
                rest = &rest[i + j + 1..];
            }
            None => {
                out += &rest[i..];
                rest = "";
            }
        }
    }
    out + rest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_conditions_render_like_kimi_cli() {
        let vars: BTreeMap<&str, String> =
            [("KIMI_OS", "Linux".to_string()), ("KIMI_WORK_DIR", "/w".into()), ("EMPTY", "".into())].into();
        assert_eq!(render("on ${KIMI_OS} in ${KIMI_WORK_DIR}${MISSING}.", &vars), "on Linux in /w.");
        assert_eq!(render("a{% if KIMI_OS == \"Windows\" %} win{% endif +%}b", &vars), "ab");
        assert_eq!(render("a{% if KIMI_OS == \"Linux\" %} lin{% endif %}b", &vars), "a linb");
        assert_eq!(render("a{% if EMPTY %}x{% endif %}b{% if KIMI_OS %}y{% endif %}", &vars), "aby");
        assert_eq!(tree("f app.py\n"), "└── app.py");
        assert_eq!(
            tree("d src\nf src/b.py\nf src/a.py\nf README.md\n"),
            "├── README.md\n└── src\n    ├── a.py\n    └── b.py"
        );
        let full = render(DEFAULT_TEMPLATE, &vars);
        assert!(full.contains("running on **Linux**") && !full.contains("${") && !full.contains("{%"), "{full}");
    }

    #[test]
    fn the_prompt_names_only_the_tools_given() {
        let render_with = |tools: &[&str]| {
            let mut vars: BTreeMap<&str, String> = [("KIMI_OS", "Linux".to_string())].into();
            vars.extend(tool_variables(tools.iter().copied()));
            render(DEFAULT_TEMPLATE, &vars)
        };
        let coding = render_with(&["Shell", "ReadFile", "Glob", "Grep", "WriteFile", "StrReplaceFile"]);
        for name in ["`Shell`", "`ReadFile`", "`WriteFile`", "`StrReplaceFile`", "The Shell tool"] {
            assert!(coding.contains(name), "{name} missing:\n{coding}");
        }
        // An assistant task's tools: none of the coding tools is named.
        let assistant = render_with(&["calendar_events", "calendar_freebusy"]);
        for name in ["Shell", "ReadFile", "WriteFile", "StrReplaceFile", "Glob", "Grep"] {
            assert!(!assistant.contains(name), "{name} named without being given:\n{assistant}");
        }
    }
}
