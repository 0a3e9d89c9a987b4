//! The `mini-swe` harness: mini-swe-agent 2.4.6's `DefaultAgent` loop, ported rule for rule.
//!
//! What the real program does with its shipped `mini.yaml` (tool calls, the default) or
//! `mini_textbased.yaml` (`action_format: "text"`), this port does:
//! - The system and first user messages are the config's templates (`config/`, taken unchanged
//!   from the release) rendered as Jinja with its variables: the task, the agent's settings, the
//!   sandbox's `uname` (`system`, `node`, `release`, `version`, `machine`) and environment.
//! - Each step asks the model; its reply's actions (every `bash` tool call; or the one
//!   ```` ```mswea_bash_command ```` block) run one after another, each in a fresh `/bin/sh` with
//!   stderr merged, `environment.env`'s variables set and a 30 s timeout; each output is rendered
//!   through `observation_template` (a `tool` message answering its call; a `user` message in
//!   text mode).
//! - A reply without usable actions is not kept: only `format_error_template`'s message (a `user`
//!   message) is added; `max_consecutive_format_errors` (3) in a row end the run (`format_error`).
//! - A command whose output's first line is `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` *and* whose
//!   exit status is 0 ends the run; the rest of its output is the submission. Nothing runs after
//!   it, and its observation is not sent.
//! - Before each model call: `step_limit` (0: none) calls made, or `cost_limit` (3.0 USD)
//!   reached, end the run (`limit_reached`); so does `wall_time_limit_seconds` (0: none). Cost is
//!   counted from `prices` (`{prompt, completion}` USD per million tokens) when given, else 0,
//!   as mini-swe-agent counts a model its cost table does not know.
//!
//! Config keys: `action_format` (`tool` | `text`, also called `markdown`),
//! `system_template`, `instance_template`, `observation_template`, `format_error_template`,
//! `action_regex`, `step_limit`, `cost_limit`, `prices`, `wall_time_limit_seconds`,
//! `max_consecutive_format_errors`, `timeout`, `env`, `cwd`, and the sampling keys.
//! Checked against the real program by `tests/evaluations/mini_swe_faithful.rs`.

mod actions;
mod render;

use orchard_harness_kit::config;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::orchard::plugin::{log, model, tools};
use orchard_harness_kit::text::shell_quote;
use orchard_harness_kit::{
    Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolSpec, message, text_of, tool_message,
};
use serde_json::{Map, Value, json};

use actions::Action;

struct MiniSwe;

/// The release this port follows.
pub const RELEASE: &str = "mini-swe-agent 2.4.6";
pub const SENTINEL: &str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT";

/// One shipped config's templates.
struct Templates {
    system: &'static str,
    instance: &'static str,
    observation: &'static str,
    format_error: &'static str,
}

const MINI: Templates = Templates {
    system: include_str!("../config/mini/system_template.jinja"),
    instance: include_str!("../config/mini/instance_template.jinja"),
    observation: include_str!("../config/mini/observation_template.jinja"),
    format_error: include_str!("../config/mini/format_error_template.jinja"),
};

const MINI_TEXTBASED: Templates = Templates {
    system: include_str!("../config/mini_textbased/system_template.jinja"),
    instance: include_str!("../config/mini_textbased/instance_template.jinja"),
    observation: include_str!("../config/mini_textbased/observation_template.jinja"),
    format_error: include_str!("../config/mini_textbased/format_error_template.jinja"),
};

/// `environment.env` in both shipped configs.
const CONFIG_ENV: [(&str, &str); 5] =
    [("PAGER", "cat"), ("MANPAGER", "cat"), ("LESS", "-R"), ("PIP_PROGRESS_BAR", "off"), ("TQDM_DISABLE", "1")];

/// mini-swe-agent's `BASH_TOOL`.
fn bash_tool() -> ToolSpec {
    ToolSpec {
        name: "bash".into(),
        description: "Execute a bash command".into(),
        parameters: json!({
            "type": "object",
            "properties": {"command": {"type": "string", "description": "The bash command to execute"}},
            "required": ["command"],
        })
        .to_string(),
    }
}

/// The settings a run reads from its config.
struct Settings {
    tool_mode: bool,
    system: String,
    instance: String,
    observation: String,
    format_error: String,
    action_regex: String,
    step_limit: u64,
    cost_limit: f64,
    prices: Option<(f64, f64)>,
    wall_time_limit: u64,
    max_format_errors: u64,
    timeout: u64,
    env: Map<String, Value>,
    cwd: String,
}

impl Settings {
    fn read(config: &Value) -> Result<Settings, String> {
        let mode = match config.get("action_format").and_then(Value::as_str) {
            None | Some("tool") => true,
            Some("text" | "markdown") => false,
            Some(other) => return Err(format!("action_format {other:?}: expected \"tool\" or \"text\"")),
        };
        let shipped = if mode { &MINI } else { &MINI_TEXTBASED };
        let text = |key: &str, default: &str| config.get(key).and_then(Value::as_str).unwrap_or(default).to_string();
        let env = match config.get("env") {
            None => CONFIG_ENV.iter().map(|(k, v)| (k.to_string(), json!(v))).collect(),
            Some(Value::Object(map)) if map.values().all(Value::is_string) => map.clone(),
            Some(_) => return Err("env: an object of strings".into()),
        };
        Ok(Settings {
            tool_mode: mode,
            system: text("system_template", shipped.system),
            instance: text("instance_template", shipped.instance),
            observation: text("observation_template", shipped.observation),
            format_error: text("format_error_template", shipped.format_error),
            action_regex: text("action_regex", actions::DEFAULT_ACTION_REGEX),
            step_limit: config.get("step_limit").and_then(Value::as_u64).unwrap_or(0),
            cost_limit: config.get("cost_limit").and_then(Value::as_f64).unwrap_or(3.0),
            prices: config
                .get("prices")
                .and_then(|p| Some((p.get("prompt")?.as_f64()?, p.get("completion")?.as_f64()?))),
            wall_time_limit: config.get("wall_time_limit_seconds").and_then(Value::as_u64).unwrap_or(0),
            max_format_errors: config.get("max_consecutive_format_errors").and_then(Value::as_u64).unwrap_or(3),
            timeout: config.get("timeout").and_then(Value::as_u64).unwrap_or(30),
            env,
            cwd: text("cwd", ""),
        })
    }

    /// The agent's settings as its `config.model_dump()` gives them to templates.
    fn dump(&self) -> Value {
        json!({
            "system_template": self.system,
            "instance_template": self.instance,
            "step_limit": self.step_limit,
            "cost_limit": self.cost_limit,
            "wall_time_limit_seconds": self.wall_time_limit,
            "max_consecutive_format_errors": self.max_format_errors,
            "output_path": null,
            "mode": "yolo",
            "whitelist_actions": [],
            "confirm_exit": false,
            "cwd": self.cwd,
            "env": self.env,
            "timeout": self.timeout,
        })
    }
}

/// A command's result as mini-swe-agent's environment reports it.
struct Output {
    output: String,
    returncode: i64,
    exception_info: String,
}

/// Runs one action through the shell adapter's `bash` tool as `LocalEnvironment.execute` runs
/// it: `/bin/sh -c`, stderr into stdout, the config's environment, killed at the timeout.
fn execute(action: &Action, s: &Settings, step: u64) -> Result<Output, Error> {
    let quoted = shell_quote(&action.command);
    let env: Vec<String> =
        s.env.iter().map(|(k, v)| format!("{k}={}", shell_quote(v.as_str().unwrap_or_default()))).collect();
    let cd = if s.cwd.is_empty() { String::new() } else { format!("cd {} && ", shell_quote(&s.cwd)) };
    let script = format!("{cd}exec 2>&1; exec env {} /bin/sh -c {quoted}", env.join(" "));
    let call = ToolCall {
        id: action.tool_call_id.clone().unwrap_or_else(|| format!("mini-{step}")),
        name: "bash".into(),
        arguments: json!({"command": script, "timeout": s.timeout}).to_string(),
    };
    let answer = text_of(&tools::call(&call)?.content);
    let timed_out = answer.starts_with("[command timed out");
    let body = if timed_out { answer.split_once('\n').map(|(_, r)| r).unwrap_or("") } else { answer.as_str() };
    let (first, rest) = body.split_once('\n').unwrap_or((body, ""));
    let code = first.strip_prefix("exit code: ").and_then(|c| c.trim().parse().ok()).unwrap_or(-1);
    let output = rest.strip_prefix("stdout:\n").unwrap_or(rest).to_string();
    if timed_out {
        return Ok(Output {
            output,
            returncode: -1,
            exception_info: format!(
                "An error occurred while executing the command: Command '{}' timed out after {} seconds",
                action.command, s.timeout
            ),
        });
    }
    Ok(Output { output, returncode: code, exception_info: String::new() })
}

/// The submission when `output` submits (`_check_finished`): its first line, after leading
/// whitespace, is the sentinel and the command exited 0.
fn submission(output: &Output) -> Option<String> {
    if output.returncode != 0 {
        return None;
    }
    let text = output.output.trim_start();
    let cut = text.find(['\n', '\r']).map(|i| i + if text[i..].starts_with("\r\n") { 2 } else { 1 });
    let (first, rest) = match cut {
        Some(i) => (&text[..i], &text[i..]),
        None => (text, ""),
    };
    (first.trim() == SENTINEL).then(|| rest.to_string())
}

/// The sandbox's `uname` and environment: what `LocalEnvironment.get_template_vars` adds.
fn environment_vars() -> Result<Map<String, Value>, Error> {
    let call = ToolCall {
        id: "mini-swe-uname".into(),
        name: "bash".into(),
        arguments: json!({"command": "uname -s; uname -n; uname -r; uname -v; uname -m; env", "timeout": 30})
            .to_string(),
    };
    let answer = text_of(&tools::call(&call)?.content);
    let out = answer.split_once("stdout:\n").map(|(_, r)| r).unwrap_or("");
    let mut lines = out.lines();
    let mut vars = Map::new();
    for (line, key) in lines.by_ref().zip(["system", "node", "release", "version", "machine"]) {
        vars.insert(key.into(), json!(line));
    }
    for line in lines {
        if let Some((k, v)) = line.split_once('=')
            && !k.is_empty()
            && !vars.contains_key(k)
        {
            vars.insert(k.into(), json!(v));
        }
    }
    Ok(vars)
}

fn outcome(status: RunStatus, steps: u64, answer: Option<String>, message: Option<String>) -> Result<Outcome, Error> {
    Ok(Outcome { status, answer, steps: steps as u32, message })
}

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &[
    "action_format",
    "env",
    "system_template",
    "instance_template",
    "observation_template",
    "format_error_template",
    "action_regex",
    "step_limit",
    "cost_limit",
    "prices",
    "wall_time_limit_seconds",
    "max_consecutive_format_errors",
    "timeout",
    "cwd",
];

impl Guest for MiniSwe {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let config = orchard_harness_kit::config::parse("mini-swe", &config, &[CONFIG_KEYS, config::SAMPLING])?;
        let s = Settings::read(&config).map_err(|e| Error::InvalidInput(format!("mini-swe: {e}")))?;
        if !tools::list().iter().any(|t| t.name == "bash") {
            return Err(Error::Unavailable("mini-swe needs a `bash` tool: run it with the shell adapter".into()));
        }
        let sampling = orchard_harness_kit::sampling(&config);
        let offered: Vec<ToolSpec> = if s.tool_mode { vec![bash_tool()] } else { vec![] };
        let started = std::time::Instant::now();
        let mut vars = s.dump();
        for (k, v) in environment_vars()? {
            vars.as_object_mut().expect("an object").entry(k).or_insert(v);
        }
        vars["task"] = json!(task.instruction);
        let mut cost = 0.0;
        let mut n_calls: u64 = 0;
        let render = |name: &str, template: &str, vars: &Value| {
            render::render(name, template, vars).map_err(|e| Error::InvalidInput(format!("mini-swe: {e}")))
        };
        let with_counters = |vars: &Value, n_calls: u64, cost: f64| {
            let mut v = vars.clone();
            v["n_model_calls"] = json!(n_calls);
            v["model_cost"] = json!(cost);
            v["elapsed_seconds"] = json!(started.elapsed().as_secs());
            v
        };
        let first = with_counters(&vars, 0, 0.0);
        let mut messages: Vec<Message> = vec![
            message(Role::System, render("system_template", &s.system, &first)?),
            message(Role::User, render("instance_template", &s.instance, &first)?),
        ];
        let mut format_errors: u64 = 0;
        loop {
            if (s.step_limit > 0 && n_calls >= s.step_limit) || (s.cost_limit > 0.0 && cost >= s.cost_limit) {
                let why = format!("LimitsExceeded: {n_calls} model calls, ${cost:.4}");
                return outcome(RunStatus::LimitReached, n_calls, None, Some(why));
            }
            if s.wall_time_limit > 0 && started.elapsed().as_secs() >= s.wall_time_limit {
                return outcome(RunStatus::LimitReached, n_calls, None, Some("TimeExceeded".into()));
            }
            n_calls += 1;
            let completion = model::complete(&messages, &offered, &sampling)?;
            if let Some((p, c)) = s.prices {
                cost +=
                    (completion.usage.prompt_tokens as f64 * p + completion.usage.completion_tokens as f64 * c) / 1e6;
            }
            let finish = match completion.finish_reason {
                model::FinishReason::Stop | model::FinishReason::Other => "stop",
                model::FinishReason::Length => "length",
                model::FinishReason::ToolCalls => "tool_calls",
                model::FinishReason::ContentFilter => "content_filter",
            };
            let reply = completion.message;
            let parsed = if s.tool_mode {
                let calls: Vec<(String, String, String)> =
                    reply.tool_calls.iter().map(|c| (c.name.clone(), c.arguments.clone(), c.id.clone())).collect();
                actions::from_tool_calls(&calls, finish)
            } else {
                actions::from_text(&text_of(&reply.content), &s.action_regex, finish)
            };
            let actions = match parsed {
                Ok(actions) => actions,
                Err(e) => {
                    // The reply is dropped; only the format error joins the history. The
                    // template sees only the error's own variables, as in mini-swe-agent.
                    format_errors += 1;
                    let fv = e.vars;
                    let text = render("format_error_template", &s.format_error, &fv)?;
                    log::event(
                        log::Level::Info,
                        "format-error",
                        &json!({"step": n_calls, "in_a_row": format_errors, "error": fv["error"]}).to_string(),
                    );
                    messages.push(message(Role::User, text));
                    if s.max_format_errors > 0 && format_errors >= s.max_format_errors {
                        return outcome(RunStatus::FormatError, n_calls, None, Some("RepeatedFormatError".into()));
                    }
                    continue;
                }
            };
            format_errors = 0;
            messages.push(reply);
            let mut observations = Vec::new();
            for action in &actions {
                let output = execute(action, &s, n_calls)?;
                if let Some(submitted) = submission(&output) {
                    return outcome(RunStatus::Completed, n_calls, Some(submitted), None);
                }
                let mut ov = with_counters(&vars, n_calls, cost);
                ov["output"] = json!({
                    "output": output.output,
                    "returncode": output.returncode,
                    "exception_info": output.exception_info,
                });
                let text = render("observation_template", &s.observation, &ov)?;
                observations.push(match &action.tool_call_id {
                    Some(id) => tool_message(id, text),
                    None => message(Role::User, text),
                });
            }
            messages.extend(observations);
        }
    }
}

orchard_harness_kit::export_harness!(MiniSwe);

#[cfg(test)]
mod tests {
    use super::*;

    fn out(text: &str, code: i64) -> Output {
        Output { output: text.into(), returncode: code, exception_info: String::new() }
    }

    #[test]
    fn only_a_clean_exit_with_the_sentinel_first_submits() {
        assert_eq!(submission(&out("  \nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\npatch\n", 0)), Some("patch\n".into()));
        assert_eq!(submission(&out("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 3)), None, "exit status 3 goes on");
        assert_eq!(submission(&out("x\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n", 0)), None);
        assert_eq!(submission(&out("COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT", 0)), Some(String::new()));
    }

    #[test]
    fn the_shipped_templates_render_with_the_programs_variables() {
        let s = Settings::read(&json!({})).unwrap();
        assert!(s.tool_mode, "mini.yaml, tool calls, is the default");
        let mut vars = s.dump();
        for (k, v) in [("system", "Linux"), ("release", "6.1"), ("version", "#1"), ("machine", "x86_64"), ("task", "T")]
        {
            vars[k] = json!(v);
        }
        let instance = render::render("i", &s.instance, &vars).unwrap();
        assert!(instance.starts_with("Please solve this issue: T\n"), "{instance}");
        vars["output"] = json!({"output": "hi\n", "returncode": 0, "exception_info": ""});
        assert_eq!(
            render::render("o", &s.observation, &vars).unwrap(),
            "{\n  \"returncode\": 0,\n  \"output\": \"hi\\n\"\n}"
        );
        let text = Settings::read(&json!({"action_format": "markdown"})).unwrap();
        assert!(!text.tool_mode && text.system.contains("mswea_bash_command"));
        assert!(Settings::read(&json!({"action_format": "both"})).is_err());
    }
}
