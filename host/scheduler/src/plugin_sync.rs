//! Uploaded plugins across replicas and restarts: the store keeps every uploaded version, and
//! each runner loads the current ones it does not have yet (at start, then with its housekeeping),
//! so a plugin uploaded to one replica runs on all of them and survives a restart.

use std::sync::Arc;

use orchard_runtime::{Manifest, Registry};
use orchard_store::Store;

/// Loads every current upload this registry does not hold yet. Returns how many were loaded;
/// one that fails to load is logged and skipped (it was valid when uploaded: a newer host may
/// have dropped something it needs).
pub async fn sync_plugins(store: &Store, registry: &Arc<Registry>) -> Result<usize, orchard_store::StoreError> {
    let mut loaded = 0;
    for v in store.current_plugins().await? {
        if registry.is_current(&v.tenant, &v.name, &v.sha256) {
            continue;
        }
        let Some(stored) = store.plugin(v.tenant.as_deref(), &v.sha256).await? else { continue };
        let registry = registry.clone();
        let owner = v.tenant.clone();
        let name = v.name.clone();
        // Compiling (or reading the compiled cache) is blocking work.
        let outcome = tokio::task::spawn_blocking(move || {
            let manifest = stored.manifest.as_deref().map(|m| Manifest::parse(m, "(stored)")).transpose()?;
            registry.install_for(owner, &stored.data, manifest, &format!("{name}.wasm")).map_err(|e| e.to_string())
        })
        .await;
        match outcome {
            Ok(Ok(_)) => loaded += 1,
            Ok(Err(e)) => tracing::warn!(plugin = %v.name, tenant = ?v.tenant, "stored plugin does not load: {e}"),
            Err(e) => tracing::warn!(plugin = %v.name, "loading a stored plugin: {e}"),
        }
    }
    Ok(loaded)
}
