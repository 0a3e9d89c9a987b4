//! Uploaded archives (task folders as `.tar.gz`), by content hash, so that every replica can
//! fetch what a job needs from the one database; and what each costs its tenant.

use sqlx::Row;

use crate::{Result, Store, get_f64, get_i64, get_str, now};

/// One uploaded dataset as its tenant sees it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DatasetRow {
    /// Its id.
    pub id: String,
    /// The archive as uploaded.
    pub bytes: u64,
    /// Its files unpacked.
    pub unpacked_bytes: u64,
    /// Tasks found in it.
    pub tasks: u64,
    /// Epoch seconds.
    pub created_at: f64,
    /// When a job last named it.
    pub used_at: f64,
}

impl Store {
    /// Keeps an uploaded dataset: the archive (by its content hash `id`) and what it costs.
    /// A second upload of the same id is a no-op.
    pub async fn put_dataset(
        &self,
        id: &str,
        tenant: &str,
        data: &[u8],
        unpacked_bytes: u64,
        tasks: u64,
    ) -> Result<()> {
        let mut tx = self.write.begin().await?;
        let at = now();
        sqlx::query(
            "INSERT INTO blobs (id, tenant, data, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(tenant)
        .bind(data.to_vec())
        .bind(at)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO datasets (id, tenant, bytes, unpacked_bytes, tasks, created_at, used_at)
             VALUES ($1, $2, $3, $4, $5, $6, $6) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(tenant)
        .bind(data.len() as i64)
        .bind(unpacked_bytes as i64)
        .bind(tasks as i64)
        .bind(at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// The bytes `tenant`'s datasets take (archives and their unpacked files).
    pub async fn dataset_usage(&self, tenant: &str) -> Result<u64> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(bytes + unpacked_bytes), 0) AS BIGINT) AS used FROM datasets WHERE tenant = $1",
        )
        .bind(tenant)
        .fetch_one(&self.read)
        .await?;
        Ok(get_i64(&row, "used")?.max(0) as u64)
    }

    /// `tenant`'s datasets, newest first.
    pub async fn datasets(&self, tenant: &str) -> Result<Vec<DatasetRow>> {
        let rows = sqlx::query(
            "SELECT id, bytes, unpacked_bytes, tasks, created_at, used_at FROM datasets WHERE tenant = $1
             ORDER BY created_at DESC, id",
        )
        .bind(tenant)
        .fetch_all(&self.read)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(DatasetRow {
                    id: get_str(r, "id")?,
                    bytes: get_i64(r, "bytes")?.max(0) as u64,
                    unpacked_bytes: get_i64(r, "unpacked_bytes")?.max(0) as u64,
                    tasks: get_i64(r, "tasks")?.max(0) as u64,
                    created_at: get_f64(r, "created_at")?,
                    used_at: get_f64(r, "used_at")?,
                })
            })
            .collect()
    }

    /// Whether a job of `tenant` that has not finished names the dataset.
    pub async fn dataset_in_use(&self, tenant: &str, id: &str) -> Result<bool> {
        let pattern = format!("%\"archive\":\"{id}\"%");
        let row = sqlx::query(
            "SELECT 1 AS one FROM evals WHERE tenant = $1 AND status IN ('queued', 'running') AND spec LIKE $2 LIMIT 1",
        )
        .bind(tenant)
        .bind(pattern)
        .fetch_optional(&self.read)
        .await?;
        Ok(row.is_some())
    }

    /// Forgets `tenant`'s dataset `id` (archive and record); false when it has none by that id.
    pub async fn delete_dataset(&self, tenant: &str, id: &str) -> Result<bool> {
        let mut tx = self.write.begin().await?;
        let gone = sqlx::query("DELETE FROM datasets WHERE id = $1 AND tenant = $2")
            .bind(id)
            .bind(tenant)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let blob = sqlx::query("DELETE FROM blobs WHERE id = $1 AND tenant = $2")
            .bind(id)
            .bind(tenant)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(gone + blob > 0)
    }

    /// Records that a job named the dataset now.
    pub async fn touch_dataset(&self, id: &str) -> Result<()> {
        sqlx::query("UPDATE datasets SET used_at = $2 WHERE id = $1").bind(id).bind(now()).execute(&self.write).await?;
        Ok(())
    }

    /// Datasets no job has named since `before` (epoch seconds): (tenant, id).
    pub async fn stale_datasets(&self, before: f64) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query("SELECT tenant, id FROM datasets WHERE used_at < $1")
            .bind(before)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| Ok((get_str(r, "tenant")?, get_str(r, "id")?))).collect()
    }

    /// Whether any tenant still has the archive `id`.
    pub async fn blob_exists(&self, id: &str) -> Result<bool> {
        Ok(self.blob_owner(id).await?.is_some())
    }

    /// Keeps `data` under `id` (its content hash) for `tenant`; a second upload is a no-op.
    pub async fn put_blob(&self, id: &str, tenant: &str, data: &[u8]) -> Result<()> {
        sqlx::query(
            "INSERT INTO blobs (id, tenant, data, created_at) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING",
        )
        .bind(id)
        .bind(tenant)
        .bind(data.to_vec())
        .bind(now())
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// The blob and the tenant that uploaded it.
    pub async fn blob(&self, id: &str) -> Result<Option<(String, Vec<u8>)>> {
        let row =
            sqlx::query("SELECT tenant, data FROM blobs WHERE id = $1").bind(id).fetch_optional(&self.read).await?;
        row.map(|r| Ok((get_str(&r, "tenant")?, r.try_get::<Vec<u8>, _>("data")?))).transpose()
    }

    /// The tenant that uploaded the blob, without reading its bytes.
    pub async fn blob_owner(&self, id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT tenant FROM blobs WHERE id = $1").bind(id).fetch_optional(&self.read).await?;
        row.map(|r| get_str(&r, "tenant")).transpose()
    }
}
