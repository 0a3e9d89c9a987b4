//! Bounded capture of one output stream: the first and last N bytes are kept in memory, and once
//! the stream outgrows them the whole of it is spilled to a file in the sandbox.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use orchard_protocol::{Output, OutputLimit};

pub struct BoundedOutput {
    limit: OutputLimit,
    /// Everything, while the stream still fits in head + tail; afterwards only the head.
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
    spill_path: PathBuf,
    spill: Option<File>,
    spill_error: Option<String>,
}

impl BoundedOutput {
    pub fn new(limit: OutputLimit, spill_path: PathBuf) -> Self {
        BoundedOutput {
            limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spill_path,
            spill: None,
            spill_error: None,
        }
    }

    fn overflowed(&self) -> bool {
        self.total > self.limit.head_bytes + self.limit.tail_bytes
    }

    pub fn push(&mut self, chunk: &[u8]) {
        let was_overflowed = self.overflowed();
        self.total += chunk.len() as u64;
        if !self.overflowed() {
            self.head.extend_from_slice(chunk);
            return;
        }
        if !was_overflowed {
            // First overflow: everything so far goes to the spill file, then split head/tail.
            self.open_spill();
            let mut all = std::mem::take(&mut self.head);
            all.extend_from_slice(chunk);
            self.write_spill(&all);
            let head_len = (self.limit.head_bytes as usize).min(all.len());
            self.tail.extend(&all[head_len..]);
            all.truncate(head_len);
            self.head = all;
        } else {
            self.write_spill(chunk);
            self.tail.extend(chunk);
        }
        let excess = self.tail.len().saturating_sub(self.limit.tail_bytes as usize);
        self.tail.drain(..excess);
    }

    fn open_spill(&mut self) {
        if let Some(dir) = self.spill_path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        match File::create(&self.spill_path) {
            Ok(f) => self.spill = Some(f),
            Err(e) => self.spill_error = Some(format!("cannot write {}: {e}", self.spill_path.display())),
        }
    }

    fn write_spill(&mut self, bytes: &[u8]) {
        if let Some(f) = &mut self.spill
            && let Err(e) = f.write_all(bytes)
        {
            self.spill_error = Some(format!("writing {} failed: {e}", self.spill_path.display()));
            self.spill = None;
        }
    }

    pub fn finish(self) -> Output {
        if !self.overflowed() {
            return Output {
                text: String::from_utf8_lossy(&self.head).into_owned(),
                total_bytes: self.total,
                truncated: false,
                full_output_path: None,
            };
        }
        let omitted = self.total - self.head.len() as u64 - self.tail.len() as u64;
        let (tail_a, tail_b) = self.tail.as_slices();
        let tail = [tail_a, tail_b].concat();
        let where_ = match &self.spill_error {
            None => format!("full output in {}", self.spill_path.display()),
            Some(err) => format!("full output lost: {err}"),
        };
        let text = format!(
            "{}\n[... orchard: {omitted} bytes omitted; {where_} ...]\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        );
        Output {
            text,
            total_bytes: self.total,
            truncated: true,
            full_output_path: self.spill_error.is_none().then(|| self.spill_path.display().to_string()),
        }
    }
}

/// The bounded view of a stream that sits in a file (a session command's output), from byte
/// `from` to the file's current end, and that end. The file is the spill when this view is
/// truncated; otherwise it is removed if `remove` (the command ended and no earlier view
/// pointed at the file).
pub fn bounded_from_file(path: &std::path::Path, from: u64, limit: OutputLimit, remove: bool) -> (Output, u64) {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = File::open(path) else {
        return (Output::default(), from);
    };
    let end = file.metadata().map(|m| m.len()).unwrap_or(0).max(from);
    let total = end - from;
    let mut read_at = |offset: u64, len: u64| {
        let mut buf = Vec::new();
        if file.seek(SeekFrom::Start(from + offset)).is_ok() {
            let _ = (&mut file).take(len).read_to_end(&mut buf);
        }
        buf
    };
    if total <= limit.head_bytes + limit.tail_bytes {
        let all = read_at(0, total);
        if remove {
            let _ = std::fs::remove_file(path);
        }
        let output = Output {
            text: String::from_utf8_lossy(&all).into_owned(),
            total_bytes: total,
            truncated: false,
            full_output_path: None,
        };
        return (output, end);
    }
    let head = read_at(0, limit.head_bytes);
    let tail = read_at(total - limit.tail_bytes, limit.tail_bytes);
    let omitted = total - limit.head_bytes - limit.tail_bytes;
    let output = Output {
        text: format!(
            "{}\n[... orchard: {omitted} bytes omitted; full output in {} ...]\n{}",
            String::from_utf8_lossy(&head),
            path.display(),
            String::from_utf8_lossy(&tail)
        ),
        total_bytes: total,
        truncated: true,
        full_output_path: Some(path.display().to_string()),
    };
    (output, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(head: u64, tail: u64) -> OutputLimit {
        OutputLimit { head_bytes: head, tail_bytes: tail }
    }

    #[test]
    fn small_output_is_kept_whole_and_not_spilled() {
        let dir = std::env::temp_dir().join(format!("orchard-out-{}", std::process::id()));
        let spill = dir.join("small.out");
        let mut out = BoundedOutput::new(limit(4, 4), spill.clone());
        out.push(b"abc");
        out.push(b"defgh");
        let o = out.finish();
        assert_eq!(o.text, "abcdefgh");
        assert!(!o.truncated);
        assert!(!spill.exists());
    }

    #[test]
    fn large_output_keeps_head_and_tail_and_spills_everything() {
        let dir = std::env::temp_dir().join(format!("orchard-out-big-{}", std::process::id()));
        let spill = dir.join("big.out");
        let mut out = BoundedOutput::new(limit(5, 3), spill.clone());
        let data: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for chunk in data.chunks(7) {
            out.push(chunk);
        }
        let o = out.finish();
        assert!(o.truncated);
        assert_eq!(o.total_bytes, 1000);
        assert!(o.text.starts_with("abcde\n[... orchard: 992 bytes omitted"), "{}", o.text);
        let tail = String::from_utf8(data[997..].to_vec()).unwrap();
        assert!(o.text.ends_with(&format!("...]\n{tail}")), "{}", o.text);
        assert_eq!(std::fs::read(&spill).unwrap(), data);
        assert_eq!(o.full_output_path.as_deref(), Some(spill.to_str().unwrap()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
