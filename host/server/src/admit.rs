//! Creating and deleting sandboxes for API clients: every create passes the operator's
//! admission rules (images, resources, the tenant's quota) before the backend sees it.

use axum::http::StatusCode;
use futures::StreamExt;
use orchard_sandbox::{SandboxError, SandboxInfo, SandboxSpec};

use crate::{ApiError, ApiResult, AppState, Tenant};

/// How many creates of one batch run at once.
const BATCH_CONCURRENCY: usize = 64;
/// Longest a create waits for one of the starting permits before it is told to retry.
const STARTING_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl AppState {
    /// Creates one sandbox. A create that repeats an earlier one exactly (same tenant, id,
    /// image, network and resources) answers the sandbox that one made: clients retry POSTs
    /// whose answer they lost. A different create under a taken id is a conflict.
    pub async fn create_sandbox(&self, spec: SandboxSpec) -> ApiResult<SandboxInfo> {
        if let Some(existing) = self.made_by_same_create(&spec).await? {
            return Ok(existing);
        }
        let (spec, mut reservation) = self.admission.admit(spec, 1)?;
        let client = spec.id.as_deref().map(|id| crate::unscoped(&spec.tenant, id).to_string());
        let _starting = self.starting_permit().await?;
        let info = self.backend.create(spec).await.map_err(|e| match (e, client) {
            // Named as the client named it, not by the server's scoped id.
            (orchard_sandbox::SandboxError::AlreadyExists(_), Some(id)) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", format!("sandbox_id: {id} is already in use"))
            }
            (e, _) => e.into(),
        })?;
        reservation.commit(&info.id);
        Ok(info)
    }

    /// One of the `--max-starting` permits: a storm of creates is started a bounded number at a
    /// time (the rest wait their turn), so it cannot take the host's CPU, memory or descriptors
    /// all at once.
    async fn starting_permit(&self) -> ApiResult<tokio::sync::SemaphorePermit<'_>> {
        match tokio::time::timeout(STARTING_WAIT, self.starting.acquire()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(ApiError {
                retry_after: Some(5),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "capacity",
                    format!(
                        "too many sandboxes are starting at once (orchard serve --max-starting): this create waited {} s",
                        STARTING_WAIT.as_secs()
                    ),
                )
            }),
        }
    }

    /// The sandbox an identical earlier create made, when `spec` repeats one.
    async fn made_by_same_create(&self, spec: &SandboxSpec) -> ApiResult<Option<SandboxInfo>> {
        let Some(id) = &spec.id else { return Ok(None) };
        let Ok(existing) = self.backend.get(id).await else { return Ok(None) };
        if existing.tenant != spec.tenant {
            return Ok(None);
        }
        // Compared as admitted (image rewritten, defaults filled), without taking quota.
        let mut admitted = spec.clone();
        admitted.image = self.admission.images.admit(&spec.image)?;
        self.admission.resources.apply(&mut admitted)?;
        let same = existing.image == admitted.image
            && existing.block_network == admitted.block_network
            && existing.memory_bytes == admitted.memory_bytes
            && existing.cpu == admitted.cpu
            && existing.disk_bytes == admitted.disk_bytes;
        Ok(same.then_some(existing))
    }

    /// Creates `count` sandboxes or none: admission (capacity and quota) is checked up front,
    /// and if any create fails the ones already made are deleted again.
    pub async fn create_sandboxes(&self, spec: SandboxSpec, count: usize) -> ApiResult<Vec<SandboxInfo>> {
        let (spec, mut reservation) = self.admission.admit(spec, count)?;
        if let Some(free) = self.backend.free_slots().await
            && free < count
        {
            return Err(ApiError {
                retry_after: Some(5),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "capacity",
                    format!("count: {count} sandboxes asked for, {free} can be admitted now"),
                )
            });
        }
        let creates = (0..count).map(|_| {
            let (backend, spec) = (self.backend.clone(), spec.clone());
            async move {
                let _starting = self.starting_permit().await.map_err(|e| SandboxError::Capacity(e.detail))?;
                backend.create(spec).await
            }
        });
        let results: Vec<Result<SandboxInfo, SandboxError>> =
            futures::stream::iter(creates).buffer_unordered(BATCH_CONCURRENCY).collect().await;
        let (made, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|r| r.is_ok());
        let made: Vec<SandboxInfo> = made.into_iter().filter_map(Result::ok).collect();
        if let Some(Err(first)) = failed.into_iter().next() {
            let ids: Vec<String> = made.iter().map(|info| info.id.clone()).collect();
            let deletes = ids.into_iter().map(|id| {
                let backend = self.backend.clone();
                async move { backend.delete(&id).await }
            });
            futures::stream::iter(deletes).buffer_unordered(BATCH_CONCURRENCY).collect::<Vec<_>>().await;
            let mut e = ApiError::from(first);
            e.detail = format!("batch create rolled back ({} created and deleted again): {}", made.len(), e.detail);
            return Err(e);
        }
        for info in &made {
            reservation.commit(&info.id);
        }
        Ok(made)
    }

    /// Deletes the tenant's sandbox and gives its room back to the tenant's quota.
    pub async fn delete_sandbox(&self, tenant: &Tenant, id: &str) -> ApiResult<()> {
        let info = self.sandbox(tenant, id).await?;
        self.backend.delete(&info.id).await?;
        self.admission.quotas.release(&info.id);
        Ok(())
    }

    /// Rebuilds the quota ledger from what the backend holds (idle reaping, restarts, other
    /// replicas all change it without passing through this server's routes).
    pub async fn resync_quotas(&self) {
        let alive = self.backend.list().await;
        self.admission.quotas.resync(alive.iter().map(|i| (i.id.as_str(), i.tenant.as_str(), i.memory_bytes, i.cpu)));
    }
}
