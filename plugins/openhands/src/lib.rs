//! The `openhands` harness: OpenHands' SDK 1.58.2 default agent (`openhands-sdk` and
//! `openhands-tools` from PyPI, `get_default_agent(llm, cli_mode=True)`), ported.
//!
//! The model gets the SDK's system prompt and its five tools as the SDK sends them
//! (`release/`, MIT):
//! - `terminal {command, is_input?, timeout?, reset?}`: a persistent bash session (the shell
//!   adapter's `bash_session`): cwd, variables and virtualenvs carry over. A command that prints
//!   nothing for 30 s (`soft_timeout`), or is still running at its `timeout`, is left running and
//!   the observation says so; the model then sends an empty command to wait, `is_input` text to
//!   type into it, or `C-c` (`C-d`) to interrupt it (end its input); other commands are refused
//!   meanwhile. A finished command's observation ends with the working directory and its exit
//!   code, in the SDK's words.
//! - `file_editor`: the editor adapter's `str_replace_editor` (view, create, str_replace, insert,
//!   undo_edit).
//! - `task_tracker {command: view|plan, task_list}`: kept in the harness.
//! - `think {thought}`: logged. `finish {message}`: ends the run; the message is the answer.
//!
//! As the SDK does, a reply without tool calls ends the run (its text is the answer), and the
//! arguments of the calls kept in the history are written back as Python writes JSON. Config keys:
//! `max_iterations` (500), `soft_timeout`, `system_prompt`, sampling keys and the context
//! policy's. Checked against the real SDK by `tests/evaluations/openhands_faithful.rs`.

use orchard_harness_kit::config;
use orchard_harness_kit::context::Policy;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::orchard::plugin::{log, model, tools};
use orchard_harness_kit::{
    Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolSpec, message, text_of, tool_message,
};
use serde_json::{Value, json};

struct OpenHands;

/// The SDK's system prompt for its default agent in CLI mode.
const SYSTEM: &str = include_str!("../release/system_prompt.md");

/// The SDK's five tools as it offers them.
const TOOLS: &str = include_str!("../release/tools.json");

/// The SDK's `TIMEOUT_MESSAGE_TEMPLATE`.
const KEEP_WAITING: &str = "You may wait longer to see additional output by sending empty command '', send other \
     commands to interact with the current process, send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the previous \
     command before sending your new command, or use the timeout parameter in terminal for future commands.";

/// The SDK's header of an observation that is an error.
const ERROR_HEADER: &str = "[An error occurred during execution.]\n";

fn offered() -> Vec<ToolSpec> {
    let tools: Value = serde_json::from_str(TOOLS).expect("release/tools.json is JSON");
    tools
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| &t["function"])
        .map(|f| ToolSpec {
            name: f["name"].as_str().unwrap_or_default().into(),
            description: f["description"].as_str().unwrap_or_default().into(),
            parameters: f["parameters"].to_string(),
        })
        .collect()
}

/// What the shell adapter's `bash_session` answered, parsed back.
#[derive(Debug, PartialEq)]
pub enum BashAnswer {
    Finished {
        code: String,
        output: String,
    },
    /// Still running: quiet for the soft timeout, or (`hard`) still going at its timeout.
    Running {
        hard: bool,
        output: String,
    },
    /// Not an answer about a command (an error of the call, e.g. the shell exited).
    Other(String),
}

pub fn parse_bash_answer(answer: &str) -> BashAnswer {
    let (first, rest) = answer.split_once('\n').unwrap_or((answer, ""));
    let output = rest.replacen("stdout:\n", "", 1).replacen("stderr:\n", "", 1);
    if let Some(code) = first.strip_prefix("exit code: ") {
        return BashAnswer::Finished { code: code.trim().to_string(), output };
    }
    if first.starts_with("[still running") {
        return BashAnswer::Running { hard: first.starts_with("[still running after"), output };
    }
    BashAnswer::Other(answer.to_string())
}

/// The observation of a `terminal` call, in the SDK's words; a finished command's ends with the
/// working directory (`cwd`) and its exit code.
pub fn terminal_observation(
    answer: &BashAnswer,
    soft_timeout: f64,
    timeout: Option<f64>,
    interrupted: bool,
    cwd: Option<&str>,
) -> String {
    match answer {
        BashAnswer::Finished { code, output } => {
            let output = output.strip_suffix('\n').unwrap_or(output);
            let note = if interrupted { " CTRL+C was sent." } else { "" };
            let mut text = format!("{output}\n[The command completed with exit code {code}.{note}]");
            if let Some(cwd) = cwd {
                text += &format!("\n[Current working directory: {cwd}]");
            }
            text + &format!("\n[Command finished with exit code {code}]")
        }
        BashAnswer::Running { hard: false, output } => format!(
            "{}\n[The command has no new output after {soft_timeout} seconds. {KEEP_WAITING}]",
            output.strip_suffix('\n').unwrap_or(output)
        ),
        BashAnswer::Running { hard: true, output } => format!(
            "{}\n[The command timed out after {} seconds. {KEEP_WAITING}]",
            output.strip_suffix('\n').unwrap_or(output),
            timeout.unwrap_or(soft_timeout)
        ),
        BashAnswer::Other(text) => format!("{ERROR_HEADER}{text}"),
    }
}

/// `task_tracker`, as the SDK's executor answers it.
fn task_tracker(list: &mut Vec<Value>, args: &Value) -> String {
    match args.get("command").and_then(Value::as_str).unwrap_or_default() {
        "plan" => {
            *list = args.get("task_list").and_then(Value::as_array).cloned().unwrap_or_default();
            format!("Task list has been updated with {} item(s).", list.len())
        }
        "view" if list.is_empty() => "No task list found. Use the \"plan\" command to create one.".into(),
        "view" => {
            let mut content = String::from("# Task List\n\n");
            for (i, task) in list.iter().enumerate() {
                let icon = match task["status"].as_str() {
                    Some("in_progress") => "🔄",
                    Some("done") => "✅",
                    _ => "⏳",
                };
                content += &format!("{}. {icon} {}\n", i + 1, task["title"].as_str().unwrap_or_default());
                if let Some(notes) = task["notes"].as_str().filter(|n| !n.is_empty()) {
                    content += &format!("   {notes}\n");
                }
                content += "\n";
            }
            content.trim().to_string()
        }
        other => format!("{ERROR_HEADER}Unknown command: {other}. Supported commands are \"view\" and \"plan\"."),
    }
}

/// The arguments without the SDK's own bookkeeping fields (`security_risk`, `summary`), which
/// the adapters do not take.
fn without_bookkeeping(args: &Value) -> Value {
    let mut args = args.clone();
    if let Some(map) = args.as_object_mut() {
        map.remove("security_risk");
        map.remove("summary");
    }
    args
}

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &["max_iterations", "soft_timeout", "system_prompt"];

impl Guest for OpenHands {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config = orchard_harness_kit::config::parse(
            "openhands",
            &config,
            &[CONFIG_KEYS, config::SAMPLING, config::CONTEXT],
        )?;
        let max_iterations = config.get("max_iterations").and_then(Value::as_u64).unwrap_or(500) as u32;
        let soft_timeout = config.get("soft_timeout").and_then(Value::as_f64).unwrap_or(30.0);
        let sampling = orchard_harness_kit::sampling(&config);
        let policy = Policy::from_config(&config);
        let available = tools::list();
        if !available.iter().any(|t| t.name == "str_replace_editor") {
            return Err(Error::Unavailable(
                "openhands needs the editor adapter (str_replace_editor): run it with --tools editor".into(),
            ));
        }
        if !available.iter().any(|t| t.name == "bash_session") {
            return Err(Error::Unavailable(
                "openhands needs the shell adapter (bash_session): run it with --tools shell".into(),
            ));
        }
        let offered = offered();
        let system = config.get("system_prompt").and_then(Value::as_str).unwrap_or(SYSTEM).to_string();
        // Whether the session is still running the last command (soft or hard timeout).
        let mut running = false;
        let mut tasks: Vec<Value> = Vec::new();
        let mut messages: Vec<Message> =
            vec![message(Role::System, system), message(Role::User, task.instruction.clone())];
        let mut last_prompt = 0;
        for step in 1..=max_iterations {
            policy.fit(&mut messages, last_prompt);
            let completion = model::complete(&messages, &offered, &sampling)?;
            last_prompt = completion.usage.prompt_tokens;
            let mut reply = completion.message;
            // The SDK keeps a call's parsed arguments and sends them back as Python writes JSON.
            for call in &mut reply.tool_calls {
                if let Some(again) = orchard_harness_kit::python_json::redump(&call.arguments) {
                    call.arguments = again;
                }
            }
            let calls: Vec<ToolCall> = reply.tool_calls.clone();
            if calls.is_empty() {
                // A message without an action: the agent is done (it waits for the user).
                return Ok(Outcome {
                    status: RunStatus::Completed,
                    answer: Some(text_of(&reply.content)),
                    steps: step,
                    message: None,
                });
            }
            messages.push(reply);
            for call in &calls {
                let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let observation = match call.name.as_str() {
                    "finish" => {
                        return Ok(Outcome {
                            status: RunStatus::Completed,
                            answer: Some(text("message")),
                            steps: step,
                            message: None,
                        });
                    }
                    "think" => {
                        log::event(log::Level::Info, "think", &json!({"thought": text("thought")}).to_string());
                        "Your thought has been logged.".to_string()
                    }
                    "task_tracker" => task_tracker(&mut tasks, &args),
                    "terminal" => terminal(call, &args, &mut running, soft_timeout, &policy),
                    "file_editor" => {
                        let forward = ToolCall {
                            id: call.id.clone(),
                            name: "str_replace_editor".into(),
                            arguments: without_bookkeeping(&args).to_string(),
                        };
                        match tools::call(&forward) {
                            Ok(out) if out.is_error => format!("{ERROR_HEADER}{}", policy.cap(&text_of(&out.content))),
                            Ok(out) => policy.cap(&text_of(&out.content)),
                            Err(e) => format!("{ERROR_HEADER}{e:?}"),
                        }
                    }
                    other => format!(
                        "Tool '{other}' not found. Available: ['terminal', 'file_editor', 'task_tracker', 'finish', 'think']"
                    ),
                };
                messages.push(tool_message(&call.id, observation));
            }
        }
        Ok(Outcome {
            status: RunStatus::LimitReached,
            answer: None,
            steps: max_iterations,
            message: Some(format!("stopped after {max_iterations} iterations")),
        })
    }
}

/// One `terminal` call through the shell adapter's session, with the SDK's rules for a command
/// that is still running.
fn terminal(call: &ToolCall, args: &Value, running: &mut bool, soft_timeout: f64, policy: &Policy) -> String {
    let command = args.get("command").and_then(Value::as_str).unwrap_or_default().to_string();
    let is_input = matches!(args.get("is_input"), Some(Value::Bool(true)))
        || args.get("is_input").and_then(Value::as_str) == Some("true");
    let timeout = args.get("timeout").and_then(Value::as_f64);
    let continuing = *running && (is_input || command.trim().is_empty());
    if *running && !continuing {
        return format!(
            "\n[Your command \"{command}\" is NOT executed. The previous command is still running - You CANNOT send new \
             commands until the previous command is completed. By setting `is_input` to `true`, you can interact with the \
             current process: {KEEP_WAITING}]"
        );
    }
    if !*running && (is_input || command.trim().is_empty()) {
        return if is_input {
            format!("{ERROR_HEADER}No previous running command to interact with.")
        } else {
            format!("{ERROR_HEADER}No previous running command to retrieve logs from.")
        };
    }
    if continuing && command.trim() == "C-z" {
        return format!("{ERROR_HEADER}C-z (suspend) is not supported here; send C-c to interrupt the command.");
    }
    let mut arguments =
        json!({"command": command.trim_end_matches('\n'), "idle_timeout": soft_timeout, "is_input": continuing});
    if let Some(t) = timeout {
        arguments["timeout"] = t.into();
    }
    let forward = ToolCall { id: call.id.clone(), name: "bash_session".into(), arguments: arguments.to_string() };
    let answer = match tools::call(&forward) {
        Ok(out) => parse_bash_answer(&text_of(&out.content)),
        Err(e) => return format!("{ERROR_HEADER}{e:?}"),
    };
    *running = matches!(answer, BashAnswer::Running { .. });
    // The working directory the command left, as the SDK reads it from its prompt.
    let cwd = (!*running)
        .then(|| {
            let pwd = ToolCall {
                id: format!("{}-cwd", call.id),
                name: "bash_session".into(),
                arguments: json!({"command": "pwd", "timeout": 10}).to_string(),
            };
            match tools::call(&pwd).map(|o| parse_bash_answer(&text_of(&o.content))) {
                Ok(BashAnswer::Finished { output, .. }) => Some(output.trim().to_string()),
                _ => None,
            }
        })
        .flatten();
    let interrupted = continuing && command.trim() == "C-c";
    policy.cap(&terminal_observation(&answer, soft_timeout, timeout, interrupted, cwd.as_deref()))
}

orchard_harness_kit::export_harness!(OpenHands);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_answers_become_the_sdks_observations() {
        let done = parse_bash_answer("exit code: 0\nstdout:\nhello\n");
        assert_eq!(
            terminal_observation(&done, 30.0, None, false, Some("/w")),
            "hello\n[The command completed with exit code 0.]\n[Current working directory: /w]\n[Command finished with exit code 0]"
        );
        let quiet = parse_bash_answer("[still running: no new output for 30 s]\nstdout:\nstep 1\n");
        assert_eq!(quiet, BashAnswer::Running { hard: false, output: "step 1\n".into() });
        assert!(
            terminal_observation(&quiet, 30.0, None, false, None)
                .ends_with(&format!("no new output after 30 seconds. {KEEP_WAITING}]"))
        );
        let hard = parse_bash_answer("[still running after 2 s]\n");
        assert!(
            terminal_observation(&hard, 30.0, Some(2.0), false, None)
                .contains("[The command timed out after 2 seconds.")
        );
        let stopped = parse_bash_answer("exit code: 130\n");
        assert!(terminal_observation(&stopped, 30.0, None, true, None).contains("exit code 130. CTRL+C was sent.]"));
    }

    #[test]
    fn the_task_tracker_answers_as_the_sdk_does() {
        let mut list = vec![];
        assert!(task_tracker(&mut list, &json!({"command": "view"})).starts_with("No task list found."));
        let plan = json!({"command": "plan", "task_list": [{"title": "a", "status": "done", "notes": "n"}, {"title": "b", "status": "todo"}]});
        assert_eq!(task_tracker(&mut list, &plan), "Task list has been updated with 2 item(s).");
        assert_eq!(task_tracker(&mut list, &json!({"command": "view"})), "# Task List\n\n1. ✅ a\n   n\n\n2. ⏳ b");
        assert_eq!(
            offered().iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["terminal", "file_editor", "task_tracker", "finish", "think"]
        );
    }
}
