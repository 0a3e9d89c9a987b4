//! Web UI sessions ended before their time (signed out): every replica refuses them until they
//! would have expired anyway, then they are forgotten.

use crate::{Result, Store, now};

impl Store {
    /// Ends the session `id` (valid until `expires_at`, epoch seconds) on every replica.
    pub async fn revoke_session(&self, id: &str, expires_at: f64) -> Result<()> {
        sqlx::query("INSERT INTO revoked_sessions (id, expires_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING")
            .bind(id)
            .bind(expires_at)
            .execute(&self.write)
            .await?;
        // Forgotten once they could not be used anyway.
        sqlx::query("DELETE FROM revoked_sessions WHERE expires_at < $1").bind(now()).execute(&self.write).await?;
        Ok(())
    }

    /// Whether the session `id` was ended.
    pub async fn session_revoked(&self, id: &str) -> Result<bool> {
        let row = sqlx::query("SELECT 1 AS one FROM revoked_sessions WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.is_some())
    }
}
