//! The `kimi-cli` harness: Kimi-CLI's agent loop ("KimiSoul"), for comparing SWE and assistant
//! agents across harnesses.
//!
//! - The system prompt is Kimi-CLI's template (see `prompt`), rendered with the working
//!   directory, its listing and `AGENTS.md` (read once at the start through the shell), the
//!   date, the OS and shell. The task is the first user message.
//! - Kimi's tool names over the run's adapters (see `tools`), `SetTodoList` kept in the harness.
//! - `Task {description, subagent_name, prompt}` runs a subagent (`subagents`, default `coder`) as a
//!   nested conversation with its own system prompt (the template with the subagent role) and
//!   narrowed tools (no `Task`, no `SetTodoList`); only its last message returns, and a reply under
//!   200 characters is asked once to say more. Logged as `subagent-start` / `subagent-end`.
//! - Up to `max_steps_per_turn` (100) steps; each model call tried `max_retries_per_step` (3)
//!   times when the endpoint is unavailable or times out.
//! - Compaction when the context reaches `compaction_trigger_ratio` (0.85) of `context_tokens`
//!   (131072) or leaves less than `reserved_context_size` (50000, at most half the window): the
//!   last 2 user/assistant messages (with what follows them) stay, the rest is summarised by the
//!   model into one user message, as Kimi-CLI's `SimpleCompaction` does. Logged as `compaction`.
//!
//! Other keys: `system_prompt_template` (your own copy of Kimi-CLI's `system.md`), `workdir`,
//! `now`, `agents_md`, `list_workdir` (true), sampling keys.

mod prompt;
mod tools;

use std::cell::RefCell;
use std::collections::BTreeMap;

use orchard_harness_kit::config;
use orchard_harness_kit::context::estimate_tokens;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::nested::{self, Subagent};
use orchard_harness_kit::orchard::plugin::{model, tools as run_tools};
use orchard_harness_kit::{
    ContentPart, Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolSpec, message, text_of, tool_message,
};
use serde_json::{Value, json};
use tools::KimiResult;

struct KimiCli;

const COMPACTION_SYSTEM: &str = "You are a helpful assistant that compacts conversation context.";
const COMPACTION_PREFIX: &str = "<system>Previous context has been compacted. Here is the compaction output:</system>";
const COMPACT_PROMPT: &str = "Compress the conversation above into a summary another instance of you can continue \
from. Keep, in order of priority: the current task and what remains to do; the user's requirements and \
constraints; decisions made and why; files, commands, identifiers and results that matter; errors met and how they \
were handled. Drop chit-chat and superseded attempts. Write it as a structured, concise summary.";
const CONTINUE_PROMPT: &str = "Your previous response was too brief. Please give a more complete summary: the \
specific technical details and changes, the findings and their analysis, and everything the caller should know.";

struct Config {
    template: String,
    /// Where the built-in skills' files are (their paths in `KIMI_SKILLS`).
    skills_root: String,
    max_steps: u32,
    retries: u32,
    context_tokens: usize,
    trigger_ratio: f64,
    reserved: usize,
    workdir: String,
    now: String,
    agents_md: Option<String>,
    list_workdir: bool,
    subagents: Vec<(String, String, Option<Vec<String>>)>,
    subagent_tool: tools::SubagentTool,
    sampling: model::Sampling,
}

impl Config {
    fn from(c: &Value, task: &Task) -> Config {
        let n = |k: &str, d: u64| c.get(k).and_then(Value::as_u64).unwrap_or(d);
        let s = |k: &str| c.get(k).and_then(Value::as_str).map(str::to_string);
        let meta: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
        let context_tokens = n("context_tokens", 131_072).max(1_000) as usize;
        let subagents = match c.get("subagents").and_then(Value::as_object) {
            Some(m) => m
                .iter()
                .map(|(name, v)| {
                    let tools = v
                        .get("tools")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect());
                    (name.clone(), v.get("description").and_then(Value::as_str).unwrap_or("").to_string(), tools)
                })
                .collect(),
            // Kimi-CLI's `coder`, with the tools its Agent tool lists for it (those it has here).
            None => vec![(
                "coder".into(),
                "Good at general software engineering tasks.".into(),
                Some(
                    ["Shell", "ReadFile", "Glob", "Grep", "WriteFile", "StrReplaceFile", "FetchURL"]
                        .map(String::from)
                        .to_vec(),
                ),
            )],
        };
        Config {
            template: s("system_prompt_template").unwrap_or_else(|| prompt::RELEASE_TEMPLATE.into()),
            skills_root: s("skills_root").unwrap_or_else(|| "/opt/orchard/programs/kimi-cli/kimi_cli/skills".into()),
            max_steps: n("max_steps_per_turn", 100).max(1) as u32,
            retries: n("max_retries_per_step", 3).max(1) as u32,
            context_tokens,
            trigger_ratio: c.get("compaction_trigger_ratio").and_then(Value::as_f64).unwrap_or(0.85).clamp(0.5, 0.99),
            reserved: (n("reserved_context_size", 50_000) as usize).min(context_tokens / 2),
            workdir: s("workdir")
                .or_else(|| meta.get("workdir").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| "/workspace".into()),
            now: s("now").unwrap_or_else(now_iso),
            agents_md: s("agents_md"),
            list_workdir: c.get("list_workdir").and_then(Value::as_bool).unwrap_or(true),
            subagents,
            subagent_tool: if s("subagent_tool").as_deref() == Some("Task") {
                tools::SubagentTool::Task
            } else {
                tools::SubagentTool::Agent
            },
            sampling: orchard_harness_kit::sampling(c),
        }
    }
}

/// Now as Kimi-CLI's `KIMI_NOW` (`datetime.now().astimezone().isoformat()`): ISO 8601 with
/// microseconds and the offset.
fn now_iso() -> String {
    let micros =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_micros()).unwrap_or(0);
    format!("{}.{micros:06}+00:00", orchard_harness_kit::clock::utc_now().replacen(' ', "T", 1))
}

/// What the system prompt needs from the sandbox: (listing, AGENTS.md), read once.
fn environment(config: &Config, run: &[ToolSpec]) -> (String, String) {
    if !config.list_workdir || !run.iter().any(|t| t.name == "bash") {
        return (String::new(), config.agents_md.clone().unwrap_or_default());
    }
    let marker = "----- AGENTS.md -----";
    let command = format!(
        "cd {dir} 2>/dev/null && find . -mindepth 1 -maxdepth 2 -not -path './.git/*' -printf '%y %P\\n' | head -400; echo '{marker}'; cat AGENTS.md 2>/dev/null",
        dir = orchard_harness_kit::text::shell_quote(&config.workdir)
    );
    let call = ToolCall {
        id: "kimi-init".into(),
        name: "bash".into(),
        arguments: json!({"command": command, "timeout": 30}).to_string(),
    };
    let out = run_tools::call(&call).map(|o| text_of(&o.content)).unwrap_or_default();
    let (listing, agents) = out.split_once(marker).unwrap_or((&out, ""));
    // The shell adapter's answer: `exit code: N`, then `stdout:` and the lines.
    let listing: String = listing
        .lines()
        .filter(|l| l.len() > 2 && l.as_bytes()[1] == b' ' && !l.starts_with("exit code"))
        .map(|l| format!("{l}\n"))
        .collect();
    let agents = agents.split("stderr:").next().unwrap_or("").trim();
    (prompt::tree(&listing), config.agents_md.clone().unwrap_or_else(|| agents.to_string()))
}

struct Soul<'a> {
    config: &'a Config,
    todos: &'a RefCell<Value>,
    me: Subagent,
    system: String,
    specs: Vec<ToolSpec>,
    /// The working directory's listing and AGENTS.md, read once for the main agent's prompt and
    /// its subagents'.
    listing: String,
    agents_md: String,
}

impl Soul<'_> {
    fn complete(&self, history: &[Message]) -> Result<model::Completion, Error> {
        let mut request = vec![message(Role::System, self.system.clone())];
        request.extend(history.iter().cloned());
        let mut tries = 0;
        loop {
            tries += 1;
            match model::complete(&request, &self.specs, &self.config.sampling) {
                Err(Error::Unavailable(_) | Error::Timeout(_)) if tries < self.config.retries => continue,
                other => return other,
            }
        }
    }

    /// Runs the loop on `history` until the model answers without tools: (status, text, steps).
    fn run(&self, history: &mut Vec<Message>, steps: &mut u32) -> Result<(RunStatus, String), Error> {
        let mut context = estimate_tokens(history);
        loop {
            if *steps >= self.config.max_steps {
                return Ok((RunStatus::LimitReached, format!("Max steps {} reached", self.config.max_steps)));
            }
            let window = self.config.context_tokens;
            if context as f64 >= window as f64 * self.config.trigger_ratio || context + self.config.reserved >= window {
                self.compact(history, "the context reached its limit")?;
            }
            let completion = match self.complete(history) {
                Err(e) if nested::is_context_overflow(&e) => {
                    self.compact(history, "the endpoint reported a context overflow")?;
                    self.complete(history)?
                }
                other => other?,
            };
            *steps += 1;
            context = (completion.usage.prompt_tokens + completion.usage.completion_tokens) as usize;
            let reply = completion.message;
            let calls = reply.tool_calls.clone();
            history.push(reply.clone());
            if calls.is_empty() {
                return Ok((RunStatus::Completed, text_of(&reply.content)));
            }
            for call in &calls {
                let result = self.tool(call);
                let message = tool_result_message(&call.id, &result);
                context += text_of(&message.content).len() / 4;
                history.push(message);
            }
        }
    }

    fn tool(&self, call: &ToolCall) -> KimiResult {
        let failed = |message: String| KimiResult { message, output: String::new(), is_error: true };
        if !self.specs.iter().any(|t| t.name == call.name) {
            return failed(format!("Tool `{}` not found", call.name));
        }
        let args: Value = match serde_json::from_str(&call.arguments) {
            Ok(v) => v,
            Err(e) => return failed(format!("Invalid arguments: {e}")),
        };
        match call.name.as_str() {
            "SetTodoList" => match args.get("todos").filter(|t| !t.is_null()) {
                Some(todos) => {
                    *self.todos.borrow_mut() = todos.clone();
                    KimiResult {
                        message: "Todo list updated".into(),
                        output: "Todo list updated".into(),
                        is_error: false,
                    }
                }
                None => KimiResult {
                    message: String::new(),
                    output: serde_json::to_string_pretty(&*self.todos.borrow()).unwrap_or_default(),
                    is_error: false,
                },
            },
            name if name == self.config.subagent_tool.name() => self.task(call, &args),
            name => match tools::run(&call.id, name, &args, &self.config.workdir) {
                Some(result) => result,
                None => match run_tools::call(call) {
                    Ok(out) if out.is_error => failed(text_of(&out.content)),
                    Ok(out) => KimiResult { message: String::new(), output: text_of(&out.content), is_error: false },
                    Err(e) => failed(format!("{e:?}")),
                },
            },
        }
    }

    fn task(&self, call: &ToolCall, args: &Value) -> KimiResult {
        let failed = |message: String| KimiResult { message, output: String::new(), is_error: true };
        let name = self.config.subagent_tool.requested(args).unwrap_or_else(|| "coder".into());
        let Some((_, _, allowed)) = self.config.subagents.iter().find(|(n, _, _)| *n == name) else {
            return failed(format!("Subagent not found: {name}"));
        };
        let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("").to_string();
        let mut specs =
            tools::specs(&run_tools::list(), &["Agent", "Task", "SetTodoList"], &[], self.config.subagent_tool);
        if let Some(allowed) = allowed {
            specs.retain(|t| allowed.iter().any(|a| a == &t.name));
        }
        let mut vars = variables(self.config);
        vars.insert("KIMI_WORK_DIR_LS", self.listing.clone());
        vars.insert("KIMI_AGENTS_MD", self.agents_md.clone());
        vars.insert("ROLE_ADDITIONAL", prompt::SUBAGENT_ROLE.to_string());
        let system = match prompt::render(&self.config.template, &vars) {
            Ok(system) => system,
            Err(e) => return failed(e),
        };
        let child = Soul {
            config: self.config,
            todos: self.todos,
            me: Subagent { id: call.id.clone(), parent: Some(self.me.id.clone()), name, depth: self.me.depth + 1 },
            system,
            specs,
            listing: self.listing.clone(),
            agents_md: self.agents_md.clone(),
        };
        child.me.start(&prompt, &child.specs);
        let mut history = vec![message(Role::User, prompt)];
        let mut steps = 0;
        let mut result = child.run(&mut history, &mut steps);
        // Too brief a report: ask once for more.
        if let Ok((RunStatus::Completed, text)) = &result
            && text.chars().count() < 200
        {
            history.push(message(Role::User, CONTINUE_PROMPT));
            result = child.run(&mut history, &mut steps);
        }
        let mut transcript = vec![message(Role::System, child.system.clone())];
        transcript.extend(history);
        match result {
            Ok((RunStatus::Completed, text)) => {
                child.me.end("completed", &transcript, &child.specs, &text);
                KimiResult { message: String::new(), output: text, is_error: false }
            }
            Ok((_, why)) => {
                child.me.end("limit-reached", &transcript, &child.specs, &why);
                failed(format!("{why} when running subagent. Please try splitting the task into smaller subtasks."))
            }
            Err(e) => {
                child.me.end("error", &transcript, &child.specs, &format!("{e:?}"));
                failed(format!("Failed to run subagent: {e:?}"))
            }
        }
    }

    /// Kimi-CLI's `SimpleCompaction`: keeps the last 2 user/assistant messages and what follows
    /// them; the rest becomes one user message holding the model's summary.
    fn compact(&self, history: &mut Vec<Message>, reason: &str) -> Result<(), Error> {
        let mut seen = 0;
        let Some(keep_from) = (0..history.len()).rev().find(|&i| {
            if matches!(history[i].role, Role::User | Role::Assistant) {
                seen += 1;
            }
            seen == 2
        }) else {
            return Ok(());
        };
        if keep_from == 0 {
            return Ok(());
        }
        let mut parts = Vec::new();
        for (i, m) in history[..keep_from].iter().enumerate() {
            let role = match m.role {
                Role::System => "system",
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool",
            };
            parts.push(ContentPart::Text(format!("## Message {}\nRole: {role}\nContent:\n", i + 1)));
            parts.extend(m.content.iter().filter(|p| matches!(p, ContentPart::Text(_))).cloned());
        }
        parts.push(ContentPart::Text(format!("\n{COMPACT_PROMPT}")));
        let request = [
            message(Role::System, COMPACTION_SYSTEM),
            Message { role: Role::User, content: parts, tool_calls: vec![], tool_call_id: None, reasoning: None },
        ];
        let summary = text_of(&model::complete(&request, &[], &self.config.sampling)?.message.content);
        let folded = keep_from;
        let kept: Vec<Message> = history.drain(keep_from..).collect();
        history.clear();
        history.push(Message {
            role: Role::User,
            content: vec![ContentPart::Text(COMPACTION_PREFIX.into()), ContentPart::Text(summary.clone())],
            tool_calls: vec![],
            tool_call_id: None,
            reasoning: None,
        });
        history.extend(kept);
        let agent = (self.me.depth > 0).then_some(self.me.id.as_str());
        nested::compaction(agent, reason, folded, history.len() - 1, &summary);
        Ok(())
    }
}

/// A tool result as Kimi-CLI writes it: the note in `<system>` tags (`ERROR: ` first for a
/// failure), then the output, as separate text parts; an empty success says so.
fn tool_result_message(call_id: &str, r: &KimiResult) -> Message {
    let mut parts = Vec::new();
    if r.is_error {
        parts.push(ContentPart::Text(format!("<system>ERROR: {}</system>", r.message)));
    } else if !r.message.is_empty() {
        parts.push(ContentPart::Text(format!("<system>{}</system>", r.message)));
    }
    if !r.output.is_empty() {
        parts.push(ContentPart::Text(r.output.clone()));
    }
    if parts.is_empty() {
        parts.push(ContentPart::Text("<system>Tool output is empty.</system>".into()));
    }
    let mut m = tool_message(call_id, "");
    m.content = parts;
    m
}

fn variables(config: &Config) -> BTreeMap<&'static str, String> {
    [
        ("ROLE_ADDITIONAL", String::new()),
        ("KIMI_OS", "Linux".to_string()),
        ("KIMI_SHELL", "bash (`/bin/bash`)".to_string()),
        ("KIMI_NOW", config.now.clone()),
        ("KIMI_WORK_DIR", config.workdir.clone()),
        ("KIMI_SKILLS", prompt::builtin_skills(&config.skills_root)),
        ("KIMI_ADDITIONAL_DIRS_INFO", String::new()),
    ]
    .into()
}

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &[
    "system_prompt_template",
    "skills_root",
    "max_steps_per_turn",
    "max_retries_per_step",
    "context_tokens",
    "compaction_trigger_ratio",
    "reserved_context_size",
    "workdir",
    "now",
    "agents_md",
    "list_workdir",
    "subagents",
    "subagent_tool",
];

impl Guest for KimiCli {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let raw = orchard_harness_kit::config::parse("kimi-cli", &config, &[CONFIG_KEYS, config::SAMPLING])?;
        let config = Config::from(&raw, &task);
        let run = run_tools::list();
        let (listing, agents_md) = environment(&config, &run);
        let mut vars = variables(&config);
        vars.insert("KIMI_WORK_DIR_LS", listing);
        vars.insert("KIMI_AGENTS_MD", agents_md);
        let subagents: Vec<(String, String)> =
            config.subagents.iter().map(|(n, d, _)| (n.clone(), d.clone())).collect();
        let todos = RefCell::new(json!([]));
        let specs = tools::specs(&run, &[], &subagents, config.subagent_tool);
        let system =
            prompt::render(&config.template, &vars).map_err(|e| Error::InvalidInput(format!("kimi-cli: {e}")))?;
        let soul = Soul {
            config: &config,
            todos: &todos,
            me: Subagent { id: "main".into(), parent: None, name: "main".into(), depth: 0 },
            system,
            specs,
            listing: vars["KIMI_WORK_DIR_LS"].clone(),
            agents_md: vars["KIMI_AGENTS_MD"].clone(),
        };
        // Kimi-CLI strips the prompt it is given (`--prompt`).
        let mut history = vec![message(Role::User, task.instruction.trim().to_string())];
        let mut steps = 0;
        let (status, text) = soul.run(&mut history, &mut steps)?;
        Ok(Outcome {
            status,
            answer: (status == RunStatus::Completed).then(|| text.clone()),
            steps,
            message: (status != RunStatus::Completed).then_some(text),
        })
    }
}

orchard_harness_kit::export_harness!(KimiCli);
