//! The domains end to end: browser and GUI rollouts, the mock services of the assistant
//! domain, its harnesses and tasks, and the Claw-Eval converter. One binary; each module is
//! one behaviour's tests.

mod assistant_domain;
mod assistant_harnesses;
mod browser_rollouts;
mod convert_claw_eval;
mod desktop;
mod desktop_live;
mod desktop_tasks;
mod gui_domain;
mod mock_services;
mod osworld_env;
