//! Uploaded archives (task folders as `.tar.gz`), by content hash, so that every replica can
//! fetch what a job needs from the one database.

use sqlx::Row;

use crate::{Result, Store, get_str, now};

impl Store {
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
