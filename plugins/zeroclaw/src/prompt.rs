//! The system prompt, in ZeroClaw's sections and order (with native tool calling): no tool
//! narration, tool honesty, the task framing, safety, workspace, project context, date, runtime.
//! The wording is ours; the headings and what each section carries follow ZeroClaw v0.8.

pub struct PromptInputs<'a> {
    pub workspace: &'a str,
    pub project_context: &'a str,
    pub date: &'a str,
    pub model: &'a str,
    /// A configured agent's own instructions, put before the sections.
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
              Do not tell the user which tools you are about to use or have used, and do not announce steps \
              (\"let me look\", \"searching now\"). Tool calls are invisible plumbing: the user sees only your final \
              answer.\n\n";
        s += "## CRITICAL: Tool Honesty\n\n\
              - Report only what tools actually returned; when a tool finds nothing, say that nothing was found.\n\
              - When a tool call fails, report the failure instead of inventing data.\n\
              - When you cannot tell whether a call worked, say so rather than guessing.\n\n";
        s += "## Your Task\n\n\
              When the user sends a message, respond naturally, and use the tools you have been given whenever the \
              request needs an action (reading, writing, sending, running). Answer questions about earlier messages \
              from the conversation itself. Do not describe your configuration or your capabilities.\n\n";
    } else {
        s += "## Your Task\n\nAnswer the user directly from the conversation; you have no tools.\n\n";
    }
    s += "## Safety\n\n\
          - Never exfiltrate private data.\n\
          - Ask before running destructive commands.\n\
          - Never bypass oversight or approval mechanisms.\n\
          - Prefer recoverable actions over irreversible ones.\n\
          - When in doubt, ask before acting outside the workspace.\n\n";
    s += &format!("## Workspace\n\nWorking directory: `{}`\n\n", p.workspace);
    s += &format!("## Project Context\n\n{}\n\n", p.project_context.trim_end());
    s += &format!("## Current Date\n\n{} (+00:00)\n\n", p.date);
    s += &format!("## Runtime\n\nHost: orchard-sandbox | OS: linux | Model: {}\n", p.model);
    s
}

/// Today's date (UTC) as `YYYY-MM-DD`, from the clock the component sees.
pub fn today() -> String {
    now()[..10].to_string()
}

/// The time (UTC) as `YYYY-MM-DD HH:MM:SS`: ZeroClaw stamps each user message with it.
pub fn now() -> String {
    orchard_harness_kit::clock::utc_now()
}
