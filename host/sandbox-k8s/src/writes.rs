//! Writes to the API server: paced by a rate limit shared by everything this replica writes,
//! and retried with exponential backoff and jitter when the server answers 429 (priority and
//! fairness, a busy control plane) or 5xx — never on other errors, which name a real problem.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Paces writes to the API server and retries the ones it pushed back.
pub struct Writes {
    interval: Duration,
    next_slot: Mutex<Instant>,
    retries: u32,
    /// Writes retried so far (for operators and tests).
    pub retried: AtomicU64,
}

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Writes {
    /// At most `per_second` writes a second, each retried `retries` times on 429 or 5xx.
    pub fn new(per_second: f64, retries: u32) -> Self {
        Writes {
            interval: Duration::from_secs_f64(1.0 / per_second.max(0.001)),
            next_slot: Mutex::new(Instant::now()),
            retries,
            retried: AtomicU64::new(0),
        }
    }

    /// Waits for this write's slot: slots are handed out `interval` apart, in call order.
    async fn pace(&self) {
        let slot = {
            let mut next = self.next_slot.lock().unwrap_or_else(|p| p.into_inner());
            let slot = (*next).max(Instant::now());
            *next = slot + self.interval;
            slot
        };
        tokio::time::sleep_until(slot).await;
    }

    /// Runs `write` until it succeeds, fails for a reason retrying cannot fix, or the retries
    /// run out. `attempt` (0-based) lets the caller recognise its own earlier, answered-5xx
    /// write when the retry meets 409.
    pub async fn run<T, F, Fut>(&self, mut write: F) -> Result<T, kube::Error>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            self.pace().await;
            match write(attempt).await {
                Err(e) if retryable(&e) && attempt < self.retries => {
                    self.retried.fetch_add(1, Ordering::Relaxed);
                    let jitter = rand::rng().random_range(0.5..1.5);
                    tracing::debug!("API write failed ({e}); retrying in {:?}", backoff.mul_f64(jitter));
                    tokio::time::sleep(backoff.mul_f64(jitter)).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    attempt += 1;
                }
                other => return other,
            }
        }
    }
}

fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(response) => response.code == 429 || response.code >= 500,
        // The connection broke or timed out: the server may be restarting.
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// The API server's status code of an error, if it gave one.
pub fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(response) => Some(response.code),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(kube::core::ErrorResponse {
            status: "Failure".into(),
            message: "m".into(),
            reason: "r".into(),
            code,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn retries_429_and_5xx_but_not_other_errors() {
        let writes = Writes::new(1000.0, 5);
        let mut calls = 0;
        let ok = writes
            .run(|_| {
                calls += 1;
                let answer = if calls < 4 { Err(api_error(if calls == 2 { 503 } else { 429 })) } else { Ok(calls) };
                async move { answer }
            })
            .await
            .unwrap();
        assert_eq!(ok, 4);
        assert_eq!(writes.retried.load(Ordering::Relaxed), 3);
        let mut calls = 0;
        let err = writes
            .run(|_| {
                calls += 1;
                async { Err::<(), _>(api_error(422)) }
            })
            .await
            .unwrap_err();
        assert_eq!((api_code(&err), calls), (Some(422), 1));
        let err = writes.run(|_| async { Err::<(), _>(api_error(429)) }).await.unwrap_err();
        assert_eq!(api_code(&err), Some(429), "gives up after the retries");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_are_paced() {
        let writes = Writes::new(10.0, 0);
        let t0 = Instant::now();
        for _ in 0..5 {
            writes.run(|_| async { Ok::<_, kube::Error>(()) }).await.unwrap();
        }
        let elapsed = t0.elapsed();
        assert!(elapsed >= Duration::from_millis(400) && elapsed < Duration::from_millis(500), "{elapsed:?}");
    }
}
