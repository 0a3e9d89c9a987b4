//! `orchard serve`'s admission flags: which images clients may name, per-sandbox resource
//! defaults and maxima, and per-tenant quotas.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use orchard_admission::{Admission, CreateRates, DEFAULT_REGISTRIES, ImagePolicy, Quota, Quotas, Rate, ResourcePolicy};
use orchard_server::ApiKeys;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum HostImage {
    Allow,
    Deny,
}

#[derive(Args, Debug, Clone)]
pub struct AdmissionArgs {
    /// Whether clients may use the `host` image (the host's /usr, /bin and /lib, read-only).
    #[arg(long, value_enum, default_value = "allow", help_heading = "Admission")]
    host_image: HostImage,
    /// A directory whose rootfs directories, OCI layouts and archives clients may name as images
    /// by path (repeatable). Without one, clients cannot use local paths at all.
    #[arg(long = "image-root", help_heading = "Admission")]
    image_roots: Vec<PathBuf>,
    /// Registers an image under a name clients use: NAME=REFERENCE (a path or registry
    /// reference; repeatable).
    #[arg(long = "image", value_parser = name_ref, help_heading = "Admission")]
    images: Vec<(String, String)>,
    /// A registry clients' images may be pulled from (repeatable; `*` for any). Default: the
    /// public registries (docker.io, ghcr.io, quay.io, gcr.io, mirror.gcr.io, registry.k8s.io,
    /// mcr.microsoft.com, public.ecr.aws, nvcr.io) and every --insecure-registry.
    #[arg(long = "allowed-registry", help_heading = "Admission")]
    allowed_registries: Vec<String>,
    /// Memory of a sandbox created without `memory` ("none": no limit).
    #[arg(long, default_value = "2Gi", help_heading = "Admission")]
    default_memory: String,
    /// Most memory one sandbox may ask for ("none": any).
    #[arg(long, default_value = "32Gi", help_heading = "Admission")]
    max_memory: String,
    /// Cores of a sandbox created without `cpu` ("none": no limit).
    #[arg(long, default_value = "2", help_heading = "Admission")]
    default_cpu: String,
    #[arg(long, default_value = "16", help_heading = "Admission")]
    max_cpu: String,
    /// Process limit of a sandbox created without `pids`.
    #[arg(long, default_value = "4096", help_heading = "Admission")]
    default_pids: String,
    #[arg(long, default_value = "32768", help_heading = "Admission")]
    max_pids: String,
    /// Writable-layer size of a sandbox created without `disk` ("none": no limit).
    #[arg(long, default_value = "10Gi", help_heading = "Admission")]
    default_disk: String,
    #[arg(long, default_value = "100Gi", help_heading = "Admission")]
    max_disk: String,
    /// Every sandbox's hard lifetime in seconds ("none": no limit). Enforced below the server
    /// (by the sandbox's own init locally, `activeDeadlineSeconds` on Kubernetes): a sandbox
    /// dies on time even when no server is left to delete it.
    #[arg(long, default_value = "86400", help_heading = "Admission")]
    max_sandbox_lifetime: String,
    /// A quota: `[TENANT:]sandboxes=N,memory=SIZE,cpu=CORES` (repeatable). Without a tenant it
    /// is every tenant's default. With several tenants and no default, each may hold at most
    /// half of --max-sandboxes.
    #[arg(long = "tenant-quota", help_heading = "Admission")]
    tenant_quotas: Vec<String>,
    /// Sandboxes the whole server may create a second: `N/s` or `N/s,burst=M` ("none": no
    /// limit). Creates over it are answered 429 with Retry-After.
    #[arg(long, default_value = "500/s,burst=2000", help_heading = "Admission")]
    create_rate: String,
    /// Sandboxes each tenant may create a second, as --create-rate.
    #[arg(long, default_value = "200/s,burst=1000", help_heading = "Admission")]
    tenant_create_rate: String,
}

fn name_ref(text: &str) -> Result<(String, String), String> {
    let (name, reference) = text.split_once('=').ok_or_else(|| format!("{text:?}: expected NAME=REFERENCE"))?;
    Ok((name.trim().to_string(), reference.trim().to_string()))
}

/// What a local sandbox limit can be: memory (cgroups) or disk (loop devices).
#[derive(Clone, Copy)]
pub(crate) enum Limit {
    Memory,
    Disk,
}

/// A local sandbox's limit flag: `auto` is `default` where this host can enforce the limit and
/// none (with a warning) where it cannot (an unprivileged host); `none`, or a size.
pub(crate) fn local_limit(flag: &str, text: &str, default: &str, limit: Limit) -> anyhow::Result<Option<u64>> {
    if text.eq_ignore_ascii_case("auto") {
        let supported = match limit {
            Limit::Memory => orchard_sandbox_local::memory_limits_supported(),
            Limit::Disk => orchard_sandbox_local::disk_limits_supported(),
        };
        return match supported {
            Ok(()) => optional(flag, default, orchard_sandbox::parse_memory),
            Err(why) => {
                tracing::warn!("sandboxes get no disk limit: {why} (--{flag} none to silence this)");
                Ok(None)
            }
        };
    }
    optional(flag, text, orchard_sandbox::parse_memory)
}

pub(crate) fn optional<T>(
    flag: &str,
    text: &str,
    parse: impl Fn(&serde_json::Value) -> Result<T, String>,
) -> anyhow::Result<Option<T>> {
    if text.eq_ignore_ascii_case("none") {
        return Ok(None);
    }
    parse(&serde_json::Value::String(text.to_string())).map(Some).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

/// A parser of positive whole numbers whose error calls the value what it should be.
fn positive(what: &'static str) -> impl Fn(&serde_json::Value) -> Result<u64, String> {
    move |value| {
        value.as_str().and_then(|s| s.parse().ok()).filter(|n| *n > 0).ok_or_else(|| format!("{value}: not {what}"))
    }
}

fn rate(value: &serde_json::Value) -> Result<Rate, String> {
    Rate::parse(value.as_str().unwrap_or_default())
}

impl AdmissionArgs {
    pub fn build(
        &self,
        keys: &ApiKeys,
        max_sandboxes: usize,
        insecure_registries: &[String],
    ) -> anyhow::Result<Admission> {
        let mut images = ImagePolicy::default();
        images.allow_host = self.host_image == HostImage::Allow;
        for root in &self.image_roots {
            images.add_root(root).map_err(|e| anyhow::anyhow!("--image-root: {e}"))?;
        }
        for (name, reference) in &self.images {
            images.register(name, reference).map_err(|e| anyhow::anyhow!("--image: {e}"))?;
        }
        if !self.allowed_registries.is_empty() {
            images.set_registries(&self.allowed_registries);
        } else {
            images.set_registries(&DEFAULT_REGISTRIES.iter().map(|r| r.to_string()).collect::<Vec<_>>());
        }
        for registry in insecure_registries {
            images.allow_registry(registry);
        }
        let parse_memory = orchard_sandbox::parse_memory;
        let parse_cpu = orchard_sandbox::parse_cpu;
        let resources = ResourcePolicy {
            default_memory_bytes: optional("default-memory", &self.default_memory, parse_memory)?,
            max_memory_bytes: optional("max-memory", &self.max_memory, parse_memory)?,
            default_cpu: optional("default-cpu", &self.default_cpu, parse_cpu)?,
            max_cpu: optional("max-cpu", &self.max_cpu, parse_cpu)?,
            default_pids: optional("default-pids", &self.default_pids, positive("a process count"))?,
            max_pids: optional("max-pids", &self.max_pids, positive("a process count"))?,
            default_disk_bytes: optional("default-disk", &self.default_disk, parse_memory)?,
            max_disk_bytes: optional("max-disk", &self.max_disk, parse_memory)?,
            max_lifetime_seconds: optional(
                "max-sandbox-lifetime",
                &self.max_sandbox_lifetime,
                positive("a whole number of seconds"),
            )?,
        };
        resources.validate().map_err(anyhow::Error::msg)?;
        let mut default_quota = None;
        let mut per_tenant = Vec::new();
        for text in &self.tenant_quotas {
            // `tenant:` prefixes are told apart from `key=value` lists by the colon coming first.
            match text.split_once(':').filter(|(t, _)| !t.contains('=')) {
                Some((tenant, quota)) => per_tenant.push((tenant.trim().to_string(), parse_quota(quota)?)),
                None => default_quota = Some(parse_quota(text)?),
            }
        }
        let default_quota = default_quota.unwrap_or_else(|| {
            if keys.tenants().len() > 1 {
                Quota { sandboxes: Some((max_sandboxes / 2).max(1)), ..Default::default() }
            } else {
                Quota::default()
            }
        });
        let mut quotas = Quotas::new(default_quota);
        for (tenant, quota) in per_tenant {
            quotas.set(&tenant, quota);
        }
        let rates = CreateRates::new(
            optional("create-rate", &self.create_rate, rate)?,
            optional("tenant-create-rate", &self.tenant_create_rate, rate)?,
        );
        Ok(Admission { images, resources, quotas, rates })
    }
}

fn parse_quota(text: &str) -> anyhow::Result<Quota> {
    Quota::parse(text).map_err(|e| anyhow::anyhow!("--tenant-quota {text:?}: {e}"))
}
