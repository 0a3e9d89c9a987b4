//! Writes to the API server: paced by one token bucket (a rate and a burst, client-go's QPS and
//! Burst) shared by everything this replica writes, and retried with exponential backoff and
//! jitter when the server answers 429 (priority and fairness, a busy control plane) or 5xx —
//! never on other errors, which name a real problem.
//!
//! Invariants:
//! - at most `burst` writes start at once, and at most `rate` a second after that; at most
//!   [`MAX_IN_FLIGHT`] await their answer at once;
//! - a write waiting for a token is served by its [`Lane`]'s priority, first come first served
//!   within a lane: deletes (they free capacity, and a storm of creates must never hold them
//!   back), then claims (a caller is waiting), then creates, then background work (warm-pool
//!   refills, activity records). A retry waits for a token again, in its own lane.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::sync::oneshot;
use tokio::time::Instant;

/// Which queue a write waits in, highest priority first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Deleting a sandbox's objects.
    Delete = 0,
    /// Claiming a warm-pool pod for a waiting create.
    Claim = 1,
    /// Creating a sandbox's objects for a waiting create.
    Create = 2,
    /// Work nobody waits on: warm-pool refills, activity records.
    Background = 3,
}

const LANES: usize = 4;

/// Paces writes to the API server and retries the ones it pushed back.
pub struct Writes {
    bucket: Arc<Mutex<Bucket>>,
    /// Writes awaiting their answer, at most [`MAX_IN_FLIGHT`]: a burst larger than the API
    /// server's concurrency share would be answered 429 (priority and fairness) and retried
    /// after a backoff, slower than waiting here.
    in_flight: tokio::sync::Semaphore,
    retries: u32,
    /// Writes retried so far (for operators and tests).
    pub retried: AtomicU64,
}

struct Bucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    filled_at: Instant,
    waiting: [VecDeque<oneshot::Sender<()>>; LANES],
    /// Whether a task is handing out tokens to the waiting.
    dispatching: bool,
}

impl Bucket {
    fn refill(&mut self) {
        let now = Instant::now();
        let earned = now.duration_since(self.filled_at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.burst);
        self.filled_at = now;
    }

    fn anyone_waiting(&self) -> bool {
        self.waiting.iter().any(|q| !q.is_empty())
    }

    /// Hands the tokens there are to the waiting, highest lane first; true when some still wait.
    fn hand_out(&mut self) -> bool {
        self.refill();
        while self.tokens >= 1.0 {
            let Some(next) = self.waiting.iter_mut().find_map(|q| q.pop_front()) else { break };
            // A waiter that gave up (its future dropped) takes no token.
            if next.send(()).is_ok() {
                self.tokens -= 1.0;
            }
        }
        self.anyone_waiting()
    }
}

/// Writes of one replica in flight at once.
pub const MAX_IN_FLIGHT: usize = 128;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl Writes {
    /// At most `per_second` writes a second after a burst of `burst`, each retried `retries`
    /// times on 429 or 5xx.
    pub fn new(per_second: f64, burst: u32, retries: u32) -> Self {
        let per_second = per_second.max(0.001);
        let burst = f64::from(burst.max(1));
        let bucket = Bucket {
            per_second,
            burst,
            tokens: burst,
            filled_at: Instant::now(),
            waiting: Default::default(),
            dispatching: false,
        };
        Writes {
            bucket: Arc::new(Mutex::new(bucket)),
            in_flight: tokio::sync::Semaphore::new(MAX_IN_FLIGHT),
            retries,
            retried: AtomicU64::new(0),
        }
    }

    /// Waits for a token in `lane`'s queue.
    async fn pace(&self, lane: Lane) {
        let ready = {
            let mut bucket = self.bucket.lock().unwrap_or_else(|p| p.into_inner());
            bucket.refill();
            if bucket.tokens >= 1.0 && !bucket.anyone_waiting() {
                bucket.tokens -= 1.0;
                return;
            }
            let (tell, ready) = oneshot::channel();
            bucket.waiting[lane as usize].push_back(tell);
            if !bucket.dispatching {
                bucket.dispatching = true;
                tokio::spawn(dispatch(self.bucket.clone()));
            }
            ready
        };
        // The dispatcher only drops a sender after sending on it.
        let _ = ready.await;
    }

    /// Runs `write` in `lane` until it succeeds, fails for a reason retrying cannot fix, or the
    /// retries run out. `attempt` (0-based) lets the caller recognise its own earlier,
    /// answered-5xx write when the retry meets 409.
    pub async fn run<T, F, Fut>(&self, lane: Lane, mut write: F) -> Result<T, kube::Error>
    where
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, kube::Error>>,
    {
        let mut backoff = FIRST_BACKOFF;
        let mut attempt = 0;
        loop {
            self.pace(lane).await;
            let answer = {
                let _slot = self.in_flight.acquire().await.expect("never closed");
                write(attempt).await
            };
            match answer {
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

/// Hands out tokens as they are earned while anyone waits, then ends.
async fn dispatch(bucket: Arc<Mutex<Bucket>>) {
    loop {
        let wait = {
            let mut bucket = bucket.lock().unwrap_or_else(|p| p.into_inner());
            if !bucket.hand_out() {
                bucket.dispatching = false;
                return;
            }
            Duration::from_secs_f64((1.0 - bucket.tokens).max(0.0) / bucket.per_second)
        };
        tokio::time::sleep(wait).await;
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
        let writes = Writes::new(1000.0, 1, 5);
        let mut calls = 0;
        let ok = writes
            .run(Lane::Create, |_| {
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
            .run(Lane::Create, |_| {
                calls += 1;
                async { Err::<(), _>(api_error(422)) }
            })
            .await
            .unwrap_err();
        assert_eq!((api_code(&err), calls), (Some(422), 1));
        let err = writes.run(Lane::Create, |_| async { Err::<(), _>(api_error(429)) }).await.unwrap_err();
        assert_eq!(api_code(&err), Some(429), "gives up after the retries");
    }

    #[tokio::test(start_paused = true)]
    async fn writes_are_paced() {
        let writes = Writes::new(10.0, 1, 0);
        let t0 = Instant::now();
        for _ in 0..5 {
            writes.run(Lane::Create, |_| async { Ok::<_, kube::Error>(()) }).await.unwrap();
        }
        let elapsed = t0.elapsed();
        assert!(elapsed >= Duration::from_millis(400) && elapsed < Duration::from_millis(500), "{elapsed:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_and_the_rest_at_the_rate() {
        let writes = Writes::new(10.0, 5, 0);
        let t0 = Instant::now();
        let mut done = Vec::new();
        let all = (0..8).map(|_| async {
            writes.run(Lane::Create, |_| async { Ok::<_, kube::Error>(()) }).await.unwrap();
            t0.elapsed()
        });
        for at in futures::future::join_all(all).await {
            done.push(at);
        }
        done.sort();
        assert!(done[..5].iter().all(|t| *t < Duration::from_millis(1)), "the burst waits: {done:?}");
        assert!(done[7] >= Duration::from_millis(300) && done[7] < Duration::from_millis(400), "{done:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn waiting_deletes_go_before_waiting_creates_and_refills() {
        let writes = Arc::new(Writes::new(100.0, 1, 0));
        let order = Arc::new(Mutex::new(Vec::new()));
        // The one token goes to the first write; everything after it waits in its lane.
        writes.run(Lane::Create, |_| async { Ok::<_, kube::Error>(()) }).await.unwrap();
        let mut tasks = Vec::new();
        for (i, lane) in [Lane::Background, Lane::Create, Lane::Create, Lane::Claim, Lane::Delete, Lane::Delete]
            .into_iter()
            .enumerate()
        {
            let (writes, order) = (writes.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                writes
                    .run(lane, |_| {
                        order.lock().unwrap().push((i, lane));
                        async { Ok::<_, kube::Error>(()) }
                    })
                    .await
                    .unwrap();
            }));
            tokio::task::yield_now().await;
        }
        for task in tasks {
            task.await.unwrap();
        }
        let lanes: Vec<usize> = order.lock().unwrap().iter().map(|(i, _)| *i).collect();
        assert_eq!(lanes, [4, 5, 3, 1, 2, 0], "deletes, the claim, creates in order, then the refill");
    }
}
