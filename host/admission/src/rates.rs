//! Create rate limits: how many sandboxes a second the whole server, and each tenant, may
//! start. A token bucket each: `burst` creates at once, then `per_second` more every second.
//! A create over a limit is refused at once with the wait after which one would pass (a 429
//! with `Retry-After`), never queued: a tenant's storm costs the server nothing but the answer.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::AdmissionError;

/// A rate: `per_second` sustained, `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    /// Creates a second, sustained.
    pub per_second: f64,
    /// Creates at once after a quiet spell.
    pub burst: f64,
}

impl Rate {
    /// Parses `N/s` or `N/s,burst=M` (the burst is N when not given).
    pub fn parse(text: &str) -> Result<Rate, String> {
        let (rate, burst) = match text.split_once(',') {
            Some((rate, rest)) => {
                let burst = rest
                    .trim()
                    .strip_prefix("burst=")
                    .ok_or_else(|| format!("{text:?}: expected N/s or N/s,burst=M"))?;
                (rate, Some(burst))
            }
            None => (text, None),
        };
        let per_second: f64 = rate
            .trim()
            .strip_suffix("/s")
            .and_then(|n| n.trim().parse().ok())
            .filter(|n: &f64| n.is_finite() && *n > 0.0)
            .ok_or_else(|| format!("{text:?}: expected a positive rate such as 200/s"))?;
        let burst = match burst {
            Some(b) => b
                .trim()
                .parse()
                .ok()
                .filter(|n: &f64| n.is_finite() && *n >= 1.0)
                .ok_or_else(|| format!("{text:?}: the burst must be a number of creates, at least 1"))?,
            None => per_second.max(1.0),
        };
        Ok(Rate { per_second, burst })
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(rate: &Rate) -> Self {
        Bucket { tokens: rate.burst, at: Instant::now() }
    }

    fn refill(&mut self, rate: &Rate, now: Instant) {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * rate.per_second;
        self.tokens = (self.tokens + earned).min(rate.burst);
        self.at = now;
    }

    /// Refills, then refuses `n` creates when they can never pass (more than a burst) or when
    /// they must wait; `who` and `whose` name the limit in the answer.
    fn check(&mut self, rate: &Rate, now: Instant, n: f64, who: &str, whose: &str) -> Result<(), AdmissionError> {
        self.refill(rate, now);
        if n > rate.burst {
            return Err(refused(format!(
                "{n} creates at once are more than this server lets {who} start at once ({})",
                rate.burst
            )));
        }
        if self.tokens < n {
            return Err(limited(whose, rate, self.wait_for(rate, n)));
        }
        Ok(())
    }

    /// Seconds until `n` tokens are there (0 when they are).
    fn wait_for(&self, rate: &Rate, n: f64) -> f64 {
        ((n - self.tokens) / rate.per_second).max(0.0)
    }
}

/// The server's create limits (none by default).
#[derive(Debug, Default)]
pub struct CreateRates {
    global: Option<(Rate, Mutex<Bucket>)>,
    per_tenant: Option<Rate>,
    tenants: Mutex<HashMap<String, Bucket>>,
}

/// Buckets of tenants idle this long are dropped (they would be full again anyway).
const IDLE_TENANT_SECONDS: f64 = 600.0;

impl CreateRates {
    /// Limits for the whole server and for each tenant (`None`: no limit).
    pub fn new(global: Option<Rate>, per_tenant: Option<Rate>) -> Self {
        CreateRates {
            global: global.map(|r| (r, Mutex::new(Bucket::full(&r)))),
            per_tenant,
            tenants: Mutex::new(HashMap::new()),
        }
    }

    /// Takes `count` creates for `tenant` from both limits, or none and says how long to wait.
    pub fn take(&self, tenant: &str, count: usize) -> Result<(), AdmissionError> {
        let n = count as f64;
        let now = Instant::now();
        // The tenant's first: a tenant over its own rate does not spend the server's.
        let mut tenants = self.tenants.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(rate) = &self.per_tenant {
            if tenants.len() > 10_000 {
                tenants.retain(|_, b| now.saturating_duration_since(b.at).as_secs_f64() < IDLE_TENANT_SECONDS);
            }
            let bucket = tenants.entry(tenant.to_string()).or_insert_with(|| Bucket::full(rate));
            bucket.check(rate, now, n, "one tenant", "this tenant's")?;
        }
        if let Some((rate, bucket)) = &self.global {
            let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
            bucket.check(rate, now, n, "the whole server", "the server's")?;
            bucket.tokens -= n;
        }
        if let Some(bucket) = self.per_tenant.and(tenants.get_mut(tenant)) {
            bucket.tokens -= n;
        }
        Ok(())
    }
}

fn refused(reason: String) -> AdmissionError {
    AdmissionError::refused("count", reason)
}

fn limited(whose: &str, rate: &Rate, wait: f64) -> AdmissionError {
    AdmissionError::RateLimited {
        message: format!(
            "{whose} create rate ({}/s, bursts of {}) is used up: retry in {:.1} s",
            rate.per_second, rate.burst, wait
        ),
        retry_after_seconds: wait.ceil().max(1.0) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_with_and_without_a_burst_and_bad_ones_are_named() {
        assert_eq!(Rate::parse("200/s").unwrap(), Rate { per_second: 200.0, burst: 200.0 });
        assert_eq!(Rate::parse("0.5/s, burst=4").unwrap(), Rate { per_second: 0.5, burst: 4.0 });
        for bad in ["200", "-1/s", "0/s", "1/s,burst=0", "1/s,b=3", "nan/s"] {
            assert!(Rate::parse(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn a_tenant_over_its_rate_waits_and_others_do_not() {
        let rates = CreateRates::new(None, Some(Rate { per_second: 1.0, burst: 2.0 }));
        rates.take("a", 1).unwrap();
        rates.take("a", 1).unwrap();
        match rates.take("a", 1) {
            Err(AdmissionError::RateLimited { retry_after_seconds, message }) => {
                assert_eq!(retry_after_seconds, 1);
                assert!(message.contains("tenant"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        rates.take("b", 2).unwrap();
        assert!(
            matches!(rates.take("b", 3), Err(AdmissionError::Refused { .. })),
            "more than a burst is never possible"
        );
    }

    #[test]
    fn the_server_rate_is_shared_and_a_refused_tenant_spends_none_of_it() {
        let rates =
            CreateRates::new(Some(Rate { per_second: 1.0, burst: 3.0 }), Some(Rate { per_second: 1.0, burst: 1.0 }));
        rates.take("a", 1).unwrap();
        assert!(rates.take("a", 1).is_err());
        assert!(rates.take("a", 1).is_err());
        rates.take("b", 1).unwrap();
        rates.take("c", 1).unwrap();
        match rates.take("d", 1) {
            Err(AdmissionError::RateLimited { message, .. }) => assert!(message.contains("server"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
