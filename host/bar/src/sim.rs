//! BAR against the ways RL recipes pick prompts today (the bench's `--suite bar`), in a seeded simulation: tasks with an
//! SWE-like difficulty mixture (24 % unsolvable, 10 % easy ~Beta(12, 1), 66 % U-shaped
//! ~Beta(0.7, 0.7)) whose pass rates drift up slowly as the policy learns. Counted: mixed
//! groups of size G per 1,000 rollouts (every rollout counts, discarded ones too) and the RMSE of
//! each emitted group's advantage baseline against the task's true pass rate.

use crate::{GroupConfig, GroupOutcome, Planner, Prior, Step};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Beta, Distribution};

/// One simulated run.
pub struct Setup {
    /// Tasks in the pool.
    pub tasks: usize,
    /// The rollout budget.
    pub rollouts: u64,
    /// Rollouts per group (G).
    pub group: u32,
    /// The random seed.
    pub seed: u64,
    /// Logit added to every solvable task's pass rate per epoch (G rollouts of every task).
    pub drift: f64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup { tasks: 3000, rollouts: 60_000, group: 8, seed: 7, drift: 0.15 }
    }
}

struct World {
    /// Each task's starting logit; `None`: unsolvable.
    logits: Vec<Option<f64>>,
    drift: f64,
    per_epoch: f64,
    spent: u64,
    rng: StdRng,
}

fn logit(p: f64) -> f64 {
    let p = p.clamp(1e-6, 1.0 - 1e-6);
    (p / (1.0 - p)).ln()
}

impl World {
    fn new(s: &Setup) -> World {
        let mut rng = StdRng::seed_from_u64(s.seed);
        let easy = Beta::new(12.0, 1.0).expect("valid");
        let u = Beta::new(0.7, 0.7).expect("valid");
        let logits = (0..s.tasks)
            .map(|_| {
                let x: f64 = rng.random();
                if x < 0.24 {
                    None
                } else if x < 0.34 {
                    Some(logit(easy.sample(&mut rng)))
                } else {
                    Some(logit(u.sample(&mut rng)))
                }
            })
            .collect();
        World { logits, drift: s.drift, per_epoch: (s.tasks as u32 * s.group) as f64, spent: 0, rng }
    }

    /// The task's pass rate now.
    fn p(&self, task: usize) -> f64 {
        match self.logits[task] {
            None => 0.0,
            Some(l) => 1.0 / (1.0 + (-(l + self.drift * self.spent as f64 / self.per_epoch)).exp()),
        }
    }

    /// One rollout: 1 or 0.
    fn roll(&mut self, task: usize) -> f64 {
        self.spent += 1;
        let p = self.p(task);
        if self.rng.random::<f64>() < p { 1.0 } else { 0.0 }
    }
}

/// What one way of picking prompts got from the budget.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Tally {
    /// Groups with both outcomes.
    pub mixed: u64,
    /// Groups with each outcome at least G/4 times.
    pub balanced: u64,
    /// Squared error of the estimated pass rates.
    pub sq_err: f64,
    /// Rollouts spent.
    pub rollouts: u64,
}

impl Tally {
    fn emit(&mut self, rewards: &[f64], baseline: f64, truth: f64, g: u32) {
        let pos = rewards.iter().filter(|r| **r >= 0.5).count() as u32;
        if rewards.len() as u32 == g && pos > 0 && pos < g {
            self.mixed += 1;
            self.sq_err += (baseline - truth).powi(2);
            if pos >= g / 4 && g - pos >= g / 4 {
                self.balanced += 1;
            }
        }
    }

    /// Mixed groups of size G per 1,000 rollouts.
    pub fn per_1000(&self) -> f64 {
        self.mixed as f64 * 1000.0 / self.rollouts.max(1) as f64
    }

    /// The baseline's RMSE against the true pass rate, over the mixed groups.
    pub fn rmse(&self) -> f64 {
        (self.sq_err / self.mixed.max(1) as f64).sqrt()
    }

    /// The share of mixed groups with at least G/4 of each outcome.
    pub fn balanced_share(&self) -> f64 {
        self.balanced as f64 / self.mixed.max(1) as f64
    }
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The tasks in a fresh order each epoch, for ever.
fn order(world: &mut World, n: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    v.shuffle(&mut world.rng);
    v
}

/// Uniform sampling (and DAPO's filter, which keeps the same mixed groups and drops the rest):
/// G rollouts of each task in turn; the group mean is the baseline.
pub fn uniform(s: &Setup) -> Tally {
    let mut w = World::new(s);
    let mut t = Tally::default();
    'outer: loop {
        for task in order(&mut w, s.tasks) {
            if w.spent + s.group as u64 > s.rollouts {
                break 'outer;
            }
            let truth = w.p(task);
            let r: Vec<f64> = (0..s.group).map(|_| w.roll(task)).collect();
            t.emit(&r, mean(&r), truth, s.group);
        }
    }
    t.rollouts = w.spent;
    t
}

/// GRESO: a task whose last groups had no variance is skipped before any rollout, with a
/// probability that grows with how many in a row had none.
pub fn greso(s: &Setup) -> Tally {
    let mut w = World::new(s);
    let mut t = Tally::default();
    let mut flat = vec![0u32; s.tasks];
    'outer: loop {
        for task in order(&mut w, s.tasks) {
            if w.spent + s.group as u64 > s.rollouts {
                break 'outer;
            }
            let skip = (0.5 * flat[task] as f64).min(0.9);
            if w.rng.random::<f64>() < skip {
                continue;
            }
            let truth = w.p(task);
            let r: Vec<f64> = (0..s.group).map(|_| w.roll(task)).collect();
            let pos = r.iter().filter(|x| **x >= 0.5).count();
            flat[task] = if pos == 0 || pos == s.group as usize { flat[task] + 1 } else { 0 };
            t.emit(&r, mean(&r), truth, s.group);
        }
    }
    t.rollouts = w.spent;
    t
}

/// The paper's progressive rule: 2G rollouts, the G closest to half positive emitted.
pub fn progressive(s: &Setup) -> Tally {
    let mut w = World::new(s);
    let mut t = Tally::default();
    let g = s.group as usize;
    'outer: loop {
        for task in order(&mut w, s.tasks) {
            if w.spent + 2 * s.group as u64 > s.rollouts {
                break 'outer;
            }
            let truth = w.p(task);
            let r: Vec<f64> = (0..2 * g).map(|_| w.roll(task)).collect();
            let pos = r.iter().filter(|x| **x >= 0.5).count();
            let take_pos = pos.min(g / 2).max(g.saturating_sub(2 * g - pos));
            let chosen: Vec<f64> =
                std::iter::repeat_n(1.0, take_pos).chain(std::iter::repeat_n(0.0, g - take_pos)).collect();
            t.emit(&chosen, mean(&chosen), truth, s.group);
        }
    }
    t.rollouts = w.spent;
    t
}

/// BAR: admission by the probability of a mixed group, groups grown in strides to 2G, the
/// posterior mean as the baseline.
pub fn bar(s: &Setup, prior: Prior, balanced: bool) -> Tally {
    let mut w = World::new(s);
    let mut t = Tally::default();
    let mut config = GroupConfig::new(s.group);
    config.balanced = balanced;
    let mut planner = Planner::new(s.tasks, prior, config);
    'outer: loop {
        for task in order(&mut w, s.tasks) {
            if w.spent + config.cap as u64 > s.rollouts {
                break 'outer;
            }
            let epoch = w.spent as f64 / w.per_epoch;
            if w.rng.random::<f64>() >= planner.admit_probability(task, epoch) {
                continue;
            }
            let truth = w.p(task);
            let mut b = planner.start(task);
            let mut i = 0;
            while let Step::Launch(n) = b.next_step() {
                for _ in 0..n {
                    let r = w.roll(task);
                    b.record(i, r);
                    i += 1;
                }
            }
            planner.finish(task, &b);
            if let Some(GroupOutcome::Emitted { selected, .. }) = b.outcome() {
                let r: Vec<f64> = selected.iter().map(|i| b.rewards()[*i].unwrap_or(0.0)).collect();
                t.emit(&r, planner.posterior(task).mean(), truth, s.group);
            }
        }
    }
    t.rollouts = w.spent;
    t
}

/// As the service runs it (`POST /v1/groups`): a fresh task set, requests that each pass once
/// over every task (BAR admitting each by its posterior, which persists between requests),
/// until the budget is spent. Answers the first request's tally and the later ones'. Uniform
/// is the same with every task admitted and G rollouts each.
pub fn requests(s: &Setup, prior: Prior, config: Option<GroupConfig>) -> (Tally, Tally) {
    let mut w = World::new(s);
    let (mut first, mut later) = (Tally::default(), Tally::default());
    let mut planner = config.map(|c| {
        let mut p = Planner::new(s.tasks, prior, c);
        // The service keeps each task's posterior between requests and refits no prior.
        p.refit_every = 0;
        p
    });
    let mut request = 0;
    'outer: loop {
        let t = if request == 0 { &mut first } else { &mut later };
        let before = w.spent;
        for task in order(&mut w, s.tasks) {
            let cap = planner.as_ref().map(|p| p.config.cap).unwrap_or(s.group) as u64;
            if w.spent + cap > s.rollouts {
                t.rollouts += w.spent - before;
                break 'outer;
            }
            let truth = w.p(task);
            match planner.as_mut() {
                None => {
                    let r: Vec<f64> = (0..s.group).map(|_| w.roll(task)).collect();
                    t.emit(&r, mean(&r), truth, s.group);
                }
                Some(planner) => {
                    if w.rng.random::<f64>() >= planner.admit_probability(task, 0.0) {
                        continue;
                    }
                    let mut b = planner.start(task);
                    let mut i = 0;
                    while let Step::Launch(n) = b.next_step() {
                        for _ in 0..n {
                            let r = w.roll(task);
                            b.record(i, r);
                            i += 1;
                        }
                    }
                    planner.finish(task, &b);
                    if let Some(GroupOutcome::Emitted { selected, .. }) = b.outcome() {
                        let r: Vec<f64> = selected.iter().map(|i| b.rewards()[*i].unwrap_or(0.0)).collect();
                        t.emit(&r, planner.posterior(task).mean(), truth, s.group);
                    }
                }
            }
        }
        t.rollouts += w.spent - before;
        request += 1;
    }
    (first, later)
}

/// Every way, on the same world: (name, tally).
pub fn all(s: &Setup) -> Vec<(&'static str, Tally)> {
    vec![
        ("uniform / DAPO's filter", uniform(s)),
        ("GRESO's skipping", greso(s)),
        ("progressive (2G, keep G nearest half)", progressive(s)),
        ("BAR", bar(s, Prior::default(), false)),
        ("BAR, balanced mode", bar(s, Prior::default(), true)),
        ("BAR, a wrong prior (pi0 0.02, Beta(4, 1))", bar(s, WRONG_PRIOR, false)),
    ]
}

/// A prior far from the mixture: almost nothing unsolvable, most tasks easy.
pub const WRONG_PRIOR: Prior = Prior { pi0: 0.02, a: 4.0, b: 1.0 };

#[cfg(test)]
mod tests {
    #[test]
    fn the_simulation_is_deterministic() {
        let s = super::Setup { tasks: 200, rollouts: 4000, ..Default::default() };
        assert_eq!(super::all(&s), super::all(&s));
    }

    #[test]
    fn service_like_requests_spend_the_budget_and_uniform_admits_everything() {
        let s = super::Setup { tasks: 50, rollouts: 400, seed: 3, drift: 0.0, ..Default::default() };
        let (u1, u2) = super::requests(&s, crate::Prior::default(), None);
        assert_eq!((u1.rollouts, u2.rollouts), (400, 0), "uniform: one request of G per task");
        let (b1, b2) = super::requests(&s, crate::Prior::default(), Some(crate::GroupConfig::new(8)));
        assert!(b1.rollouts + b2.rollouts <= 400 && b1.rollouts + b2.rollouts > 400 - 16);
        assert!(b1.rollouts < 400, "a cold start admits only part of the tasks");
    }
}
