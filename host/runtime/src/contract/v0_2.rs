//! `orchard:plugin@0.2.0` (`wit/0.2.0`, frozen): what 0.1.0 has, and
//! - `grading.grade` is told its environment (a separate verifier or in place; what was carried
//!   and dropped);
//! - tool adapters and browser drivers read their own configuration (`config.get`);
//! - browser sessions report page events (dialogs, popups, downloads).

worlds!("../../wit/0.2.0");
conversions!(v0_2);
common_calls!(grading_environment);

impl tool_adapter::orchard::plugin::types::Host for HostState {}
log_host!(v0_2);
model_host!(v0_2);
sandbox_host!(v0_2);
tools_host!(v0_2);
since_v0_2!(v0_2);

// `grading.environment` (new in 0.2.0): where the grader works and what was carried there.
grading_environment_fn!();
