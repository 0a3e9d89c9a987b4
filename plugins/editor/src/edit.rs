//! The editing rules of `str_replace_editor`, on strings.

/// Lines around an edit shown back to the model.
const SNIPPET_LINES: usize = 4;

/// `cat -n` of `text`, numbering from `first` (1-based), each line followed by a newline. A
/// terminating newline ends the last line rather than adding a blank one (OpenHands' editor).
fn numbered(text: &str, first: usize) -> String {
    let mut lines: Vec<&str> = text.split('\n').collect();
    if lines.last() == Some(&"") {
        lines.pop();
    }
    lines.iter().enumerate().map(|(i, l)| format!("{:>6}\t{l}\n", i + first)).collect()
}

pub fn view(text: &str, path: &str, range: Option<&[i64]>) -> Result<String, String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let (start, body) = match range {
        None => (1, text.to_string()),
        Some([start, end]) => {
            let n = lines.len() as i64;
            if *start < 1 || *start > n {
                return Err(format!(
                    "Invalid `view_range`: [{start}, {end}]. Its first element `{start}` should be within the range of lines of the file: [1, {n}]"
                ));
            }
            let end = if *end == -1 { n } else { *end };
            if end < *start || end > n {
                return Err(format!(
                    "Invalid `view_range`: [{start}, {end}]. Its second element `{end}` should be -1 or within [{start}, {n}]"
                ));
            }
            (*start as usize, lines[*start as usize - 1..end as usize].join("\n"))
        }
        Some(other) => return Err(format!("Invalid `view_range`: {other:?}. It should be a list of two integers.")),
    };
    Ok(format!("Here's the result of running `cat -n` on {path}:\n{}", numbered(&body, start)))
}

/// The snippet around line `line` (0-based) after an edit of `added` lines.
fn snippet(text: &str, path: &str, line: usize, added: usize) -> String {
    let lines: Vec<&str> = text.split('\n').collect();
    let start = line.saturating_sub(SNIPPET_LINES);
    let end = (line + added + SNIPPET_LINES).min(lines.len());
    format!(
        "The file {path} has been edited. Here's the result of running `cat -n` on a snippet of {path}:\n{}Review the changes and make sure they are as expected. Edit the file again if necessary.",
        numbered(&lines[start..end].join("\n"), start + 1)
    )
}

/// Replaces the single occurrence of `old`. Returns the new text and the message.
pub fn str_replace(text: &str, path: &str, old: &str, new: &str) -> Result<(String, String), String> {
    if old.is_empty() {
        return Err("No replacement was performed: `old_str` is empty.".into());
    }
    let at: Vec<usize> = text.match_indices(old).map(|(i, _)| i).collect();
    match at.as_slice() {
        [] => Err(format!("No replacement was performed, old_str `{old}` did not appear verbatim in {path}.")),
        [i] => {
            let updated = format!("{}{new}{}", &text[..*i], &text[i + old.len()..]);
            let line = text[..*i].matches('\n').count();
            let message = snippet(&updated, path, line, new.matches('\n').count() + 1);
            Ok((updated, message))
        }
        many => {
            let lines: Vec<String> = many.iter().map(|i| (text[..*i].matches('\n').count() + 1).to_string()).collect();
            Err(format!(
                "No replacement was performed. Multiple occurrences of old_str `{old}` in lines [{}]. Please ensure it is unique.",
                lines.join(", ")
            ))
        }
    }
}

/// Inserts `new` after line `after` (0: before the first line).
pub fn insert(text: &str, path: &str, after: i64, new: &str) -> Result<(String, String), String> {
    let lines: Vec<&str> = text.split('\n').collect();
    let n = lines.len() as i64;
    if after < 0 || after > n {
        return Err(format!(
            "Invalid `insert_line` parameter: {after}. It should be within the range of lines of the file: [0, {n}]"
        ));
    }
    let at = after as usize;
    let mut out: Vec<&str> = lines[..at].to_vec();
    out.extend(new.split('\n'));
    out.extend_from_slice(&lines[at..]);
    let updated = out.join("\n");
    let message = snippet(&updated, path, at, new.split('\n').count());
    Ok((updated, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "def f():\n    return 1\n\ndef g():\n    return 1\n";

    #[test]
    fn a_unique_match_is_replaced_and_shown() {
        let (out, msg) = str_replace(FILE, "/a.py", "def g():\n    return 1", "def g():\n    return 2").unwrap();
        assert_eq!(out, "def f():\n    return 1\n\ndef g():\n    return 2\n");
        assert!(msg.contains("has been edited") && msg.contains("     5\t    return 2"), "{msg}");
    }

    #[test]
    fn absent_and_repeated_matches_are_refused_precisely() {
        let err = str_replace(FILE, "/a.py", "return 3", "x").unwrap_err();
        assert_eq!(err, "No replacement was performed, old_str `return 3` did not appear verbatim in /a.py.");
        let err = str_replace(FILE, "/a.py", "    return 1", "x").unwrap_err();
        assert_eq!(
            err,
            "No replacement was performed. Multiple occurrences of old_str `    return 1` in lines [2, 5]. Please ensure it is unique."
        );
        assert!(str_replace(FILE, "/a.py", "", "x").is_err());
    }

    #[test]
    fn insert_goes_after_the_line_and_checks_the_range() {
        let (out, _) = insert(FILE, "/a.py", 0, "import os").unwrap();
        assert!(out.starts_with("import os\ndef f():"));
        let (out, _) = insert(FILE, "/a.py", 2, "    # done").unwrap();
        assert_eq!(out.lines().nth(2), Some("    # done"));
        let err = insert(FILE, "/a.py", 99, "x").unwrap_err();
        assert!(err.contains("Invalid `insert_line` parameter: 99") && err.contains("[0, 6]"), "{err}");
    }

    #[test]
    fn view_numbers_lines_and_honours_ranges() {
        let v = view(FILE, "/a.py", Some(&[4, -1])).unwrap();
        assert!(v.contains("     4\tdef g():") && !v.contains("def f"), "{v}");
        assert!(view(FILE, "/a.py", Some(&[0, 2])).is_err());
        assert!(view(FILE, "/a.py", None).unwrap().contains("     1\tdef f():"));
    }
}
