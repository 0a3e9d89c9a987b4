//! The `openhands` harness: OpenHands' CodeAct agent loop and tool set.
//!
//! The model sees four tools:
//! - `execute_bash {command, is_input?, timeout?}`: runs in a persistent bash session (the shell
//!   adapter's `bash_session`): cwd, variables and virtualenvs carry over. A command that prints
//!   nothing for `soft_timeout` seconds (default 30), or is still running at its `timeout`, is
//!   left running and the observation says so; the model then sends an empty command to wait,
//!   `is_input` text to type into it, or `C-c` (`C-d`) to interrupt it (end its input), and other
//!   commands are refused until it ends — OpenHands' semantics and messages.
//! - `str_replace_editor`: the editor adapter's, as it is (view, create, str_replace, insert,
//!   undo_edit).
//! - `think {thought}`: logged; changes nothing.
//! - `finish {message}`: ends the run; the message is the answer.
//!
//! A reply without tool calls gets OpenHands' nudge to continue or call `finish`; three in a row
//! end the run (`gave_up`). Config keys: `max_iterations` (default 100), `soft_timeout`,
//! `system_prompt`, sampling keys and the context policy's.

use orchard_harness_kit::context::Policy;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::orchard::plugin::{log, model, tools};
use orchard_harness_kit::{
    Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolSpec, message, text_of, tool_message,
};
use serde_json::{Value, json};

struct OpenHands;

const SYSTEM: &str = "You are OpenHands agent, a helpful AI assistant that can interact with a computer to solve tasks.

<ROLE>
Solve the user's task by running commands and editing files. Be thorough and methodical; verify your changes.
</ROLE>

<TOOLS>
- execute_bash runs commands in a persistent shell: the working directory and environment carry over.
- str_replace_editor views, creates and edits files; prefer it to sed for edits.
- think lets you reason about complex problems; it does not change anything.
- finish ends the task: call it once the work is done and verified, with a short summary.
</TOOLS>

<EFFICIENCY>
Combine related commands, avoid commands that wait for input, keep outputs short (head, tail, grep).
</EFFICIENCY>";

const NUDGE: &str = "Please continue working on the task on whatever approach you think is suitable.\n\
If you think you have solved the task, please finish the interaction with the finish tool.\n\
IMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.";

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.to_string() }
}

fn own_tools(editor: ToolSpec) -> Vec<ToolSpec> {
    vec![
        spec(
            "execute_bash",
            "Execute a bash command in the terminal (a persistent session). Long-running commands should run in the \
             background (`cmd > out.log 2>&1 &`). A command that outlives its timeout is interrupted.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to execute."},
                "is_input": {"type": "string", "enum": ["true", "false"], "description": "Whether the command is input to a running process."},
                "timeout": {"type": "number", "description": "Seconds to wait for the command."}},
                "required": ["command"]}),
        ),
        editor,
        spec(
            "think",
            "Use the tool to think about something. It will not obtain new information or change anything; it just logs the thought.",
            json!({"type": "object", "properties": {"thought": {"type": "string"}}, "required": ["thought"]}),
        ),
        spec(
            "finish",
            "Signals the completion of the current task.",
            json!({"type": "object", "properties": {"message": {"type": "string", "description": "Final message to the user."}}, "required": ["message"]}),
        ),
    ]
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

const KEEP_WAITING: &str = "You may wait longer to see additional output by sending empty command '', send other commands \
     to interact with the current process, send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the command, or use the \
     timeout parameter in execute_bash for future commands.";

/// The observation of an `execute_bash` call, in OpenHands' words.
pub fn bash_observation(answer: &BashAnswer, soft_timeout: f64, timeout: Option<f64>, interrupted: bool) -> String {
    match answer {
        BashAnswer::Finished { code, output } if interrupted => {
            format!("{output}\n[The command completed with exit code {code}. CTRL+C was sent.]")
        }
        BashAnswer::Finished { code, output } => format!("{output}\n[The command completed with exit code {code}.]"),
        BashAnswer::Running { hard: false, output } => {
            format!("{output}\n[The command has no new output after {soft_timeout} seconds. {KEEP_WAITING}]")
        }
        BashAnswer::Running { hard: true, output } => {
            format!(
                "{output}\n[The command timed out after {} seconds. {KEEP_WAITING}]",
                timeout.unwrap_or(soft_timeout)
            )
        }
        BashAnswer::Other(text) => format!("ERROR: {text}"),
    }
}

impl Guest for OpenHands {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config: Value = serde_json::from_str(&config).unwrap_or(Value::Null);
        let max_iterations = config.get("max_iterations").and_then(Value::as_u64).unwrap_or(100) as u32;
        let soft_timeout = config.get("soft_timeout").and_then(Value::as_f64).unwrap_or(30.0);
        let sampling = orchard_harness_kit::sampling(&config);
        let policy = Policy::from_config(&config);
        let available = tools::list();
        let editor = available.iter().find(|t| t.name == "str_replace_editor").cloned().ok_or_else(|| {
            Error::Unavailable(
                "openhands needs the editor adapter (str_replace_editor): run it with --tools editor".into(),
            )
        })?;
        if !available.iter().any(|t| t.name == "bash_session") {
            return Err(Error::Unavailable(
                "openhands needs the shell adapter (bash_session): run it with --tools shell".into(),
            ));
        }
        let offered = own_tools(editor);
        let system = config.get("system_prompt").and_then(Value::as_str).unwrap_or(SYSTEM).to_string();
        // Whether the session is still running the last command (soft or hard timeout).
        let mut running = false;
        let mut messages: Vec<Message> =
            vec![message(Role::System, system), message(Role::User, task.instruction.clone())];
        let mut idle_turns = 0;
        let mut last_prompt = 0;
        for step in 1..=max_iterations {
            policy.fit(&mut messages, last_prompt);
            let completion = model::complete(&messages, &offered, &sampling)?;
            last_prompt = completion.usage.prompt_tokens;
            let reply = completion.message;
            let calls: Vec<ToolCall> = reply.tool_calls.clone();
            messages.push(reply);
            if calls.is_empty() {
                idle_turns += 1;
                if idle_turns >= 3 {
                    return Ok(Outcome {
                        status: RunStatus::GaveUp,
                        answer: None,
                        steps: step,
                        message: Some("three turns without an action".into()),
                    });
                }
                messages.push(message(Role::User, NUDGE));
                continue;
            }
            idle_turns = 0;
            for call in &calls {
                let args: Value = serde_json::from_str(&call.arguments).unwrap_or(Value::Null);
                let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                let observation = match call.name.as_str() {
                    "finish" => {
                        let answer = text("message");
                        return Ok(Outcome {
                            status: RunStatus::Completed,
                            answer: Some(answer),
                            steps: step,
                            message: None,
                        });
                    }
                    "think" => {
                        log::event(log::Level::Info, "think", &json!({"thought": text("thought")}).to_string());
                        "Your thought has been logged.".to_string()
                    }
                    "execute_bash" => {
                        let command = text("command");
                        let is_input =
                            matches!(args.get("is_input"), Some(Value::Bool(true))) || text("is_input") == "true";
                        let timeout = args.get("timeout").and_then(Value::as_f64);
                        let continuing = running && (is_input || command.trim().is_empty());
                        if running && !continuing {
                            format!(
                                "[Your command \"{command}\" is NOT executed. The previous command is still running - You \
                                 CANNOT send new commands until the previous command is completed. By setting `is_input` to \
                                 `true`, you can interact with the current process: {KEEP_WAITING}]"
                            )
                        } else if !running && (is_input || command.trim().is_empty()) {
                            if is_input {
                                "ERROR: No previous running command to interact with.".to_string()
                            } else {
                                "ERROR: No previous running command to retrieve logs from.".to_string()
                            }
                        } else if continuing && command.trim() == "C-z" {
                            "ERROR: C-z (suspend) is not supported here; send C-c to interrupt the command.".to_string()
                        } else {
                            let mut arguments = json!({"command": command.trim_end_matches('\n'), "idle_timeout": soft_timeout,
                                "is_input": continuing});
                            if let Some(t) = timeout {
                                arguments["timeout"] = t.into();
                            }
                            let forward = ToolCall {
                                id: call.id.clone(),
                                name: "bash_session".into(),
                                arguments: arguments.to_string(),
                            };
                            match tools::call(&forward) {
                                Ok(out) => {
                                    let answer = parse_bash_answer(&text_of(&out.content));
                                    running = matches!(answer, BashAnswer::Running { .. });
                                    let interrupted = continuing && command.trim() == "C-c";
                                    policy.cap(&bash_observation(&answer, soft_timeout, timeout, interrupted))
                                }
                                Err(e) => format!("ERROR: {e:?}"),
                            }
                        }
                    }
                    "str_replace_editor" => match tools::call(call) {
                        Ok(out) => policy.cap(&text_of(&out.content)),
                        Err(e) => format!("ERROR: {e:?}"),
                    },
                    other => format!(
                        "ERROR: unknown tool {other:?}; the tools are execute_bash, str_replace_editor, think, finish."
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

orchard_harness_kit::export_harness!(OpenHands);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_answers_become_openhands_observations() {
        let done = parse_bash_answer("exit code: 0\nstdout:\nhello\n");
        assert_eq!(bash_observation(&done, 30.0, None, false), "hello\n\n[The command completed with exit code 0.]");
        let quiet = parse_bash_answer("[still running: no new output for 30 s]\nstdout:\nstep 1\n");
        assert_eq!(quiet, BashAnswer::Running { hard: false, output: "step 1\n".into() });
        assert!(
            bash_observation(&quiet, 30.0, None, false)
                .ends_with(&format!("no new output after 30 seconds. {KEEP_WAITING}]"))
        );
        let hard = parse_bash_answer("[still running after 2 s]\n");
        assert!(bash_observation(&hard, 30.0, Some(2.0), false).contains("[The command timed out after 2 seconds."));
        let stopped = parse_bash_answer("exit code: 130\n");
        assert!(bash_observation(&stopped, 30.0, None, true).ends_with("exit code 130. CTRL+C was sent.]"));
    }
}
