//! Evaluations: tasks × harness (+ tool adapters) × model × grader × attempts, run as rollouts
//! on sandboxes, graded, summarised with pass@k, and written to disk.

#![warn(missing_docs)]

mod environment;
mod episode;
pub mod export;
mod healthcheck;
mod job;
mod metrics;
mod report;
mod result;
mod separate;
mod steps;
mod task;

pub use episode::{EPISODE_AGENT, Episode};
pub use healthcheck::Healthcheck;
pub use job::{BrowserPlacement, Job, Placement, rollout};
pub use metrics::{pass_at_k, pass_hat_k};
pub use orchard_task_files::TaskFiles;
pub use report::trajectory_line;
pub use report::{DomainSummary, HarnessSummary, Summary, TaskSummary, summarize, write_outputs, write_rollout};
pub use result::{FailureClass, RolloutResult, RolloutStatus, VerifierRecord};
pub use separate::verifier_id;
pub use steps::{StepRecord, TaskStep};
pub use task::{
    MAX_COPY_BYTES, MAX_PATCH_BYTES, MAX_TEXT_BYTES, Task, TaskError, load_task, load_tasks, load_tasks_in,
};
