//! What one request may spend, shared by its groups: a rollout budget (every launch, retries
//! included, is taken from it before it is queued, so the request never launches more) and a
//! number of groups wanted (a group emits only while fewer were, so exactly that many are).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use tokio::sync::watch;

pub(crate) struct Spend {
    pub budget: Option<u32>,
    pub wanted: Option<u32>,
    launched: AtomicU32,
    emitted: AtomicU32,
    enough: watch::Sender<bool>,
}

impl Spend {
    pub fn new(budget: Option<u32>, wanted: Option<u32>) -> Arc<Spend> {
        Arc::new(Spend {
            budget,
            wanted,
            launched: AtomicU32::new(0),
            emitted: AtomicU32::new(0),
            enough: watch::channel(false).0,
        })
    }

    /// Takes `n` rollouts from the budget, all or none: a group grows by whole strides.
    pub fn reserve(&self, n: u32) -> bool {
        let Some(budget) = self.budget else {
            self.launched.fetch_add(n, Ordering::SeqCst);
            return true;
        };
        self.launched
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| (used + n <= budget).then_some(used + n))
            .is_ok()
    }

    /// Rollouts launched so far.
    pub fn spent(&self) -> u32 {
        self.launched.load(Ordering::SeqCst)
    }

    /// Claims the right to emit one more group: `false` once as many as wanted were. The
    /// claim that reaches the number tells every other group to stop.
    pub fn claim_emit(&self) -> bool {
        let Some(wanted) = self.wanted else { return true };
        let claimed = self
            .emitted
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < wanted).then_some(n + 1))
            .map(|before| before + 1);
        match claimed {
            Ok(now) => {
                if now == wanted {
                    self.enough.send_replace(true);
                }
                true
            }
            Err(_) => false,
        }
    }

    /// Becomes true once as many groups as wanted were emitted.
    pub fn enough(&self) -> watch::Receiver<bool> {
        self.enough.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_is_never_overspent_and_groups_are_emitted_exactly() {
        let s = Spend::new(Some(20), Some(2));
        assert!(s.reserve(8));
        assert!(s.reserve(8));
        assert!(!s.reserve(8), "16 + 8 > 20");
        assert!(s.reserve(4));
        assert!(!s.reserve(1));
        assert_eq!(s.spent(), 20);
        let enough = s.enough();
        assert!(s.claim_emit());
        assert!(!*enough.borrow());
        assert!(s.claim_emit());
        assert!(*enough.borrow());
        assert!(!s.claim_emit(), "a third group is not emitted");
        let open = Spend::new(None, None);
        assert!(open.reserve(1000) && open.claim_emit());
    }
}
