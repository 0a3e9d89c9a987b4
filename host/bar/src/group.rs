//! Growing one group: launch G (or a smaller probe first), top up in strides to a cap until both
//! outcomes are there (at least G/4 of each in balanced mode), abandon once that has become
//! unlikely — or less likely than a fresh task's group would be mixed, when an opportunity
//! factor is set — and emit G with the minority outcome kept.

use serde::{Deserialize, Serialize};

use crate::posterior::Posterior;

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
/// How groups are built.
pub struct GroupConfig {
    /// Rollouts per emitted group (G).
    pub size: u32,
    /// At most this many rollouts per group (2G).
    pub cap: u32,
    /// Rollouts added per top-up.
    pub stride: u32,
    /// Each outcome at least `size / 4` times, not just once.
    pub balanced: bool,
    /// Abandon when reaching a usable group within the cap is less likely than this.
    pub abandon_below: f64,
    /// The first launch, when smaller than G: a probe of a task whose outcome is uncertain
    /// costs `first` rollouts, not G, before BAR can abandon it (then the group is topped up to
    /// G at once). `None`: G.
    #[serde(default)]
    pub first: Option<u32>,
    /// Opportunity cost: keep growing only while a usable group is at least this many times
    /// as likely as a fresh task's group would be mixed (under the prior). A fresh task is the
    /// alternative use of the next rollouts; 0 turns it off.
    #[serde(default)]
    pub opportunity: f64,
}

/// The opportunity factor BAR grows groups with by default (see [`GroupConfig::opportunity`]):
/// in the service-like simulation (a fresh task set, requests of one pass each) it took the
/// first request from 0.86× uniform's mixed groups per 1,000 rollouts to 1.15× and later ones
/// from 1.26× to 1.48× (`orchard-bench --suite bar`, its service-like rows); on real rollouts
/// through `orchard serve`, `--suite bar-real`.
pub const DEFAULT_OPPORTUNITY: f64 = 1.0;

impl GroupConfig {
    /// A configuration for groups of `size`, with the defaults.
    pub fn new(size: u32) -> GroupConfig {
        let size = size.max(2);
        GroupConfig {
            size,
            cap: 2 * size,
            stride: (size / 4).max(1),
            balanced: false,
            abandon_below: 0.1,
            first: None,
            opportunity: 0.0,
        }
    }

    /// How many of each outcome a usable group needs.
    pub fn need_each(&self) -> u32 {
        if self.balanced { (self.size / 4).max(1) } else { 1 }
    }
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Step {
    /// Start this many more rollouts of the task.
    Launch(u32),
    /// Wait: rollouts are still running.
    Wait,
    /// The group is complete: these rollouts (indices in launch order) are emitted.
    Emit(Vec<usize>),
    /// Give up on the group: it is unlikely to become usable within the cap.
    Abandon,
}

/// One decision, for the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// What was decided.
    pub step: Step,
    /// Rollouts launched so far.
    pub launched: u32,
    /// Rewards ≥ 0.5 so far.
    pub positives: u32,
    /// Rewards < 0.5 so far.
    pub negatives: u32,
    /// The probability that drove it (of a usable group within the cap), when one did.
    pub p_usable: Option<f64>,
}

/// How a finished group ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum GroupOutcome {
    /// Enough of each outcome: the group is out.
    Emitted {
        /// Which rollouts (by launch order) form the group.
        selected: Vec<usize>,
        /// How many of them passed.
        positives: u32,
        /// How many failed.
        negatives: u32,
    },
    /// A usable group was too unlikely within the cap.
    Abandoned {
        /// Rollouts spent on it.
        generated: u32,
    },
}

/// One group in the making. Rewards count as positive at ≥ 0.5.
#[derive(Debug, Clone)]
pub struct GroupBuilder {
    /// How it is built.
    pub config: GroupConfig,
    /// The task's posterior, updated with this group's results as they come.
    pub posterior: Posterior,
    launched: u32,
    rewards: Vec<Option<f64>>,
    /// Slots given up without a reward (the environment failed them): they count for neither
    /// outcome, but their launch stays spent.
    discarded: Vec<bool>,
    /// Every decision taken, in order.
    pub decisions: Vec<Decision>,
    done: bool,
}

/// P(K ≥ lo and n − K ≥ hi_fail) for K positives among `n` more rollouts, under `post`.
fn p_reach(post: &Posterior, n: u32, need_pos: u32, need_neg: u32) -> f64 {
    if need_pos + need_neg > n {
        return 0.0;
    }
    if n == 0 {
        return 1.0;
    }
    // Beta-binomial under the Beta part, K = 0 under "unsolvable".
    let (a, b) = (post.prior.a + post.successes, post.prior.b + post.failures);
    let w = 1.0 - post.p_unsolvable();
    let ln_choose = |n: u32, k: u32| -> f64 { (1..=k).map(|i| ((n - k + i) as f64 / i as f64).ln()).sum() };
    let lb = |x: f64, y: f64| crate::posterior::ln_beta_pub(x, y);
    let mut p = 0.0;
    for k in need_pos..=(n - need_neg) {
        let pk = w * (ln_choose(n, k) + lb(a + k as f64, b + (n - k) as f64) - lb(a, b)).exp();
        p += pk;
    }
    if need_pos == 0 {
        p += 1.0 - w;
    }
    p.clamp(0.0, 1.0)
}

impl GroupBuilder {
    /// A group for a task whose pass rate is believed to be `posterior`.
    pub fn new(config: GroupConfig, posterior: Posterior) -> GroupBuilder {
        GroupBuilder {
            config,
            posterior,
            launched: 0,
            rewards: Vec::new(),
            discarded: Vec::new(),
            decisions: Vec::new(),
            done: false,
        }
    }

    /// A rollout of index `i` (launch order) finished with `reward`.
    pub fn record(&mut self, i: usize, reward: f64) {
        if self.discarded.get(i) == Some(&false)
            && let Some(slot) = self.rewards.get_mut(i)
            && slot.is_none()
        {
            *slot = Some(reward);
            self.posterior.observe(reward);
        }
    }

    /// Gives up slot `i` without a reward: an environment error is no evidence about the
    /// policy, so it is neither a positive nor a negative.
    pub fn discard(&mut self, i: usize) {
        if let Some(d) = self.discarded.get_mut(i)
            && self.rewards[i].is_none()
        {
            *d = true;
        }
    }

    fn counts(&self) -> (u32, u32, u32) {
        let mut pos = 0;
        let mut neg = 0;
        let mut running = 0;
        for (r, _) in self.rewards.iter().zip(&self.discarded).filter(|(_, d)| !**d) {
            match r {
                Some(r) if *r >= 0.5 => pos += 1,
                Some(_) => neg += 1,
                None => running += 1,
            }
        }
        (pos, neg, running)
    }

    fn decide(&mut self, step: Step, p_usable: Option<f64>) -> Step {
        let (positives, negatives, _) = self.counts();
        self.decisions.push(Decision { step: step.clone(), launched: self.launched, positives, negatives, p_usable });
        if matches!(step, Step::Emit(_) | Step::Abandon) {
            self.done = true;
        }
        if let Step::Launch(n) = step {
            self.launched += n;
            self.rewards.extend(std::iter::repeat_n(None, n as usize));
            self.discarded.extend(std::iter::repeat_n(false, n as usize));
        }
        step
    }

    /// The next step. Call it after every recorded result (and once to start).
    pub fn next_step(&mut self) -> Step {
        if self.done {
            return Step::Wait;
        }
        let c = self.config;
        if self.launched == 0 {
            let first = c.first.unwrap_or(c.size).clamp(1, c.size);
            return self.decide(Step::Launch(first), None);
        }
        let (pos, neg, running) = self.counts();
        let need = c.need_each();
        if pos >= need && neg >= need && pos + neg >= c.size {
            let selected = self.select(pos, neg);
            return self.decide(Step::Emit(selected), None);
        }
        if running > 0 {
            return Step::Wait;
        }
        let left = c.cap - self.launched.min(c.cap);
        let p = p_reach(&self.posterior, left, need.saturating_sub(pos), need.saturating_sub(neg));
        let fresh = crate::posterior::Posterior::new(self.posterior.prior).p_mixed(c.size);
        if left == 0 || p < c.abandon_below || p < c.opportunity * fresh {
            return self.decide(Step::Abandon, Some(p));
        }
        // Below G after a probe: straight to G; past it, a stride at a time.
        let more = c.size.saturating_sub(self.launched).max(c.stride);
        self.decide(Step::Launch(more.min(left)), Some(p))
    }

    /// G rollouts: every one of the minority outcome (but leaving the majority its share), the
    /// rest of the majority's in launch order.
    fn select(&self, pos: u32, neg: u32) -> Vec<usize> {
        let g = self.config.size;
        let minority_is_pos = pos <= neg;
        let minority = pos.min(neg);
        let take_min = minority.min(g - self.config.need_each());
        let take_maj = g - take_min;
        let (mut min_left, mut maj_left) = (take_min, take_maj);
        let mut out = Vec::new();
        for (i, r) in self.rewards.iter().enumerate() {
            let Some(r) = r else { continue };
            let is_min = (*r >= 0.5) == minority_is_pos;
            if is_min && min_left > 0 {
                min_left -= 1;
                out.push(i);
            } else if !is_min && maj_left > 0 {
                maj_left -= 1;
                out.push(i);
            }
        }
        out
    }

    /// The rewards of the rollouts that have finished, by launch index.
    pub fn rewards(&self) -> &[Option<f64>] {
        &self.rewards
    }

    /// How the group ended, once it has.
    pub fn outcome(&self) -> Option<GroupOutcome> {
        match &self.decisions.last()?.step {
            Step::Emit(selected) => {
                let pos = selected.iter().filter(|i| self.rewards[**i].is_some_and(|r| r >= 0.5)).count() as u32;
                Some(GroupOutcome::Emitted {
                    selected: selected.clone(),
                    positives: pos,
                    negatives: selected.len() as u32 - pos,
                })
            }
            Step::Abandon => Some(GroupOutcome::Abandoned { generated: self.launched }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::posterior::Prior;

    /// Runs a group to its end with rewards from `outcomes` in launch order.
    fn run(config: GroupConfig, outcomes: &[f64]) -> GroupBuilder {
        let mut b = GroupBuilder::new(config, Posterior::new(Prior::default()));
        let mut next = 0;
        loop {
            match b.next_step() {
                Step::Launch(n) => {
                    for _ in 0..n {
                        b.record(next, outcomes[next]);
                        next += 1;
                    }
                }
                Step::Wait => unreachable!("every launched rollout was recorded"),
                Step::Emit(_) | Step::Abandon => return b,
            }
        }
    }

    #[test]
    fn a_mixed_first_batch_is_emitted_at_once() {
        let b = run(GroupConfig::new(8), &[1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let Some(GroupOutcome::Emitted { selected, positives, negatives }) = b.outcome() else { panic!() };
        assert_eq!((selected.len(), positives, negatives), (8, 1, 7));
    }

    #[test]
    fn a_uniform_batch_is_topped_up_and_the_minority_kept() {
        // Eight failures, then two more strides: a success in the second.
        let mut outcomes = vec![0.0; 8];
        outcomes.extend([0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        // Never abandoned here: the top-up is what is tested.
        let mut config = GroupConfig::new(8);
        config.abandon_below = 0.0;
        let b = run(config, &outcomes);
        let Some(GroupOutcome::Emitted { selected, positives, .. }) = b.outcome() else { panic!("{:?}", b.decisions) };
        assert_eq!(positives, 1);
        assert!(selected.contains(&10), "the success is kept: {selected:?}");
        assert_eq!(b.decisions.iter().filter(|d| matches!(d.step, Step::Launch(_))).count(), 3);
    }

    #[test]
    fn a_discarded_slot_is_neither_outcome_and_does_not_hold_the_group() {
        let mut b = GroupBuilder::new(GroupConfig::new(4), Posterior::new(Prior::default()));
        assert_eq!(b.next_step(), Step::Launch(4));
        for (i, r) in [1.0, 0.0, 0.0].into_iter().enumerate() {
            b.record(i, r);
        }
        assert_eq!(b.next_step(), Step::Wait, "slot 3 is still running");
        b.discard(3);
        // Three counted, four needed: one more is launched rather than waiting forever.
        assert_eq!(b.next_step(), Step::Launch(1));
        b.record(4, 0.0);
        let Step::Emit(selected) = b.next_step() else { panic!("{:?}", b.decisions) };
        assert!(!selected.contains(&3), "{selected:?}");
        assert_eq!(selected.len(), 4);
    }

    #[test]
    fn balanced_mode_needs_a_quarter_of_each() {
        let mut config = GroupConfig::new(8);
        config.balanced = true;
        let mut outcomes = vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0];
        outcomes.extend([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
        let b = run(config, &outcomes);
        let Some(GroupOutcome::Emitted { positives, negatives, .. }) = b.outcome() else { panic!("{:?}", b.decisions) };
        assert_eq!((positives, negatives), (2, 6));
    }

    #[test]
    fn a_hopeless_group_is_abandoned_before_the_cap() {
        // A prior that expects unsolvable tasks; nothing but failures.
        let prior = Prior { pi0: 0.5, a: 0.7, b: 0.7 };
        let mut b = GroupBuilder::new(GroupConfig::new(8), Posterior::new(prior));
        let mut i = 0;
        while let Step::Launch(n) = b.next_step() {
            for _ in 0..n {
                b.record(i, 0.0);
                i += 1;
            }
        }
        assert_eq!(b.outcome(), Some(GroupOutcome::Abandoned { generated: i as u32 }));
        assert!(i < 16, "abandoned after {i}");
        assert!(b.decisions.last().unwrap().p_usable.unwrap() < 0.1);
    }
}
