//! What BAR remembers between requests: each task's posterior, per tenant, task source and
//! harness, decayed when the trainer's policy version changes. Kept in this replica's memory
//! (a restarted server starts again from the prior, or from `bar.prior_from`).

use std::collections::HashMap;
use std::sync::Mutex;

use orchard_bar::{Posterior, Prior};

/// What survives of a task's evidence when the policy version changes.
pub const KEEP_PER_VERSION: f64 = 0.6;

#[derive(Default)]
/// What is known of each task's pass rate across requests, per policy version.
pub struct Memory {
    tasks: Mutex<HashMap<String, Remembered>>,
}

#[derive(Clone, Copy)]
struct Remembered {
    posterior: Posterior,
    version: u64,
}

/// A task's key: whose, which dataset, which harness, which task.
pub fn key(tenant: &str, source: &str, harness: &str, task_id: &str) -> String {
    format!("{tenant}\u{0}{source}\u{0}{harness}\u{0}{task_id}")
}

/// A policy version's number for decay: its hash (versions are compared for equality only).
fn version_tag(version: Option<&str>) -> u64 {
    version.map(|v| fnv(v.as_bytes())).unwrap_or(0)
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

impl Memory {
    /// The task's posterior now: remembered (decayed if the policy moved on) or fresh under
    /// `prior`.
    pub fn posterior(&self, key: &str, prior: Prior, version: Option<&str>) -> Posterior {
        let tag = version_tag(version);
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        let entry =
            tasks.entry(key.to_string()).or_insert(Remembered { posterior: Posterior::new(prior), version: tag });
        if entry.version != tag {
            entry.posterior.decay(KEEP_PER_VERSION);
            entry.version = tag;
        }
        entry.posterior
    }

    /// Starts a task from its own earlier counts (a warm-up run), under `prior`, unless it is
    /// already remembered (the evidence since the warm-up wins).
    pub fn seed(&self, key: &str, prior: Prior, successes: u32, trials: u32, version: Option<&str>) {
        let mut posterior = Posterior::new(prior);
        for i in 0..trials {
            posterior.observe(if i < successes { 1.0 } else { 0.0 });
        }
        let tag = version_tag(version);
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_insert(Remembered { posterior, version: tag });
    }

    /// Keeps a task's posterior.
    pub fn store(&self, key: &str, posterior: Posterior, version: Option<&str>) {
        let tag = version_tag(version);
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), Remembered { posterior, version: tag });
    }
}

/// A uniform draw in [0, 1) fixed by the seed, the task, its place in the request and the
/// policy version: the same request against the same evidence admits the same tasks.
pub fn draw(seed: u64, task_id: &str, position: usize, version: Option<&str>) -> f64 {
    let mut h = fnv(task_id.as_bytes()) ^ seed.rotate_left(17) ^ (position as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    h ^= version_tag(version);
    // splitmix64's finaliser.
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    (h >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_is_kept_and_decays_when_the_policy_moves_on() {
        let m = Memory::default();
        let k = key("t", "d", "react", "a");
        let mut p = m.posterior(&k, Prior::default(), Some("v1"));
        for _ in 0..10 {
            p.observe(1.0);
        }
        m.store(&k, p, Some("v1"));
        let same = m.posterior(&k, Prior::default(), Some("v1"));
        assert_eq!(same.successes, 10.0);
        let later = m.posterior(&k, Prior::default(), Some("v2"));
        assert!((later.successes - 10.0 * KEEP_PER_VERSION).abs() < 1e-9);
    }

    #[test]
    fn draws_are_uniform_and_reproducible() {
        let draws: Vec<f64> = (0..10_000).map(|i| draw(7, "task", i, None)).collect();
        assert_eq!(draws[3], draw(7, "task", 3, None));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
    }
}
