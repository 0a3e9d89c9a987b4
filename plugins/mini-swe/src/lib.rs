//! The `mini-swe` harness: mini-swe-agent's loop.
//!
//! - Each turn the model gives exactly one action: a single ```` ```bash ```` block in its reply
//!   (`action_format: "markdown"`, the default) or a single call of a `bash` function tool
//!   (`action_format: "tool"`).
//! - The action runs in a fresh process (the shell adapter's `bash` tool), stdout and stderr
//!   together; the observation comes back in mini-swe-agent's shape: `<returncode>` and
//!   `<output>`, or, for long output, a `<warning>` with `<output_head>`, `<elided_chars>` and
//!   `<output_tail>`; a timeout has its own message.
//! - The run ends when a command prints the sentinel `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` on
//!   its first line (what follows is the submission), at `step_limit` model calls, or at
//!   `cost_limit` (USD, with `prices: {prompt, completion}` per million tokens) / `token_limit`.
//! - A malformed reply (no action, or more than one) is answered with a format error; three in a
//!   row end the run with status `format_error`.
//!
//! Config keys: `action_format`, `step_limit` (default 250), `cost_limit`, `prices`,
//! `token_limit`, `timeout` (seconds per command, default 60), `system_template`,
//! `instance_template`, sampling keys and the context policy's.

use orchard_harness_kit::context::Policy;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::orchard::plugin::{log, model, tools};
use orchard_harness_kit::{
    Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolSpec, message, text_of, tool_message,
};
use serde_json::{Value, json};

struct MiniSwe;

pub const SENTINEL: &str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";
const LONG_OUTPUT: usize = 10_000;
const MAX_FORMAT_ERRORS: u32 = 3;

const SYSTEM: &str = "You are a helpful assistant that can interact with a computer shell to solve programming tasks.

Every reply must contain exactly ONE bash code block holding ONE command (join several with && or || if you need them).
Before the code block, include a THOUGHT section that explains your reasoning.

<format_example>
THOUGHT: why this is the next step.

```bash
the_command_here
```
</format_example>

A reply with no bash block, or with more than one, is rejected.";

const SYSTEM_TOOLS: &str =
    "You are a helpful assistant that can interact with a computer shell to solve programming tasks.

Every reply must call the `bash` tool exactly once, with ONE command (join several with && or || if you need them).
Explain your reasoning in the message text before the call. A reply with no call, or with more than one, is rejected.";

const INSTANCE: &str = "Please solve this task:

{{task}}

You can run bash commands and edit files to make the needed changes.

## How to work
1. Explore the files to understand the situation.
2. Reproduce the problem, if there is one.
3. Make the change.
4. Check that it works, including edge cases.

## Rules
- Each command runs in a new shell: `cd` and exported variables do not carry over. Prefix commands with `cd /path &&` when needed.
- Commands must not wait for input: no editors, no pagers; use sed, cat with heredocs, or python to edit files.
- Keep outputs short: use head, tail, grep and sed -n to look at parts of files.

## Finishing
When the work is done and checked, run exactly this command, on its own:

```bash
echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
```

You cannot continue working after that.";

/// mini-swe-agent's observation: the return code and the output, or a warning with head and
/// tail when the output is too long.
pub fn observation(returncode: i32, output: &str) -> String {
    let n = output.chars().count();
    if n < LONG_OUTPUT {
        return format!("<returncode>{returncode}</returncode>\n<output>\n{output}</output>");
    }
    let head: String = output.chars().take(LONG_OUTPUT / 2).collect();
    let tail: String = output.chars().skip(n - LONG_OUTPUT / 2).collect();
    format!(
        "<returncode>{returncode}</returncode>\n<warning>\nThe output of your last command was too long.\n\
         Try a command that prints less: head, tail or sed -n for parts of files, a more selective pattern for grep or find, \
         or redirect the output to a file and search that.\n</warning>\n<output_head>\n{head}\n</output_head>\n\
         <elided_chars>\n{} characters elided\n</elided_chars>\n<output_tail>\n{tail}\n</output_tail>",
        n - LONG_OUTPUT
    )
}

pub fn timeout_message(command: &str, output: &str) -> String {
    format!(
        "The last command <command>{command}</command> timed out and was killed.\nIts output was:\n<output>\n{output}\n</output>\n\
         Try another command, and avoid ones that wait for input or run for a long time."
    )
}

pub fn format_error(found: usize) -> String {
    format!(
        "Your reply must contain EXACTLY ONE bash code block (or exactly one bash tool call); found {found}.\n\
         If you want to finish, run `echo {SENTINEL}`. Otherwise, reply with one THOUGHT section and one command."
    )
}

/// The bash blocks of a markdown reply.
pub fn bash_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```bash") {
        let after = &rest[start + 7..];
        let Some(newline) = after.find('\n') else { break };
        if !after[..newline].trim().is_empty() {
            rest = &after[newline..];
            continue;
        }
        let body = &after[newline + 1..];
        let Some(end) = body.find("```") else { break };
        blocks.push(body[..end].trim_end_matches('\n').to_string());
        rest = &body[end + 3..];
    }
    blocks
}

/// The shell adapter's `bash` answer: `exit code: N` then the output (stdout, with stderr merged
/// by the command wrapper). Returns (exit code, output, timed out).
fn parse_bash(text: &str) -> (i32, String, bool) {
    let timed_out = text.starts_with("[command timed out");
    let body = if timed_out { text.split_once('\n').map(|(_, r)| r).unwrap_or("") } else { text };
    let (first, rest) = body.split_once('\n').unwrap_or((body, ""));
    let code = first.strip_prefix("exit code: ").and_then(|c| c.trim().parse().ok()).unwrap_or(-1);
    let output = rest.strip_prefix("stdout:\n").unwrap_or(rest);
    (code, output.to_string(), timed_out)
}

struct Budget {
    token_limit: Option<u64>,
    cost_limit: Option<f64>,
    prices: Option<(f64, f64)>,
    tokens: u64,
    cost: f64,
}

impl Budget {
    fn charge(&mut self, usage: &orchard_harness_kit::orchard::plugin::types::Usage) {
        self.tokens += usage.total_tokens as u64;
        if let Some((p, c)) = self.prices {
            self.cost += (usage.prompt_tokens as f64 * p + usage.completion_tokens as f64 * c) / 1e6;
        }
    }

    fn exceeded(&self) -> Option<String> {
        if let Some(limit) = self.token_limit
            && self.tokens >= limit
        {
            return Some(format!("token limit {limit} reached ({} used)", self.tokens));
        }
        if let Some(limit) = self.cost_limit
            && self.prices.is_some()
            && self.cost >= limit
        {
            return Some(format!("cost limit ${limit} reached (${:.4} spent)", self.cost));
        }
        None
    }
}

impl Guest for MiniSwe {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config: Value = serde_json::from_str(&config).unwrap_or(Value::Null);
        let tool_mode = match config.get("action_format").and_then(Value::as_str) {
            None | Some("markdown") => false,
            Some("tool") => true,
            Some(other) => {
                return Err(Error::InvalidInput(format!("action_format {other:?}: expected \"markdown\" or \"tool\"")));
            }
        };
        let step_limit = config.get("step_limit").and_then(Value::as_u64).unwrap_or(250) as u32;
        let timeout = config.get("timeout").and_then(Value::as_f64).unwrap_or(60.0);
        let mut budget = Budget {
            token_limit: config.get("token_limit").and_then(Value::as_u64),
            cost_limit: config.get("cost_limit").and_then(Value::as_f64),
            prices: config
                .get("prices")
                .and_then(|p| Some((p.get("prompt")?.as_f64()?, p.get("completion")?.as_f64()?))),
            tokens: 0,
            cost: 0.0,
        };
        if budget.cost_limit.is_some() && budget.prices.is_none() {
            return Err(Error::InvalidInput(
                "cost_limit needs prices: {\"prompt\": USD, \"completion\": USD} per million tokens".into(),
            ));
        }
        let sampling = orchard_harness_kit::sampling(&config);
        let policy = Policy::from_config(&config);
        if !tools::list().iter().any(|t| t.name == "bash") {
            return Err(Error::Unavailable("mini-swe needs a `bash` tool: run it with the shell adapter".into()));
        }
        let bash_tool = ToolSpec {
            name: "bash".into(),
            description: "Run one bash command in a fresh shell and see its return code and output.".into(),
            parameters: r#"{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}"#.into(),
        };
        let offered: Vec<ToolSpec> = if tool_mode { vec![bash_tool] } else { vec![] };
        let system = config
            .get("system_template")
            .and_then(Value::as_str)
            .unwrap_or(if tool_mode { SYSTEM_TOOLS } else { SYSTEM })
            .to_string();
        let instance = config
            .get("instance_template")
            .and_then(Value::as_str)
            .unwrap_or(INSTANCE)
            .replace("{{task}}", &task.instruction);
        let mut messages: Vec<Message> = vec![message(Role::System, system), message(Role::User, instance)];
        let mut format_errors = 0;
        let mut last_prompt = 0;
        for step in 1..=step_limit {
            if let Some(why) = budget.exceeded() {
                return Ok(Outcome {
                    status: RunStatus::LimitReached,
                    answer: None,
                    steps: step - 1,
                    message: Some(why),
                });
            }
            policy.fit(&mut messages, last_prompt);
            let completion = model::complete(&messages, &offered, &sampling)?;
            last_prompt = completion.usage.prompt_tokens;
            budget.charge(&completion.usage);
            let reply = completion.message;
            messages.push(reply.clone());
            let calls: Vec<ToolCall> = reply.tool_calls.clone();
            let actions: Vec<String> = if tool_mode {
                calls
                    .iter()
                    .filter(|c| c.name == "bash")
                    .filter_map(|c| {
                        serde_json::from_str::<Value>(&c.arguments).ok()?.get("command")?.as_str().map(str::to_string)
                    })
                    .collect()
            } else {
                bash_blocks(&text_of(&reply.content))
            };
            let well_formed = actions.len() == 1 && (!tool_mode || calls.len() == 1);
            if !well_formed {
                format_errors += 1;
                log::event(
                    log::Level::Info,
                    "format-error",
                    &json!({"step": step, "actions": actions.len(), "in_a_row": format_errors}).to_string(),
                );
                let found = if tool_mode { calls.len() } else { actions.len() };
                if format_errors >= MAX_FORMAT_ERRORS {
                    return Ok(Outcome {
                        status: RunStatus::FormatError,
                        answer: None,
                        steps: step,
                        message: Some(format!("{MAX_FORMAT_ERRORS} malformed replies in a row")),
                    });
                }
                // Every tool call must be answered before the next user message.
                for c in &calls {
                    messages.push(tool_message(&c.id, format_error(found)));
                }
                if calls.is_empty() {
                    messages.push(message(Role::User, format_error(found)));
                }
                continue;
            }
            format_errors = 0;
            let command = actions[0].clone();
            let call = ToolCall {
                id: calls.first().map(|c| c.id.clone()).unwrap_or_else(|| format!("mini-{step}")),
                name: "bash".into(),
                // stderr joins stdout, as mini-swe-agent runs commands.
                arguments: json!({"command": format!("{{ {command}\n}} 2>&1"), "timeout": timeout}).to_string(),
            };
            let answer = tools::call(&call)?;
            let (code, output, timed_out) = parse_bash(&text_of(&answer.content));
            if !timed_out && output.trim_start().lines().next().map(str::trim) == Some(SENTINEL) {
                let submission =
                    output.trim_start().split_once('\n').map(|(_, rest)| rest.to_string()).unwrap_or_default();
                return Ok(Outcome {
                    status: RunStatus::Completed,
                    answer: Some(submission),
                    steps: step,
                    message: None,
                });
            }
            let text = if timed_out { timeout_message(&command, &output) } else { observation(code, &output) };
            if tool_mode {
                messages.push(tool_message(&call.id, text));
            } else {
                messages.push(message(Role::User, text));
            }
        }
        Ok(Outcome {
            status: RunStatus::LimitReached,
            answer: None,
            steps: step_limit,
            message: Some(format!("step limit {step_limit} reached")),
        })
    }
}

orchard_harness_kit::export_harness!(MiniSwe);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_blocks_are_found_and_other_blocks_ignored() {
        let text = "THOUGHT: look\n\n```bash\nls -la\n```\n\nand ```python\nprint(1)\n```";
        assert_eq!(bash_blocks(text), vec!["ls -la"]);
        assert_eq!(bash_blocks("```bash\na\n```\n```bash\nb && c\n```").len(), 2);
        assert!(bash_blocks("no code here").is_empty());
        assert!(bash_blocks("```bash\nunterminated").is_empty());
    }

    #[test]
    fn observations_take_mini_swe_agents_shape() {
        assert_eq!(observation(0, "hi\n"), "<returncode>0</returncode>\n<output>\nhi\n</output>");
        let long = "x".repeat(12_345);
        let o = observation(1, &long);
        assert!(
            o.contains("<warning>") && o.contains("<elided_chars>\n2345 characters elided\n</elided_chars>"),
            "{o}"
        );
        assert!(o.contains("<output_head>") && o.contains("<output_tail>"));
    }

    #[test]
    fn the_shell_adapters_answers_are_parsed() {
        assert_eq!(parse_bash("exit code: 2\nstdout:\nboom\n"), (2, "boom\n".into(), false));
        assert_eq!(parse_bash("exit code: 0\n"), (0, String::new(), false));
        assert!(parse_bash("[command timed out after 1 s and was interrupted]\nexit code: 124\n").2);
    }
}
