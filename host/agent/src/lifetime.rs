//! The sandbox's hard lifetime, kept by the agent itself.
//!
//! The agent is the sandbox's pid 1 on the local backend: when it exits, the kernel kills every
//! process of the sandbox's pid namespace, and nothing inside can stop that (signals from
//! inside never reach pid 1 unhandled, and it is not dumpable). So the deadline holds with no
//! server alive: a host that crashed, was killed or lost its store still sees each of its
//! sandboxes end on time. The host gives the deadline at start (`--die-at`) or, for a sandbox
//! claimed from a warm pool, later (`PUT /lifetime`); a deadline may only come closer.
//!
//! A sandbox waiting in a warm pool has a deadline of its own (`--pool-die-at`), so that a pool
//! outlives its server no longer than a sandbox would: the claim's deadline replaces it (the
//! claim's lifetime counts from the claim, and may end after the pool's would have).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Unix seconds the sandbox ends at; 0: none.
static DEADLINE: AtomicU64 = AtomicU64::new(0);
/// Unix seconds an unclaimed pooled sandbox ends at; 0: none (or claimed).
static POOL_DEADLINE: AtomicU64 = AtomicU64::new(0);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Sets the deadline, unless one already set is earlier, and ends the pool's: the host has
/// claimed the sandbox and given it its own.
pub fn set(die_at: u64) {
    let _ = DEADLINE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |current| {
        (current == 0 || die_at < current).then_some(die_at)
    });
    POOL_DEADLINE.store(0, Ordering::SeqCst);
}

/// Sets the deadline of a sandbox waiting in a warm pool, until a claim sets its own.
pub fn set_pool(die_at: u64) {
    POOL_DEADLINE.store(die_at, Ordering::SeqCst);
}

/// The deadline in force (Unix seconds), if any: the earlier of the two.
pub fn get() -> Option<u64> {
    [DEADLINE.load(Ordering::SeqCst), POOL_DEADLINE.load(Ordering::SeqCst)].into_iter().filter(|d| *d != 0).min()
}

/// Starts the thread that ends the agent (and with it the sandbox) at the deadline. A thread of
/// its own, so that a busy or stuck runtime cannot delay it.
pub fn start_watchdog() -> std::io::Result<()> {
    std::thread::Builder::new().name("lifetime".into()).stack_size(64 * 1024).spawn(|| {
        loop {
            let wait = match get() {
                Some(deadline) if now() >= deadline => {
                    eprintln!("orchard-agent: the sandbox reached its hard lifetime; ending it");
                    std::process::exit(124);
                }
                // Wakes at least every second: a deadline set later is seen within one.
                Some(deadline) => Duration::from_secs((deadline - now()).min(1)),
                None => Duration::from_secs(1),
            };
            std::thread::sleep(wait);
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_claim_replaces_the_pools_deadline() {
        // One test touches the globals: tests run on threads of one process.
        super::set_pool(1_500_000_000);
        assert_eq!(super::get(), Some(1_500_000_000));
        super::set(2_000_000_000);
        assert_eq!(super::get(), Some(2_000_000_000), "the claim's deadline, though later than the pool's");
        a_deadline_only_comes_closer();
    }

    fn a_deadline_only_comes_closer() {
        super::set(2_000_000_000);
        super::set(2_100_000_000);
        assert_eq!(super::get(), Some(2_000_000_000));
        super::set(1_900_000_000);
        assert_eq!(super::get(), Some(1_900_000_000));
    }
}
