//! Claims waiting for warm-pool pods that are still starting.
//!
//! When a burst of claims outruns a pool's ready pods, a claim waits for one of the pool's
//! starting pods rather than making a cold one (which would be ready later still, and cost two
//! more writes). Invariant: per pool, at most as many claims wait as it has pods starting or ready, the
//! earliest first; the rest go cold at once. [`PoolWaiter`] counts a claim in while it waits.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a claim waits for a starting pool pod before it makes a cold one.
pub const POOL_START_WAIT: Duration = Duration::from_secs(15);

/// The claims waiting, per pool key: tickets in the order they joined, and the next ticket.
#[derive(Default, Debug)]
pub struct Waiters(Mutex<HashMap<String, (BTreeSet<u64>, u64)>>);

/// One claim counted among its pool's waiters until dropped.
pub struct PoolWaiter {
    waiters: Arc<Waiters>,
    key: String,
    ticket: u64,
}

impl PoolWaiter {
    /// Counts a claim of pool `key` in, after those already waiting.
    pub fn join(waiters: &Arc<Waiters>, key: &str) -> PoolWaiter {
        let mut all = waiters.0.lock().unwrap_or_else(|p| p.into_inner());
        let (tickets, next) = all.entry(key.to_string()).or_default();
        let ticket = *next;
        *next += 1;
        tickets.insert(ticket);
        PoolWaiter { waiters: waiters.clone(), key: key.to_string(), ticket }
    }

    /// How many claims of the same pool, still waiting, joined before this one.
    pub fn ahead(&self) -> usize {
        let all = self.waiters.0.lock().unwrap_or_else(|p| p.into_inner());
        all.get(&self.key).map_or(0, |(tickets, _)| tickets.range(..self.ticket).count())
    }
}

impl Drop for PoolWaiter {
    fn drop(&mut self) {
        let mut all = self.waiters.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((tickets, _)) = all.get_mut(&self.key) {
            tickets.remove(&self.ticket);
            if tickets.is_empty() {
                all.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiters_count_in_order_and_move_up_as_those_ahead_leave() {
        let waiters = Arc::new(Waiters::default());
        let first = PoolWaiter::join(&waiters, "a");
        let second = PoolWaiter::join(&waiters, "a");
        let third = PoolWaiter::join(&waiters, "a");
        let other = PoolWaiter::join(&waiters, "b");
        assert_eq!((first.ahead(), second.ahead(), third.ahead(), other.ahead()), (0, 1, 2, 0));
        drop(second);
        assert_eq!(third.ahead(), 1);
        drop(first);
        assert_eq!(third.ahead(), 0);
        assert_eq!(PoolWaiter::join(&waiters, "a").ahead(), 1, "a newcomer goes after the third");
        drop((third, other));
        assert!(waiters.0.lock().unwrap().is_empty(), "{waiters:?}");
    }
}
