//! A reply's actions, parsed as mini-swe-agent 2.4.6 parses them, or the format error it answers.
//!
//! - Tool mode (`LitellmModel`): every tool call must be `bash` with JSON arguments holding a
//!   `command`; all of them run, in order. No call, or one bad call, is a format error.
//! - Text mode (`LitellmTextbasedModel`): exactly one match of `action_regex`
//!   (```` ```mswea_bash_command ```` blocks by default), stripped.

use regex::RegexBuilder;
use serde_json::{Value, json};

/// One command to run, and the tool call it answers (tool mode).
pub struct Action {
    pub command: String,
    pub tool_call_id: Option<String>,
}

/// What `format_error_template` is rendered with when a reply has no usable actions.
#[derive(Debug)]
pub struct FormatError {
    pub vars: Value,
}

/// mini-swe-agent's default `action_regex` in text mode.
pub const DEFAULT_ACTION_REGEX: &str = r"```mswea_bash_command\s*\n(.*?)\n```";

/// Tool mode: the calls of a reply (`name`, `arguments`, `id`).
pub fn from_tool_calls(calls: &[(String, String, String)], finish_reason: &str) -> Result<Vec<Action>, FormatError> {
    if calls.is_empty() {
        return Err(FormatError {
            vars: json!({
                "error": "No tool calls found in the response. Every response MUST include at least one tool call.",
                "actions": [],
                "has_tool_calls": false,
                "finish_reason": finish_reason,
            }),
        });
    }
    let mut actions = Vec::new();
    for (name, arguments, id) in calls {
        let mut error = String::new();
        let args: Value = match serde_json::from_str(arguments) {
            Ok(v) => v,
            Err(e) => {
                error.push_str(&format!("Error parsing tool call arguments: {e}."));
                Value::Null
            }
        };
        if name != "bash" {
            error.push_str(&format!("Unknown tool '{name}'."));
        }
        let command = args.as_object().and_then(|o| o.get("command"));
        if command.is_none() {
            error.push_str("Missing 'command' argument in bash tool call.");
        }
        if !error.is_empty() {
            return Err(FormatError {
                vars: json!({"error": error.trim(), "actions": [], "has_tool_calls": true, "finish_reason": finish_reason}),
            });
        }
        let command = match command {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => unreachable!("checked above"),
        };
        actions.push(Action { command, tool_call_id: Some(id.clone()) });
    }
    Ok(actions)
}

/// Text mode: exactly one match of `action_regex` in the reply's text.
pub fn from_text(content: &str, action_regex: &str, finish_reason: &str) -> Result<Vec<Action>, FormatError> {
    // Python's `re.findall(…, re.DOTALL)`: the first group of every match, or the whole match.
    let found: Vec<String> = match RegexBuilder::new(action_regex).dot_matches_new_line(true).build() {
        Ok(re) => re
            .captures_iter(content)
            .map(|c| c.get(1).or_else(|| c.get(0)).map(|m| m.as_str().trim().to_string()).unwrap_or_default())
            .collect(),
        Err(_) => vec![],
    };
    if found.len() != 1 {
        return Err(FormatError {
            vars: json!({
                "error": format!("Expected exactly 1 action, found {}.", found.len()),
                "actions": found,
                "finish_reason": finish_reason,
            }),
        });
    }
    Ok(found.into_iter().map(|command| Action { command, tool_call_id: None }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_actions_are_the_regexs_one_match() {
        let one = from_text("THOUGHT\n\n```mswea_bash_command\nls -la\n```", DEFAULT_ACTION_REGEX, "stop").unwrap();
        assert_eq!(one[0].command, "ls -la");
        let e = from_text("```bash\nls\n```", DEFAULT_ACTION_REGEX, "stop").err().unwrap();
        assert_eq!(e.vars["error"], "Expected exactly 1 action, found 0.");
        let two = "```mswea_bash_command\na\n```\n```mswea_bash_command\nb\n```";
        assert_eq!(from_text(two, DEFAULT_ACTION_REGEX, "stop").err().unwrap().vars["actions"], json!(["a", "b"]));
    }

    #[test]
    fn tool_calls_must_all_be_bash_with_a_command() {
        let call = |name: &str, args: &str| (name.to_string(), args.to_string(), "id".to_string());
        let two =
            from_tool_calls(&[call("bash", r#"{"command":"a"}"#), call("bash", r#"{"command":"b"}"#)], "tool_calls");
        assert_eq!(two.ok().unwrap().len(), 2, "parallel calls all run");
        let e = from_tool_calls(&[call("bash", r#"{"command":"a"}"#), call("edit", "{}")], "tool_calls").err().unwrap();
        assert_eq!(e.vars["error"], "Unknown tool 'edit'.Missing 'command' argument in bash tool call.");
        assert_eq!(from_tool_calls(&[], "stop").err().unwrap().vars["has_tool_calls"], false);
    }
}
