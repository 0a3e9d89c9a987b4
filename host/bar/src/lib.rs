//! BAR — balanced adaptive rollout.
//!
//! RL on agent tasks learns only from groups whose rollouts disagree: a group of G that all pass
//! or all fail has zero group-relative advantage and wastes its compute. BAR keeps, per task, a
//! posterior over its pass rate ([`Posterior`]: a point mass at "unsolvable" plus a Beta, from
//! decayed success/failure counts), admits tasks in proportion to the probability that a group of
//! G will be mixed ([`Posterior::p_mixed`]), grows a group in small strides up to a cap until it
//! holds both outcomes ([`GroupBuilder`]), abandons it once that has become unlikely, emits G
//! rollouts with the minority outcome kept, and computes advantages against the posterior mean
//! rather than the selected group's own mean ([`advantages`]). Every decision is recorded.

#![warn(missing_docs)]

mod group;
mod planner;
mod posterior;
pub mod sim;

pub use group::{DEFAULT_OPPORTUNITY, Decision, GroupBuilder, GroupConfig, GroupOutcome, Step};
pub use planner::{ADMIT_FLOOR, ADMIT_SHARPNESS, Planner, admit_probability};
pub use posterior::{Posterior, Prior};

/// Advantages of `rewards` (0/1 or graded in [0, 1]) against `baseline` (the task's posterior
/// mean pass rate): the selected group's own mean would be biased by the selection that kept
/// its minority outcome.
pub fn advantages(rewards: &[f64], baseline: f64) -> Vec<f64> {
    rewards.iter().map(|r| r - baseline).collect()
}
