//! ZeroClaw's loop detection over a sliding window of the last 20 tool calls, recorded after each
//! call ran (name, canonical arguments, result): the same call three times in a row warns, a
//! fourth is flagged as blocked, a fifth ends the run; two tools alternating for four cycles warn,
//! five block, six end it; one tool returning the same result for different arguments five times
//! warns (no progress), six block, seven end it. The messages are ZeroClaw's.

use std::collections::VecDeque;

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    /// Nudge the model (`[Loop Detection] …` in the system prompt).
    Warn(String),
    /// Tell the model harder (`[Loop Detection — BLOCKED] …`).
    Block(String),
    /// End the run.
    Break(String),
}

#[derive(Debug, Clone, PartialEq)]
struct Record {
    name: String,
    args: String,
    result: u64,
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

    /// Records a call that ran and what it returned; what to tell the model, if anything.
    pub fn record(&mut self, name: &str, args: &str, output: &str) -> Verdict {
        if self.window.len() == self.size {
            self.window.pop_front();
        }
        self.window.push_back(Record { name: name.into(), args: canonical(args), result: hash(output) });
        self.exact_repeat().or_else(|| self.ping_pong()).or_else(|| self.no_progress()).unwrap_or(Verdict::Ok)
    }

    fn exact_repeat(&self) -> Option<Verdict> {
        let last = self.window.back()?;
        let n = self.window.iter().rev().take_while(|r| r.name == last.name && r.args == last.args).count();
        let max = self.max_repeats;
        if n >= max + 2 {
            Some(Verdict::Break(format!(
                "Circuit breaker: tool '{}' called {n} times consecutively with identical arguments",
                last.name
            )))
        } else if n > max {
            Some(Verdict::Block(format!(
                "Blocked: tool '{}' called {n} times consecutively with identical arguments",
                last.name
            )))
        } else if n == max {
            Some(Verdict::Warn(format!(
                "Warning: tool '{}' has been called {n} times consecutively with identical arguments. Try a different approach.",
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
                "Circuit breaker: tools '{a}' and '{b}' have been alternating for {cycles} cycles"
            )))
        } else if cycles > CYCLES {
            Some(Verdict::Block(format!("Blocked: tools '{a}' and '{b}' have been alternating for {cycles} cycles")))
        } else if cycles == CYCLES {
            Some(Verdict::Warn(format!(
                "Warning: tools '{a}' and '{b}' appear to be alternating ({cycles} cycles). Consider a different strategy."
            )))
        } else {
            None
        }
    }

    /// One tool returning the same result for different arguments, again and again.
    fn no_progress(&self) -> Option<Verdict> {
        const MIN: usize = 5;
        let last = self.window.back()?;
        let same: Vec<&Record> =
            self.window.iter().filter(|r| r.name == last.name && r.result == last.result).collect();
        let n = same.len();
        let distinct_args = same.iter().map(|r| r.args.as_str()).collect::<std::collections::HashSet<_>>().len();
        if n < MIN || distinct_args < 2 {
            return None;
        }
        Some(if n >= MIN + 2 {
            Verdict::Break(format!(
                "Circuit breaker: tool '{}' called {n} times with different arguments but identical results — no progress",
                last.name
            ))
        } else if n > MIN {
            Verdict::Block(format!(
                "Blocked: tool '{}' called {n} times with different arguments but identical results",
                last.name
            ))
        } else {
            Verdict::Warn(format!(
                "Warning: tool '{}' called {n} times with different arguments but identical results. The current approach may not be making progress.",
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
        let verdicts: Vec<Verdict> = (0..5).map(|_| g.record("ls", r#"{"b":1,"a":2}"#, "x")).collect();
        assert_eq!(verdicts[..2], [Verdict::Ok, Verdict::Ok]);
        assert!(matches!(&verdicts[2], Verdict::Warn(m) if m.contains("3 times consecutively")));
        assert!(matches!(verdicts[3], Verdict::Block(_)));
        assert!(matches!(verdicts[4], Verdict::Break(_)));
        // Key order does not hide a repeat; different arguments reset it.
        let mut g = LoopGuard::new(20, 3);
        g.record("ls", r#"{"a":2,"b":1}"#, "x");
        g.record("ls", r#"{"b":1,"a":2}"#, "y");
        assert!(matches!(g.record("ls", r#"{ "a": 2, "b": 1 }"#, "z"), Verdict::Warn(_)));
        assert_eq!(g.record("ls", r#"{"a":3}"#, "w"), Verdict::Ok);
    }

    #[test]
    fn alternating_tools_and_no_progress_are_caught() {
        let mut g = LoopGuard::new(20, 3);
        let mut last = Verdict::Ok;
        for i in 0..8 {
            last = g.record(if i % 2 == 0 { "read" } else { "write" }, &format!("{{\"i\":{i}}}"), &i.to_string());
        }
        assert!(
            matches!(&last, Verdict::Warn(m) if m.contains("'write' and 'read' appear to be alternating (4 cycles)")),
            "{last:?}"
        );
        for i in 8..10 {
            last = g.record(if i % 2 == 0 { "read" } else { "write" }, &format!("{{\"i\":{i}}}"), &i.to_string());
        }
        assert!(matches!(last, Verdict::Block(_)), "{last:?}");
        let mut g = LoopGuard::new(20, 3);
        let verdicts: Vec<Verdict> =
            (0..7).map(|i| g.record("search", &format!("{{\"q\":{i}}}"), "nothing found")).collect();
        assert_eq!(verdicts[3], Verdict::Ok);
        assert!(matches!(&verdicts[4], Verdict::Warn(m) if m.contains("identical results")));
        assert!(matches!(verdicts[5], Verdict::Block(_)));
        assert!(matches!(verdicts[6], Verdict::Break(_)));
    }
}
