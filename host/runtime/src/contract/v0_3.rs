//! `orchard:plugin@0.3.0` (`wit/0.3.0`, the current version): what 0.2.0 has, and
//! - a harness may import `sandbox` (capability `sandbox`): a harness that runs a real agent
//!   program inside the sandbox and relays its model calls. Its sandbox calls are the tool
//!   adapters' (the same host implementation), recorded in the trajectory the same way;
//! - the `desktop-driver` world and its `desktop` import: the rollout's X desktop (screenshots,
//!   XTEST input, the accessibility tree, windows, the clipboard, Python on the display).

worlds!("../../wit/0.3.0", harness_with: {
    "orchard:plugin/sandbox": super::tool_adapter::orchard::plugin::sandbox,
}, desktop: yes);
conversions!(v0_3);
common_calls!(grading_environment);

impl tool_adapter::orchard::plugin::types::Host for HostState {}
log_host!(v0_3);
model_host!(v0_3);
sandbox_host!(v0_3);
tools_host!(v0_3);
since_v0_2!(v0_3);

// `grading.environment` (as in 0.2.0): where the grader works and what was carried there.
grading_environment_fn!();
desktop_host!(v0_3);
