//! Chunked byte streams to text without splitting a UTF-8 sequence across frames.

#[derive(Default)]
pub struct Utf8Chunker {
    carry: Vec<u8>,
}

impl Utf8Chunker {
    /// Returns the text of `carry + chunk` up to the last complete character; an incomplete
    /// trailing sequence waits for the next chunk. Invalid bytes become U+FFFD.
    pub fn push(&mut self, chunk: &[u8]) -> String {
        self.carry.extend_from_slice(chunk);
        let keep = incomplete_suffix_len(&self.carry);
        let complete = self.carry.len() - keep;
        let text = String::from_utf8_lossy(&self.carry[..complete]).into_owned();
        self.carry.drain(..complete);
        text
    }

    /// What is left at end of stream.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.carry).into_owned();
        self.carry.clear();
        text
    }
}

/// Length of a trailing, possibly valid but unfinished UTF-8 sequence (0..=3 bytes).
fn incomplete_suffix_len(bytes: &[u8]) -> usize {
    for back in 1..=3.min(bytes.len()) {
        let b = bytes[bytes.len() - back];
        if b & 0b1100_0000 == 0b1000_0000 {
            continue; // continuation byte: look further back for the lead byte
        }
        let needed = match b {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if needed > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_multibyte_characters_are_joined() {
        let text = "héllo wörld 🎉";
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            let mut c = Utf8Chunker::default();
            let mut out = c.push(&bytes[..split]);
            out += &c.push(&bytes[split..]);
            out += &c.finish();
            assert_eq!(out, text, "split at {split}");
        }
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut c = Utf8Chunker::default();
        let out = c.push(&[b'a', 0xFF, b'b']) + &c.finish();
        assert_eq!(out, "a\u{FFFD}b");
    }
}
