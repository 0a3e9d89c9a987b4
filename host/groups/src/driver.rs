//! One group, start to end: its job is queued with G rollouts of the task; as rollouts finish
//! (on any replica: read from the store) each is streamed, BAR takes its reward, and decides to
//! wait, top up, emit or abandon. An environment's failure is run again in the same slot, never
//! counted; what is still queued or running when the group ends is cancelled.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use orchard_bar::{GroupBuilder, Posterior, Step};
use orchard_eval::RolloutResult;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::GroupService;
use crate::record::{GroupRecord, Record, RolloutKind, rollout_record};
use crate::request::GroupRequest;

/// How long a decided group waits for its cancelled rollouts to stop before the stream ends
/// (a remote replica sees a cancel at its next pass: a quarter of its lease).
const DRAIN_WAIT: Duration = Duration::from_secs(30);

/// How a group ended, for the stream's last record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Enough of each outcome: emitted.
    Emitted,
    /// A usable group was too unlikely within its cap or the budget.
    Abandoned,
    /// Ended unfinished: as many groups as the request wanted were emitted by others.
    Stopped,
    /// Its job was refused or failed.
    Failed,
    /// The client went away: the group's job was cancelled.
    Dropped,
}

#[derive(Debug, Clone)]
enum Slot {
    Running { attempt: u32, retries: u32 },
    Done { rollout_id: String, reward: f64 },
    Discarded,
}

pub struct GroupRun {
    pub service: Arc<GroupService>,
    pub tenant: String,
    pub request: Arc<GroupRequest>,
    pub task_id: String,
    /// The harness's id (checked when the request was), what rollout ids are made of.
    pub harness_id: String,
    pub posterior: Posterior,
    pub memory_key: String,
    pub tx: mpsc::Sender<Record>,
    pub spend: Arc<crate::spend::Spend>,
}

struct State {
    group_id: String,
    /// Whether the group's job exists yet (its first launch makes it).
    queued: bool,
    builder: GroupBuilder,
    slots: Vec<Slot>,
    by_attempt: HashMap<u32, usize>,
    next_attempt: u32,
    cursor: i64,
    env_errors: u32,
    model_errors: u32,
}

impl GroupRun {
    pub async fn run(self) -> (Ended, usize) {
        let group_id = orchard_scheduler::new_eval_id();
        let bar = self.request.bar.is_some();
        let mut config = self.request.group_config();
        if !bar {
            config.cap = config.size;
        }
        let mut st = State {
            group_id,
            queued: false,
            builder: GroupBuilder::new(config, self.posterior),
            slots: Vec::new(),
            by_attempt: HashMap::new(),
            next_attempt: 1,
            cursor: 0,
            env_errors: 0,
            model_errors: 0,
        };
        let mut events = self.service.evals.runner.subscribe();
        let mut enough = self.spend.enough();
        let mut streamed = 0usize;
        let ended = loop {
            if *enough.borrow() {
                self.finish(&mut st, None, Some("stopped: as many groups as the request wanted were emitted")).await;
                break Ended::Stopped;
            }
            // Decide.
            let step = if bar || st.slots.is_empty() {
                st.builder.next_step()
            } else if st.slots.iter().any(|s| matches!(s, Slot::Running { .. })) {
                Step::Wait
            } else {
                // A fixed group: every slot has ended; emit what was counted.
                Step::Emit((0..st.slots.len()).filter(|i| matches!(st.slots[*i], Slot::Done { .. })).collect())
            };
            match step {
                Step::Launch(n) => {
                    if !self.spend.reserve(n) {
                        let why = format!(
                            "abandoned: the request's budget of {} rollouts was spent",
                            self.spend.budget.unwrap_or_default()
                        );
                        self.finish(&mut st, None, Some(&why)).await;
                        break Ended::Abandoned;
                    }
                    let first = st.slots.len();
                    let attempts: Vec<u32> = (0..n).map(|k| self.new_attempt(&mut st, first + k as usize, 0)).collect();
                    if let Err(message) = self.launch(&mut st, &attempts).await {
                        let _ = self
                            .tx
                            .send(Record::Error {
                                task_id: self.task_id.clone(),
                                group_id: Some(st.group_id.clone()),
                                message,
                            })
                            .await;
                        self.cancel(&st).await;
                        break Ended::Failed;
                    }
                    continue;
                }
                Step::Emit(selected) => {
                    if !self.spend.claim_emit() {
                        self.finish(&mut st, None, Some("stopped: as many groups as the request wanted were emitted"))
                            .await;
                        break Ended::Stopped;
                    }
                    self.finish(&mut st, Some(selected), None).await;
                    break Ended::Emitted;
                }
                Step::Abandon => {
                    self.finish(&mut st, None, None).await;
                    break Ended::Abandoned;
                }
                Step::Wait => {}
            }
            // Wait for rollouts to finish (here or on another replica), or the client to leave.
            tokio::select! {
                _ = events.recv() => {}
                _ = tokio::time::sleep(Duration::from_millis(300)) => {}
                _ = self.tx.closed() => {
                    self.cancel(&st).await;
                    break Ended::Dropped;
                }
                _ = enough.changed() => {}
            }
            match self.take_finished(&mut st).await {
                Ok(n) => streamed += n,
                Err(e) => tracing::warn!(group = %st.group_id, "reading finished rollouts: {e}"),
            }
        };
        if ended != Ended::Dropped {
            streamed += self.drain(&mut st).await;
        }
        self.service.memory.store(&self.memory_key, st.builder.posterior, self.request.policy_version().as_deref());
        (ended, streamed)
    }

    /// After the group is decided: waits for its cancelled rollouts to stop (here at once, on
    /// another replica at its runner's next pass) and streams those that finished anyway as
    /// surplus — a rollout that ended 8 ms after the one that completed its group is the
    /// trainer's too. Bounded: a replica that died holds its claims until their lease lapses,
    /// and then they are cancelled, never run.
    async fn drain(&self, st: &mut State) -> usize {
        if !st.queued {
            return 0;
        }
        let store = &self.service.evals.env.store;
        let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
        let mut streamed = 0;
        loop {
            let running = match store.eval(&st.group_id).await {
                Ok(Some(e)) => e.running,
                Ok(None) => 0,
                Err(e) => {
                    tracing::warn!(group = %st.group_id, "reading the group's job: {e}");
                    0
                }
            };
            let rows = match store.finished_since(&st.group_id, st.cursor, 100).await {
                Ok(rows) => rows,
                Err(e) => {
                    tracing::warn!(group = %st.group_id, "reading finished rollouts: {e}");
                    Vec::new()
                }
            };
            for row in rows {
                st.cursor = row.finish_seq.unwrap_or(st.cursor);
                let Some(result) = row.result.as_deref().and_then(|r| serde_json::from_str::<RolloutResult>(r).ok())
                else {
                    continue;
                };
                let doc = self.document(&st.group_id, &row.rollout_id).await;
                let slot = st.by_attempt.get(&(row.attempt as u32)).copied().unwrap_or_default();
                let mut record = rollout_record(&result, &doc, &st.group_id, slot, self.request.policy_version());
                record.surplus = true;
                streamed += 1;
                let _ = self.tx.send(Record::Rollout(Box::new(record))).await;
            }
            if running == 0 || tokio::time::Instant::now() >= deadline {
                if running > 0 {
                    tracing::warn!(group = %st.group_id, running, "rollouts of a decided group still running: not streamed");
                }
                return streamed;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn document(&self, group_id: &str, rollout_id: &str) -> Value {
        let store = &self.service.evals.env.store;
        store
            .rollout(group_id, rollout_id)
            .await
            .ok()
            .flatten()
            .and_then(|(_, doc)| doc)
            .and_then(|d| serde_json::from_str::<Value>(&d).ok())
            .unwrap_or(Value::Null)
    }

    fn new_attempt(&self, st: &mut State, slot: usize, retries: u32) -> u32 {
        let attempt = st.next_attempt;
        st.next_attempt += 1;
        st.by_attempt.insert(attempt, slot);
        let running = Slot::Running { attempt, retries };
        if slot < st.slots.len() {
            st.slots[slot] = running;
        } else {
            st.slots.push(running);
        }
        attempt
    }

    /// Queues `attempts`: the group's job the first time, more of its rollouts after.
    async fn launch(&self, st: &mut State, attempts: &[u32]) -> Result<(), String> {
        let (Some(&lo), Some(&hi)) = (attempts.iter().min(), attempts.iter().max()) else { return Ok(()) };
        let store = &self.service.evals.env.store;
        if st.queued {
            orchard_scheduler::add_attempts(store, &st.group_id, &self.task_id, &self.harness_id, lo..=hi)
                .await
                .map_err(|e| e.to_string())?;
        } else {
            orchard_scheduler::queue_attempts(
                store,
                &st.group_id,
                &self.tenant,
                &self.request.spec(),
                &self.task_id,
                &self.harness_id,
                lo..=hi,
            )
            .await
            .map_err(|e| e.to_string())?;
            tracing::info!(group = %st.group_id, task = %self.task_id, rollouts = hi - lo + 1, "group started");
            st.queued = true;
        }
        self.service.evals.runner.wake();
        Ok(())
    }

    /// Streams what finished since last time and hands BAR the rewards; returns how many.
    async fn take_finished(&self, st: &mut State) -> Result<usize, String> {
        let store = &self.service.evals.env.store;
        let rows = store.finished_since(&st.group_id, st.cursor, 100).await.map_err(|e| e.to_string())?;
        let mut n = 0;
        for row in rows {
            st.cursor = row.finish_seq.unwrap_or(st.cursor);
            let Some(&slot) = st.by_attempt.get(&(row.attempt as u32)) else { continue };
            let Some(result) = row.result.as_deref().and_then(|r| serde_json::from_str::<RolloutResult>(r).ok()) else {
                continue;
            };
            let doc = store
                .rollout(&st.group_id, &row.rollout_id)
                .await
                .map_err(|e| e.to_string())?
                .and_then(|(_, doc)| doc)
                .and_then(|d| serde_json::from_str::<Value>(&d).ok())
                .unwrap_or(Value::Null);
            let record = rollout_record(&result, &doc, &st.group_id, slot, self.request.policy_version());
            let kind = record.status;
            n += 1;
            let _ = self.tx.send(Record::Rollout(Box::new(record))).await;
            let Slot::Running { attempt, retries } = st.slots[slot] else { continue };
            if attempt != row.attempt as u32 {
                continue;
            }
            if kind.counted() {
                let reward = result.reward.unwrap_or(0.0);
                st.builder.record(slot, reward);
                st.slots[slot] = Slot::Done { rollout_id: result.rollout_id.clone(), reward };
                continue;
            }
            if kind == RolloutKind::ModelError {
                st.model_errors += 1;
            } else {
                st.env_errors += 1;
            }
            // The environment failed, not the policy: run the slot again (a model error is the
            // trainer's endpoint, already retried by the client: given up).
            // A retry is a launch like any other: it comes out of the request's budget.
            if kind == RolloutKind::EnvError && retries < self.request.env_retries && self.spend.reserve(1) {
                let attempt = self.new_attempt(st, slot, retries + 1);
                if let Err(e) = self.launch(st, &[attempt]).await {
                    tracing::warn!(group = %st.group_id, "retrying a rollout: {e}");
                    st.slots[slot] = Slot::Discarded;
                    st.builder.discard(slot);
                }
            } else {
                st.slots[slot] = Slot::Discarded;
                st.builder.discard(slot);
            }
        }
        Ok(n)
    }

    /// Emits the group's record (`selected`: slots, or `None` when abandoned) and cancels
    /// what still runs.
    async fn finish(&self, st: &mut State, selected: Option<Vec<usize>>, why: Option<&str>) {
        if st.slots.iter().any(|s| matches!(s, Slot::Running { .. })) {
            self.cancel(st).await;
        }
        let bar = self.request.bar.is_some();
        let done = |i: &usize| match &st.slots[*i] {
            Slot::Done { rollout_id, reward } => Some((rollout_id.clone(), *reward)),
            _ => None,
        };
        let chosen: Vec<(String, f64)> = selected.as_deref().unwrap_or(&[]).iter().filter_map(done).collect();
        let rewards: Vec<f64> = chosen.iter().map(|c| c.1).collect();
        let all: Vec<f64> = (0..st.slots.len()).filter_map(|i| done(&i)).map(|c| c.1).collect();
        // Emitted: what was selected. Abandoned: what was graded (nothing is selected, but the
        // counts are what the trainer reads to see why).
        let counted: &[f64] = if selected.is_some() { &rewards } else { &all };
        let positives = counted.iter().filter(|r| **r >= 0.5).count() as u32;
        let negatives = counted.len() as u32 - positives;
        let (baseline, baseline_kind) = if bar {
            (st.builder.posterior.mean(), "posterior_mean")
        } else {
            (rewards.iter().sum::<f64>() / rewards.len().max(1) as f64, "group_mean")
        };
        let generated = st.slots.len() as u32 + st.env_errors + st.model_errors;
        let decided = match (&selected, st.builder.decisions.last()) {
            (Some(_), _) if !bar => format!("every slot ended: {} counted of {}", rewards.len(), self.request.size),
            (Some(_), _) => {
                format!("mixed: {positives} positive and {negatives} negative selected from {} graded", all.len())
            }
            (None, Some(d)) => match d.p_usable {
                Some(p) if (st.slots.len() as u32) < st.builder.config.cap => format!(
                    "abandoned: a usable group within {} rollouts had probability {p:.3} (< {})",
                    st.builder.config.cap, st.builder.config.abandon_below
                ),
                _ => format!(
                    "abandoned: the cap of {} rollouts was reached without a usable group",
                    st.builder.config.cap
                ),
            },
            (None, None) => "abandoned".into(),
        };
        let reason = why.map(str::to_string).unwrap_or(decided);
        let record = GroupRecord {
            group_id: st.group_id.clone(),
            task_id: self.task_id.clone(),
            outcome: match (&selected, why) {
                (Some(_), _) => "emitted",
                (None, Some(w)) if w.starts_with("stopped") => "stopped",
                (None, _) => "abandoned",
            }
            .into(),
            reason,
            selected: chosen.iter().map(|c| c.0.clone()).collect(),
            advantages: orchard_bar::advantages(&rewards, baseline),
            rewards,
            baseline,
            baseline_kind,
            generated,
            positives,
            negatives,
            env_errors: st.env_errors,
            model_errors: st.model_errors,
            estimated_pass_rate: st.builder.posterior.mean(),
            policy_version: self.request.policy_version(),
            decisions: st.builder.decisions.clone(),
        };
        let _ = self.tx.send(Record::Group(Box::new(record))).await;
    }

    /// Cancels the group's job: queued rollouts at once, running ones on this replica now (on
    /// another at its runner's next pass).
    async fn cancel(&self, st: &State) {
        let evals = &self.service.evals;
        if st.queued {
            if let Err(e) = evals.env.store.cancel(&st.group_id).await {
                tracing::warn!(group = %st.group_id, "cancelling the group's leftovers: {e}");
            }
            evals.runner.stop_eval(&st.group_id).await;
        }
    }
}
