//! Per-tenant secrets (model API keys), referenced by name from job requests. Values are read
//! only by runners; no route answers them.

use crate::{Result, Store, get_str, now};

impl Store {
    /// Stores a tenant's secret (sealed), replacing one of the same name.
    pub async fn put_secret(&self, tenant: &str, name: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO secrets (tenant, name, value, updated_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (tenant, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
        )
        .bind(tenant)
        .bind(name)
        .bind(value)
        .bind(now())
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// A tenant's secret, unsealed.
    pub async fn secret(&self, tenant: &str, name: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT value FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .fetch_optional(&self.read)
            .await?;
        row.map(|r| get_str(&r, "value")).transpose()
    }

    /// Names only.
    pub async fn secret_names(&self, tenant: &str) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT name FROM secrets WHERE tenant = $1 ORDER BY name")
            .bind(tenant)
            .fetch_all(&self.read)
            .await?;
        rows.iter().map(|r| get_str(r, "name")).collect()
    }

    /// Removes a tenant's secret; whether there was one.
    pub async fn delete_secret(&self, tenant: &str, name: &str) -> Result<bool> {
        let n = sqlx::query("DELETE FROM secrets WHERE tenant = $1 AND name = $2")
            .bind(tenant)
            .bind(name)
            .execute(&self.write)
            .await?
            .rows_affected();
        Ok(n > 0)
    }
}
