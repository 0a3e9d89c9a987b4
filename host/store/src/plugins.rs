//! Uploaded plugins, every version, so that each replica runs what was uploaded to any of them
//! and a restarted server still has them. Shared plugins (an admin's) have the tenant `''`.

use sqlx::Row;

use crate::{Result, Store, get_f64, get_str, now};

/// The current version of one uploaded plugin, without its bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct PluginVersion {
    /// `None`: shared (an admin's upload, for everybody).
    pub tenant: Option<String>,
    /// The plugin's name.
    pub name: String,
    /// SHA-256 of its component, hex.
    pub sha256: String,
    /// Epoch seconds.
    pub created_at: f64,
}

/// A stored version with its bytes.
#[derive(Debug, Clone)]
pub struct StoredPlugin {
    /// Which version.
    pub version: PluginVersion,
    /// Its manifest (TOML), if uploaded with one.
    pub manifest: Option<String>,
    /// The component's bytes.
    pub data: Vec<u8>,
}

fn tenant_key(tenant: Option<&str>) -> &str {
    tenant.unwrap_or("")
}

impl Store {
    /// Keeps an uploaded version (validated by the caller); it becomes the name's current one.
    /// The same bytes uploaded again become current again.
    pub async fn put_plugin(
        &self,
        tenant: Option<&str>,
        name: &str,
        sha256: &str,
        manifest: Option<&str>,
        data: &[u8],
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO plugins (tenant, sha256, name, manifest, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant, sha256) DO UPDATE SET name = excluded.name, manifest = excluded.manifest,
             created_at = excluded.created_at",
        )
        .bind(tenant_key(tenant))
        .bind(sha256)
        .bind(name)
        .bind(manifest)
        .bind(data.to_vec())
        .bind(now())
        .execute(&self.write)
        .await?;
        Ok(())
    }

    /// Bytes `tenant`'s uploaded plugins take, every version kept (what the plugin quota counts).
    pub async fn plugin_usage(&self, tenant: &str) -> Result<u64> {
        let row =
            sqlx::query("SELECT CAST(COALESCE(SUM(LENGTH(data)), 0) AS BIGINT) AS used FROM plugins WHERE tenant = $1")
                .bind(tenant)
                .fetch_one(&self.read)
                .await?;
        Ok(crate::get_i64(&row, "used")?.max(0) as u64)
    }

    /// The current version of every uploaded plugin, of every tenant (what a replica syncs).
    pub async fn current_plugins(&self) -> Result<Vec<PluginVersion>> {
        let rows = sqlx::query(
            "SELECT p.tenant, p.name, p.sha256, p.created_at FROM plugins p
             WHERE p.created_at = (SELECT MAX(q.created_at) FROM plugins q WHERE q.tenant = p.tenant AND q.name = p.name)
             ORDER BY p.created_at",
        )
        .fetch_all(&self.read)
        .await?;
        rows.iter().map(version).collect()
    }

    /// One stored version with its bytes.
    pub async fn plugin(&self, tenant: Option<&str>, sha256: &str) -> Result<Option<StoredPlugin>> {
        let row = sqlx::query(
            "SELECT tenant, name, sha256, created_at, manifest, data FROM plugins WHERE tenant = $1 AND sha256 = $2",
        )
        .bind(tenant_key(tenant))
        .bind(sha256)
        .fetch_optional(&self.read)
        .await?;
        row.map(|r| {
            Ok(StoredPlugin {
                version: version(&r)?,
                manifest: r.try_get::<Option<String>, _>("manifest")?,
                data: r.try_get::<Vec<u8>, _>("data")?,
            })
        })
        .transpose()
    }
}

fn version(r: &sqlx::any::AnyRow) -> Result<PluginVersion> {
    let tenant = get_str(r, "tenant")?;
    Ok(PluginVersion {
        tenant: (!tenant.is_empty()).then_some(tenant),
        name: get_str(r, "name")?,
        sha256: get_str(r, "sha256")?,
        created_at: get_f64(r, "created_at")?,
    })
}
