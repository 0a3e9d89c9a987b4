//! ZeroClaw 0.8.2's own workspace tools — `shell`, `file_read`, `file_write`, `file_edit`,
//! `glob_search`, `content_search` — acting on the sandbox through the run's `bash` tool, with
//! the release's results and error texts (`zeroclaw-runtime/src/tools/shell.rs`,
//! `zeroclaw-tools/src/file_*.rs`, `glob_search.rs`, `content_search.rs`).
//!
//! Relative paths resolve from the workspace, as ZeroClaw's do. ZeroClaw's command allowlist and
//! path policy are not carried over: an evaluation runs it with every command allowed
//! (`allowed_commands = ["*"]`), and the sandbox is the wall.

use std::collections::BTreeSet;

use base64::Engine;
use serde_json::Value;

use crate::exec::{self, quote};

/// What a ZeroClaw tool returns (`ToolResult`).
pub struct Outcome {
    pub success: bool,
    pub output: String,
    pub error: Option<String>,
}

/// A tool's failure before it produced a result (ZeroClaw's `anyhow` error).
pub type Failed = String;

/// The names this module serves.
pub const TOOLS: [&str; 6] = ["shell", "file_read", "file_write", "file_edit", "glob_search", "content_search"];

/// `shell_timeout_secs`' default.
const SHELL_TIMEOUT_SECS: u64 = 60;
/// The variables ZeroClaw's shell keeps from its environment (`SAFE_ENV_VARS`).
const SAFE_ENV_VARS: &str = "PATH HOME TERM LANG LC_ALL LC_CTYPE USER SHELL TMPDIR";
const MAX_OUTPUT_BYTES: usize = 1_048_576;
const MAX_RESULTS: usize = 1000;
const SEARCH_TIMEOUT_SECS: u64 = 30;

fn ok(output: String) -> Outcome {
    Outcome { success: true, output, error: None }
}

fn fail(error: impl Into<String>) -> Outcome {
    Outcome { success: false, output: String::new(), error: Some(error.into()) }
}

fn arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, Failed> {
    args.get(key).and_then(Value::as_str).ok_or_else(|| format!("Missing '{key}' parameter"))
}

/// Runs ZeroClaw's tool `name` in `workspace`.
pub fn run(name: &str, args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    match name {
        "shell" => shell(args, workspace),
        "file_read" => file_read(args, workspace),
        "file_write" => file_write(args, workspace),
        "file_edit" => file_edit(args, workspace),
        "glob_search" => glob_search(args, workspace),
        "content_search" => content_search(args, workspace),
        other => Err(format!("Unknown tool: {other}")),
    }
}

/// `path` as ZeroClaw resolves it: relative to the workspace.
fn resolve(workspace: &str, path: &str) -> String {
    if path.starts_with('/') { path.to_string() } else { format!("{}/{path}", workspace.trim_end_matches('/')) }
}

/// Truncates `text` to `max` bytes on a character boundary with ZeroClaw's marker.
fn cap(mut text: String, marker: &str) -> String {
    if text.len() > MAX_OUTPUT_BYTES {
        let mut b = MAX_OUTPUT_BYTES;
        while b > 0 && !text.is_char_boundary(b) {
            b -= 1;
        }
        text.truncate(b);
        text.push_str(marker);
    }
    text
}

fn shell(args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    let command = arg(args, "command")?;
    // A cleared environment but for the safe variables, `sh -c` in the workspace, killed at the
    // timeout (exit 124 from `timeout`).
    let script = format!(
        "mkdir -p {ws} && cd {ws} || exit 125\n\
         set --\n\
         for v in {SAFE_ENV_VARS}; do eval \"s=\\${{$v+x}}\"; [ \"$s\" = x ] && eval \"set -- \\\"\\$@\\\" \\\"$v=\\${{$v}}\\\"\"; done\n\
         exec timeout -s KILL {SHELL_TIMEOUT_SECS} env -i \"$@\" sh -c {cmd}",
        ws = quote(workspace),
        cmd = quote(command),
    );
    let ran = match exec::sh(&script, SHELL_TIMEOUT_SECS + 5) {
        Ok(ran) => ran,
        Err(e) => return Ok(fail(format!("Failed to execute command: {e}"))),
    };
    if ran.code == 124 || ran.code == 137 {
        return Ok(fail(format!("Command timed out after {SHELL_TIMEOUT_SECS}s and was killed")));
    }
    let stdout = cap(String::from_utf8_lossy(&ran.stdout).into_owned(), "\n... [output truncated at 1MB]");
    let stderr = cap(String::from_utf8_lossy(&ran.stderr).into_owned(), "\n... [stderr truncated at 1MB]");
    Ok(Outcome { success: ran.code == 0, output: stdout, error: (!stderr.is_empty()).then_some(stderr) })
}

/// The bytes of the file at `path`, or ZeroClaw's error for it.
fn read_bytes(path: &str, missing: &str) -> Result<Vec<u8>, Outcome> {
    let p = quote(path);
    let script = format!("[ -e {p} ] || exit 2\n[ -d {p} ] && exit 21\n[ -r {p} ] || exit 13\nhead -c 10485761 -- {p}");
    match exec::sh(&script, 30) {
        Ok(ran) if ran.code == 0 => Ok(ran.stdout),
        Ok(ran) => Err(fail(match ran.code {
            2 => format!("{missing}: No such file or directory (os error 2)"),
            21 => "Failed to read file: Is a directory (os error 21)".to_string(),
            13 => format!("{missing}: Permission denied (os error 13)"),
            _ => format!("Failed to read file: {}", String::from_utf8_lossy(&ran.stderr).trim()),
        })),
        Err(e) => Err(fail(format!("Failed to read file: {e}"))),
    }
}

fn file_read(args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    let path = arg(args, "path")?;
    let bytes = match read_bytes(&resolve(workspace, path), "Failed to resolve file path") {
        Ok(bytes) => bytes,
        Err(outcome) => return Ok(outcome),
    };
    if bytes.len() > 10 * 1024 * 1024 {
        return Ok(fail(format!("File too large: {} bytes (limit: 10485760 bytes)", bytes.len())));
    }
    if args.get("encoding").and_then(Value::as_str) == Some("base64") {
        return Ok(ok(base64::engine::general_purpose::STANDARD.encode(&bytes)));
    }
    let contents = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = contents.lines().collect();
    let total = lines.len();
    if total == 0 {
        return Ok(ok(String::new()));
    }
    let offset = args.get("offset").and_then(Value::as_u64).map(|v| v.max(1) as usize - 1).unwrap_or(0);
    let start = offset.min(total);
    let end = match args.get("limit").and_then(Value::as_u64) {
        Some(limit) => start.saturating_add(limit as usize).min(total),
        None => total,
    };
    if start >= end {
        return Ok(ok(format!("[No lines in range, file has {total} lines]")));
    }
    let numbered: Vec<String> =
        lines[start..end].iter().enumerate().map(|(i, line)| format!("{}: {line}", start + i + 1)).collect();
    let summary = if start > 0 || end < total {
        format!("\n[Lines {}-{end} of {total}]", start + 1)
    } else {
        format!("\n[{total} lines total]")
    };
    Ok(ok(format!("{}{summary}", numbered.join("\n"))))
}

/// Writes `bytes` to `path` (its directory made first); ZeroClaw's error when it cannot.
fn write_bytes(path: &str, bytes: &[u8]) -> Result<(), Outcome> {
    let p = quote(path);
    let script = format!(
        "mkdir -p -- \"$(dirname -- {p})\" || exit 3\n[ -L {p} ] && exit 40\nprintf %s {data} | base64 -d > {p}",
        data = quote(&exec::encode(bytes)),
    );
    match exec::sh(&script, 60) {
        Ok(ran) if ran.code == 0 => Ok(()),
        Ok(ran) if ran.code == 40 => Err(fail(format!("Refusing to write through symlink: {path}"))),
        Ok(ran) => Err(fail(format!("Failed to write file: {}", String::from_utf8_lossy(&ran.stderr).trim()))),
        Err(e) => Err(fail(format!("Failed to write file: {e}"))),
    }
}

fn file_write(args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    let path = arg(args, "path")?;
    let content = arg(args, "content")?;
    let bytes = match args.get("encoding").and_then(Value::as_str).unwrap_or("utf8") {
        "base64" => match base64::engine::general_purpose::STANDARD.decode(content.trim()) {
            Ok(bytes) => bytes,
            Err(e) => return Ok(fail(format!("Invalid base64 content: {e}"))),
        },
        _ => content.as_bytes().to_vec(),
    };
    Ok(match write_bytes(&resolve(workspace, path), &bytes) {
        Ok(()) => ok(format!("Written {} bytes to {path}", bytes.len())),
        Err(outcome) => outcome,
    })
}

/// ZeroClaw's words for an `old_string` that is not in the file.
fn no_match_diagnostic(content: &str, old_string: &str) -> String {
    let strip = |s: &str| s.lines().map(str::trim_start).collect::<Vec<_>>().join("\n");
    match strip(content).matches(strip(old_string).as_str()).count() {
        0 => "old_string not found in file".to_string(),
        1 => "old_string not found exactly: a block matching it ignoring leading whitespace exists exactly once. \
              The difference is indentation (width, or tabs vs spaces). Re-read the target region and copy its \
              leading whitespace exactly, then retry."
            .to_string(),
        n => format!(
            "old_string not found exactly: {n} blocks match it when leading whitespace is ignored. Indentation \
             differs and the target is ambiguous. Re-read the region, copy exact indentation, and include enough \
             surrounding lines to make the match unique."
        ),
    }
}

fn file_edit(args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    let path = arg(args, "path")?;
    let old = arg(args, "old_string")?;
    let new = arg(args, "new_string")?;
    if old.is_empty() {
        return Ok(fail("old_string must not be empty"));
    }
    let full = resolve(workspace, path);
    let content = match read_bytes(&full, "Failed to read file") {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => return Ok(fail("Failed to read file: stream did not contain valid UTF-8")),
        },
        Err(outcome) => return Ok(outcome),
    };
    match content.matches(old).count() {
        0 => return Ok(fail(no_match_diagnostic(&content, old))),
        1 => {}
        n => return Ok(fail(format!("old_string matches {n} times; must match exactly once"))),
    }
    let edited = content.replacen(old, new, 1);
    Ok(match write_bytes(&full, edited.as_bytes()) {
        Ok(()) => ok(format!("Edited {path}: replaced 1 occurrence ({} bytes)", edited.len())),
        Err(outcome) => outcome,
    })
}

/// Every file under the workspace, relative to it (symlinks to files included).
fn workspace_files(workspace: &str) -> Result<Vec<String>, String> {
    let ws = quote(workspace);
    let script = format!("cd {ws} || exit 2\nfind . \\( -type f -o \\( -type l -xtype f \\) \\) -print0");
    let ran = exec::sh(&script, SEARCH_TIMEOUT_SECS)?;
    if ran.code != 0 {
        return Err(String::from_utf8_lossy(&ran.stderr).trim().to_string());
    }
    Ok(ran
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).trim_start_matches("./").to_string())
        .collect())
}

fn glob_search(args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    let pattern = arg(args, "pattern")?;
    if pattern.starts_with('/') || pattern.starts_with('\\') {
        return Ok(fail("Absolute paths are not allowed. Use a relative glob pattern."));
    }
    if pattern.contains("../") || pattern.contains("..\\") || pattern == ".." {
        return Ok(fail("Path traversal ('..') is not allowed."));
    }
    let matcher = match glob::Pattern::new(pattern) {
        Ok(p) => p,
        Err(e) => return Ok(fail(format!("Invalid glob pattern: {e}"))),
    };
    // `glob::glob` walks path components: `*` never crosses a `/`.
    let options = glob::MatchOptions { require_literal_separator: true, ..glob::MatchOptions::new() };
    let files = match workspace_files(workspace) {
        Ok(files) => files,
        Err(e) => return Ok(fail(format!("Cannot resolve workspace directory: {e}"))),
    };
    let mut results: Vec<String> = files.into_iter().filter(|f| matcher.matches_with(f, options)).collect();
    results.sort();
    let truncated = results.len() > MAX_RESULTS;
    results.truncate(MAX_RESULTS);
    if results.is_empty() {
        return Ok(ok(format!("No files matching pattern '{pattern}' found in workspace.")));
    }
    let mut out = results.join("\n");
    if truncated {
        out += &format!("\n\n[Results truncated: showing first {MAX_RESULTS} of more matches]");
    }
    out += &format!("\n\nTotal: {} files", results.len());
    Ok(ok(out))
}

fn content_search(args: &Value, workspace: &str) -> Result<Outcome, Failed> {
    let pattern = arg(args, "pattern")?;
    if pattern.is_empty() {
        return Ok(fail("Empty pattern is not allowed."));
    }
    let search_path = args.get("path").and_then(Value::as_str).unwrap_or(".");
    let mode = args.get("output_mode").and_then(Value::as_str).unwrap_or("content");
    if !["content", "files_with_matches", "count"].contains(&mode) {
        return Ok(fail(format!("Invalid output_mode '{mode}'. Allowed values: content, files_with_matches, count.")));
    }
    if search_path.contains("../") || search_path.contains("..\\") || search_path == ".." {
        return Ok(fail("Path traversal ('..') is not allowed."));
    }
    let number = |k: &str| args.get(k).and_then(Value::as_u64).unwrap_or(0);
    let case_sensitive = args.get("case_sensitive").and_then(Value::as_bool).unwrap_or(true);
    let multiline = args.get("multiline").and_then(Value::as_bool).unwrap_or(false);
    let max_results =
        args.get("max_results").and_then(Value::as_u64).map_or(MAX_RESULTS, |v| v as usize).min(MAX_RESULTS);
    let include = args.get("include").and_then(Value::as_str);
    // ripgrep where the sandbox has it, else grep, with the release's flags for each.
    let mut rg = "rg --no-heading --line-number --with-filename".to_string();
    let mut grep = "grep -r -n -E --binary-files=without-match".to_string();
    match mode {
        "files_with_matches" => {
            rg += " --files-with-matches";
            grep += " -l";
        }
        "count" => {
            rg += " --count";
            grep += " -c";
        }
        _ => {
            for (flag, key) in [("-B", "context_before"), ("-A", "context_after")] {
                if number(key) > 0 {
                    rg += &format!(" {flag} {}", number(key));
                    grep += &format!(" {flag} {}", number(key));
                }
            }
        }
    }
    if !case_sensitive {
        rg += " -i";
        grep += " -i";
    }
    if multiline {
        rg += " -U --multiline-dotall";
    }
    if let Some(glob) = include {
        rg += &format!(" --glob {}", quote(glob));
        grep += &format!(" --include {}", quote(glob));
    }
    let tail = format!(" -- {} \"$p\"", quote(pattern));
    let script = format!(
        "cd {ws} || exit 3\np=$(realpath -e -- {path} 2>&1) || {{ printf '%s' \"$p\" | sed 's/^realpath: [^:]*: //' >&2; exit 4; }}\n\
         if command -v rg >/dev/null; then {rg}{tail}; else {multi}{grep}{tail}; fi",
        ws = quote(workspace),
        path = quote(&resolve(workspace, search_path)),
        multi = if multiline { "echo multiline >&2; exit 5; " } else { "" },
    );
    let ran = match exec::sh(&script, SEARCH_TIMEOUT_SECS) {
        Ok(ran) => ran,
        Err(e) if e.starts_with("timed out") => {
            return Ok(fail(format!("Search timed out after {SEARCH_TIMEOUT_SECS} seconds.")));
        }
        Err(e) => return Ok(fail(format!("Failed to execute search command: {e}"))),
    };
    let stderr = String::from_utf8_lossy(&ran.stderr).trim().to_string();
    match ran.code {
        0 | 1 => {}
        4 => return Ok(fail(format!("Cannot resolve path '{search_path}': {stderr}"))),
        5 => return Ok(fail("Multiline matching requires ripgrep (rg), which is not available.")),
        _ => return Ok(fail(format!("Search error: {stderr}"))),
    }
    let raw = String::from_utf8_lossy(&ran.stdout);
    let formatted = format_lines(&raw, workspace.trim_end_matches('/'), mode, max_results);
    Ok(ok(cap(formatted, "\n\n[Output truncated: exceeded 1 MB limit]")))
}

/// Where `line` has `sep` digits `sep` after at least one character: the earliest such `sep`.
fn numbered_at(line: &str, sep: u8) -> Option<usize> {
    let b = line.as_bytes();
    (1..b.len()).find(|&i| {
        b[i] == sep && {
            let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
            digits > 0 && b.get(i + 1 + digits) == Some(&sep)
        }
    })
}

/// The search's lines as ZeroClaw formats them (`format_line_output`).
fn format_lines(raw: &str, workspace: &str, mode: &str, max_results: usize) -> String {
    if raw.trim().is_empty() {
        return "No matches found.".into();
    }
    let mut lines: Vec<String> = Vec::new();
    let mut files = BTreeSet::new();
    let (mut total, mut truncated, mut limit_reached) = (0usize, false, false);
    for line in raw.lines().filter(|l| !l.is_empty()) {
        let line = match line.strip_prefix(workspace) {
            Some(rest) => rest.strip_prefix('/').unwrap_or(rest).to_string(),
            None => line.to_string(),
        };
        match mode {
            "files_with_matches" => {
                let path = line.trim().to_string();
                if !path.is_empty() && files.insert(path.clone()) {
                    lines.push(path);
                    if lines.len() >= max_results {
                        truncated = true;
                        break;
                    }
                }
            }
            "count" => {
                let parsed =
                    line.trim_end().rsplit_once(':').and_then(|(p, c)| Some((p.to_string(), c.parse::<usize>().ok()?)));
                if let Some((path, count)) = parsed
                    && count > 0
                {
                    total += count;
                    lines.push(format!("{path}:{count}"));
                    files.insert(path);
                    if lines.len() >= max_results {
                        truncated = true;
                        break;
                    }
                }
            }
            _ => {
                if line == "--" {
                    lines.push(line);
                    continue;
                }
                let parsed =
                    numbered_at(&line, b':').map(|i| (i, true)).or(numbered_at(&line, b'-').map(|i| (i, false)));
                let is_match = match parsed {
                    Some((i, is_match)) => {
                        if limit_reached && is_match {
                            break;
                        }
                        files.insert(line[..i].to_string());
                        is_match
                    }
                    None => true,
                };
                if is_match {
                    if total >= max_results {
                        truncated = true;
                        break;
                    }
                    total += 1;
                    if total >= max_results {
                        truncated = true;
                        limit_reached = true;
                    }
                }
                lines.push(line);
            }
        }
    }
    if lines.is_empty() {
        return "No matches found.".into();
    }
    let mut out = lines.join("\n");
    if truncated {
        out += &format!("\n\n[Results truncated: showing first {max_results} results]");
    }
    out += &match mode {
        "files_with_matches" => format!("\n\nTotal: {} files", files.len()),
        "count" => format!("\n\nTotal: {total} matches in {} files", files.len()),
        _ => format!("\n\nTotal: {total} matching lines in {} files", files.len()),
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_lines_are_counted_as_zeroclaw_counts_them() {
        let raw = "/w/src/main.rs-1-use std::fmt;\n/w/src/main.rs:2:fn main() {}\n--\n/w/src/lib.rs:10:pub fn f() {}";
        let out = format_lines(raw, "/w", "content", 100);
        assert!(out.starts_with("src/main.rs-1-use std::fmt;\nsrc/main.rs:2:fn main() {}\n--\n"), "{out}");
        assert!(out.ends_with("\n\nTotal: 2 matching lines in 2 files"), "{out}");
        assert_eq!(format_lines("a:3\nb:0\n", "/w", "count", 100), "a:3\n\nTotal: 3 matches in 1 files");
        assert_eq!(format_lines("", "/w", "content", 100), "No matches found.");
    }

    #[test]
    fn a_missing_string_is_diagnosed_by_indentation() {
        assert_eq!(no_match_diagnostic("a\nb", "c"), "old_string not found in file");
        assert!(no_match_diagnostic("    x = 1\n", "  x = 1").contains("exists exactly once"));
    }

    #[test]
    fn paths_resolve_from_the_workspace() {
        assert_eq!(resolve("/w/", "a/b"), "/w/a/b");
        assert_eq!(resolve("/w", "/etc/x"), "/etc/x");
    }
}
