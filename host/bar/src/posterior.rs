//! A task's pass rate: a point mass at 0 ("unsolvable", weight `pi0`) plus Beta(a, b), updated
//! with decayed success and failure counts.

use serde::{Deserialize, Serialize};

/// The prior every task starts from (fitted from earlier runs, or a warm-up).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Prior {
    /// Prior probability that the task is unsolvable (pass rate exactly 0).
    pub pi0: f64,
    /// Beta prior's first shape parameter (of the solvable tasks' pass rates).
    pub a: f64,
    /// Beta prior's second shape parameter.
    pub b: f64,
}

impl Default for Prior {
    fn default() -> Self {
        // Vague: a quarter unsolvable, the rest U-shaped.
        Prior { pi0: 0.25, a: 0.7, b: 0.7 }
    }
}

impl Prior {
    /// Fits a prior to observed per-task counts `(successes, trials)` by moments: the share of
    /// tasks never solved in `trials ≥ 4` attempts beyond what the Beta part explains goes to
    /// `pi0`, the rest's mean and variance to `a` and `b`.
    pub fn fit(counts: &[(u32, u32)]) -> Prior {
        let seen: Vec<(f64, f64)> =
            counts.iter().filter(|(_, n)| *n > 0).map(|(s, n)| (*s as f64, *n as f64)).collect();
        if seen.len() < 8 {
            return Prior::default();
        }
        let zero = seen.iter().filter(|(s, n)| *s == 0.0 && *n >= 4.0).count() as f64 / seen.len() as f64;
        let rest: Vec<f64> = seen.iter().filter(|(s, _)| *s > 0.0).map(|(s, n)| s / n).collect();
        if rest.len() < 4 {
            return Prior::default();
        }
        let mean = rest.iter().sum::<f64>() / rest.len() as f64;
        let var = rest.iter().map(|p| (p - mean).powi(2)).sum::<f64>() / rest.len() as f64;
        let common = (mean * (1.0 - mean) / var.max(1e-6) - 1.0).clamp(0.2, 200.0);
        Prior { pi0: zero.clamp(0.01, 0.9), a: (mean * common).max(0.05), b: ((1.0 - mean) * common).max(0.05) }
    }
}

/// ln Γ(x), Lanczos (g = 7, n = 9), for x > 0.
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection.
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = G[0];
    for (i, g) in G.iter().enumerate().skip(1) {
        sum += g / (x + i as f64);
    }
    let t = x + 7.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

fn ln_beta(a: f64, b: f64) -> f64 {
    ln_gamma(a) + ln_gamma(b) - ln_gamma(a + b)
}

/// ln B(a, b), for the group's predictive probabilities.
pub(crate) fn ln_beta_pub(a: f64, b: f64) -> f64 {
    ln_beta(a, b)
}

/// What is known of one task's pass rate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Posterior {
    /// What is believed before any rollout.
    pub prior: Prior,
    /// Decayed counts of passed and failed rollouts.
    pub successes: f64,
    /// Decayed count of failed rollouts.
    pub failures: f64,
}

impl Posterior {
    /// Nothing seen yet.
    pub fn new(prior: Prior) -> Posterior {
        Posterior { prior, successes: 0.0, failures: 0.0 }
    }

    /// Records rollouts; graded rewards count fractionally.
    pub fn observe(&mut self, reward: f64) {
        let r = reward.clamp(0.0, 1.0);
        self.successes += r;
        self.failures += 1.0 - r;
    }

    /// Forgets a share of what was seen (the policy changes: old outcomes say less).
    pub fn decay(&mut self, keep: f64) {
        self.successes *= keep;
        self.failures *= keep;
    }

    fn beta(&self) -> (f64, f64) {
        (self.prior.a + self.successes, self.prior.b + self.failures)
    }

    /// The posterior weight of "unsolvable": only tasks never seen passing keep it.
    pub fn p_unsolvable(&self) -> f64 {
        if self.successes > 1e-9 || self.prior.pi0 <= 0.0 {
            return 0.0;
        }
        // Under p = 0 the failures are certain; under the Beta part their likelihood is
        // B(a, b + f) / B(a, b).
        let (a, b) = (self.prior.a, self.prior.b);
        let beta_likelihood = (ln_beta(a, b + self.failures) - ln_beta(a, b)).exp();
        let w0 = self.prior.pi0;
        w0 / (w0 + (1.0 - w0) * beta_likelihood)
    }

    /// The posterior mean pass rate: the advantage baseline.
    pub fn mean(&self) -> f64 {
        let (a, b) = self.beta();
        (1.0 - self.p_unsolvable()) * a / (a + b)
    }

    /// The probability that `n` more rollouts all pass, and that they all fail.
    pub fn p_uniform(&self, n: u32) -> (f64, f64) {
        let (a, b) = self.beta();
        let w = 1.0 - self.p_unsolvable();
        let n = n as f64;
        let all_pass = w * (ln_beta(a + n, b) - ln_beta(a, b)).exp();
        let all_fail = (1.0 - w) + w * (ln_beta(a, b + n) - ln_beta(a, b)).exp();
        (all_pass, all_fail)
    }

    /// The probability that a group of `g` holds both outcomes.
    pub fn p_mixed(&self, g: u32) -> f64 {
        let (pass, fail) = self.p_uniform(g);
        (1.0 - pass - fail).clamp(0.0, 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ln_gamma_matches_known_values() {
        for (x, want) in [(1.0, 0.0), (2.0, 0.0), (5.0, 24f64.ln()), (0.5, std::f64::consts::PI.sqrt().ln())] {
            assert!((ln_gamma(x) - want).abs() < 1e-10, "{x}");
        }
    }

    #[test]
    fn evidence_moves_the_posterior() {
        let prior = Prior { pi0: 0.3, a: 1.0, b: 1.0 };
        let fresh = Posterior::new(prior);
        assert!((fresh.mean() - 0.35).abs() < 1e-9);
        assert!((fresh.p_unsolvable() - 0.3).abs() < 1e-9);
        // Many failures: likely unsolvable, a mixed group unlikely.
        let mut failing = fresh;
        for _ in 0..16 {
            failing.observe(0.0);
        }
        assert!(failing.p_unsolvable() > 0.85, "{}", failing.p_unsolvable());
        assert!(failing.p_mixed(8) < 0.1);
        // One success rules out "unsolvable".
        let mut solved = failing;
        solved.observe(1.0);
        assert_eq!(solved.p_unsolvable(), 0.0);
        // Half and half: mixed groups are likely, the mean near a half.
        let mut even = fresh;
        for i in 0..20 {
            even.observe((i % 2) as f64);
        }
        assert!(even.p_mixed(8) > 0.9 && (even.mean() - 0.5).abs() < 0.05);
        // A group of one is never mixed; the probabilities add up.
        assert!(even.p_mixed(1) < 1e-12);
        let (p, f) = even.p_uniform(8);
        assert!((p + f + even.p_mixed(8) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_prior_is_fitted_from_counts() {
        let mut counts = vec![(0, 8); 25];
        counts.extend((0..75).map(|i| ((i % 9) as u32, 8)));
        let p = Prior::fit(&counts);
        assert!(p.pi0 > 0.2 && p.pi0 < 0.45, "{p:?}");
        assert!(p.a > 0.0 && p.b > 0.0);
    }
}
