//! Text helpers.

/// `text` single-quoted as one word for a POSIX shell.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The first `head` and last `tail` characters of `text`, with a marker saying how much is gone;
/// `text` itself when it fits.
pub fn head_tail(text: &str, head: usize, tail: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= head + tail {
        return text.to_string();
    }
    let omitted = chars.len() - head - tail;
    let first: String = chars[..head].iter().collect();
    let last: String = chars[chars.len() - tail..].iter().collect();
    format!("{first}\n[... {omitted} characters omitted ...]\n{last}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_text_keeps_its_ends() {
        assert_eq!(super::head_tail("abcdefghij", 2, 3), "ab\n[... 5 characters omitted ...]\nhij");
        assert_eq!(super::head_tail("short", 2, 3), "short");
    }
}
