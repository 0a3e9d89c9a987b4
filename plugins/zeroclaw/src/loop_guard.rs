//! ZeroClaw's loop detection over a sliding window of the last 20 tool calls: the same call
//! (name and canonical arguments) three times in a row warns, a fourth is refused, a fifth ends
//! the run; two tools alternating for four cycles warn, five refuse, six end the run; the same
//! call returning the same result over and over (no progress) warns.

use std::collections::VecDeque;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Run the call, then nudge the model with this.
    Warn(String),
    /// Do not run the call; answer it with this.
    Block(String),
    /// End the run.
    Break(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Record {
    name: String,
    args: String,
    result: Option<u64>,
}

pub struct LoopGuard {
    window: VecDeque<Record>,
    size: usize,
    max_repeats: usize,
}

/// Arguments with object keys sorted, so that key order does not hide a repeat.
pub fn canonical(args: &str) -> String {
    fn sort(v: Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<(String, Value)> = m.into_iter().collect();
                keys.sort_by(|a, b| a.0.cmp(&b.0));
                Value::Object(keys.into_iter().map(|(k, v)| (k, sort(v))).collect())
            }
            Value::Array(a) => Value::Array(a.into_iter().map(sort).collect()),
            other => other,
        }
    }
    serde_json::from_str::<Value>(args).map(|v| sort(v).to_string()).unwrap_or_else(|_| args.trim().to_string())
}

fn hash(s: &str) -> u64 {
    // FNV-1a: stable across runs (std's hasher is randomly seeded per process in some builds).
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

impl LoopGuard {
    pub fn new(size: usize, max_repeats: usize) -> LoopGuard {
        LoopGuard { window: VecDeque::new(), size: size.max(2), max_repeats: max_repeats.max(1) }
    }

    /// Before running a call: whether it may run (and the nudge to give after it).
    pub fn check(&mut self, name: &str, args: &str) -> Verdict {
        let record = Record { name: name.into(), args: canonical(args), result: None };
        if self.window.len() == self.size {
            self.window.pop_front();
        }
        self.window.push_back(record);
        self.exact_repeat().or_else(|| self.ping_pong()).or_else(|| self.no_progress()).unwrap_or(Verdict::Ok)
    }

    /// After running it: what it returned (for the no-progress rule).
    pub fn returned(&mut self, output: &str) {
        if let Some(last) = self.window.back_mut() {
            last.result = Some(hash(output));
        }
    }

    fn exact_repeat(&self) -> Option<Verdict> {
        let last = self.window.back()?;
        let n = self.window.iter().rev().take_while(|r| r.name == last.name && r.args == last.args).count();
        let max = self.max_repeats;
        if n >= max + 2 {
            Some(Verdict::Break(format!(
                "Circuit breaker: tool '{}' called {n} times in a row with identical arguments",
                last.name
            )))
        } else if n > max {
            Some(Verdict::Block(format!(
                "Blocked: tool '{}' called {n} times in a row with identical arguments",
                last.name
            )))
        } else if n == max {
            Some(Verdict::Warn(format!(
                "Warning: tool '{}' has been called {n} times in a row with identical arguments. Try a different approach.",
                last.name
            )))
        } else {
            None
        }
    }

    fn ping_pong(&self) -> Option<Verdict> {
        const CYCLES: usize = 4;
        let calls: Vec<&Record> = self.window.iter().rev().collect();
        if calls.len() < CYCLES * 2 || calls[0].name == calls[1].name {
            return None;
        }
        let (a, b) = (&calls[0].name, &calls[1].name);
        let cycles =
            calls.chunks(2).take_while(|pair| pair.len() == 2 && &pair[0].name == a && &pair[1].name == b).count();
        if cycles >= CYCLES + 2 {
            Some(Verdict::Break(format!(
                "Circuit breaker: tools '{b}' and '{a}' have been alternating for {cycles} cycles"
            )))
        } else if cycles > CYCLES {
            Some(Verdict::Block(format!("Blocked: tools '{b}' and '{a}' have been alternating for {cycles} cycles")))
        } else if cycles == CYCLES {
            Some(Verdict::Warn(format!(
                "Warning: tools '{b}' and '{a}' have been alternating for {cycles} cycles. Step back and change approach."
            )))
        } else {
            None
        }
    }

    /// The same tool has returned the same output five times in the window.
    fn no_progress(&self) -> Option<Verdict> {
        let last = self.window.iter().rev().nth(1)?;
        let result = last.result?;
        let same = self.window.iter().filter(|r| r.name == last.name && r.result == Some(result)).count();
        (same >= 5).then(|| {
            Verdict::Warn(format!(
                "Warning: tool '{}' keeps returning the same result ({same} times). You are not making progress.",
                last.name
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_calls_warn_then_block_then_break() {
        let mut g = LoopGuard::new(20, 3);
        let mut verdicts = Vec::new();
        for _ in 0..5 {
            verdicts.push(g.check("ls", r#"{"b":1,"a":2}"#));
            g.returned("x");
        }
        assert_eq!(verdicts[..2], [Verdict::Ok, Verdict::Ok]);
        assert!(matches!(verdicts[2], Verdict::Warn(_)));
        assert!(matches!(verdicts[3], Verdict::Block(_)));
        assert!(matches!(verdicts[4], Verdict::Break(_)));
        // Key order does not hide a repeat; different arguments reset it.
        let mut g = LoopGuard::new(20, 3);
        g.check("ls", r#"{"a":2,"b":1}"#);
        g.check("ls", r#"{"b":1,"a":2}"#);
        assert!(matches!(g.check("ls", r#"{ "a": 2, "b": 1 }"#), Verdict::Warn(_)));
        assert_eq!(g.check("ls", r#"{"a":3}"#), Verdict::Ok);
    }

    #[test]
    fn alternating_tools_are_caught() {
        let mut g = LoopGuard::new(20, 3);
        let mut last = Verdict::Ok;
        for i in 0..8 {
            last = g.check(if i % 2 == 0 { "read" } else { "write" }, &format!("{{\"i\":{i}}}"));
            g.returned(&i.to_string());
        }
        assert!(matches!(last, Verdict::Warn(ref m) if m.contains("alternating for 4 cycles")), "{last:?}");
        for i in 8..10 {
            last = g.check(if i % 2 == 0 { "read" } else { "write" }, &format!("{{\"i\":{i}}}"));
        }
        assert!(matches!(last, Verdict::Block(_)), "{last:?}");
    }
}
