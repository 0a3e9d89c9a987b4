//! The durable side of evaluations: jobs, the queue of rollouts with leases, finished results and
//! trajectories, per-tenant secrets, uploaded task archives and uploaded plugins.
//!
//! One schema, two engines through sqlx's runtime-chosen driver: SQLite embedded in the state
//! directory (what `orchard serve` and `orchard eval` need by default: nothing else to run), and
//! PostgreSQL for several replicas sharing one database, where rollouts are claimed with
//! `FOR UPDATE SKIP LOCKED` under leases. Every state change of a rollout and the job's counters
//! move in one transaction, so a job's page reads its counts from one row however large the job,
//! and a result is durable the moment `finish` returns. A rollout that ran outside the queue
//! (an OpenEnv episode) enters finished, in one transaction (`record_finished`): no runner ever
//! sees it queued. Pages that clients poll (a job's rollouts, its cells) come back from the
//! database as one packed row, exact to the last bit of every float (`packed`).

#![warn(missing_docs)]

mod blobs;
mod evals;
mod packed;
mod plugins;
mod queue;
mod schema;
mod secrets;
mod sessions;

use std::time::Duration;

use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::{AnyPool, Row};

pub use blobs::DatasetRow;
pub use evals::{EvalFilter, EvalRow, NewEval, NewRollout, RolloutFilter, RolloutRow, TaskCell};
pub use plugins::{PluginVersion, StoredPlugin};
pub use queue::{Claim, Finished};

#[derive(Debug, thiserror::Error)]
/// Why a store operation failed.
pub enum StoreError {
    #[error("database: {0}")]
    /// The database failed.
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    /// The request was wrong; the message names what.
    Invalid(String),
    #[error("stored data: {0}")]
    /// What is stored cannot be read back (a bug or a hand-edited database).
    Corrupt(String),
}

/// What every store operation answers.
pub type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
/// Which database.
pub enum Dialect {
    /// SQLite (a file, or in memory).
    Sqlite,
    /// PostgreSQL.
    Postgres,
}

/// The store. Cheap to clone (pools are shared).
#[derive(Clone)]
pub struct Store {
    /// Writes. One connection for SQLite (one writer at a time, without lock-upgrade failures);
    /// the same pool as `read` for PostgreSQL.
    write: AnyPool,
    read: AnyPool,
    dialect: Dialect,
}

impl Store {
    /// Opens (and creates, and migrates) the store at `url`: `sqlite:PATH` or
    /// `postgres://user:pass@host:port/db`.
    pub async fn open(url: &str) -> Result<Store> {
        sqlx::any::install_default_drivers();
        let (dialect, url) = if let Some(path) = url.strip_prefix("sqlite:") {
            let path = path.trim_start_matches("//");
            if let Some(dir) = std::path::Path::new(path).parent()
                && !dir.as_os_str().is_empty()
            {
                std::fs::create_dir_all(dir)
                    .map_err(|e| StoreError::Invalid(format!("database directory {}: {e}", dir.display())))?;
            }
            (Dialect::Sqlite, format!("sqlite://{path}?mode=rwc"))
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            (Dialect::Postgres, url.to_string())
        } else {
            return Err(StoreError::Invalid(format!(
                "database {url:?}: use sqlite:PATH or postgres://user:password@host:port/database"
            )));
        };
        let pragmas = dialect == Dialect::Sqlite;
        let options = |max: u32| {
            AnyPoolOptions::new().max_connections(max).acquire_timeout(Duration::from_secs(30)).after_connect(
                move |conn, _| {
                    Box::pin(async move {
                        if pragmas {
                            // WAL: readers never wait for the writer; synchronous=NORMAL is
                            // durable across a process kill (not a power cut), as WAL allows.
                            // Pages are read through a shared mapping of the file: with the
                            // default 2 MB cache per connection, a client walking a large job's
                            // pages had every database page copied out of the kernel by read().
                            for pragma in [
                                "PRAGMA journal_mode=WAL",
                                "PRAGMA synchronous=NORMAL",
                                "PRAGMA busy_timeout=10000",
                                "PRAGMA mmap_size=268435456",
                            ] {
                                sqlx::query(pragma).execute(&mut *conn).await?;
                            }
                        }
                        Ok(())
                    })
                },
            )
        };
        let (write, read) = match dialect {
            Dialect::Sqlite => (options(1).connect(&url).await?, options(4).connect(&url).await?),
            Dialect::Postgres => {
                let pool = options(16).connect(&url).await?;
                (pool.clone(), pool)
            }
        };
        let store = Store { write, read, dialect };
        schema::migrate(&store).await?;
        Ok(store)
    }

    /// Which database this is.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Whether the database answers (readiness).
    pub async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.read).await?;
        Ok(())
    }
}

pub(crate) fn now() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

pub(crate) fn get_str(row: &AnyRow, col: &str) -> Result<String> {
    Ok(row.try_get::<String, _>(col)?)
}

pub(crate) fn get_opt_str(row: &AnyRow, col: &str) -> Result<Option<String>> {
    Ok(row.try_get::<Option<String>, _>(col)?)
}

pub(crate) fn get_i64(row: &AnyRow, col: &str) -> Result<i64> {
    Ok(row.try_get::<i64, _>(col)?)
}

pub(crate) fn get_f64(row: &AnyRow, col: &str) -> Result<f64> {
    Ok(get_opt_f64(row, col)?.unwrap_or(0.0))
}

/// A number column. SQLite answers an aggregate over whole numbers (a `SUM` of rewards that
/// are all 0 and 1) as an integer, so both are read.
pub(crate) fn get_opt_f64(row: &AnyRow, col: &str) -> Result<Option<f64>> {
    match row.try_get::<Option<f64>, _>(col) {
        Ok(v) => Ok(v),
        Err(_) => Ok(row.try_get::<Option<i64>, _>(col)?.map(|v| v as f64)),
    }
}

/// Compressed JSON: trajectories can be megabytes of text that gzip shrinks several times.
pub(crate) fn pack(json: &str) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let _ = gz.write_all(json.as_bytes());
    gz.finish().unwrap_or_default()
}

pub(crate) fn unpack(bytes: &[u8]) -> Result<String> {
    use std::io::Read;
    let mut out = String::new();
    flate2::read::GzDecoder::new(bytes).read_to_string(&mut out).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(out)
}
