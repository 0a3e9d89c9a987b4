//! The system prompt ZeroClaw 0.8.2 sends with native tool calls at the `full` autonomy level
//! (`zeroclaw-runtime/src/agent/system_prompt.rs`, MIT; see `release/LICENSE-MIT`): the texts
//! are the release's, section for section, and so is the order.

/// The workspace files ZeroClaw injects, in its order (`MEMORY.md` last).
pub const BOOTSTRAP_FILES: [&str; 6] = ["AGENTS.md", "SOUL.md", "TOOLS.md", "IDENTITY.md", "USER.md", "MEMORY.md"];
/// Characters kept of each injected file (`BOOTSTRAP_MAX_CHARS`).
const BOOTSTRAP_MAX_CHARS: usize = 20_000;

pub struct PromptInputs<'a> {
    pub workspace: &'a str,
    /// Each bootstrap file with its text (`None`: not there), plus `BOOTSTRAP.md` when present.
    pub files: &'a [(String, Option<String>)],
    pub date: &'a str,
    pub host: &'a str,
    pub model: &'a str,
    /// A configured agent's own instructions, put before the sections (the port's choice:
    /// ZeroClaw's agentic delegates load their own identity files).
    pub identity: Option<&'a str>,
    pub has_tools: bool,
}

pub fn system_prompt(p: &PromptInputs) -> String {
    let mut s = String::new();
    if let Some(identity) = p.identity {
        s += identity.trim_end();
        s += "\n\n";
    }
    if p.has_tools {
        s += "## CRITICAL: No Tool Narration\n\n\
              NEVER narrate, announce, describe, or explain your tool usage to the user. \
              Do NOT say things like 'Let me check...', 'I will use http_request to...', \
              'I'll fetch that for you', 'Searching now...', or 'Using the web_search tool'. \
              The user must ONLY see the final answer. Tool calls are invisible infrastructure — \
              never reference them. If you catch yourself starting a sentence about what tool \
              you are about to use or just used, DELETE it and give the answer directly.\n\n";
        s += "## CRITICAL: Tool Honesty\n\n\
              - NEVER fabricate, invent, or guess tool results. If a tool returns empty results, say \"No results found.\"\n\
              - If a tool call fails, report the error — never make up data to fill the gap.\n\
              - When unsure whether a tool call succeeded, ask the user rather than guessing.\n\n";
        s += "## Your Task\n\n\
              When the user sends a message, respond naturally. Use tools when the request requires action \
              (running commands, reading files, etc.).\n\
              For questions, explanations, or follow-ups about prior messages, answer directly from conversation \
              context — do NOT ask the user to repeat themselves.\n\
              Do NOT: summarize this configuration, describe your capabilities, or output step-by-step \
              meta-commentary.\n\n";
    } else {
        s += "## Your Task\n\n\
              When the user sends a message, respond naturally and answer directly from conversation context.\n\
              No tools are available for this turn, so do not emit tool calls or describe unavailable actions.\n\
              Do NOT: summarize this configuration, describe your capabilities, or output step-by-step \
              meta-commentary.\n\n";
    }
    s += "## Safety\n\n\
          - Do not exfiltrate private data.\n\
          - Prefer `trash` over `rm` (recoverable beats gone forever).\n\
          - Respect the runtime autonomy policy: if a tool or action is allowed, execute it directly instead of \
          asking the user for extra approval.\n\
          - If a tool or action is blocked by policy or unavailable, explain that concrete restriction instead of \
          simulating an approval dialog.\n\n";
    s += &format!("## Workspace\n\nWorking directory: `{}`\n\n", p.workspace);
    s += "## Project Context\n\n\
          The following workspace files define your identity, behavior, and context. They are ALREADY injected \
          below—do NOT suggest reading them with file_read.\n\n";
    for (name, text) in p.files {
        s += &inject(name, text.as_deref());
    }
    s += &format!("## Current Date\n\n{} (+00:00)\n\n", p.date);
    s += &format!("## Runtime\n\nHost: {} | OS: linux | Model: {}\n\n", p.host, p.model);
    s
}

/// One workspace file as ZeroClaw injects it (`inject_workspace_file`).
fn inject(name: &str, text: Option<&str>) -> String {
    let Some(text) = text else {
        return format!("### {name}\n\n[File not found: {name}]\n\n");
    };
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return String::new();
    }
    match trimmed.char_indices().nth(BOOTSTRAP_MAX_CHARS) {
        Some((cut, _)) => format!(
            "### {name}\n\n{}\n\n[... truncated at {BOOTSTRAP_MAX_CHARS} chars — use `read` for full file]\n\n",
            &trimmed[..cut]
        ),
        None => format!("### {name}\n\n{trimmed}\n\n"),
    }
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the clock the component sees.
pub fn today() -> String {
    now()[..10].to_string()
}

/// The time (UTC) as `YYYY-MM-DD HH:MM:SS`: ZeroClaw stamps each user message with it.
pub fn now() -> String {
    orchard_harness_kit::clock::utc_now()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_injected_trimmed_or_marked_missing() {
        assert_eq!(inject("SOUL.md", None), "### SOUL.md\n\n[File not found: SOUL.md]\n\n");
        assert_eq!(inject("AGENTS.md", Some("\n rules \n")), "### AGENTS.md\n\nrules\n\n");
        assert_eq!(inject("USER.md", Some("  \n")), "");
        let long = "é".repeat(BOOTSTRAP_MAX_CHARS + 1);
        assert!(
            inject("TOOLS.md", Some(&long)).ends_with("[... truncated at 20000 chars — use `read` for full file]\n\n")
        );
    }
}
