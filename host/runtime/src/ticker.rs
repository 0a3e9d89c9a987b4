//! The epoch ticker: the thread that advances the engine's epoch, which is how plugins are
//! metered and made to yield (see `Runtime::new_store`).
//!
//! Invariants:
//! - while any store lives (each holds a [`Ticking`]), the epoch advances every [`TICK`];
//! - while none does, the thread is parked: an idle server makes no wakeups for it (ticking
//!   unconditionally cost 500 wakeups a second, a few per cent of the server's CPU while it
//!   served sandbox requests, with no plugin running);
//! - the thread ends when the runtime is dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::Thread;
use std::time::Duration;

/// How often the epoch advances: the granularity of CPU accounting and of cooperative yields.
pub const TICK: Duration = Duration::from_millis(2);

struct Shared {
    /// Stores alive now.
    live: AtomicUsize,
    /// Epochs advanced so far (for tests and diagnostics).
    ticks: AtomicU64,
    stop: AtomicBool,
}

pub(crate) struct Ticker {
    shared: Arc<Shared>,
    thread: Thread,
}

/// Held by a store: the epoch advances while any is held.
pub(crate) struct Ticking {
    shared: Arc<Shared>,
}

impl Drop for Ticking {
    fn drop(&mut self) {
        self.shared.live.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Ticker {
    pub(crate) fn start(engine: wasmtime::Engine) -> Result<Ticker, String> {
        let shared =
            Arc::new(Shared { live: AtomicUsize::new(0), ticks: AtomicU64::new(0), stop: AtomicBool::new(false) });
        let for_thread = shared.clone();
        let handle = std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while !for_thread.stop.load(Ordering::Acquire) {
                    if for_thread.live.load(Ordering::Acquire) == 0 {
                        // `ticking` unparks after making `live` non-zero; an unpark that came
                        // before this park makes it return at once, so no start is missed.
                        std::thread::park();
                        continue;
                    }
                    std::thread::sleep(TICK);
                    engine.increment_epoch();
                    for_thread.ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| format!("epoch thread: {e}"))?;
        Ok(Ticker { shared, thread: handle.thread().clone() })
    }

    /// Keeps the epoch advancing until the returned guard is dropped.
    pub(crate) fn ticking(&self) -> Ticking {
        if self.shared.live.fetch_add(1, Ordering::AcqRel) == 0 {
            self.thread.unpark();
        }
        Ticking { shared: self.shared.clone() }
    }

    #[cfg(test)]
    fn ticks(&self) -> u64 {
        self.shared.ticks.load(Ordering::Relaxed)
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.thread.unpark();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_epoch_advances_only_while_a_store_lives() {
        let ticker = Ticker::start(wasmtime::Engine::default()).unwrap();
        std::thread::sleep(TICK * 20);
        assert_eq!(ticker.ticks(), 0, "no store: no ticks");
        let first = ticker.ticking();
        let second = ticker.ticking();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while ticker.ticks() < 5 {
            assert!(std::time::Instant::now() < deadline, "a live store got no ticks");
            std::thread::sleep(TICK);
        }
        drop(first);
        let before = ticker.ticks();
        while ticker.ticks() < before + 3 {
            assert!(std::time::Instant::now() < deadline, "one store still lives: ticks go on");
            std::thread::sleep(TICK);
        }
        drop(second);
        // At most the tick in progress lands after the last store went.
        std::thread::sleep(TICK * 3);
        let settled = ticker.ticks();
        std::thread::sleep(TICK * 20);
        assert_eq!(ticker.ticks(), settled, "every store gone: the thread parks again");
        // And starts again for the next store.
        let _again = ticker.ticking();
        while ticker.ticks() <= settled {
            assert!(std::time::Instant::now() < deadline, "the ticker did not wake for a new store");
            std::thread::sleep(TICK);
        }
    }
}
