//! Seeded error injection, to measure how an agent copes: each call may get, instead of its
//! answer, a 500, a 429 with `Retry-After`, or a timeout (the answer withheld, then a 504). The
//! draw depends only on the seed and the call's number, so a run is reproducible.

#[derive(Debug, Clone, Copy, PartialEq)]
/// Faults injected into answers, deterministically from a seed.
pub struct Faults {
    /// The seed.
    pub seed: u64,
    /// Probability per call of a fault.
    pub rate: f64,
    /// How long a timeout withholds the answer.
    pub timeout_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// One injected fault.
pub enum Fault {
    /// A 500.
    ServerError,
    /// A 429 with Retry-After.
    RateLimited,
    /// No answer until the client gives up.
    Timeout,
}

impl Faults {
    /// `SEED:RATE[:TIMEOUT_MS]`, e.g. `7:0.2`.
    pub fn parse(s: &str) -> Result<Faults, String> {
        let mut parts = s.split(':');
        let seed = parts.next().and_then(|p| p.parse().ok()).ok_or("--faults: SEED:RATE[:TIMEOUT_MS]")?;
        let rate: f64 = parts.next().and_then(|p| p.parse().ok()).ok_or("--faults: SEED:RATE[:TIMEOUT_MS]")?;
        if !(0.0..=1.0).contains(&rate) {
            return Err("--faults: RATE is a probability".into());
        }
        let timeout_ms =
            parts.next().map(|p| p.parse().map_err(|_| "--faults: TIMEOUT_MS")).transpose()?.unwrap_or(3000);
        Ok(Faults { seed, rate, timeout_ms })
    }

    /// The fault of call number `n`, if it gets one.
    pub fn draw(&self, n: u64) -> Option<Fault> {
        let mut h = self.seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^= h >> 31;
        let u = (h >> 11) as f64 / (1u64 << 53) as f64;
        if u >= self.rate {
            return None;
        }
        Some(match h % 3 {
            0 => Fault::ServerError,
            1 => Fault::RateLimited,
            _ => Fault::Timeout,
        })
    }
}
