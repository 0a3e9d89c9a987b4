//! Jobs and what they show: create (with every rollout queued), read one, list a tenant's,
//! page through rollouts, per-cell counts for the task × harness matrix, cancel, retry.

use serde::Serialize;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::packed::{Col, flag, float, float_or_zero, packed_sql, unpack_rows};
use crate::{Result, Store, StoreError, get_f64, get_i64, get_opt_f64, get_opt_str, get_str, now, unpack};

/// A job to create. `spec` is the request as JSON (never a secret's value).
pub struct NewEval {
    /// The job's id.
    pub id: String,
    /// The tenant that submitted it.
    pub tenant: String,
    /// The request, as JSON.
    pub spec: String,
    /// What identifies the request (a resumed CLI run must match it).
    pub fingerprint: String,
    /// Attempts per task and harness.
    pub k: u32,
    /// Its rollouts, in work order.
    pub rollouts: Vec<NewRollout>,
    /// A rollout group's job (`POST /v1/groups`): reachable by id, never listed among the
    /// tenant's evaluations.
    pub group: bool,
}

/// A rollout in work order (`seq`): task, harness as given, attempt.
pub struct NewRollout {
    /// Its id.
    pub rollout_id: String,
    /// Its task.
    pub task_id: String,
    /// Its harness, as the job named it.
    pub harness: String,
    /// Its attempt (0-based).
    pub attempt: u32,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
/// A job and its counts.
pub struct EvalRow {
    /// Its id.
    pub id: String,
    /// The tenant that submitted it.
    pub tenant: String,
    /// queued | running | done | cancelled
    pub status: String,
    #[serde(skip)]
    /// The request, as JSON.
    pub spec: String,
    #[serde(skip)]
    /// What identifies the request.
    pub fingerprint: String,
    /// Epoch seconds.
    pub created_at: f64,
    /// When its last rollout finished.
    pub finished_at: Option<f64>,
    /// Attempts per task and harness.
    pub k: i64,
    /// Rollouts in all.
    pub total: i64,
    /// Rollouts waiting.
    pub queued: i64,
    /// Rollouts running.
    pub running: i64,
    /// Rollouts finished.
    pub done: i64,
    /// Finished with a grade.
    pub graded: i64,
    /// Graded as passed.
    pub passed: i64,
    /// Finished with an error.
    pub errored: i64,
    /// Finished without a grade the grader could give.
    pub unknown: i64,
    /// Cancelled before they ran.
    pub cancelled: i64,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
/// One rollout of a job. Reads back what it writes, and a packed row (floats as exact text,
/// `passed` as 0 or 1).
pub struct RolloutRow {
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
    pub attempt: i64,
    /// queued | running | done | cancelled
    pub state: String,
    /// graded | unknown | error, once done.
    pub status: Option<String>,
    /// The grader's reward.
    #[serde(default, deserialize_with = "float")]
    pub reward: Option<f64>,
    /// Whether it passed.
    #[serde(default, deserialize_with = "flag")]
    pub passed: Option<bool>,
    /// What failed, if it did.
    pub error: Option<String>,
    /// How many times it was claimed.
    pub tries: i64,
    /// Its place in finishing order.
    pub finish_seq: Option<i64>,
    /// Epoch seconds.
    #[serde(default, deserialize_with = "float")]
    pub finished_at: Option<f64>,
    /// The whole result document, once done.
    #[serde(skip_serializing, default)]
    pub result: Option<String>,
}

/// Counts for one task × harness cell, from the rollouts done so far. Reads back what it writes,
/// and a packed row (the float as exact text).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct TaskCell {
    /// The task.
    pub task_id: String,
    /// The harness.
    pub harness: String,
    /// Rollouts finished.
    pub done: i64,
    /// Finished with a grade.
    pub graded: i64,
    /// Graded as passed.
    pub passed: i64,
    /// Finished with an error.
    pub errored: i64,
    /// Finished without a grade.
    pub unknown: i64,
    /// Sum of the graded rewards.
    #[serde(deserialize_with = "float_or_zero")]
    pub reward_sum: f64,
}

#[derive(Debug, Clone, Default)]
/// Which jobs to list.
pub struct EvalFilter {
    /// Only jobs in this state (`running`, `done`, `cancelled`).
    pub status: Option<String>,
    /// Page after this one: (created_at, id) of the last row seen.
    pub before: Option<(f64, String)>,
    /// Most rows.
    pub limit: i64,
}

#[derive(Debug, Clone, Default)]
/// Which rollouts to list.
pub struct RolloutFilter {
    /// Only this task's.
    pub task_id: Option<String>,
    /// Only this harness's.
    pub harness: Option<String>,
    /// Only in this state (`queued`, `running`, `done`).
    pub state: Option<String>,
    /// Only with this status (`graded`, `unknown`, `error`, `cancelled`).
    pub status: Option<String>,
    /// Only passed (or failed) ones.
    pub passed: Option<bool>,
    /// Only if the job is this tenant's: a page that checks its owner in the same read (a job
    /// of anyone else's, like one that does not exist, has no rows).
    pub tenant: Option<String>,
    /// Page after this `seq`.
    pub after_seq: Option<i64>,
    /// Most rows.
    pub limit: i64,
    /// Whether each row carries its whole result document (a list page does not show it, and
    /// reading it made a page of 100 cost three times as much).
    pub with_result: bool,
}

const EVAL_COLUMNS: &str = "id, tenant, status, spec, fingerprint, created_at, finished_at, k, total, queued, \
                            running, done, graded, passed, errored, unknown, cancelled";
/// A rollout row's columns but its result document (one list for both selections below).
macro_rules! rollout_fields {
    () => {
        "eval_id, rollout_id, seq, task_id, harness, attempt, state, status, reward, passed, error, tries, \
         finish_seq, finished_at"
    };
}
const ROLLOUT_COLUMNS: &str = concat!(rollout_fields!(), ", result");

/// A rollout row read packed (see `packed`): [`RolloutRow`]'s fields, in their order (a packed
/// row is an array, which serde reads into the struct field by field).
const PACKED_ROLLOUT: &[Col] = &[
    Col::Plain("eval_id"),
    Col::Plain("rollout_id"),
    Col::Plain("seq"),
    Col::Plain("task_id"),
    Col::Plain("harness"),
    Col::Plain("attempt"),
    Col::Plain("state"),
    Col::Plain("status"),
    Col::Float("reward"),
    Col::Plain("passed"),
    Col::Plain("error"),
    Col::Plain("tries"),
    Col::Plain("finish_seq"),
    Col::Float("finished_at"),
    Col::Plain("result"),
];

fn eval_row(row: &AnyRow) -> Result<EvalRow> {
    Ok(EvalRow {
        id: get_str(row, "id")?,
        tenant: get_str(row, "tenant")?,
        status: get_str(row, "status")?,
        spec: get_str(row, "spec")?,
        fingerprint: get_str(row, "fingerprint")?,
        created_at: get_f64(row, "created_at")?,
        finished_at: get_opt_f64(row, "finished_at")?,
        k: get_i64(row, "k")?,
        total: get_i64(row, "total")?,
        queued: get_i64(row, "queued")?,
        running: get_i64(row, "running")?,
        done: get_i64(row, "done")?,
        graded: get_i64(row, "graded")?,
        passed: get_i64(row, "passed")?,
        errored: get_i64(row, "errored")?,
        unknown: get_i64(row, "unknown")?,
        cancelled: get_i64(row, "cancelled")?,
    })
}

pub(crate) fn rollout_row(row: &AnyRow) -> Result<RolloutRow> {
    Ok(RolloutRow {
        eval_id: get_str(row, "eval_id")?,
        rollout_id: get_str(row, "rollout_id")?,
        seq: get_i64(row, "seq")?,
        task_id: get_str(row, "task_id")?,
        harness: get_str(row, "harness")?,
        attempt: get_i64(row, "attempt")?,
        state: get_str(row, "state")?,
        status: get_opt_str(row, "status")?,
        reward: get_opt_f64(row, "reward")?,
        passed: row.try_get::<Option<i64>, _>("passed")?.map(|p| p != 0),
        error: get_opt_str(row, "error")?,
        tries: get_i64(row, "tries")?,
        finish_seq: row.try_get::<Option<i64>, _>("finish_seq")?,
        finished_at: get_opt_f64(row, "finished_at")?,
        result: get_opt_str(row, "result")?,
    })
}

/// Rows per multi-row INSERT (well under both engines' bound-parameter limits).
const INSERT_CHUNK: usize = 400;

/// Queues `rollouts` of a job with work-order numbers from `first_seq`, a chunk per INSERT.
async fn insert_rollouts(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    eval_id: &str,
    tenant: &str,
    first_seq: i64,
    rollouts: &[NewRollout],
    now: f64,
) -> Result<()> {
    for (chunk_index, chunk) in rollouts.chunks(INSERT_CHUNK).enumerate() {
        let mut sql = String::from(
            "INSERT INTO rollouts (eval_id, rollout_id, seq, tenant, task_id, harness, attempt, state, queued_at) VALUES ",
        );
        for i in 0..chunk.len() {
            let b = i * 7;
            if i > 0 {
                sql.push(',');
            }
            sql.push_str(&format!(
                "(${}, ${}, ${}, ${}, ${}, ${}, ${}, 'queued', ${})",
                b + 1,
                b + 2,
                b + 3,
                b + 4,
                b + 5,
                b + 6,
                b + 7,
                chunk.len() * 7 + 1
            ));
        }
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (i, r) in chunk.iter().enumerate() {
            let seq = first_seq + (chunk_index * INSERT_CHUNK + i) as i64;
            query = query
                .bind(eval_id)
                .bind(&r.rollout_id)
                .bind(seq)
                .bind(tenant)
                .bind(&r.task_id)
                .bind(&r.harness)
                .bind(i64::from(r.attempt));
        }
        query.bind(now).execute(&mut **tx).await?;
    }
    Ok(())
}

impl Store {
    /// Bytes `tenant`'s stored results take: trajectories and result documents of its jobs (what
    /// the results quota counts).
    pub async fn result_usage(&self, tenant: &str) -> Result<u64> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE((SELECT SUM(LENGTH(t.doc)) FROM trajectories t JOIN evals e ON e.id = t.eval_id
                                   WHERE e.tenant = $1), 0)
                       + COALESCE((SELECT SUM(LENGTH(r.result)) FROM rollouts r WHERE r.tenant = $1), 0) AS BIGINT)
                    AS used",
        )
        .bind(tenant)
        .fetch_one(&self.read)
        .await?;
        Ok(crate::get_i64(&row, "used")?.max(0) as u64)
    }

    /// Harness names by how many rollouts ran them, most first (what a fresh replica compiles
    /// first).
    pub async fn harness_usage(&self) -> Result<Vec<String>> {
        let rows =
            sqlx::query("SELECT harness, COUNT(*) AS n FROM rollouts GROUP BY harness ORDER BY n DESC LIMIT 100")
                .fetch_all(&self.read)
                .await?;
        let mut names: Vec<String> = Vec::new();
        for row in &rows {
            let id = get_str(row, "harness")?;
            let name = id.split('@').next().unwrap_or(&id).to_string();
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// Creates the job with every rollout queued, in one transaction.
    pub async fn create_eval(&self, eval: &NewEval) -> Result<EvalRow> {
        if eval.rollouts.is_empty() {
            return Err(StoreError::Invalid("an evaluation needs at least one rollout".into()));
        }
        self.insert_eval(eval).await
    }

    /// Creates a job whose rollouts run outside the queue and arrive finished
    /// ([`Store::record_finished`]): an OpenEnv session's episodes. It starts empty and done.
    pub async fn create_open_eval(&self, eval: &NewEval) -> Result<EvalRow> {
        if !eval.rollouts.is_empty() {
            return Err(StoreError::Invalid("an open job's rollouts are recorded as they finish".into()));
        }
        self.insert_eval(eval).await?;
        sqlx::query("UPDATE evals SET status = 'done', finished_at = created_at WHERE id = $1")
            .bind(&eval.id)
            .execute(&self.write)
            .await?;
        self.eval(&eval.id).await?.ok_or_else(|| StoreError::Corrupt("the evaluation just created is gone".into()))
    }

    async fn insert_eval(&self, eval: &NewEval) -> Result<EvalRow> {
        let now = now();
        let mut tx = self.write.begin().await?;
        let total = eval.rollouts.len() as i64;
        sqlx::query(
            "INSERT INTO evals (id, tenant, status, spec, fingerprint, created_at, k, total, queued, running, done) \
             VALUES ($1, $2, 'queued', $3, $4, $5, $6, $7, $7, 0, 0)",
        )
        .bind(&eval.id)
        .bind(&eval.tenant)
        .bind(&eval.spec)
        .bind(&eval.fingerprint)
        .bind(now)
        .bind(i64::from(eval.k))
        .bind(total)
        .execute(&mut *tx)
        .await?;
        insert_rollouts(&mut tx, &eval.id, &eval.tenant, 0, &eval.rollouts, now).await?;
        if eval.group {
            sqlx::query("INSERT INTO group_jobs (id) VALUES ($1)").bind(&eval.id).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        self.eval(&eval.id).await?.ok_or_else(|| StoreError::Corrupt("the evaluation just created is gone".into()))
    }

    /// Queues more rollouts of a job that is not cancelled (a rollout group topping up); a
    /// finished job runs again. Rollout ids must be new.
    pub async fn add_rollouts(&self, eval_id: &str, rollouts: &[NewRollout]) -> Result<()> {
        if rollouts.is_empty() {
            return Ok(());
        }
        let mut tx = self.write.begin().await?;
        let row = sqlx::query("SELECT tenant, status, (SELECT COALESCE(MAX(seq), -1) FROM rollouts WHERE eval_id = $1) AS last FROM evals WHERE id = $1")
            .bind(eval_id)
            .fetch_optional(&mut *tx)
            .await?
            .ok_or_else(|| StoreError::Invalid(format!("no evaluation {eval_id}")))?;
        let (tenant, status, last) = (get_str(&row, "tenant")?, get_str(&row, "status")?, get_i64(&row, "last")?);
        if status == "cancelled" {
            return Err(StoreError::Invalid(format!("evaluation {eval_id} is cancelled")));
        }
        let now = now();
        insert_rollouts(&mut tx, eval_id, &tenant, last + 1, rollouts, now).await?;
        sqlx::query(
            "UPDATE evals SET total = total + $2, queued = queued + $2, \
             status = CASE WHEN status = 'done' THEN 'running' ELSE status END, finished_at = NULL WHERE id = $1",
        )
        .bind(eval_id)
        .bind(rollouts.len() as i64)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// One job, if it exists.
    pub async fn eval(&self, id: &str) -> Result<Option<EvalRow>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT {EVAL_COLUMNS} FROM evals WHERE id = $1")))
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        row.as_ref().map(eval_row).transpose()
    }

    /// A tenant's jobs, newest first, a page at a time.
    pub async fn list_evals(&self, tenant: &str, filter: &EvalFilter) -> Result<Vec<EvalRow>> {
        let mut sql =
            format!("SELECT {EVAL_COLUMNS} FROM evals WHERE tenant = $1 AND id NOT IN (SELECT id FROM group_jobs)");
        let mut n = 1;
        if filter.status.is_some() {
            n += 1;
            sql.push_str(&format!(" AND status = ${n}"));
        }
        if filter.before.is_some() {
            sql.push_str(&format!(" AND (created_at < ${} OR (created_at = ${} AND id < ${}))", n + 1, n + 1, n + 2));
            n += 2;
        }
        sql.push_str(&format!(" ORDER BY created_at DESC, id DESC LIMIT ${}", n + 1));
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(tenant);
        if let Some(status) = &filter.status {
            query = query.bind(status);
        }
        if let Some((at, id)) = &filter.before {
            query = query.bind(*at).bind(id);
        }
        let rows = query.bind(filter.limit.clamp(1, 1000)).fetch_all(&self.read).await?;
        rows.iter().map(eval_row).collect()
    }

    /// A page of a job's rollouts, in work order.
    pub async fn rollouts(&self, eval_id: &str, filter: &RolloutFilter) -> Result<Vec<RolloutRow>> {
        let result = if filter.with_result { "result" } else { "CAST(NULL AS TEXT) AS result" };
        let mut sql = format!("SELECT {}, {result} FROM rollouts WHERE eval_id = $1", rollout_fields!());
        let mut binds: Vec<String> = Vec::new();
        for (column, value) in [
            ("task_id", &filter.task_id),
            ("harness", &filter.harness),
            ("state", &filter.state),
            ("status", &filter.status),
        ] {
            let Some(v) = value else { continue };
            if column == "harness" && !v.contains('@') {
                // A harness by name alone: every version of it.
                binds.push(v.clone());
                let escaped = v.replace('\\', "\\\\").replace('%', "\\%").replace('_', "\\_");
                binds.push(format!("{escaped}@%"));
                let n = binds.len() + 1;
                sql.push_str(&format!(" AND (harness = ${} OR harness LIKE ${n} ESCAPE '\\')", n - 1));
            } else {
                binds.push(v.clone());
                sql.push_str(&format!(" AND {column} = ${}", binds.len() + 1));
            }
        }
        if let Some(tenant) = &filter.tenant {
            // The job's row is the truth of who owns it, as for a job read alone.
            binds.push(tenant.clone());
            sql.push_str(&format!(
                " AND EXISTS (SELECT 1 FROM evals WHERE evals.id = $1 AND evals.tenant = ${})",
                binds.len() + 1
            ));
        }
        if let Some(passed) = filter.passed {
            sql.push_str(if passed {
                " AND passed = 1"
            } else {
                " AND state = 'done' AND (passed = 0 OR passed IS NULL)"
            });
        }
        let n = binds.len() + 1;
        sql.push_str(&format!(" AND seq > ${} ORDER BY seq LIMIT ${}", n + 1, n + 2));
        // One row for the whole page (see `packed`): pages are what watching clients poll.
        let sql = packed_sql(self.dialect, PACKED_ROLLOUT, &sql, "seq");
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(eval_id);
        for b in &binds {
            query = query.bind(b);
        }
        let row =
            query.bind(filter.after_seq.unwrap_or(-1)).bind(filter.limit.clamp(1, 1000)).fetch_one(&self.read).await?;
        unpack_rows(&get_str(&row, "page")?)
    }

    /// One rollout, with its trajectory document once it has one.
    pub async fn rollout(&self, eval_id: &str, rollout_id: &str) -> Result<Option<(RolloutRow, Option<String>)>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE eval_id = $1 AND rollout_id = $2"
        )))
        .bind(eval_id)
        .bind(rollout_id)
        .fetch_optional(&self.read)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let rollout = rollout_row(&row)?;
        let doc = sqlx::query("SELECT doc FROM trajectories WHERE eval_id = $1 AND rollout_id = $2")
            .bind(eval_id)
            .bind(rollout_id)
            .fetch_optional(&self.read)
            .await?;
        let doc = doc.map(|r| r.try_get::<Vec<u8>, _>("doc")).transpose()?.map(|b| unpack(&b)).transpose()?;
        Ok(Some((rollout, doc)))
    }

    /// Rollouts finished after `after` (a `finish_seq`), in the order they finished.
    pub async fn finished_since(&self, eval_id: &str, after: i64, limit: i64) -> Result<Vec<RolloutRow>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {ROLLOUT_COLUMNS} FROM rollouts WHERE eval_id = $1 AND finish_seq > $2 ORDER BY finish_seq LIMIT $3"
        )))
        .bind(eval_id)
        .bind(after)
        .bind(limit.clamp(1, 1000))
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(rollout_row).collect()
    }

    /// Per task × harness counts of what is done, for summaries and the matrix.
    pub async fn cells(&self, eval_id: &str) -> Result<Vec<TaskCell>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(self.cells_sql())).bind(eval_id).fetch_one(&self.read).await?;
        unpack_rows(&get_str(&row, "page")?)
    }

    /// One job and its cells (see [`Store::cells`]) in one read: the job's page, which
    /// watching clients poll.
    pub async fn eval_with_cells(&self, id: &str) -> Result<Option<(EvalRow, Vec<TaskCell>)>> {
        let sql = format!("SELECT {EVAL_COLUMNS}, ({}) AS cells FROM evals WHERE id = $1", self.cells_sql());
        let row = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(id).fetch_optional(&self.read).await?;
        row.map(|row| Ok((eval_row(&row)?, unpack_rows(&get_str(&row, "cells")?)?))).transpose()
    }

    /// The job `$1`'s cells as one packed row, `page`.
    fn cells_sql(&self) -> String {
        // The counters kept with every finish (one row per cell, however large the job), read
        // as one packed row (see `packed`). `TaskCell`'s fields, in their order.
        packed_sql(
            self.dialect,
            &[
                Col::Plain("task_id"),
                Col::Plain("harness"),
                Col::Plain("done"),
                Col::Plain("graded"),
                Col::Plain("passed"),
                Col::Plain("errored"),
                Col::Plain("unknown"),
                Col::Float("reward_sum"),
            ],
            "SELECT task_id, harness, done, graded, passed, errored, unknown, reward_sum \
             FROM cells WHERE eval_id = $1 AND done > 0",
            "task_id, harness",
        )
    }

    /// Every finished rollout's result and trajectory, in work order, a page at a time.
    pub async fn results_page(
        &self,
        eval_id: &str,
        after_seq: i64,
        limit: i64,
    ) -> Result<Vec<(RolloutRow, Option<String>)>> {
        let rows = sqlx::query(
            "SELECT r.eval_id AS eval_id, r.rollout_id AS rollout_id, seq, task_id, harness, attempt, state, status, \
             reward, passed, error, tries, finish_seq, finished_at, result, t.doc AS doc \
             FROM rollouts r LEFT JOIN trajectories t ON t.eval_id = r.eval_id AND t.rollout_id = r.rollout_id \
             WHERE r.eval_id = $1 AND r.state = 'done' AND r.seq > $2 ORDER BY r.seq LIMIT $3",
        )
        .bind(eval_id)
        .bind(after_seq)
        .bind(limit.clamp(1, 1000))
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|row| {
                let doc = row.try_get::<Option<Vec<u8>>, _>("doc")?.map(|b| unpack(&b)).transpose()?;
                Ok((rollout_row(row)?, doc))
            })
            .collect()
    }

    /// Forgets a job and everything it stored (rollouts, trajectories, counters), in one
    /// transaction. Only a job with nothing running: a runner's late write would land nowhere.
    /// `false`: it still has rollouts running.
    pub async fn delete_eval(&self, eval_id: &str) -> Result<bool> {
        let mut tx = self.write.begin().await?;
        let running = sqlx::query("SELECT 1 AS one FROM rollouts WHERE eval_id = $1 AND state = 'running' LIMIT 1")
            .bind(eval_id)
            .fetch_optional(&mut *tx)
            .await?;
        if running.is_some() {
            return Ok(false);
        }
        for statement in [
            "DELETE FROM trajectories WHERE eval_id = $1",
            "DELETE FROM cells WHERE eval_id = $1",
            "DELETE FROM rollouts WHERE eval_id = $1",
            "DELETE FROM group_jobs WHERE id = $1",
        ] {
            sqlx::query(statement).bind(eval_id).execute(&mut *tx).await?;
        }
        sqlx::query("DELETE FROM evals WHERE id = $1").bind(eval_id).execute(&mut *tx).await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Stops a job: queued rollouts are cancelled now; running ones when their runner sees it.
    pub async fn cancel(&self, eval_id: &str) -> Result<()> {
        let mut tx = self.write.begin().await?;
        let n = sqlx::query("UPDATE rollouts SET state = 'cancelled' WHERE eval_id = $1 AND state = 'queued'")
            .bind(eval_id)
            .execute(&mut *tx)
            .await?
            .rows_affected() as i64;
        sqlx::query(
            "UPDATE evals SET queued = queued - $2, cancelled = cancelled + $2, status = 'cancelled', \
             finished_at = CASE WHEN running = 0 THEN $3 ELSE finished_at END WHERE id = $1",
        )
        .bind(eval_id)
        .bind(n)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Queues again a job's errored and unknown rollouts (and only those); returns how many.
    pub async fn retry(&self, eval_id: &str) -> Result<i64> {
        let mut tx = self.write.begin().await?;
        let counts = sqlx::query(
            "SELECT SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS errored,
                    SUM(CASE WHEN status = 'unknown' THEN 1 ELSE 0 END) AS unknown
             FROM rollouts WHERE eval_id = $1 AND state = 'done' AND status IN ('error', 'unknown')",
        )
        .bind(eval_id)
        .fetch_one(&mut *tx)
        .await?;
        let errored = counts.try_get::<Option<i64>, _>("errored")?.unwrap_or(0);
        let unknown = counts.try_get::<Option<i64>, _>("unknown")?.unwrap_or(0);
        let n = errored + unknown;
        if n > 0 {
            // Their cells forget them (errors and unknowns never passed nor were graded).
            let again = "SELECT task_id, harness, COUNT(*) AS n, \
                         SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END) AS e, \
                         SUM(CASE WHEN status = 'unknown' THEN 1 ELSE 0 END) AS u, \
                         SUM(COALESCE(reward, 0.0)) AS r \
                         FROM rollouts WHERE eval_id = $1 AND state = 'done' AND status IN ('error', 'unknown') \
                         GROUP BY task_id, harness";
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE cells SET done = cells.done - x.n, errored = cells.errored - x.e, \
                 unknown = cells.unknown - x.u, reward_sum = cells.reward_sum - x.r \
                 FROM ({again}) AS x WHERE cells.eval_id = $1 AND cells.task_id = x.task_id AND cells.harness = x.harness"
            )))
            .bind(eval_id)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "DELETE FROM trajectories WHERE eval_id = $1 AND rollout_id IN \
                 (SELECT rollout_id FROM rollouts WHERE eval_id = $1 AND state = 'done' AND status IN ('error', 'unknown'))",
            )
            .bind(eval_id)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE rollouts SET state = 'queued', status = NULL, reward = NULL, passed = NULL, error = NULL, \
                 result = NULL, finish_seq = NULL, finished_at = NULL, owner = NULL, lease_until = NULL, queued_at = $2 \
                 WHERE eval_id = $1 AND state = 'done' AND status IN ('error', 'unknown')",
            )
            .bind(eval_id)
            .bind(now())
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE evals SET queued = queued + $2, done = done - $2, errored = errored - $3, unknown = unknown - $4, \
                 status = 'queued', finished_at = NULL WHERE id = $1",
            )
            .bind(eval_id)
            .bind(n)
            .bind(errored)
            .bind(unknown)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(n)
    }

    /// Ids of evaluations with work left (queued or running), for runners checking cancels.
    pub async fn statuses(&self, ids: &[String]) -> Result<Vec<(String, String)>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(e) = self.eval(id).await? {
                out.push((e.id, e.status));
            }
        }
        Ok(out)
    }
}
