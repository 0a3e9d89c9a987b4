//! The `zeroclaw` harness: ZeroClaw v0.8's agent loop, for training and evaluating on the
//! harness the assistant-domain recipes use.
//!
//! - The system prompt in ZeroClaw's sections (see `prompt`); the task is the user message.
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
//! - Memory (`memory_store`, `memory_recall`, `memory_forget`) and a todo list (`todo`) live in
//!   the harness, shared by the agent and its subagents, never in the sandbox.
//!
//! Other config keys: `workspace` (the task's workdir, else `/workspace`), `project_context`,
//! `date` (default today), `now` (the task message's stamp, `YYYY-MM-DD HH:MM:SS`; default the
//! time; `timestamp_messages: false` sends the task bare), `model_name` (for the Runtime section), `loop_window` (20),
//! `loop_max_repeats` (3), sampling (`temperature`, `top_p`, `max_tokens`, `seed`, `extra_body`).

mod loop_guard;
mod prompt;

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
    project_context: String,
    date: String,
    /// The stamp on the task's user message (`[YYYY-MM-DD HH:MM:SS +00:00] …`), as ZeroClaw
    /// sends it; `None` with `timestamp_messages: false`.
    stamp: Option<String>,
    model_name: String,
    loop_window: usize,
    loop_repeats: usize,
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
            project_context: s("project_context").unwrap_or_else(|| "No project files were provided.".into()),
            date: s("date").unwrap_or_else(prompt::today),
            stamp: (config.get("timestamp_messages").and_then(Value::as_bool) != Some(false))
                .then(|| s("now").unwrap_or_else(prompt::now)),
            model_name: s("model_name").unwrap_or_else(|| "default".into()),
            loop_window: n("loop_window", 20) as usize,
            loop_repeats: n("loop_max_repeats", 3) as usize,
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

/// What the agent and its subagents share: memory and the todo list.
#[derive(Default)]
struct Shared {
    memory: BTreeMap<String, String>,
    todos: Value,
}

/// One agent (the main one or a subagent): who it is and what it may call.
struct Agent<'a> {
    config: &'a Config,
    shared: &'a RefCell<Shared>,
    me: Subagent,
    /// The run's tools this agent sees.
    run_tools: Vec<ToolSpec>,
    /// Whether this agent may `spawn_subagent` (only the main agent).
    may_spawn: bool,
    max_iterations: u32,
    identity: Option<String>,
}

fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
    ToolSpec { name: name.into(), description: description.into(), parameters: parameters.to_string() }
}

impl Agent<'_> {
    fn may_delegate(&self) -> bool {
        !self.config.agents.is_empty() && self.me.depth < self.config.max_depth
    }

    fn tools(&self) -> Vec<ToolSpec> {
        let mut all = self.run_tools.clone();
        all.push(spec(
            "memory_store",
            "Store a fact in long-term memory under a key (replaces what the key held).",
            json!({"type": "object", "properties": {"key": {"type": "string"}, "content": {"type": "string"}}, "required": ["key", "content"]}),
        ));
        all.push(spec(
            "memory_recall",
            "Recall memories whose key or content contains the query (all of them for an empty query).",
            json!({"type": "object", "properties": {"query": {"type": "string"}}, "required": []}),
        ));
        all.push(spec(
            "memory_forget",
            "Forget the memory stored under a key.",
            json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        ));
        all.push(spec(
            "todo",
            "Replace your todo list: every item with its status (pending, in_progress, done). Returns the list.",
            json!({"type": "object", "properties": {"todos": {"type": "array", "items": {"type": "object",
                "properties": {"content": {"type": "string"}, "status": {"type": "string", "enum": ["pending", "in_progress", "done"]}},
                "required": ["content", "status"]}}}, "required": ["todos"]}),
        ));
        if self.may_delegate() {
            let names: Vec<&str> = self.config.agents.keys().map(String::as_str).collect();
            all.push(spec(
                "delegate",
                "Delegate a subtask to a specialised agent. It works in its own conversation with its own tools and \
                 returns only its final answer.",
                json!({"type": "object", "additionalProperties": false, "properties": {
                    "agent": {"type": "string", "minLength": 1, "description": format!("Name of the agent to delegate to. Available: {}", names.join(", "))},
                    "prompt": {"type": "string", "minLength": 1, "description": "The task for the agent"},
                    "context": {"type": "string", "description": "Optional context to put before the prompt (findings so far, relevant data)"}},
                    "required": ["agent", "prompt"]}),
            ));
        }
        // Offered to subagents too, as ZeroClaw does; a nested call is refused (depth-1 cap).
        {
            all.push(spec(
                "spawn_subagent",
                "Spawn an ephemeral subagent with your tools and permissions to carry out a focused subtask in its own \
                 conversation; it returns its final answer. It does not see this conversation: make the prompt self-contained.",
                json!({"type": "object", "properties": {"prompt": {"type": "string", "description": "The self-contained task for the subagent"}}, "required": ["prompt"]}),
            ));
        }
        all
    }

    fn system_prompt(&self, tools: &[ToolSpec]) -> String {
        prompt::system_prompt(&prompt::PromptInputs {
            workspace: &self.config.workspace,
            project_context: &self.config.project_context,
            date: &self.config.date,
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
                let output = self.run_tool(call);
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

    /// A tool's answer as the model sees it: the harness's own tools here, the rest through the
    /// run's adapters (failures as text the model can read).
    fn run_tool(&self, call: &ToolCall) -> String {
        let args: Value = serde_json::from_str(&call.arguments).unwrap_or(json!({}));
        let str_arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        match call.name.as_str() {
            "memory_store" => {
                let key = str_arg("key");
                if key.is_empty() {
                    return "Error: key is required".into();
                }
                self.shared.borrow_mut().memory.insert(key.clone(), str_arg("content"));
                format!("Stored memory '{key}'")
            }
            "memory_recall" => {
                let q = str_arg("query").to_lowercase();
                let shared = self.shared.borrow();
                let hits: Vec<String> = shared
                    .memory
                    .iter()
                    .filter(|(k, v)| q.is_empty() || k.to_lowercase().contains(&q) || v.to_lowercase().contains(&q))
                    .map(|(k, v)| format!("- {k}: {v}"))
                    .collect();
                if hits.is_empty() { "No memories found.".into() } else { hits.join("\n") }
            }
            "memory_forget" => match self.shared.borrow_mut().memory.remove(&str_arg("key")) {
                Some(_) => format!("Forgot '{}'", str_arg("key")),
                None => format!("No memory under '{}'", str_arg("key")),
            },
            "todo" => {
                let todos = args.get("todos").cloned().unwrap_or(json!([]));
                self.shared.borrow_mut().todos = todos.clone();
                format!("Todo list updated:\n{}", serde_json::to_string_pretty(&todos).unwrap_or_default())
            }
            "delegate" if self.may_delegate() => self.delegate(call, &args),
            "spawn_subagent" => {
                if !self.may_spawn {
                    return "Error: spawn_subagent: a subagent may not spawn its own subagents (depth-1 cap)".into();
                }
                let child =
                    self.child(call, "subagent", self.run_tools.clone(), self.max_iterations, self.identity.clone());
                child.run_nested(&str_arg("prompt"))
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

    /// A subagent one level below this agent, started by `call`; subagents never spawn.
    fn child(
        &self,
        call: &ToolCall,
        name: &str,
        run_tools: Vec<ToolSpec>,
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
            run_tools,
            may_spawn: false,
            max_iterations,
            identity,
        }
    }

    fn delegate(&self, call: &ToolCall, args: &Value) -> String {
        let name = args.get("agent").and_then(Value::as_str).unwrap_or("");
        let Some(agent) = self.config.agents.get(name) else {
            let known: Vec<&str> = self.config.agents.keys().map(String::as_str).collect();
            return format!("Error: unknown agent '{name}'. Available: {}", known.join(", "));
        };
        // The agent's tool subset: the run's tools it names (all of them when it names none).
        let allowed: Option<Vec<&str>> =
            agent.get("tools").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_str).collect());
        let run_tools = self
            .run_tools
            .iter()
            .filter(|t| allowed.as_ref().is_none_or(|a| a.contains(&t.name.as_str())))
            .cloned()
            .collect();
        let child = self.child(
            call,
            name,
            run_tools,
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

/// The configuration keys this harness reads; any other is refused.
const CONFIG_KEYS: &[&str] = &[
    "max_tool_iterations",
    "context_tokens",
    "max_delegation_depth",
    "agents",
    "workspace",
    "project_context",
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
        let shared = RefCell::new(Shared::default());
        let main = Agent {
            config: &config,
            shared: &shared,
            me: Subagent { id: "main".into(), parent: None, name: "main".into(), depth: 0 },
            run_tools: tools::list(),
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
