//! Exec jobs (the Orchard Env model): a command submitted to a sandbox runs in the background;
//! clients poll or wait on its job. Finished jobs are kept for an hour.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orchard_protocol::ExecResult;
use serde::Serialize;
use tokio::sync::watch;

/// How long finished jobs and idempotency keys are remembered.
const RETENTION: f64 = 3600.0;

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum JobStatus {
    Queued,
    Running,
    Succeeded,
    Failed,
}

pub struct Job {
    pub id: String,
    pub sandbox_id: String,
    pub tenant: String,
    pub command: serde_json::Value,
    pub created_at: f64,
    state: Mutex<JobState>,
    done: watch::Sender<bool>,
}

#[derive(Default)]
struct JobState {
    status: Option<JobStatus>,
    started_at: Option<f64>,
    completed_at: Option<f64>,
    result: Option<ExecResult>,
    error: Option<String>,
}

/// What `GET /jobs/{id}` answers.
#[derive(Debug, Serialize)]
pub struct JobView {
    pub job_id: String,
    pub sandbox_id: String,
    /// The command as text (an argv joined with spaces), as Orchard Env answers.
    pub command: String,
    pub status: JobStatus,
    /// Empty until the job has finished (never null: Orchard Env's clients read it as text).
    pub stdout: String,
    pub stderr: String,
    pub exit_code: Option<i32>,
    pub created_at: f64,
    pub started_at: Option<f64>,
    pub completed_at: Option<f64>,
    pub error: Option<String>,
    // Beyond Orchard Env's fields:
    pub timed_out: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_seconds: Option<f64>,
}

/// `"ls -la"` stays as it is; `["ls", "-la"]` becomes `"ls -la"`.
fn command_text(command: &serde_json::Value) -> String {
    match command {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Array(items) => items
            .iter()
            .map(|v| v.as_str().map(str::to_string).unwrap_or_else(|| v.to_string()))
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

impl Job {
    pub fn view(&self) -> JobView {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let r = s.result.as_ref();
        JobView {
            job_id: self.id.clone(),
            sandbox_id: self.sandbox_id.clone(),
            command: command_text(&self.command),
            status: s.status.unwrap_or(JobStatus::Queued),
            stdout: r.map(|r| r.stdout.text.clone()).unwrap_or_default(),
            stderr: r.map(|r| r.stderr.text.clone()).unwrap_or_default(),
            exit_code: r.map(|r| r.exit_code),
            created_at: self.created_at,
            started_at: s.started_at,
            completed_at: s.completed_at,
            error: s.error.clone(),
            timed_out: r.is_some_and(|r| r.timed_out),
            stdout_truncated: r.is_some_and(|r| r.stdout.truncated),
            stderr_truncated: r.is_some_and(|r| r.stderr.truncated),
            duration_seconds: r.map(|r| r.wall_seconds),
        }
    }

    pub fn start(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.status = Some(JobStatus::Running);
        s.started_at = Some(now());
    }

    /// Records the outcome: a zero exit succeeds; anything else, a timeout or an error fails.
    pub fn finish(&self, outcome: Result<ExecResult, String>) {
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.completed_at = Some(now());
            match outcome {
                Ok(result) => {
                    s.status = Some(if result.exit_code == 0 && !result.timed_out {
                        JobStatus::Succeeded
                    } else {
                        JobStatus::Failed
                    });
                    if result.timed_out {
                        s.error = Some(format!("command timed out after {:.1} s and was killed", result.wall_seconds));
                    }
                    s.result = Some(result);
                }
                Err(message) => {
                    s.status = Some(JobStatus::Failed);
                    s.error = Some(message);
                }
            }
        }
        let _ = self.done.send(true);
    }

    fn finished_at(&self) -> Option<f64> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).completed_at
    }

    /// Waits until the job is finished or `timeout` passes; true when finished.
    pub async fn wait(&self, timeout: Option<Duration>) -> bool {
        let mut rx = self.done.subscribe();
        let finished = rx.wait_for(|d| *d);
        match timeout {
            Some(t) => tokio::time::timeout(t, finished).await.is_ok_and(|r| r.is_ok()),
            None => finished.await.is_ok(),
        }
    }
}

#[derive(Default)]
pub struct JobStore {
    jobs: Mutex<HashMap<String, Arc<Job>>>,
    /// (tenant, Idempotency-Key) → (job id, when).
    idempotency: Mutex<HashMap<(String, String), (String, f64)>>,
}

pub enum Submission {
    New(Arc<Job>),
    /// A retry of an earlier submission with the same Idempotency-Key.
    Existing(Arc<Job>),
}

impl JobStore {
    pub fn submit(
        &self,
        tenant: &str,
        sandbox_id: &str,
        command: serde_json::Value,
        idempotency_key: Option<&str>,
    ) -> Submission {
        let mut keys = self.idempotency.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = idempotency_key
            && let Some((job_id, _)) = keys.get(&(tenant.to_string(), key.to_string()))
            && let Some(job) = self.get(tenant, job_id)
        {
            return Submission::Existing(job);
        }
        let job = Arc::new(Job {
            id: format!("job-{}", uuid::Uuid::new_v4().simple()),
            sandbox_id: sandbox_id.to_string(),
            tenant: tenant.to_string(),
            command,
            created_at: now(),
            state: Mutex::new(JobState::default()),
            done: watch::channel(false).0,
        });
        if let Some(key) = idempotency_key {
            keys.insert((tenant.to_string(), key.to_string()), (job.id.clone(), now()));
        }
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).insert(job.id.clone(), job.clone());
        Submission::New(job)
    }

    /// The job, if it exists and belongs to `tenant`.
    pub fn get(&self, tenant: &str, id: &str) -> Option<Arc<Job>> {
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).get(id).filter(|j| j.tenant == tenant).cloned()
    }

    /// Forgets finished jobs and idempotency keys older than the retention.
    pub fn collect_garbage(&self) {
        let cutoff = now() - RETENTION;
        self.jobs.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, j| j.finished_at().is_none_or(|t| t > cutoff));
        self.idempotency.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, (_, t)| *t > cutoff);
    }
}

pub fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}
