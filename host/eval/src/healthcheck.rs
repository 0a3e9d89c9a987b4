//! How a task's environment is waited for before the agent starts: Docker's HEALTHCHECK
//! semantics, as Harbor runs them.

use std::time::Duration;

/// A check and its timing.
#[derive(Debug, Clone, PartialEq)]
pub struct Healthcheck {
    /// The command; exit 0 means healthy.
    pub argv: Vec<String>,
    /// Between checks after the start period.
    pub interval: Duration,
    /// How long one check may take.
    pub timeout: Duration,
    /// During it, failures do not count.
    pub start_period: Duration,
    /// Between checks in the start period.
    pub start_interval: Duration,
    /// Failures after the start period before giving up.
    pub retries: u32,
}

fn seconds(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.0, 86_400.0))
}

impl Healthcheck {
    /// `[environment.healthcheck]`: a shell command with Docker's timing.
    pub fn from_config(h: &orchard_task_config::Healthcheck) -> Healthcheck {
        Healthcheck {
            argv: vec!["/bin/sh".into(), "-c".into(), h.command.clone()],
            interval: seconds(h.interval_sec),
            timeout: seconds(h.timeout_sec),
            start_period: seconds(h.start_period_sec),
            start_interval: seconds(h.start_interval_sec),
            retries: h.retries.max(1),
        }
    }

    /// The longest a rollout can wait on it: the start period, its last check, then every
    /// retry's interval and check (saturating: `retries` is the task's to name).
    pub fn longest_wait(&self) -> Duration {
        let retry = self.interval.saturating_add(self.timeout);
        let retries = retry.checked_mul(self.retries).unwrap_or(Duration::MAX);
        self.start_period.saturating_add(self.timeout).saturating_add(retries)
    }

    /// A Dockerfile's `HEALTHCHECK CMD`: polled every 100 ms for up to a minute (its own
    /// `--interval` and `--retries` are for a long-running container, not a rollout's start).
    pub fn from_dockerfile(argv: Vec<String>) -> Healthcheck {
        Healthcheck {
            argv,
            interval: Duration::ZERO,
            timeout: Duration::from_secs(10),
            start_period: Duration::from_secs(60),
            start_interval: Duration::from_millis(100),
            retries: 1,
        }
    }
}
