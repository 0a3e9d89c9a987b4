use std::time::Duration;

#[derive(Default)]
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn push(&mut self, d: Duration) {
        self.0.push(d);
    }

    /// The p-th percentile (nearest rank).
    pub fn pct(&self, p: f64) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
        v[rank.clamp(1, v.len()) - 1]
    }

    /// Every sample, in order of size.
    pub fn sorted(&self) -> Vec<Duration> {
        let mut v = self.0.clone();
        v.sort();
        v
    }

    pub fn fmt_ms(&self, p: f64) -> String {
        format!("{:.2} ms", self.pct(p).as_secs_f64() * 1000.0)
    }
}
