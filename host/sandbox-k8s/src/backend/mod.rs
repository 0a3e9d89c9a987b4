//! The `kubernetes` backend: a pod per sandbox, the API server for lifecycle only, exec and
//! files straight to the agent at `podIP:agentPort`.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use orchard_agent_client::{AgentAddr, AgentClient, SharedAgent};
use orchard_sandbox::{
    Backend, INLINE_READY_WAIT, Result, SandboxError, SandboxInfo, SandboxSpec, SandboxStatus, valid_sandbox_id,
};

use futures::StreamExt;

use crate::cache::PodCache;
use crate::config::KubernetesConfig;
use crate::pool_wait::{POOL_START_WAIT, PoolWaiter, Waiters};
use crate::record::PodRecord;
use crate::replicas;
use crate::spec::{self, ANNOTATION_LAST_ACTIVE, LABEL_TENANT, PodPlan};
use crate::token::{random_hex, sandbox_token};
use crate::writes::{Lane, Writes, api_code};

mod reaper;

/// Sandboxes as Kubernetes pods (see the crate doc): the pods are the record, readiness comes from a watch, writes are paced.
pub struct KubernetesBackend {
    config: KubernetesConfig,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    policies: Api<NetworkPolicy>,
    leases: Api<Lease>,
    /// CiliumNetworkPolicies, for domain allowlists (`--fqdn-policy cilium`).
    cilium: Api<DynamicObject>,
    cache: Arc<PodCache>,
    writes: Writes,
    /// Agent clients by sandbox, keyed by the pod's nonce so a recreated pod gets a new one.
    agents: Mutex<HashMap<String, (String, Arc<AgentClient>)>>,
    /// Activity seen by this replica: (last active, last written to the pod).
    activity: Mutex<HashMap<String, (f64, f64)>>,
    /// Pooled pods this replica is claiming right now: its own concurrent claims never race
    /// for one pod (each race lost is a wasted write).
    claiming: Mutex<std::collections::HashSet<String>>,
    /// Claims waiting for a starting warm-pool pod, per pool.
    pool_waiters: Arc<Waiters>,
    /// Entrypoints read from image configs.
    entrypoints: tokio::sync::Mutex<HashMap<String, Vec<String>>>,
    last_reap: Mutex<Option<std::time::Instant>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// What each node holds, when `image_locality` is on.
    node_images: Option<Arc<crate::locality::NodeImages>>,
}

impl KubernetesBackend {
    /// Connects with the ambient configuration (in-cluster service account, or `KUBECONFIG`).
    pub async fn connect(config: KubernetesConfig) -> Result<Arc<Self>> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::try_default().await.map_err(|e| SandboxError::backend("kubernetes client", e))?;
        Self::with_client(client, config).await
    }

    /// Starts the pod watch, waits for its first list, and reconciles what it found.
    pub async fn with_client(client: Client, config: KubernetesConfig) -> Result<Arc<Self>> {
        if config.token_key.len() < 16 {
            return Err(SandboxError::InvalidSpec(
                "kubernetes backend: the token key must hold at least 16 bytes (shared by all replicas)".into(),
            ));
        }
        let ns = &config.cluster.namespace;
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let cache = PodCache::new();
        let watch = tokio::spawn(cache.clone().run(pods.clone()));
        let synced = tokio::time::timeout(Duration::from_secs(30), cache.wait_synced()).await;
        if synced.is_err() {
            watch.abort();
            return Err(SandboxError::Backend(format!(
                "kubernetes backend: could not list pods in namespace {ns} within 30 s (is the API server reachable, \
                 and may this identity list pods there?)"
            )));
        }
        let mut tasks = vec![watch];
        let node_images = config.image_locality.then(crate::locality::NodeImages::new);
        if let Some(images) = &node_images {
            let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
            tasks.push(tokio::spawn(images.clone().run(nodes)));
        }
        let backend = KubernetesBackend {
            secrets: Api::namespaced(client.clone(), ns),
            policies: Api::namespaced(client.clone(), ns),
            leases: Api::namespaced(client.clone(), ns),
            cilium: Api::namespaced_with(client, ns, &cilium_resource()),
            pods,
            cache,
            writes: Writes::new(config.write_rate, config.write_burst, config.write_retries),
            agents: Mutex::new(HashMap::new()),
            activity: Mutex::new(HashMap::new()),
            claiming: Mutex::new(std::collections::HashSet::new()),
            pool_waiters: Arc::default(),
            entrypoints: tokio::sync::Mutex::new(HashMap::new()),
            last_reap: Mutex::new(None),
            tasks,
            node_images,
            config,
        };
        let backend = Arc::new(backend);
        tracing::info!(
            namespace = %backend.config.cluster.namespace,
            sandboxes = backend.cache.len(),
            "kubernetes backend: adopted the sandboxes the pods record"
        );
        // Orphan reconcile at start: this replica's share of expired, failed and half-created
        // sandboxes goes now rather than at the first housekeeping tick.
        backend.reap_now().await;
        Ok(backend)
    }

    /// Writes retried after 429 / 5xx so far.
    pub fn retried_writes(&self) -> u64 {
        self.writes.retried.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn record(&self, id: &str) -> Result<PodRecord> {
        self.cache.get(id).filter(|r| !r.deleting).ok_or_else(|| SandboxError::NotFound(id.to_string()))
    }

    fn info(&self, record: &PodRecord) -> SandboxInfo {
        let local = self.activity.lock().unwrap_or_else(|p| p.into_inner()).get(&record.id).map(|a| a.0);
        let agent =
            record.pod_ip.as_ref().map(|ip| format!("tcp:{ip}:{}", self.config.cluster.agent_port)).unwrap_or_default();
        record.info(local.unwrap_or(0.0), agent)
    }

    fn validate(&self, spec: &SandboxSpec) -> Result<String> {
        let id = match &spec.id {
            Some(id) => {
                valid_sandbox_id(id).map_err(SandboxError::InvalidSpec)?;
                id.clone()
            }
            None => format!("sb-{}", random_hex(6)),
        };
        let image = spec.image.trim();
        if image == "host" || image.starts_with('/') || image.starts_with('.') || image.contains(".tar") {
            return Err(SandboxError::InvalidSpec(format!(
                "image: {image:?} is a local image; the kubernetes backend runs registry images (e.g. python:3.12)"
            )));
        }
        if spec.pids.is_some() {
            return Err(SandboxError::InvalidSpec(
                "pids: a per-pod process limit is a kubelet setting (podPidsLimit), not a pod field; leave it unset"
                    .into(),
            ));
        }
        spec::check_network(&self.config.cluster, spec).map_err(SandboxError::InvalidSpec)?;
        Ok(id)
    }

    /// The image's own entrypoint + cmd, from the request or the registry.
    async fn image_command(&self, spec: &SandboxSpec) -> Result<Vec<String>> {
        if let Some(given) = &spec.entrypoint {
            return Ok(given.clone());
        }
        let mut known = self.entrypoints.lock().await;
        if let Some(command) = known.get(&spec.image) {
            return Ok(command.clone());
        }
        let options =
            orchard_image::RegistryOptions { insecure: self.config.insecure_registries.clone(), ..Default::default() };
        let config =
            orchard_image::registry_run_config(&options, &spec.image).await.map_err(|e| SandboxError::Image {
                image: spec.image.clone(),
                reason: format!(
                    "reading its entrypoint from the registry failed ({e}); give \"entrypoint\" in the request \
                 ([] for none) when the host cannot read this registry"
                ),
            })?;
        let command: Vec<String> = config.entrypoint.into_iter().chain(config.cmd).collect();
        known.insert(spec.image.clone(), command.clone());
        Ok(command)
    }

    async fn create_objects(
        &self,
        id: &str,
        spec: &SandboxSpec,
        command: Vec<String>,
        pool: Option<&str>,
    ) -> Result<()> {
        let nonce = random_hex(12);
        let token = sandbox_token(&self.config.token_key, id, &nonce);
        let plan = PodPlan {
            id,
            spec,
            owner_host: &self.config.host_id,
            created_at: now(),
            ttl_seconds: spec.ttl_seconds.unwrap_or(self.config.default_ttl.as_secs()),
            token: &token,
            nonce: &nonce,
            image_command: command,
            pool,
            prefer_nodes: self.node_images.as_ref().map(|n| n.nodes_with(&spec.image)).unwrap_or_default(),
        };
        let cluster = &self.config.cluster;
        // A create someone waits on goes before the warm pools' refills.
        let lane = if pool.is_some() { Lane::Background } else { Lane::Create };
        let policy = &spec::network_policy(cluster, &plan);
        // The policy first, so that the pod never runs without it. A 409 on this first write
        // means the id is taken (nothing of ours to undo), unless it is this very write gone
        // through before a 5xx answer.
        self.create_retried(lane, &self.policies, policy, |e| async move {
            let existing = self.policies.get(&spec::object_name(id)).await?;
            if existing.metadata.labels == policy.metadata.labels && self.cache.get(id).is_none() {
                Ok(existing)
            } else {
                Err(e)
            }
        })
        .await
        .map_err(|e| match api_code(&e) {
            Some(409) => SandboxError::AlreadyExists(id.to_string()),
            _ => SandboxError::backend("creating the sandbox's network policy", e),
        })?;
        let pod = &spec::pod(cluster, &plan);
        let nonce = &nonce;
        let rest = async {
            if let Some(fqdn) = spec::cilium_fqdn_policy(cluster, &plan) {
                let fqdn: &DynamicObject = &serde_json::from_value(fqdn).expect("a policy object");
                self.create_retried(lane, &self.cilium, fqdn, |_| async { Ok(fqdn.clone()) })
                    .await
                    .map_err(|e| SandboxError::backend("creating the sandbox's CiliumNetworkPolicy", e))?;
            }
            self.create_retried(lane, &self.pods, pod, |e| async move {
                let existing = self.pods.get(&spec::object_name(id)).await?;
                let ours = PodRecord::from_pod(&existing).is_some_and(|r| r.nonce == *nonce);
                if ours { Ok(existing) } else { Err(e) }
            })
            .await
            .map_err(|e| match api_code(&e) {
                Some(409) => SandboxError::AlreadyExists(id.to_string()),
                Some(403) | Some(422) => SandboxError::InvalidSpec(format!("the cluster refused the pod: {e}")),
                _ => SandboxError::backend("creating the sandbox's pod", e),
            })
        };
        match rest.await {
            Ok(created) => {
                // The watch will report it too; recording it now lets the caller use it at once.
                self.cache.upsert(&created);
                Ok(())
            }
            Err(e) => {
                self.delete_objects(id, false).await;
                Err(e)
            }
        }
    }

    /// Creates `object`, paced and retried on 429/5xx. A 409 on a retry may be this very write,
    /// gone through before its 5xx answer: `on_retry_conflict` tells (the existing object) from
    /// a real conflict (the error).
    async fn create_retried<K, F, Fut>(
        &self,
        lane: Lane,
        api: &Api<K>,
        object: &K,
        on_retry_conflict: F,
    ) -> std::result::Result<K, kube::Error>
    where
        K: Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
        F: Fn(kube::Error) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<K, kube::Error>>,
    {
        let post = &PostParams::default();
        let on_retry_conflict = &on_retry_conflict;
        self.writes
            .run(lane, |attempt| async move {
                match api.create(post, object).await {
                    Err(e) if attempt > 0 && api_code(&e) == Some(409) => on_retry_conflict(e).await,
                    other => other,
                }
            })
            .await
    }

    /// Deletes the pod (grace 0) and its policies; `NotFound` is not an error. (Sandboxes of
    /// earlier versions also had a token Secret: the reaper removes those whose pod is gone.)
    async fn delete_objects(&self, id: &str, pod: bool) -> bool {
        let name = spec::object_name(id);
        let mut pod_existed = false;
        if pod {
            let params = DeleteParams { grace_period_seconds: Some(0), ..Default::default() };
            // Its going, when the watch reports it, is ours: not a pod deleted behind our back
            // (whose policy the reaper would delete a second time).
            self.cache.deleting(id);
            match self.writes.run(Lane::Delete, |_| self.pods.delete(&name, &params)).await {
                Ok(_) => pod_existed = true,
                Err(e) if api_code(&e) == Some(404) => {}
                Err(e) => tracing::warn!(sandbox = id, "deleting its pod: {e}"),
            }
        }
        let params = &DeleteParams::default();
        let mut results =
            vec![self.writes.run(Lane::Delete, |_| self.policies.delete(&name, params)).await.map(|_| ())];
        if self.config.cluster.cilium_fqdn {
            results.push(self.writes.run(Lane::Delete, |_| self.cilium.delete(&name, params)).await.map(|_| ()));
        }
        for result in results {
            if let Err(e) = result.filter_not_found() {
                tracing::warn!(sandbox = id, "deleting its objects: {e}");
            }
        }
        pod_existed
    }

    /// Records activity; writes it to the pod at most every quarter TTL (bounded to 1–30 s),
    /// in the background, so other replicas' reapers see it without a write per request.
    fn touch(self: &Arc<Self>, record: &PodRecord) {
        let now = now();
        let interval = flush_interval(record.ttl_seconds);
        let flush = {
            let mut activity = self.activity.lock().unwrap_or_else(|p| p.into_inner());
            let entry = activity.entry(record.id.clone()).or_insert((now, record.last_active));
            entry.0 = now;
            let due = now - entry.1.max(record.last_active) >= interval;
            if due {
                entry.1 = now;
            }
            due
        };
        if flush {
            let this = self.clone();
            let name = record.pod_name.clone();
            tokio::spawn(async move {
                let patch =
                    serde_json::json!({"metadata": {"annotations": {ANNOTATION_LAST_ACTIVE: format!("{now:.3}")}}});
                let (params, patch) = (&PatchParams::default(), &Patch::Merge(&patch));
                if let Err(e) = this.writes.run(Lane::Background, |_| this.pods.patch(&name, params, patch)).await {
                    tracing::debug!(pod = %name, "recording activity: {e}");
                }
            });
        }
    }

    /// Waits for Ready or Failed (or one of `also`), on the watch's changes.
    async fn wait_for(&self, id: &str, timeout: Duration, also: &[SandboxStatus]) -> Result<SandboxInfo> {
        let mut changes = self.cache.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Some(record) = self.cache.get(id) else {
                return Err(SandboxError::NotReady { id: id.into(), reason: "its pod was deleted".into() });
            };
            let info = self.info(&record);
            if matches!(info.status, SandboxStatus::Ready | SandboxStatus::Failed) || also.contains(&info.status) {
                return Ok(info);
            }
            if tokio::time::timeout_at(deadline, changes.changed()).await.is_err() {
                let why = info.status_message.unwrap_or_else(|| "pending".into());
                return Err(SandboxError::NotReady { id: id.into(), reason: format!("{why} (after {timeout:?})") });
            }
        }
    }

    /// A ready pooled pod of the shape `spec` asks for, claimed for its tenant: a merge patch
    /// carrying the resourceVersion the claim saw, so that when two replicas race for one pod the
    /// API server accepts one patch and answers the other 409.
    async fn claim_pooled(&self, spec: &SandboxSpec) -> Option<SandboxInfo> {
        let (shape, _) = self.config.pools.iter().find(|(shape, _)| shape.serves(spec))?;
        let key = shape.key();
        let ttl = spec.ttl_seconds.unwrap_or(self.config.default_ttl.as_secs());
        let deadline = tokio::time::Instant::now() + POOL_START_WAIT;
        let mut waiting: Option<PoolWaiter> = None;
        let mut woken = false;
        loop {
            if let Some(claimed) = self.claim_ready(spec, &key, ttl, &mut waiting).await {
                return Some(claimed);
            }
            // None ready to take: wait for a pool pod already starting (it is ready sooner than
            // a cold create would be), while the pool's starting and ready pods outnumber the
            // claims that waited longer (each of those takes one).
            let coming = self.cache.pool_coming(&key);
            let waiter = waiting.get_or_insert_with(|| PoolWaiter::join(&self.pool_waiters, &key));
            let now = tokio::time::Instant::now();
            let ahead = waiter.ahead();
            if ahead >= coming || now >= deadline {
                tracing::debug!(pool = %key, ahead, coming, "no warm-pool pod to wait for");
                // A wake-up this claim could not use goes on to the next waiter.
                if woken && !self.cache.sample_ready(&key, 1).is_empty() {
                    self.cache.pass_pool_ready(&key);
                }
                return None;
            }
            // Woken by one pod becoming ready (not by every change: thousands may wait), and
            // counting again every second (a starting pod may fail instead).
            let wait = (deadline - now).min(Duration::from_secs(1));
            woken = tokio::time::timeout(wait, self.cache.pool_pod_ready(&key)).await.is_ok();
        }
    }

    /// A claim of one of warm pool `key`'s ready pods, when there is one. A claim that wins its
    /// pod stops `waiting` before the cache counts the pod as taken: the claims behind it then
    /// never see one pod fewer coming while it still stands ahead of them.
    async fn claim_ready(
        &self,
        spec: &SandboxSpec,
        key: &str,
        ttl: u64,
        waiting: &mut Option<PoolWaiter>,
    ) -> Option<SandboxInfo> {
        let claimable = |r: &PodRecord| {
            r.pool.as_deref() == Some(key)
                && r.status == SandboxStatus::Ready
                && !r.deleting
                && self.config.pool_pod_claimable_at(now_f() - r.created_at)
        };
        // A few candidates at random (spreading concurrent claims over the pool: other
        // replicas' by chance, this replica's own by never trying a pod another of its claims
        // is trying); when they are all taken, every ready pod in a random order. Both come from
        // the cache's index of ready pool pods: waiting claims try again often, and must not
        // look at every record each time.
        use rand::seq::SliceRandom;
        for round in 0..2 {
            let candidates = if round == 0 {
                self.cache.sample_ready(key, 16)
            } else {
                let mut everyone = self.cache.sample_ready(key, usize::MAX);
                everyone.shuffle(&mut rand::rng());
                everyone
            };
            for id in candidates {
                // Still claimable as far as the watch knows (another claim of ours may have
                // taken it since the list was made), and not being claimed by another request of
                // ours. Its newest version is the one claimed (a stale resourceVersion is a sure
                // 409).
                let Some(fresh) = self.cache.get(&id).filter(|r| claimable(r)) else { continue };
                if !self.claiming.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone()) {
                    continue;
                }
                let claimed = self.claim_one(spec, &fresh, ttl, waiting).await;
                self.claiming.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
                if claimed.is_some() {
                    return claimed;
                }
            }
        }
        None
    }

    /// One claim attempt of `record` for `spec`'s tenant: `None` when another claim won it.
    /// A win ends `waiting` first.
    async fn claim_one(
        &self,
        spec: &SandboxSpec,
        record: &PodRecord,
        ttl: u64,
        waiting: &mut Option<PoolWaiter>,
    ) -> Option<SandboxInfo> {
        let now = format!("{:.3}", now());
        // The lifetime counts from the claim; the kubelet counts from the pod's start, which
        // was about when it was created for the pool.
        let deadline = spec.lifetime_seconds.map(|s| (now_f() - record.created_at).max(0.0).ceil() as i64 + s as i64);
        let mut patch = serde_json::json!({
            "metadata": {
                "resourceVersion": record.resource_version,
                "labels": {LABEL_TENANT: spec.tenant},
                "annotations": {
                    LABEL_TENANT: spec.tenant,
                    spec::ANNOTATION_POOL: null,
                    spec::ANNOTATION_TTL: ttl.to_string(),
                    spec::ANNOTATION_CREATED: now,
                    spec::ANNOTATION_LAST_ACTIVE: now,
                },
            }
        });
        if let Some(deadline) = deadline {
            patch["spec"] = serde_json::json!({ "activeDeadlineSeconds": deadline });
        }
        let name = spec::object_name(&record.id);
        let (params, body) = (&PatchParams::default(), &Patch::Merge(&patch));
        match self.writes.run(Lane::Claim, |_| self.pods.patch(&name, params, body)).await {
            Ok(pod) => {
                waiting.take();
                self.cache.upsert(&pod);
                self.activity.lock().unwrap_or_else(|p| p.into_inner()).insert(record.id.clone(), (now_f(), now_f()));
                let claimed = self.cache.get(&record.id)?;
                tracing::debug!(sandbox = %record.id, tenant = %spec.tenant, "claimed from the warm pool");
                Some(self.info(&claimed))
            }
            Err(e) if api_code(&e) == Some(409) => {
                tracing::debug!(sandbox = %record.id, "claimed by someone else first");
                None
            }
            Err(e) => {
                tracing::warn!(sandbox = %record.id, "claiming a pooled pod: {e}");
                None
            }
        }
    }

    /// Tops up the warm pools this replica owns (one owner per pool, by rendezvous over the live
    /// replicas): per pass, as many pods as half the write budget of one reaper interval allows
    /// (two writes each), made a few at a time in the background lane.
    pub(super) async fn refill_pools(&self, live: &[String]) {
        const AT_ONCE: usize = 32;
        let per_pass = ((self.config.write_rate * self.config.reap_interval.as_secs_f64() / 4.0) as usize).max(8);
        for (shape, size) in &self.config.pools {
            let key = shape.key();
            if crate::replicas::owner_of(&format!("pool-{key}"), live) != Some(self.config.host_id.as_str()) {
                continue;
            }
            let have = self.cache.count_where(|r| r.pool.as_deref() == Some(key.as_str()) && !r.deleting);
            let room = self.config.max_sandboxes.saturating_sub(self.cache.len());
            let missing = size.saturating_sub(have).min(per_pass).min(room);
            if missing == 0 {
                continue;
            }
            let mut spec = shape.spec();
            spec.lifetime_seconds = self.config.pool_deadline_seconds();
            let command = match self.image_command(&spec).await {
                Ok(command) => command,
                Err(e) => {
                    tracing::warn!(image = %shape.image, "warm pool: {e}");
                    continue;
                }
            };
            let made = futures::stream::iter(0..missing)
                .map(|_| {
                    let id = format!("pool-{}", random_hex(6));
                    let (spec, command, key) = (&spec, command.clone(), key.as_str());
                    async move { self.create_objects(&id, spec, command, Some(key)).await }
                })
                .buffer_unordered(AT_ONCE);
            let failed: Vec<SandboxError> = made.filter_map(|r| async { r.err() }).collect().await;
            if let Some(e) = failed.first() {
                tracing::warn!(image = %shape.image, failed = failed.len(), "warm pool: {e}");
            }
        }
    }

    fn forget(&self, id: &str) {
        self.cache.forget(id);
        self.agents.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
        self.activity.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

fn cilium_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cilium.io", "v2", "CiliumNetworkPolicy"),
        "ciliumnetworkpolicies",
    )
}

pub(crate) fn flush_interval(ttl_seconds: u64) -> f64 {
    (ttl_seconds as f64 / 4.0).clamp(1.0, 30.0)
}

fn now_f() -> f64 {
    now()
}

pub(crate) fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

trait NotFoundIsFine {
    fn filter_not_found(self) -> std::result::Result<(), kube::Error>;
}

impl NotFoundIsFine for std::result::Result<(), kube::Error> {
    fn filter_not_found(self) -> std::result::Result<(), kube::Error> {
        match self {
            Err(e) if api_code(&e) == Some(404) => Ok(()),
            other => other,
        }
    }
}

/// The handle the server holds: the backend behind an `Arc` so that activity flushes can
/// outlive the request that caused them.
pub struct Kubernetes(pub Arc<KubernetesBackend>);

#[async_trait::async_trait]
impl Backend for Kubernetes {
    fn name(&self) -> &'static str {
        "kubernetes"
    }

    async fn create(&self, spec: SandboxSpec) -> Result<SandboxInfo> {
        let b = &self.0;
        let id = b.validate(&spec)?;
        if b.cache.get(&id).is_some() {
            return Err(SandboxError::AlreadyExists(id));
        }
        if b.cache.len() >= b.config.max_sandboxes {
            return Err(SandboxError::Capacity(format!("{} sandboxes exist", b.config.max_sandboxes)));
        }
        if let Some(claimed) = b.claim_pooled(&spec).await
            && let Some(info) = orchard_sandbox::finish_claim(self, claimed, &spec).await
        {
            return Ok(info);
        }
        let command = b.image_command(&spec).await?;
        b.create_objects(&id, &spec, command, None).await?;
        b.activity.lock().unwrap_or_else(|p| p.into_inner()).insert(id.clone(), (now(), now()));
        // Inline, "unschedulable" is an answer worth giving at once; `wait_ready` keeps waiting
        // through it (a cluster autoscaler may be adding a node).
        match b.wait_for(&id, INLINE_READY_WAIT, &[SandboxStatus::Unschedulable]).await {
            Ok(info) => Ok(info),
            Err(SandboxError::NotReady { .. }) => self.get(&id).await,
            Err(e) => Err(e),
        }
    }

    async fn get(&self, id: &str) -> Result<SandboxInfo> {
        Ok(self.0.info(&self.0.record(id)?))
    }

    /// New pods of the source's spec, its writable paths streamed across by the agents' tar:
    /// slower than a local fork (every byte passes through this host) and of a running source.
    async fn fork(&self, id: &str, count: usize) -> Result<orchard_sandbox::Forked> {
        let record = self.0.record(id)?;
        let mut spec = record.spec.clone().unwrap_or_else(|| {
            let mut spec = SandboxSpec::new(record.tenant.clone(), record.image.clone());
            spec.block_network = record.block_network;
            (spec.cpu, spec.memory_bytes, spec.disk_bytes) = (record.cpu, record.memory_bytes, record.disk_bytes);
            spec
        });
        spec.id = None;
        spec.tenant = record.tenant.clone();
        spec.ttl_seconds = Some(record.ttl_seconds);
        let sandboxes = orchard_sandbox::fork_by_tar(self, &spec, id, count, orchard_sandbox::FORK_PATHS).await?;
        Ok(orchard_sandbox::Forked { sandboxes, source_paused: None })
    }

    async fn list(&self) -> Vec<SandboxInfo> {
        let mut infos: Vec<SandboxInfo> = self
            .0
            .cache
            .all()
            .iter()
            .filter(|r| !r.deleting && r.tenant != orchard_sandbox::POOL_TENANT)
            .map(|r| self.0.info(r))
            .collect();
        infos.sort_by(|a, b| a.created_at.total_cmp(&b.created_at).then_with(|| a.id.cmp(&b.id)));
        infos
    }

    async fn agent(&self, id: &str) -> Result<SharedAgent> {
        let b = &self.0;
        let record = b.record(id)?;
        if record.status != SandboxStatus::Ready {
            return Err(SandboxError::NotReady {
                id: id.into(),
                reason: record.status_message.clone().unwrap_or_else(|| "not ready".into()),
            });
        }
        b.touch(&record);
        let mut agents = b.agents.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((nonce, client)) = agents.get(id)
            && *nonce == record.nonce
        {
            return Ok(client.clone());
        }
        let token = sandbox_token(&b.config.token_key, id, &record.nonce);
        if spec::token_hash(&token) != record.token_hash {
            return Err(SandboxError::Backend(format!(
                "sandbox {id} was created with a different token key than this host's; \
                 all replicas must share one key"
            )));
        }
        let ip: IpAddr = record
            .pod_ip
            .as_deref()
            .and_then(|ip| ip.parse().ok())
            .ok_or_else(|| SandboxError::NotReady { id: id.into(), reason: "its pod has no IP yet".into() })?;
        let client =
            Arc::new(AgentClient::new(AgentAddr::Tcp(SocketAddr::new(ip, b.config.cluster.agent_port)), &token));
        agents.insert(id.to_string(), (record.nonce.clone(), client.clone()));
        Ok(client)
    }

    async fn wait_ready(&self, id: &str, timeout: Duration) -> Result<SandboxInfo> {
        self.0.wait_for(id, timeout, &[]).await
    }

    async fn heartbeat(&self, id: &str) -> Result<SandboxInfo> {
        let record = self.0.record(id)?;
        self.0.touch(&record);
        Ok(self.0.info(&record))
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let b = &self.0;
        b.record(id)?;
        let existed = b.delete_objects(id, true).await;
        b.forget(id);
        if existed { Ok(()) } else { Err(SandboxError::NotFound(id.to_string())) }
    }

    async fn reap_expired(&self) -> Vec<String> {
        let b = &self.0;
        {
            let mut last = b.last_reap.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < b.config.reap_interval) {
                return Vec::new();
            }
            *last = Some(std::time::Instant::now());
        }
        b.reap_now().await
    }

    async fn free_slots(&self) -> Option<usize> {
        Some(self.0.config.max_sandboxes.saturating_sub(self.0.cache.len()))
    }

    /// Pods outlive the host: a restarted or other replica serves them. Only this replica's
    /// lease goes, so that the others take over its share of the reaping at once.
    async fn shutdown(&self) {
        replicas::release(&self.0.leases, &self.0.config.host_id).await;
        for task in &self.0.tasks {
            task.abort();
        }
    }
}
