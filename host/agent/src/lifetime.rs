//! The sandbox's hard lifetime, kept by the agent itself.
//!
//! The agent is the sandbox's pid 1 on the local backend: when it exits, the kernel kills every
//! process of the sandbox's pid namespace, and nothing inside can stop that (signals from
//! inside never reach pid 1 unhandled, and it is not dumpable). So the deadline holds with no
//! server alive: a host that crashed, was killed or lost its store still sees each of its
//! sandboxes end on time. The host gives the deadline at start (`--die-at`) or, for a sandbox
//! claimed from a warm pool, later (`PUT /lifetime`); a deadline may only come closer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Unix seconds the sandbox ends at; 0: none.
static DEADLINE: AtomicU64 = AtomicU64::new(0);

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Sets the deadline, unless one already set is earlier.
pub fn set(die_at: u64) {
    let _ = DEADLINE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |current| {
        (current == 0 || die_at < current).then_some(die_at)
    });
}

/// The deadline in force (Unix seconds), if any.
pub fn get() -> Option<u64> {
    Some(DEADLINE.load(Ordering::SeqCst)).filter(|d| *d != 0)
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
    fn a_deadline_only_comes_closer() {
        super::set(2_000_000_000);
        super::set(2_100_000_000);
        assert_eq!(super::get(), Some(2_000_000_000));
        super::set(1_900_000_000);
        assert_eq!(super::get(), Some(1_900_000_000));
    }
}
