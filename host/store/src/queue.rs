//! The rollout queue: claims under leases, lease renewal, finishing (result, trajectory and the
//! job's counters in one transaction), and handing back what a dead or stopping runner held.
//!
//! A claim is a lease: the runner renews it while the rollout runs; when a runner dies its
//! leases lapse and `requeue_expired` (run by any replica) queues those rollouts again. Only the
//! current lease holder can finish a rollout, so a result is written once.

use std::collections::BTreeMap;

use crate::evals::rollout_row;
use crate::{Dialect, Result, RolloutRow, Store, get_i64, get_str, now, pack};

/// A rollout handed to a runner.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    /// Its job.
    pub eval_id: String,
    /// Its id.
    pub rollout_id: String,
    /// Its place in work order.
    pub seq: i64,
    /// Its task.
    pub task_id: String,
    /// Its harness.
    pub harness: String,
    /// Its attempt (0-based).
    pub attempt: u32,
    /// How many times it has been claimed (1 the first time).
    pub tries: i64,
}

/// What a finished rollout leaves.
pub struct Finished {
    /// graded | unknown | error
    pub status: String,
    /// The grader's reward.
    pub reward: Option<f64>,
    /// Whether it passed.
    pub passed: bool,
    /// What failed, if it did.
    pub error: Option<String>,
    /// The result document (JSON).
    pub result: String,
    /// The trajectory document (JSON).
    pub trajectory: String,
}

impl Store {
    /// Jobs with queued work, oldest first: (eval id, tenant, queued, running), from the jobs'
    /// counters (one row per job, however large).
    pub async fn evals_waiting(&self) -> Result<Vec<(String, String, i64, i64)>> {
        let rows = sqlx::query(
            "SELECT id, tenant, queued, running FROM evals WHERE status IN ('queued', 'running') AND queued > 0 \
             ORDER BY created_at, id",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| Ok((get_str(r, "id")?, get_str(r, "tenant")?, get_i64(r, "queued")?, get_i64(r, "running")?)))
            .collect()
    }

    /// Running rollouts per tenant, over every job (for fairness and quotas across replicas).
    pub async fn running_per_tenant(&self) -> Result<BTreeMap<String, i64>> {
        let rows = sqlx::query(
            "SELECT tenant, CAST(SUM(running) AS BIGINT) AS running FROM evals WHERE status IN ('queued', 'running', 'cancelled') \
             GROUP BY tenant",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(|r| Ok((get_str(r, "tenant")?, get_i64(r, "running")?))).collect()
    }

    /// Claims up to `limit` of a job's queued rollouts, in work order, for `owner` until
    /// `lease_until`. Several replicas claim at once without waiting on each other (PostgreSQL:
    /// `FOR UPDATE SKIP LOCKED`; SQLite has one writer).
    pub async fn claim(&self, owner: &str, eval_id: &str, lease_until: f64, limit: i64) -> Result<Vec<Claim>> {
        let pick = match self.dialect {
            Dialect::Postgres => {
                "SELECT eval_id, rollout_id FROM rollouts WHERE eval_id = $3 AND state = 'queued' \
                 ORDER BY seq LIMIT $4 FOR UPDATE SKIP LOCKED"
            }
            Dialect::Sqlite => {
                "SELECT eval_id, rollout_id FROM rollouts WHERE eval_id = $3 AND state = 'queued' ORDER BY seq LIMIT $4"
            }
        };
        let sql = format!(
            "UPDATE rollouts SET state = 'running', owner = $1, lease_until = $2, tries = tries + 1 \
             WHERE (eval_id, rollout_id) IN ({pick}) \
             RETURNING eval_id, rollout_id, seq, task_id, harness, attempt, tries"
        );
        let mut tx = self.write.begin().await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(owner)
            .bind(lease_until)
            .bind(eval_id)
            .bind(limit)
            .fetch_all(&mut *tx)
            .await?;
        let mut claims = Vec::with_capacity(rows.len());
        for r in &rows {
            claims.push(Claim {
                eval_id: get_str(r, "eval_id")?,
                rollout_id: get_str(r, "rollout_id")?,
                seq: get_i64(r, "seq")?,
                task_id: get_str(r, "task_id")?,
                harness: get_str(r, "harness")?,
                attempt: get_i64(r, "attempt")? as u32,
                tries: get_i64(r, "tries")?,
            });
        }
        let mut per_eval: BTreeMap<&str, i64> = BTreeMap::new();
        for c in &claims {
            *per_eval.entry(&c.eval_id).or_default() += 1;
        }
        for (eval_id, n) in per_eval {
            sqlx::query(
                "UPDATE evals SET queued = queued - $2, running = running + $2, \
                 status = CASE WHEN status = 'queued' THEN 'running' ELSE status END WHERE id = $1",
            )
            .bind(eval_id)
            .bind(n)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        claims.sort_by_key(|c| c.seq);
        Ok(claims)
    }

    /// Pushes back the leases of everything `owner` runs; returns how many it holds.
    pub async fn renew(&self, owner: &str, lease_until: f64) -> Result<u64> {
        let done = sqlx::query("UPDATE rollouts SET lease_until = $2 WHERE owner = $1 AND state = 'running'")
            .bind(owner)
            .bind(lease_until)
            .execute(&self.write)
            .await?;
        Ok(done.rows_affected())
    }

    /// Records a finished rollout, if `owner` still holds it: the result, the trajectory and the
    /// job's counters together. `false` when the lease was lost (someone else runs it now).
    pub async fn finish(&self, owner: &str, eval_id: &str, rollout_id: &str, f: &Finished) -> Result<bool> {
        let mut tx = self.write.begin().await?;
        if !self.finish_in(&mut tx, owner, eval_id, rollout_id, f).await? {
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }

    /// Records a rollout that ran outside the queue (an OpenEnv episode, driven by its client)
    /// as finished in its job: added and finished in one transaction, so no runner ever sees it
    /// queued. A finished job runs again meanwhile, as `add_rollouts` makes it.
    pub async fn record_finished(&self, eval_id: &str, rollout: &crate::NewRollout, f: &Finished) -> Result<()> {
        const OWNER: &str = "outside-the-queue";
        let mut tx = self.write.begin().await?;
        if self.dialect == Dialect::Postgres {
            // The finish lock first, as `finish` takes it: one order of locks for both.
            sqlx::query("SELECT pg_advisory_xact_lock(7246353)").execute(&mut *tx).await?;
        }
        let row = sqlx::query(
            "SELECT tenant, status, (SELECT COALESCE(MAX(seq), -1) FROM rollouts WHERE eval_id = $1) AS last \
             FROM evals WHERE id = $1",
        )
        .bind(eval_id)
        .fetch_optional(&mut *tx)
        .await?
        .ok_or_else(|| crate::StoreError::Invalid(format!("no evaluation {eval_id}")))?;
        let (tenant, last) = (get_str(&row, "tenant")?, get_i64(&row, "last")?);
        sqlx::query(
            "INSERT INTO rollouts (eval_id, rollout_id, seq, tenant, task_id, harness, attempt, state, queued_at, owner, tries) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'running', $8, $9, 1)",
        )
        .bind(eval_id)
        .bind(&rollout.rollout_id)
        .bind(last + 1)
        .bind(&tenant)
        .bind(&rollout.task_id)
        .bind(&rollout.harness)
        .bind(i64::from(rollout.attempt))
        .bind(now())
        .bind(OWNER)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE evals SET total = total + 1, running = running + 1, \
             status = CASE WHEN status IN ('done', 'queued') THEN 'running' ELSE status END, finished_at = NULL \
             WHERE id = $1",
        )
        .bind(eval_id)
        .execute(&mut *tx)
        .await?;
        if !self.finish_in(&mut tx, OWNER, eval_id, &rollout.rollout_id, f).await? {
            return Err(crate::StoreError::Corrupt(format!("rollout {} vanished while recorded", rollout.rollout_id)));
        }
        tx.commit().await?;
        Ok(())
    }

    /// `finish`'s writes, in the caller's transaction; `false` when `owner` does not hold it.
    async fn finish_in(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        owner: &str,
        eval_id: &str,
        rollout_id: &str,
        f: &Finished,
    ) -> Result<bool> {
        let next_seq = match self.dialect {
            Dialect::Postgres => "nextval('rollout_finish_seq')",
            Dialect::Sqlite => "(SELECT COALESCE(MAX(finish_seq), 0) + 1 FROM rollouts)",
        };
        let now = now();
        if self.dialect == Dialect::Postgres {
            // Finish numbers must become visible in their order: a follower reading "after N"
            // would pass over a lower number committed late. Finishes take the number and
            // commit one at a time (SQLite's writes already are); they are short.
            sqlx::query("SELECT pg_advisory_xact_lock(7246353)").execute(&mut **tx).await?;
        }
        let updated = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE rollouts SET state = 'done', status = $4, reward = $5, passed = $6, error = $7, result = $8, \
             finish_seq = {next_seq}, finished_at = $9, owner = NULL, lease_until = NULL \
             WHERE eval_id = $1 AND rollout_id = $2 AND owner = $3 AND state = 'running'"
        )))
        .bind(eval_id)
        .bind(rollout_id)
        .bind(owner)
        .bind(&f.status)
        .bind(f.reward)
        .bind(i64::from(f.passed))
        .bind(f.error.as_deref())
        .bind(&f.result)
        .bind(now)
        .execute(&mut **tx)
        .await?
        .rows_affected();
        if updated == 0 {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO trajectories (eval_id, rollout_id, doc) VALUES ($1, $2, $3) \
             ON CONFLICT (eval_id, rollout_id) DO UPDATE SET doc = excluded.doc",
        )
        .bind(eval_id)
        .bind(rollout_id)
        .bind(pack(&f.trajectory))
        .execute(&mut **tx)
        .await?;
        let is = |s: &str| i64::from(f.status == s);
        sqlx::query(
            "INSERT INTO cells (eval_id, task_id, harness, done, graded, passed, errored, unknown, reward_sum) \
             SELECT eval_id, task_id, harness, 1, $3, $4, $5, $6, $7 FROM rollouts WHERE eval_id = $1 AND rollout_id = $2 \
             ON CONFLICT (eval_id, task_id, harness) DO UPDATE SET done = cells.done + 1, \
             graded = cells.graded + excluded.graded, passed = cells.passed + excluded.passed, \
             errored = cells.errored + excluded.errored, unknown = cells.unknown + excluded.unknown, \
             reward_sum = cells.reward_sum + excluded.reward_sum",
        )
        .bind(eval_id)
        .bind(rollout_id)
        .bind(is("graded"))
        .bind(i64::from(f.passed))
        .bind(is("error"))
        .bind(is("unknown"))
        .bind(f.reward.unwrap_or(0.0))
        .execute(&mut **tx)
        .await?;
        sqlx::query(
            "UPDATE evals SET running = running - 1, done = done + 1, graded = graded + $2, passed = passed + $3, \
             errored = errored + $4, unknown = unknown + $5, \
             status = CASE WHEN status = 'cancelled' THEN 'cancelled' \
                           WHEN done + 1 + cancelled >= total THEN 'done' ELSE status END, \
             finished_at = CASE WHEN done + 1 + cancelled >= total OR (status = 'cancelled' AND running = 1) \
                           THEN $6 ELSE finished_at END \
             WHERE id = $1",
        )
        .bind(eval_id)
        .bind(is("graded"))
        .bind(i64::from(f.passed))
        .bind(is("error"))
        .bind(is("unknown"))
        .bind(now)
        .execute(&mut **tx)
        .await?;
        Ok(true)
    }

    /// A running rollout stopped without a result (its job was cancelled).
    pub async fn abandon(&self, owner: &str, eval_id: &str, rollout_id: &str) -> Result<bool> {
        let mut tx = self.write.begin().await?;
        let n = sqlx::query(
            "UPDATE rollouts SET state = 'cancelled', owner = NULL, lease_until = NULL \
             WHERE eval_id = $1 AND rollout_id = $2 AND owner = $3 AND state = 'running'",
        )
        .bind(eval_id)
        .bind(rollout_id)
        .bind(owner)
        .execute(&mut *tx)
        .await?
        .rows_affected() as i64;
        if n > 0 {
            sqlx::query(
                "UPDATE evals SET running = running - 1, cancelled = cancelled + 1, \
                 finished_at = CASE WHEN running = 1 THEN $2 ELSE finished_at END WHERE id = $1",
            )
            .bind(eval_id)
            .bind(now())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(n > 0)
    }

    /// Queues again what `owner` holds (a runner stopping gracefully hands its claims back).
    pub async fn release(&self, owner: &str) -> Result<u64> {
        self.requeue("owner = $1", owner.to_string()).await
    }

    /// Queues again the rollouts whose lease lapsed (their runner died); any replica may run it.
    pub async fn requeue_expired(&self) -> Result<u64> {
        self.requeue("lease_until < $1", now()).await
    }

    /// Queues again every running rollout: for a process that is the store's only runner
    /// (`orchard eval`), at start, after a crash.
    pub async fn requeue_all_running(&self) -> Result<u64> {
        self.requeue("1 = $1", 1_i64).await
    }

    /// Queues again the running rollouts that match `condition` — except those of a cancelled
    /// job, which end cancelled there and then (a cancel that came while their runner was dead
    /// must still end the job: queued again, nobody would ever run or cancel them).
    async fn requeue<T>(&self, condition: &str, value: T) -> Result<u64>
    where
        T: for<'q> sqlx::Encode<'q, sqlx::Any> + sqlx::Type<sqlx::Any> + Send + 'static,
    {
        let mut tx = self.write.begin().await?;
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE rollouts SET state = CASE WHEN (SELECT e.status FROM evals e WHERE e.id = rollouts.eval_id) = 'cancelled' \
                                         THEN 'cancelled' ELSE 'queued' END, \
                                 owner = NULL, lease_until = NULL \
             WHERE state = 'running' AND {condition} RETURNING eval_id, state"
        )))
        .bind(value)
        .fetch_all(&mut *tx)
        .await?;
        // Per job: (queued again, cancelled).
        let mut per_eval: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for r in &rows {
            let counts = per_eval.entry(get_str(r, "eval_id")?).or_default();
            if get_str(r, "state")? == "cancelled" {
                counts.1 += 1;
            } else {
                counts.0 += 1;
            }
        }
        for (eval_id, (queued, cancelled)) in &per_eval {
            sqlx::query(
                "UPDATE evals SET queued = queued + $2, cancelled = cancelled + $3, running = running - $2 - $3, \
                 finished_at = CASE WHEN status = 'cancelled' AND running - $2 - $3 = 0 AND finished_at IS NULL \
                               THEN $4 ELSE finished_at END \
                 WHERE id = $1",
            )
            .bind(eval_id)
            .bind(*queued)
            .bind(*cancelled)
            .bind(now())
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(rows.len() as u64)
    }

    /// Queues again what earlier lives of this replica held (`owner` starts with `prefix`, but
    /// is not `current`): a restarted server takes its dead claims back at once instead of
    /// waiting out their lease. Replica names must be unique (a pod's name, the host's name).
    pub async fn release_predecessors(&self, prefix: &str, current: &str) -> Result<u64> {
        let mut tx_rows = 0;
        let owners = sqlx::query("SELECT DISTINCT owner FROM rollouts WHERE state = 'running' AND owner IS NOT NULL")
            .fetch_all(&self.read)
            .await?;
        for row in &owners {
            let owner = get_str(row, "owner")?;
            if owner.starts_with(prefix) && owner != current {
                tx_rows += self.release(&owner).await?;
            }
        }
        Ok(tx_rows)
    }

    /// What `owner` runs now (for tests and operators).
    pub async fn running_of(&self, owner: &str) -> Result<Vec<RolloutRow>> {
        let rows = sqlx::query(
            "SELECT eval_id, rollout_id, seq, task_id, harness, attempt, state, status, reward, passed, error, tries, \
             finish_seq, finished_at, result FROM rollouts WHERE owner = $1 AND state = 'running'",
        )
        .bind(owner)
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(rollout_row).collect()
    }
}
