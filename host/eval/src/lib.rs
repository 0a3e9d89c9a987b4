//! Evaluations: tasks × harness (+ tool adapters) × model × grader × attempts, run as rollouts
//! on sandboxes, graded, summarised with pass@k, and written to disk.

pub mod export;
mod job;
mod metrics;
mod report;
mod separate;
mod task;

pub use job::{Job, Placement, RolloutResult, RolloutStatus, VerifierRecord, rollout};
pub use metrics::{pass_at_k, pass_hat_k};
pub use report::trajectory_line;
pub use report::{DomainSummary, HarnessSummary, Summary, TaskSummary, summarize, write_outputs};
pub use separate::verifier_id;
pub use task::{Task, TaskError, load_tasks};
