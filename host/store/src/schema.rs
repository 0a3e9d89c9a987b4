//! Tables and indexes, created if missing (both engines read the same statements but for the
//! binary type).

use crate::{Dialect, Result, Store};

pub async fn migrate(store: &Store) -> Result<()> {
    let blob = match store.dialect {
        Dialect::Sqlite => "BLOB",
        Dialect::Postgres => "BYTEA",
    };
    let statements = [
        // One row per job: its request, its state, and counters kept in step with its rollouts.
        "CREATE TABLE IF NOT EXISTS evals (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            status TEXT NOT NULL,
            spec TEXT NOT NULL,
            fingerprint TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            finished_at DOUBLE PRECISION,
            k BIGINT NOT NULL,
            total BIGINT NOT NULL,
            queued BIGINT NOT NULL,
            running BIGINT NOT NULL,
            done BIGINT NOT NULL,
            graded BIGINT NOT NULL DEFAULT 0,
            passed BIGINT NOT NULL DEFAULT 0,
            errored BIGINT NOT NULL DEFAULT 0,
            unknown BIGINT NOT NULL DEFAULT 0,
            cancelled BIGINT NOT NULL DEFAULT 0
        )",
        "CREATE INDEX IF NOT EXISTS evals_by_tenant ON evals (tenant, created_at)",
        // The queue and the results: `state` queued | running | done | cancelled.
        "CREATE TABLE IF NOT EXISTS rollouts (
            eval_id TEXT NOT NULL,
            rollout_id TEXT NOT NULL,
            seq BIGINT NOT NULL,
            tenant TEXT NOT NULL,
            task_id TEXT NOT NULL,
            harness TEXT NOT NULL,
            attempt BIGINT NOT NULL,
            state TEXT NOT NULL,
            queued_at DOUBLE PRECISION NOT NULL,
            owner TEXT,
            lease_until DOUBLE PRECISION,
            tries BIGINT NOT NULL DEFAULT 0,
            status TEXT,
            reward DOUBLE PRECISION,
            passed BIGINT,
            error TEXT,
            result TEXT,
            finish_seq BIGINT,
            finished_at DOUBLE PRECISION,
            PRIMARY KEY (eval_id, rollout_id)
        )",
        "CREATE INDEX IF NOT EXISTS rollouts_order ON rollouts (eval_id, seq)",
        "CREATE INDEX IF NOT EXISTS rollouts_queue ON rollouts (eval_id, state, seq)",
        "CREATE INDEX IF NOT EXISTS rollouts_leases ON rollouts (state, lease_until)",
        "CREATE INDEX IF NOT EXISTS rollouts_finished ON rollouts (eval_id, finish_seq)",
        "CREATE INDEX IF NOT EXISTS rollouts_finish_seq ON rollouts (finish_seq)",
        &format!(
            "CREATE TABLE IF NOT EXISTS trajectories (
                eval_id TEXT NOT NULL,
                rollout_id TEXT NOT NULL,
                doc {blob} NOT NULL,
                PRIMARY KEY (eval_id, rollout_id)
            )"
        ),
        "CREATE TABLE IF NOT EXISTS secrets (
            tenant TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (tenant, name)
        )",
        &format!(
            "CREATE TABLE IF NOT EXISTS blobs (
                id TEXT PRIMARY KEY,
                tenant TEXT NOT NULL,
                data {blob} NOT NULL,
                created_at DOUBLE PRECISION NOT NULL
            )"
        ),
        // What each uploaded task archive costs its tenant (the archive in `blobs`, its files
        // unpacked on each replica), and when a job last named it (for retention).
        "CREATE TABLE IF NOT EXISTS datasets (
            id TEXT PRIMARY KEY,
            tenant TEXT NOT NULL,
            bytes BIGINT NOT NULL,
            unpacked_bytes BIGINT NOT NULL,
            tasks BIGINT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            used_at DOUBLE PRECISION NOT NULL
        )",
        "CREATE INDEX IF NOT EXISTS datasets_by_tenant ON datasets (tenant, created_at)",
        // Web UI sessions ended before their expiry (signed out), until then.
        // Jobs that are rollout groups (listed apart from evaluations).
        "CREATE TABLE IF NOT EXISTS group_jobs (id TEXT PRIMARY KEY)",
        "CREATE TABLE IF NOT EXISTS revoked_sessions (
            id TEXT PRIMARY KEY,
            expires_at DOUBLE PRECISION NOT NULL
        )",
        // Uploaded plugins, every version: `tenant` is '' for shared ones (an admin's). The
        // current version of a name is its newest row.
        &format!(
            "CREATE TABLE IF NOT EXISTS plugins (
                tenant TEXT NOT NULL,
                sha256 TEXT NOT NULL,
                name TEXT NOT NULL,
                manifest TEXT,
                data {blob} NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY (tenant, sha256)
            )"
        ),
        "CREATE INDEX IF NOT EXISTS plugins_by_name ON plugins (tenant, name, created_at)",
        // Per task × harness counters of finished rollouts, kept in step with `rollouts` in the
        // same transactions: a job's page reads its matrix from these rows, never from its
        // rollouts (milliseconds at 100,000 rollouts).
        "CREATE TABLE IF NOT EXISTS cells (
            eval_id TEXT NOT NULL,
            task_id TEXT NOT NULL,
            harness TEXT NOT NULL,
            done BIGINT NOT NULL DEFAULT 0,
            graded BIGINT NOT NULL DEFAULT 0,
            passed BIGINT NOT NULL DEFAULT 0,
            errored BIGINT NOT NULL DEFAULT 0,
            unknown BIGINT NOT NULL DEFAULT 0,
            reward_sum DOUBLE PRECISION NOT NULL DEFAULT 0,
            PRIMARY KEY (eval_id, task_id, harness)
        )",
    ];
    // In one transaction, under a lock on PostgreSQL: replicas starting together would
    // otherwise race on `CREATE ... IF NOT EXISTS` (it is not atomic there).
    let mut tx = store.write.begin().await?;
    if store.dialect == Dialect::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock(7246352)").execute(&mut *tx).await?;
    }
    for statement in statements {
        // On PostgreSQL, `CREATE INDEX IF NOT EXISTS` locks its table (a share lock) even when
        // the index exists: a replica starting beside running ones could deadlock with their
        // writes. What exists is skipped without touching its table.
        if store.dialect == Dialect::Postgres
            && let Some(name) = created_name(statement)
        {
            let found =
                sqlx::query("SELECT CAST(to_regclass($1) AS TEXT) AS found").bind(name).fetch_one(&mut *tx).await?;
            if crate::get_opt_str(&found, "found")?.is_some() {
                continue;
            }
        }
        sqlx::query(sqlx::AssertSqlSafe(statement)).execute(&mut *tx).await?;
    }
    if store.dialect == Dialect::Postgres {
        sqlx::query("CREATE SEQUENCE IF NOT EXISTS rollout_finish_seq").execute(&mut *tx).await?;
    }
    // A database from before `cells` existed: counted once from its rollouts. Under the finish
    // lock on PostgreSQL: a replica finishing rollouts meanwhile would otherwise add the cells
    // this count is adding (a duplicate key, and this replica failing to start).
    if store.dialect == Dialect::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock(7246353)").execute(&mut *tx).await?;
    }
    let empty = sqlx::query("SELECT 1 AS one FROM cells LIMIT 1").fetch_optional(&mut *tx).await?.is_none();
    if empty {
        sqlx::query(
            "INSERT INTO cells (eval_id, task_id, harness, done, graded, passed, errored, unknown, reward_sum)
             SELECT eval_id, task_id, harness, COUNT(*),
                    SUM(CASE WHEN status = 'graded' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN passed = 1 THEN 1 ELSE 0 END),
                    SUM(CASE WHEN status = 'error' THEN 1 ELSE 0 END),
                    SUM(CASE WHEN status = 'unknown' THEN 1 ELSE 0 END),
                    SUM(COALESCE(reward, 0.0))
             FROM rollouts WHERE state = 'done' GROUP BY eval_id, task_id, harness",
        )
        .execute(&mut *tx)
        .await?;
    }
    // Archives uploaded before `datasets` existed: counted by their stored size.
    sqlx::query(
        "INSERT INTO datasets (id, tenant, bytes, unpacked_bytes, tasks, created_at, used_at)
         SELECT id, tenant, LENGTH(data), 0, 0, created_at, created_at FROM blobs
         WHERE id NOT IN (SELECT id FROM datasets)",
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(())
}

/// The table or index a `CREATE … IF NOT EXISTS name` statement makes.
fn created_name(statement: &str) -> Option<&str> {
    let after = statement.split_once("IF NOT EXISTS ")?.1;
    after.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    #[test]
    fn created_names_are_read_from_the_statements() {
        assert_eq!(super::created_name("CREATE TABLE IF NOT EXISTS evals (\n id TEXT)"), Some("evals"));
        assert_eq!(
            super::created_name("CREATE INDEX IF NOT EXISTS evals_by_tenant ON evals (t)"),
            Some("evals_by_tenant")
        );
        assert_eq!(super::created_name("INSERT INTO x"), None);
    }
}
