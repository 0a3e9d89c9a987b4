//! Scores across attempts.

/// pass@k with the unbiased estimator (Chen et al., 2021): the chance that at least one of k
/// attempts drawn from n (of which c passed) passes: `1 - C(n-c, k) / C(n, k)`.
pub fn pass_at_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if n - c < k {
        return 1.0;
    }
    // 1 - prod_{i = n-c+1}^{n} (1 - k / i), stable for large n.
    1.0 - (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product::<f64>()
}

/// pass^k: the chance that k attempts drawn from n all pass: `C(c, k) / C(n, k)`.
pub fn pass_hat_k(n: u32, c: u32, k: u32) -> f64 {
    if k == 0 || k > n {
        return f64::NAN;
    }
    if c < k {
        return 0.0;
    }
    (0..k).map(|i| (c - i) as f64 / (n - i) as f64).product()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binom(n: u64, k: u64) -> f64 {
        if k > n {
            return 0.0;
        }
        (0..k).map(|i| (n - i) as f64 / (i + 1) as f64).product()
    }

    #[test]
    fn pass_at_k_matches_the_closed_form() {
        for n in 1..=10u32 {
            for c in 0..=n {
                for k in 1..=n {
                    let expected = 1.0 - binom((n - c) as u64, k as u64) / binom(n as u64, k as u64);
                    assert!((pass_at_k(n, c, k) - expected).abs() < 1e-9, "n={n} c={c} k={k}");
                    let hat = binom(c as u64, k as u64) / binom(n as u64, k as u64);
                    assert!((pass_hat_k(n, c, k) - hat).abs() < 1e-9, "n={n} c={c} k={k}");
                }
            }
        }
        assert_eq!(pass_at_k(5, 0, 1), 0.0);
        assert_eq!(pass_at_k(5, 5, 3), 1.0);
        assert!((pass_at_k(4, 1, 1) - 0.25).abs() < 1e-12);
    }
}
