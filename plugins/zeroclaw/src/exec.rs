//! Running a command in the sandbox through the run's `bash` tool (the shell adapter), with its
//! exit status, stdout and stderr kept apart and byte-exact: they travel base64-encoded, so no
//! output can be mistaken for the framing around it.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use orchard_harness_kit::orchard::plugin::tools;
use orchard_harness_kit::{ToolCall, text_of};
use serde_json::json;

/// What a command did.
pub struct Ran {
    pub code: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

pub use orchard_harness_kit::text::shell_quote as quote;

/// `text` as base64, to be decoded in the sandbox (`printf %s … | base64 -d`).
pub fn encode(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// Runs `script` with `sh`; `None` when the run has no `bash` tool or the sandbox did not answer
/// in the expected shape (`why` says what came back).
pub fn sh(script: &str, timeout_secs: u64) -> Result<Ran, String> {
    let wrapped = format!(
        "o=$(mktemp) && e=$(mktemp) || exit 90\n\
         ( {script}\n) >\"$o\" 2>\"$e\" </dev/null\n\
         c=$?\nprintf '%s\\n' \"$c\"; base64 -w0 \"$o\"; echo; base64 -w0 \"$e\"; echo; rm -f \"$o\" \"$e\""
    );
    let call = ToolCall {
        id: "zeroclaw-exec".into(),
        name: "bash".into(),
        // The adapter's own timeout a little past the command's, so the command's is the one hit.
        arguments: json!({"command": wrapped, "timeout": timeout_secs + 5}).to_string(),
    };
    let answer = tools::call(&call).map_err(|e| format!("{e:?}"))?;
    let text = text_of(&answer.content);
    if text.starts_with("[command timed out") {
        return Err(format!("timed out after {timeout_secs}s"));
    }
    let body = text.split_once("stdout:\n").map(|(_, rest)| rest).unwrap_or("");
    let mut lines = body.lines();
    let code = lines.next().and_then(|c| c.trim().parse().ok());
    let out = lines.next().map(|l| STANDARD.decode(l.trim()));
    let err = lines.next().map(|l| STANDARD.decode(l.trim()));
    match (code, out, err) {
        (Some(code), Some(Ok(stdout)), Some(Ok(stderr))) => Ok(Ran { code, stdout, stderr }),
        _ => Err(format!("the sandbox answered: {}", orchard_harness_kit::text::head_tail(&text, 300, 200))),
    }
}

/// Whether the run has the `bash` tool this module needs.
pub fn available() -> bool {
    tools::list().iter().any(|t| t.name == "bash")
}
