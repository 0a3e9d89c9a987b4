//! From a job's spec to what its rollouts need: the tasks (a local folder, an operator's dataset,
//! or an uploaded archive unpacked once per replica), the plugins (looked up by name when each
//! rollout starts, so a plugin replaced mid-job is used from then on; or pinned by hash), the
//! model clients (API keys read from the tenant's secrets), limits and grants.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use orchard_eval::{Job, Task};
use orchard_model::{ModelClient, ModelConfig};
use orchard_runtime::{Capability, Grants, Limits, Plugin, PluginKind, Registry};
use orchard_store::Store;

use orchard_spec::{EvalSpec, ModelSpec, TaskSource};

/// What preparing a job needs from where it runs.
pub struct Env {
    /// Jobs, rollouts and results.
    pub store: Store,
    /// The plugins jobs name.
    pub registry: Arc<Registry>,
    /// Where uploaded task archives are unpacked (one folder per archive).
    pub datasets_dir: PathBuf,
    /// Datasets the operator registered: name → folder.
    pub datasets: BTreeMap<String, PathBuf>,
    /// API keys given to this process directly (the CLI's `--api-key`), by secret name; looked
    /// up before the store's secrets. Never stored.
    pub local_secrets: BTreeMap<String, String>,
    /// The server's rules for what clients may ask of sandboxes: every task's image and
    /// resources pass them (`None` for the operator's own `orchard eval`).
    pub admission: Option<Arc<orchard_admission::Admission>>,
    /// What one uploaded task archive may hold unpacked.
    pub upload_limits: orchard_task_files::Limits,
    /// Where a model URL a job names may point (`Policy::open` for the operator's own runs).
    pub egress: orchard_egress::Policy,
    /// Sandbox limits where there is no admission (the operator's own `orchard eval`): a task
    /// that names no memory gets this much, and every sandbox this much writable layer.
    pub sandbox_defaults: SandboxDefaults,
    /// Where rollouts' browsers run.
    pub browser: orchard_eval::BrowserPlacement,
}

/// Limits for sandboxes of jobs without admission rules (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SandboxDefaults {
    /// Memory of each sandbox, in bytes.
    pub memory_bytes: Option<u64>,
    /// Writable disk of each sandbox, in bytes.
    pub disk_bytes: Option<u64>,
}

/// A job ready to run rollouts.
pub struct Prepared {
    /// The job's id.
    pub eval_id: String,
    /// The tenant that submitted it.
    pub tenant: String,
    /// What it asks for.
    pub spec: EvalSpec,
    /// Its tasks, by id.
    pub tasks: HashMap<String, Task>,
    /// In the order given (work order, matrix columns).
    pub task_order: Vec<String>,
    model: Option<Arc<ModelClient>>,
    grader_model: Option<Arc<ModelClient>>,
    limits: Limits,
    grants: Grants,
    registry: Arc<Registry>,
    sandbox_pids: Option<u64>,
    sandbox_disk_bytes: Option<u64>,
    sandbox_max_lifetime_seconds: Option<u64>,
    browser: orchard_eval::BrowserPlacement,
    /// Plugins named by path (`orchard eval --harness ./mine.wasm`), loaded once.
    local: HashMap<String, Arc<Plugin>>,
    /// A server's tenants name plugins, never files: every reference (the job's, a task's) is
    /// looked up by name in the tenant's and the shared registry, with one error for "no such
    /// plugin" whatever lies on disk.
    names_only: bool,
    /// The tool adapters and graders tasks name (`[agent] tools`, `[verifier] grader`), each
    /// once: what every rollout's job resolves, without walking the tasks again.
    task_tools: std::collections::BTreeSet<String>,
    task_graders: std::collections::BTreeSet<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
/// Why a job could not be prepared; the message names the task, plugin or model.
pub struct PrepareError(pub String);

fn err(message: impl Into<String>) -> PrepareError {
    PrepareError(message.into())
}

impl Prepared {
    /// Loads a job's tasks, plugins and model clients.
    pub async fn new(env: &Env, eval_id: &str, tenant: &str, mut spec: EvalSpec) -> Result<Prepared, PrepareError> {
        let mut tasks = load_source(env, tenant, &spec.tasks).await?;
        let (mut sandbox_pids, mut sandbox_disk_bytes) = (None, None);
        // The operator's, not the tenant's: an eval names no lifetime.
        let sandbox_max_lifetime_seconds = env.admission.as_ref().and_then(|a| a.resources.max_lifetime_seconds);
        if let Some(admission) = &env.admission {
            // What a client may not ask of a sandbox directly, it may not ask through a task.
            spec.image = admission.images.admit(&spec.image).map_err(|e| err(e.to_string()))?;
            for task in &mut tasks {
                let mut probe =
                    orchard_sandbox::SandboxSpec::new(tenant, task.image.clone().unwrap_or_else(|| spec.image.clone()));
                probe.image =
                    admission.images.admit(&probe.image).map_err(|e| err(format!("task {}: {e}", task.id)))?;
                probe.cpu = task.cpus;
                probe.memory_bytes = task.memory_bytes;
                admission.resources.apply(&mut probe).map_err(|e| err(format!("task {}: {e}", task.id)))?;
                task.image = Some(probe.image);
                task.cpus = probe.cpu;
                task.memory_bytes = probe.memory_bytes;
                sandbox_pids = probe.pids;
                sandbox_disk_bytes = probe.disk_bytes;
            }
        } else {
            let defaults = env.sandbox_defaults;
            for task in &mut tasks {
                task.memory_bytes = task.memory_bytes.or(defaults.memory_bytes);
            }
            sandbox_disk_bytes = defaults.disk_bytes;
        }
        let task_order = tasks.iter().map(|t| t.id.clone()).collect();
        let task_tools = tasks
            .iter()
            .flat_map(|t| t.tools.iter().flatten().cloned())
            .chain(tasks.iter().any(|t| t.mcp).then(|| "mcp".to_string()))
            .collect();
        let task_graders = tasks.iter().filter_map(|t| t.grader.clone()).collect();
        let mut grants = Grants::default();
        for g in &spec.grants {
            grants.0.insert(Capability::parse(g).map_err(|e| err(format!("grants: {e}")))?);
        }
        let memory = orchard_sandbox::parse_memory(&spec.plugin_memory.as_str().into())
            .map_err(|e| err(format!("plugin_memory: {e}")))?;
        let model = model_client(env, tenant, spec.model.as_ref(), "model").await?;
        let grader_model = model_client(env, tenant, spec.grader_model.as_ref(), "grader_model").await?;
        let mut local = HashMap::new();
        // Paths are the operator's to name: a server's tenants name plugins (and learn nothing of
        // what lies on its disk from how a name is refused).
        if env.admission.is_none() {
            for arg in spec.harnesses.iter().chain(&spec.tools).chain(std::iter::once(&spec.grader)) {
                if arg.ends_with(".wasm") || std::path::Path::new(arg).is_file() {
                    let plugin = env.registry.resolve(arg).map_err(|e| err(format!("{arg}: {e}")))?;
                    local.insert(arg.clone(), plugin);
                }
            }
        }
        let prepared = Prepared {
            local,
            names_only: env.admission.is_some(),
            eval_id: eval_id.to_string(),
            tenant: tenant.to_string(),
            tasks: tasks.into_iter().map(|t| (t.id.clone(), t)).collect(),
            task_order,
            model,
            grader_model,
            limits: Limits {
                memory_bytes: memory,
                cpu: Duration::from_secs_f64(spec.plugin_cpu),
                wall: Duration::from_secs(3600),
            },
            grants,
            registry: env.registry.clone(),
            sandbox_pids,
            sandbox_disk_bytes,
            sandbox_max_lifetime_seconds,
            browser: env.browser.clone(),
            spec,
            task_tools,
            task_graders,
        };
        // Every plugin is checked now, so that a bad name fails the job at once.
        let mut harness_names = Vec::new();
        for h in &prepared.spec.harnesses {
            harness_names.push(prepared.plugin(h, PluginKind::Harness)?.manifest.name.clone());
        }
        if let Some(name) = prepared.spec.harness_config.keys().find(|n| !harness_names.contains(n)) {
            return Err(err(format!(
                "harness_config.{name}: not a harness of this job (its harnesses: {})",
                harness_names.join(", ")
            )));
        }
        for t in &prepared.spec.tools {
            prepared.plugin(t, PluginKind::ToolAdapter)?;
        }
        for task in prepared.tasks.values() {
            for t in task.tools.iter().flatten() {
                prepared
                    .plugin(t, PluginKind::ToolAdapter)
                    .map_err(|e| err(format!("task {}: [agent] tools: {}", task.id, e.0)))?;
            }
            if let Some(g) = &task.grader {
                prepared
                    .plugin(g, PluginKind::Grader)
                    .map_err(|e| err(format!("task {}: [verifier] grader: {}", task.id, e.0)))?;
            }
        }
        prepared.plugin(&prepared.spec.grader, PluginKind::Grader)?;
        Ok(prepared)
    }

    /// The plugin `arg` names (a name, `name@version`, or a path for local runs), of `kind`: the
    /// version pinned by the job, else the registry's current one.
    pub fn plugin(&self, arg: &str, kind: PluginKind) -> Result<Arc<Plugin>, PrepareError> {
        let name = arg.split('@').next().unwrap_or(arg);
        // A plugin given by path is found again by its id (what the queue records).
        let local =
            self.local.get(arg).or_else(|| self.local.values().find(|p| p.id() == arg || p.manifest.name == name));
        let plugin = match self.spec.pins.get(name) {
            _ if local.is_some() => local.cloned().expect("checked"),
            Some(hash) => self
                .registry
                .by_hash_for(&self.tenant, hash)
                .ok_or_else(|| err(format!("pins: no plugin with sha256 {hash} is loaded here")))?,
            None if arg.ends_with(".wasm") && !self.names_only => self.registry.resolve(arg).map_err(err)?,
            None => self.registry.resolve_for(&self.tenant, name).map_err(err)?,
        };
        let fits = plugin.kind() == kind || (kind == PluginKind::ToolAdapter && plugin.kind().serves_tools());
        if !fits {
            return Err(err(format!("{arg}: {} is a {}, not a {kind}", plugin.id(), plugin.kind())));
        }
        Ok(plugin)
    }

    /// The engine's job for one rollout, with the plugins current now.
    pub fn job(&self) -> Result<Job, PrepareError> {
        Ok(Job {
            tasks: Vec::new(),
            harnesses: Vec::new(),
            tools: self.spec.tools.iter().map(|t| self.plugin(t, PluginKind::ToolAdapter)).collect::<Result<_, _>>()?,
            named_tools: self
                .task_tools
                .iter()
                .map(|name| Ok((name.clone(), self.plugin(name, PluginKind::ToolAdapter)?)))
                .collect::<Result<_, PrepareError>>()?,
            grader: self.plugin(&self.spec.grader, PluginKind::Grader)?,
            named_graders: self
                .task_graders
                .iter()
                .map(|name| Ok((name.clone(), self.plugin(name, PluginKind::Grader)?)))
                .collect::<Result<_, PrepareError>>()?,
            model: self.model.clone(),
            grader_model: self.grader_model.clone(),
            default_image: self.spec.image.clone(),
            attempts: self.spec.attempts,
            concurrency: self.spec.concurrency,
            harness_config: self.spec.config.clone(),
            harness_configs: self.spec.harness_config.clone(),
            tool_config: self.spec.tool_config.clone(),
            limits: self.limits,
            grants: self.grants.clone(),
            sandbox_pids: self.sandbox_pids,
            sandbox_disk_bytes: self.sandbox_disk_bytes,
            sandbox_max_lifetime_seconds: self.sandbox_max_lifetime_seconds,
            browser: self.browser.clone(),
        })
    }

    /// The model the job's harnesses call, if any.
    pub fn model_name(&self) -> Option<String> {
        self.model.as_ref().map(|m| m.config().model.clone())
    }
}

async fn model_client(
    env: &Env,
    tenant: &str,
    spec: Option<&ModelSpec>,
    field: &str,
) -> Result<Option<Arc<ModelClient>>, PrepareError> {
    let Some(spec) = spec else { return Ok(None) };
    let config = model_config(env, tenant, spec, field).await?;
    Ok(Some(Arc::new(ModelClient::new(config).map_err(|e| err(format!("{field}: {e}")))?)))
}

/// The client configuration for a model endpoint a job (or a proxy session) names as `field`:
/// its URLs checked against the server's egress policy and pinned to the addresses checked, its
/// API key read from the tenant's secrets.
pub async fn model_config(env: &Env, tenant: &str, spec: &ModelSpec, field: &str) -> Result<ModelConfig, PrepareError> {
    let api_key = match &spec.api_key_secret {
        None => None,
        Some(name) => match env.local_secrets.get(name) {
            Some(key) => Some(key.clone()),
            None => env.store.secret(tenant, name).await.map_err(|e| err(format!("{field}: {e}")))?,
        },
    };
    spec.client_config(field, &env.egress, api_key).await.map_err(err)
}

/// The tasks of every folder, in order; a task id met twice is refused (results are keyed by it).
fn load_all(dirs: &[PathBuf]) -> Result<Vec<Task>, PrepareError> {
    let mut all: Vec<Task> = Vec::new();
    for dir in dirs {
        for task in orchard_eval::load_tasks(dir).map_err(|e| err(format!("tasks: {e}")))? {
            if let Some(other) = all.iter().find(|t| t.id == task.id) {
                return Err(err(format!(
                    "tasks: two tasks named {:?} ({} and {}); task ids must be unique across folders",
                    task.id, other.location, task.location
                )));
            }
            all.push(task);
        }
    }
    Ok(all)
}

/// The tasks a job's source names: folders on this machine read as the operator gave them; a
/// registered dataset or an upload read beneath its own root, named without server paths.
async fn load_source(env: &Env, tenant: &str, source: &TaskSource) -> Result<Vec<Task>, PrepareError> {
    let (root, label, domain) = match source {
        TaskSource::Dirs(dirs) if dirs.is_empty() => return Err(err("tasks.dirs: no folder")),
        TaskSource::Dirs(dirs) => {
            let dirs: Vec<PathBuf> = dirs.iter().map(PathBuf::from).collect();
            return blocking(move || load_all(&dirs)).await?;
        }
        TaskSource::Dir(dir) => {
            let dirs = vec![PathBuf::from(dir)];
            return blocking(move || load_all(&dirs)).await?;
        }
        TaskSource::Dataset(name) => {
            let dir =
                env.datasets.get(name).cloned().ok_or_else(|| err(format!("tasks: no dataset named {name:?}")))?;
            (dir, name.clone(), name.clone())
        }
        TaskSource::Archive(id) => (archive_dir(env, tenant, id).await?, String::new(), "tasks".to_string()),
    };
    blocking(move || orchard_eval::load_tasks_in(&root, &label, &domain).map_err(|e| err(format!("tasks: {e}"))))
        .await?
}

async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Result<T, PrepareError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| err(format!("loading tasks: {e}")))
}

/// Where `tenant`'s upload `id` is unpacked on this replica: beneath a folder of the tenant's own
/// (named by a hash of the tenant), so that no path in one tenant's upload names another's.
pub fn dataset_dir(env: &Env, tenant: &str, id: &str) -> PathBuf {
    use sha2::Digest;
    let owner = hex::encode(&sha2::Sha256::digest(tenant.as_bytes())[..12]);
    let safe: String = id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    env.datasets_dir.join(owner).join(safe)
}

/// The folder of the tenant's uploaded archive, unpacking it the first time this replica
/// needs it.
async fn archive_dir(env: &Env, tenant: &str, id: &str) -> Result<PathBuf, PrepareError> {
    let missing = || err(format!("tasks.archive: no uploaded archive {id}"));
    let dir = dataset_dir(env, tenant, id);
    // Another tenant's archive is as good as absent.
    let owner = env.store.blob_owner(id).await.map_err(|e| err(format!("tasks: {e}")))?;
    if owner.as_deref() != Some(tenant) {
        return Err(missing());
    }
    // Retention counts from the last job that used it, not from the upload.
    if let Err(e) = env.store.touch_dataset(id).await {
        tracing::warn!(dataset = %id, error = %e, "could not note a dataset's use");
    }
    if dir.join(".complete").is_file() {
        return Ok(dir);
    }
    let (owner, bytes) = env.store.blob(id).await.map_err(|e| err(format!("tasks: {e}")))?.ok_or_else(missing)?;
    if owner != tenant {
        return Err(missing());
    }
    let (target, limits) = (dir.clone(), env.upload_limits);
    blocking(move || orchard_task_files::unpack(&bytes, &target, limits))
        .await?
        .map_err(|e| err(format!("tasks: the archive {id}: {e}")))?;
    Ok(dir)
}
