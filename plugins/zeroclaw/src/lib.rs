//! The `zeroclaw` harness: ZeroClaw 0.8.2's agent loop, as an evaluation runs it (native tool
//! calls, the `full` autonomy level, every command allowed: the sandbox is the wall). Diffed
//! request for request against recordings of the real program
//! (`tests/fixtures/zeroclaw-0.8.2`, `tests/evaluations/zeroclaw_faithful.rs`).
//!
//! - The release's system prompt (`prompt`), with the workspace's `AGENTS.md`, `SOUL.md`,
//!   `TOOLS.md`, `IDENTITY.md`, `USER.md`, `BOOTSTRAP.md` and `MEMORY.md` injected as it injects
//!   them; the task as the user message, stamped with the time.
//! - The release's own tools, its specs unchanged (`release/tools.json`): `shell`, `file_read`,
//!   `file_write`, `file_edit`, `glob_search`, `content_search` act on the sandbox through the
//!   shell adapter (`workspace`), `memory_store` / `memory_recall` / `memory_forget` live in the
//!   harness; then the run's other tools; then `spawn_subagent`, and `delegate` when agents are
//!   configured. `allowed_tools` keeps only those named, as ZeroClaw's risk profile does.
//! - Results as the release words them: the output (or `(no output)`), `Error: …` for a failure.
//! - At most `max_tool_iterations` model turns that call tools (default 10), then the run stops.
//! - Identical calls within one response run once (the others are answered "skipped duplicate").
//! - Loop detection (`loop_guard`) after each call: a warning or a block notice appended to the
//!   system prompt, or the run ended, on repeats, ping-pong and no progress.
//! - `delegate {agent, prompt, context?}` runs a configured agent (`agents = {name: {system_prompt,
//!   tools: [...], max_tool_iterations}}`) as a nested conversation with its own tool subset, up
//!   to `max_delegation_depth` (3) deep; `spawn_subagent {prompt}` runs an ephemeral copy of the
//!   caller with the caller's tools, one level deep (offered to subagents too, whose call is
//!   refused with ZeroClaw's depth-1 message). Only the nested
//!   conversation's final message returns to the caller; each is logged (`subagent-start`/`-end`).
//! - Compaction when the conversation passes half of `context_tokens` (default 32768), and when the
//!   endpoint says the context overflowed: the first 3 and the last 4 messages stay, the middle is
//!   summarised by the model (logged as `compaction`).
//!
//! Other config keys: `workspace` (the task's workdir, else `/workspace`), `date` (default today),
//! `now` (the task message's stamp, `YYYY-MM-DD HH:MM:SS`; default the time;
//! `timestamp_messages: false` sends the task bare), `model_name` (for the Runtime section),
//! `system_prompt` (put before the sections), `loop_window` (20), `loop_max_repeats` (3),
//! sampling (`temperature`, `top_p`, `max_tokens`, `seed`, `extra_body`).

mod exec;
mod loop_guard;
mod prompt;
mod release;
mod workspace;

use std::cell::RefCell;
use std::collections::BTreeMap;

use loop_guard::{LoopGuard, Verdict};
use orchard_harness_kit::config;
use orchard_harness_kit::context::estimate_tokens;
use orchard_harness_kit::exports::orchard::plugin::agent::Guest;
use orchard_harness_kit::nested::{self, Subagent};
use orchard_harness_kit::orchard::plugin::{log, model, tools};
use orchard_harness_kit::{
    Error, Message, Outcome, Role, RunStatus, Task, ToolCall, ToolSpec, message, text_of, tool_message,
};
use serde_json::{Value, json};

struct ZeroClaw;

struct Config {
    max_iterations: u32,
    context_tokens: usize,
    max_depth: u32,
    agents: BTreeMap<String, Value>,
    workspace: String,
    date: String,
    /// The stamp on the task's user message (`[YYYY-MM-DD HH:MM:SS +00:00] …`), as ZeroClaw
    /// sends it; `None` with `timestamp_messages: false`.
    stamp: Option<String>,
    model_name: String,
    loop_window: usize,
    loop_repeats: usize,
    /// ZeroClaw's `allowed_tools`: only these are offered (`None`: all).
    allowed_tools: Option<Vec<String>>,
    sampling: model::Sampling,
}

impl Config {
    fn from(config: &Value, task: &Task) -> Config {
        let n = |k: &str, d: u64| config.get(k).and_then(Value::as_u64).unwrap_or(d);
        let s = |k: &str| config.get(k).and_then(Value::as_str).map(str::to_string);
        let meta: Value = serde_json::from_str(&task.metadata).unwrap_or(Value::Null);
        Config {
            max_iterations: n("max_tool_iterations", 10).max(1) as u32,
            context_tokens: n("context_tokens", 32_768).max(1_000) as usize,
            max_depth: n("max_delegation_depth", 3) as u32,
            agents: config
                .get("agents")
                .and_then(Value::as_object)
                .map(|m| m.clone().into_iter().collect())
                .unwrap_or_default(),
            workspace: s("workspace")
                .or_else(|| meta.get("workdir").and_then(Value::as_str).map(str::to_string))
                .unwrap_or_else(|| "/workspace".into()),
            date: s("date").unwrap_or_else(prompt::today),
            stamp: (config.get("timestamp_messages").and_then(Value::as_bool) != Some(false))
                .then(|| s("now").unwrap_or_else(prompt::now)),
            model_name: s("model_name").unwrap_or_else(|| "default".into()),
            loop_window: n("loop_window", 20) as usize,
            loop_repeats: n("loop_max_repeats", 3) as usize,
            allowed_tools: config
                .get("allowed_tools")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect()),
            sampling: orchard_harness_kit::sampling(config),
        }
    }
}

impl Config {
    /// A user message as ZeroClaw sends it: stamped with the time.
    fn stamped(&self, text: &str) -> String {
        match &self.stamp {
            Some(stamp) => format!("[{stamp} +00:00] {text}"),
            None => text.to_string(),
        }
    }
}

/// What the agent and its subagents share: memory, and what the run started with.
#[derive(Default)]
struct Shared {
    /// Key → (category, content), in the order stored.
    memory: Vec<(String, String, String)>,
    /// The workspace files injected into every prompt, and the sandbox's host name.
    bootstrap: Vec<(String, Option<String>)>,
    host: String,
}

/// One agent (the main one or a subagent): who it is and what it may call.
struct Agent<'a> {
    config: &'a Config,
    shared: &'a RefCell<Shared>,
    me: Subagent,
    /// Only these tools are offered (`None`: all of them).
    allowed: Option<Vec<String>>,
    /// Whether this agent may `spawn_subagent` (only the main agent).
    may_spawn: bool,
    max_iterations: u32,
    identity: Option<String>,
}

/// The shell adapter's own tools: the implementation of ZeroClaw's workspace tools, not offered
/// beside them.
const SHELL_ADAPTER: [&str; 7] =
    ["bash", "bash_session", "background_start", "background_log", "background_signal", "read_file", "write_file"];

/// ZeroClaw's memory tools, served by the harness.
const MEMORY: [&str; 3] = ["memory_store", "memory_recall", "memory_forget"];

/// A tool's result as ZeroClaw puts it in the conversation (`tool_execution.rs`).
fn result_text(name: &str, result: Result<workspace::Outcome, workspace::Failed>) -> String {
    match result {
        Ok(r) if r.success => {
            if r.output.is_empty() {
                "(no output)".into()
            } else {
                r.output
            }
        }
        Ok(r) => format!("Error: {}", r.error.unwrap_or(r.output)),
        Err(e) => format!("Error executing {name}: {e}"),
    }
}

impl Agent<'_> {
    fn may_delegate(&self) -> bool {
        !self.config.agents.is_empty() && self.me.depth < self.config.max_depth
    }

    /// What this agent is offered, in ZeroClaw's order: its workspace tools (where the run has
    /// the shell adapter to act with), its memory tools, the run's other tools, then the
    /// subagent tools.
    fn tools(&self) -> Vec<ToolSpec> {
        let run = tools::list();
        let own = exec::available();
        let mut all: Vec<ToolSpec> = Vec::new();
        if own {
            all.extend(workspace::TOOLS.iter().map(|n| release::spec(n)));
        }
        all.extend(MEMORY.iter().map(|n| release::spec(n)));
        all.extend(run.into_iter().filter(|t| !(own && SHELL_ADAPTER.contains(&t.name.as_str()))));
        // Offered to subagents too, as ZeroClaw does; a nested call is refused (depth-1 cap).
        all.push(release::spec("spawn_subagent"));
        if self.may_delegate() {
            let names: Vec<&str> = self.config.agents.keys().map(String::as_str).collect();
            all.push(release::delegate(&names));
        }
        if let Some(allowed) = &self.allowed {
            all.retain(|t| allowed.contains(&t.name));
        }
        all
    }

    fn system_prompt(&self, tools: &[ToolSpec]) -> String {
        let shared = self.shared.borrow();
        prompt::system_prompt(&prompt::PromptInputs {
            workspace: &self.config.workspace,
            files: &shared.bootstrap,
            date: &self.config.date,
            host: &shared.host,
            model: &self.config.model_name,
            identity: self.identity.as_deref(),
            has_tools: !tools.is_empty(),
        })
    }

    /// Runs a conversation to its end: (status, final text, model turns, messages).
    fn converse(&self, task: &str, specs: &[ToolSpec]) -> Result<(RunStatus, String, u32, Vec<Message>), Error> {
        let mut messages = vec![message(Role::System, self.system_prompt(specs)), message(Role::User, task)];
        let mut guard = LoopGuard::new(self.config.loop_window, self.config.loop_repeats);
        let mut last_prompt = 0u32;
        let mut turns = 0;
        loop {
            if estimate_tokens(&messages).max(last_prompt as usize) > self.config.context_tokens / 2 {
                self.compact(&mut messages, "half of the context window")?;
            }
            let completion = match model::complete(&messages, specs, &self.config.sampling) {
                Err(e) if nested::is_context_overflow(&e) => {
                    // The endpoint says it did not fit: compact, then try once more.
                    self.compact(&mut messages, "the endpoint reported a context overflow")?;
                    model::complete(&messages, specs, &self.config.sampling)?
                }
                other => other?,
            };
            turns += 1;
            last_prompt = completion.usage.prompt_tokens;
            let reply = completion.message;
            let calls = reply.tool_calls.clone();
            messages.push(reply.clone());
            if calls.is_empty() {
                return Ok((RunStatus::Completed, text_of(&reply.content), turns, messages));
            }
            let mut seen: Vec<(String, String)> = Vec::new();
            for call in &calls {
                let key = (call.name.clone(), loop_guard::canonical(&call.arguments));
                if seen.contains(&key) {
                    messages.push(tool_message(
                        &call.id,
                        format!("Skipped duplicate tool call '{}' with identical arguments in this turn.", call.name),
                    ));
                    continue;
                }
                seen.push(key);
                let output = self.run_tool(call, specs);
                let verdict = guard.record(&call.name, &call.arguments, &output);
                messages.push(tool_message(&call.id, output));
                // As ZeroClaw does: the detector's word goes into the system prompt.
                let note = match verdict {
                    Verdict::Ok => continue,
                    Verdict::Warn(why) => ("warn", format!("[Loop Detection] {why}")),
                    Verdict::Block(why) => ("block", format!("[Loop Detection — BLOCKED] {why}")),
                    Verdict::Break(why) => {
                        log::event(
                            log::Level::Warn,
                            "loop-detected",
                            &json!({"action": "break", "tool": call.name, "why": why}).to_string(),
                        );
                        return Ok((
                            RunStatus::GaveUp,
                            format!("Agent loop aborted by loop detector: {why}"),
                            turns,
                            messages,
                        ));
                    }
                };
                log::event(
                    log::Level::Info,
                    "loop-detected",
                    &json!({"action": note.0, "tool": call.name, "why": note.1}).to_string(),
                );
                let system = &mut messages[0];
                let merged = format!("{}\n\n{}", text_of(&system.content), note.1);
                system.content = vec![orchard_harness_kit::ContentPart::Text(merged)];
            }
            if turns >= self.max_iterations {
                let why = format!("Agent exceeded maximum tool iterations ({})", self.max_iterations);
                return Ok((RunStatus::LimitReached, why, turns, messages));
            }
        }
    }

    /// A tool's answer as the model sees it: the memory and subagent tools here, ZeroClaw's
    /// workspace tools on the sandbox, the rest through the run's adapters.
    fn run_tool(&self, call: &ToolCall, offered: &[ToolSpec]) -> String {
        let name = call.name.as_str();
        if !offered.iter().any(|t| t.name == name) {
            return format!("Unknown tool: {name}");
        }
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
        match name {
            "memory_store" | "memory_recall" | "memory_forget" => result_text(name, self.memory(name, &args)),
            "delegate" => self.delegate(call, &args),
            "spawn_subagent" => {
                if !self.may_spawn {
                    return "Error: spawn_subagent: a subagent may not spawn its own subagents (depth-1 cap)".into();
                }
                let child =
                    self.child(call, "subagent", self.allowed.clone(), self.max_iterations, self.identity.clone());
                let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("");
                match child.run_nested(prompt) {
                    answer if answer.trim().is_empty() => "subagent completed without output".into(),
                    answer => answer,
                }
            }
            _ if workspace::TOOLS.contains(&name) => {
                result_text(name, workspace::run(name, &args, &self.config.workspace))
            }
            _ => match tools::call(call) {
                Ok(out) => {
                    let text = text_of(&out.content);
                    if out.is_error { format!("Error: {text}") } else { text }
                }
                Err(e) => format!("Error: {e:?}"),
            },
        }
    }

    /// ZeroClaw's memory tools over the memory the run's agents share (category `core` unless
    /// given; recall by keyword, `*` or no query for the most recent).
    fn memory(&self, name: &str, args: &Value) -> Result<workspace::Outcome, workspace::Failed> {
        let text = |k: &str| args.get(k).and_then(Value::as_str);
        let need = |k: &str| text(k).ok_or_else(|| format!("Missing '{k}' parameter"));
        let done = |output: String| workspace::Outcome { success: true, output, error: None };
        let mut shared = self.shared.borrow_mut();
        match name {
            "memory_store" => {
                let (key, content) = (need("key")?, need("content")?);
                let category = text("category").unwrap_or("core").to_string();
                shared.memory.retain(|(k, _, _)| k != key);
                shared.memory.push((key.to_string(), category, content.to_string()));
                Ok(done(format!("Stored memory: {key}")))
            }
            "memory_forget" => {
                let key = need("key")?;
                let before = shared.memory.len();
                shared.memory.retain(|(k, _, _)| k != key);
                Ok(done(if shared.memory.len() < before {
                    format!("Forgot memory: {key}")
                } else {
                    format!("No memory found with key: {key}")
                }))
            }
            _ => {
                let query = text("query").unwrap_or("").trim().to_lowercase();
                let limit = args.get("limit").and_then(Value::as_u64).unwrap_or(5) as usize;
                let words: Vec<&str> = query.split_whitespace().filter(|w| *w != "*").collect();
                let hits: Vec<&(String, String, String)> = shared
                    .memory
                    .iter()
                    .rev()
                    .filter(|(k, _, v)| {
                        let hay = format!("{k} {v}").to_lowercase();
                        words.is_empty() || words.iter().any(|w| hay.contains(w))
                    })
                    .take(limit)
                    .collect();
                if hits.is_empty() {
                    return Ok(done("No memories found.".into()));
                }
                let mut out = format!("Found {} memories:\n", hits.len());
                for (key, category, content) in hits {
                    out += &format!("- [{category}] {key}: {content}\n");
                }
                Ok(done(out))
            }
        }
    }

    /// A subagent one level below this agent, started by `call`; subagents never spawn.
    fn child(
        &self,
        call: &ToolCall,
        name: &str,
        allowed: Option<Vec<String>>,
        max_iterations: u32,
        identity: Option<String>,
    ) -> Agent<'_> {
        Agent {
            config: self.config,
            shared: self.shared,
            me: Subagent {
                id: call.id.clone(),
                parent: Some(self.me.id.clone()),
                name: name.into(),
                depth: self.me.depth + 1,
            },
            allowed,
            may_spawn: false,
            max_iterations,
            identity,
        }
    }

    fn delegate(&self, call: &ToolCall, args: &Value) -> String {
        let name = args.get("agent").and_then(Value::as_str).unwrap_or("");
        let Some(agent) = self.config.agents.get(name) else {
            let known: Vec<&str> = self.config.agents.keys().map(String::as_str).collect();
            return format!("Error: Unknown agent '{name}'. Available agents: {}", known.join(", "));
        };
        if let Some(action) = args.get("action").and_then(Value::as_str).filter(|a| *a != "delegate") {
            return format!(
                "Error: delegate action '{action}' needs background delegation, which this port does not run"
            );
        }
        if args.get("background").and_then(Value::as_bool) == Some(true) || args.get("parallel").is_some() {
            return "Error: background and parallel delegation are not run by this port".into();
        }
        // The agent's tool subset: the tools it names (all of this agent's when it names none).
        let allowed: Option<Vec<String>> = agent
            .get("tools")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .or_else(|| self.allowed.clone());
        let child = self.child(
            call,
            name,
            allowed,
            agent.get("max_tool_iterations").and_then(Value::as_u64).map_or(self.max_iterations, |n| n.max(1) as u32),
            agent.get("system_prompt").and_then(Value::as_str).map(str::to_string),
        );
        let prompt = args.get("prompt").and_then(Value::as_str).unwrap_or("");
        let task = match args.get("context").and_then(Value::as_str).filter(|c| !c.trim().is_empty()) {
            Some(context) => format!("[Context]\n{context}\n\n[Task]\n{prompt}"),
            None => prompt.to_string(),
        };
        child.run_nested(&task)
    }

    /// A subagent's whole conversation; the caller gets only its final message.
    fn run_nested(&self, task: &str) -> String {
        let tools = self.tools();
        self.me.start(task, &tools);
        let task = self.config.stamped(task);
        match self.converse(&task, &tools) {
            Ok((status, answer, _, messages)) => {
                let status_name = match status {
                    RunStatus::Completed => "completed",
                    RunStatus::LimitReached => "limit-reached",
                    _ => "stopped",
                };
                self.me.end(status_name, &messages, &tools, &answer);
                if status == RunStatus::Completed { answer } else { format!("Error: the subagent stopped: {answer}") }
            }
            Err(e) => {
                self.me.end("error", &[], &tools, &format!("{e:?}"));
                format!("Error: the subagent failed: {e:?}")
            }
        }
    }

    /// Keeps the first 3 and the last 4 messages; the middle becomes a model-written summary.
    fn compact(&self, messages: &mut Vec<Message>, reason: &str) -> Result<(), Error> {
        let mut front = 3.min(messages.len());
        // Never keep an assistant's tool calls without their results.
        while front < messages.len() && messages[front].role == Role::Tool {
            front += 1;
        }
        let mut back = messages.len().saturating_sub(4).max(front);
        while back > front && messages[back].role == Role::Tool {
            back -= 1;
        }
        if back <= front {
            return Ok(());
        }
        let middle: Vec<Message> = messages.drain(front..back).collect();
        let mut transcript = String::new();
        for m in &middle {
            transcript +=
                &format!("{:?}: {}\n", m.role, orchard_harness_kit::text::head_tail(&text_of(&m.content), 2000, 500));
            for c in &m.tool_calls {
                transcript +=
                    &format!("  called {}({})\n", c.name, orchard_harness_kit::text::head_tail(&c.arguments, 400, 100));
            }
        }
        let request = [
            message(
                Role::System,
                "You summarise an agent's conversation history. Keep the facts, the decisions, what was done with which \
                 tools and results, and what is left to do. Be concise.",
            ),
            message(Role::User, transcript),
        ];
        let sampling = model::Sampling {
            temperature: Some(0.2),
            top_p: None,
            max_tokens: Some(1024),
            stop: vec![],
            seed: None,
            extra: None,
        };
        let summary = text_of(&model::complete(&request, &[], &sampling)?.message.content);
        messages.insert(
            front,
            message(Role::User, format!("[Compaction summary of {} earlier messages]\n{summary}", middle.len())),
        );
        let agent = (self.me.depth > 0).then_some(self.me.id.as_str());
        nested::compaction(agent, reason, middle.len(), messages.len() - 1, &summary);
        Ok(())
    }
}

/// The workspace files ZeroClaw injects (each with its text, or `None` where there is none;
/// `BOOTSTRAP.md` only when present) and the sandbox's host name: read once, through the shell
/// adapter, which also makes the workspace as ZeroClaw makes its own. Without the adapter, the
/// files are missing and the host is `orchard-sandbox`.
fn bootstrap(workspace: &str) -> (Vec<(String, Option<String>)>, String) {
    let mut names: Vec<&str> = prompt::BOOTSTRAP_FILES.to_vec();
    names.insert(5, "BOOTSTRAP.md");
    let missing = || names.iter().filter(|n| **n != "BOOTSTRAP.md").map(|n| (n.to_string(), None)).collect();
    if !exec::available() {
        return (missing(), "orchard-sandbox".into());
    }
    let script = format!(
        "mkdir -p {ws} && cd {ws} || exit 3\nuname -n\nfor f in {files}; do if [ -f \"$f\" ]; then printf 'Y'; \
         head -c 1048576 -- \"$f\" | base64 -w0; else printf 'N'; fi; echo; done",
        ws = exec::quote(workspace),
        files = names.join(" "),
    );
    let Ok(ran) = exec::sh(&script, 30).map(|r| String::from_utf8_lossy(&r.stdout).into_owned()) else {
        return (missing(), "orchard-sandbox".into());
    };
    let mut lines = ran.lines();
    let host = lines.next().unwrap_or("orchard-sandbox").trim().to_string();
    let mut files = Vec::new();
    for (name, line) in names.iter().zip(lines) {
        let text = line.strip_prefix('Y').map(|b64| {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64.trim()).unwrap_or_default();
            String::from_utf8_lossy(&bytes).into_owned()
        });
        if *name != "BOOTSTRAP.md" || text.is_some() {
            files.push((name.to_string(), text));
        }
    }
    (files, host)
}

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &[
    "max_tool_iterations",
    "context_tokens",
    "max_delegation_depth",
    "agents",
    "workspace",
    "allowed_tools",
    "date",
    "timestamp_messages",
    "now",
    "model_name",
    "loop_window",
    "loop_max_repeats",
    "system_prompt",
];

impl Guest for ZeroClaw {
    fn run(task: Task, config: String) -> Result<Outcome, Error> {
        let raw = orchard_harness_kit::config::parse("zeroclaw", &config, &[CONFIG_KEYS, config::SAMPLING])?;
        let config = Config::from(&raw, &task);
        let (bootstrap, host) = bootstrap(&config.workspace);
        let shared = RefCell::new(Shared { bootstrap, host, ..Shared::default() });
        let main = Agent {
            config: &config,
            shared: &shared,
            me: Subagent { id: "main".into(), parent: None, name: "main".into(), depth: 0 },
            allowed: config.allowed_tools.clone(),
            may_spawn: true,
            max_iterations: config.max_iterations,
            identity: raw.get("system_prompt").and_then(Value::as_str).map(str::to_string),
        };
        let (status, text, turns, _) = main.converse(&config.stamped(&task.instruction), &main.tools())?;
        Ok(Outcome {
            status,
            answer: (status == RunStatus::Completed).then(|| text.clone()),
            steps: turns,
            message: (status != RunStatus::Completed).then_some(text),
        })
    }
}

orchard_harness_kit::export_harness!(ZeroClaw);
