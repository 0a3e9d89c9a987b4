//! Images for local sandboxes.
//!
//! A reference resolves to a read-only root directory (the overlay's lower layer), optional
//! read-only bind mounts, and the image's run configuration (env, workdir, entrypoint, cmd):
//!
//! | reference | what it is |
//! |---|---|
//! | `host` | the host's /usr, /bin, /lib* bound read-only, with a minimal /etc; for tests and quick starts |
//! | `/path/dir`, `dir:/path` | a plain root filesystem directory, used as it is |
//! | `/path/layout`, `oci:/path[:tag]` | an OCI image layout directory |
//! | `/path/x.tar`, `oci-archive:/path`, `docker-archive:/path` | an OCI archive or a `docker save` tar |
//! | anything else, e.g. `python:3.11` | a registry reference, pulled with `oci-client` |
//!
//! Layers are unpacked once per manifest digest into `<cache>/rootfs/<digest>` and shared by every
//! sandbox of that image.

#![warn(missing_docs)]

mod archive;
mod host;
mod layers;
mod layout;
mod registry;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

pub use registry::{RegistryOptions, registry_run_config};

#[derive(Debug, thiserror::Error)]
/// Why an image could not be had.
pub enum ImageError {
    #[error("image {reference}: {reason}")]
    /// The reference is not one this host can use.
    Invalid {
        /// The image as named.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },
    #[error("image {reference}: pull failed: {reason}")]
    /// The registry refused or failed.
    Pull {
        /// The image as named.
        reference: String,
        /// What the registry said.
        reason: String,
    },
    #[error("image cache {path}: {source}")]
    /// A file of the cache could not be read or written.
    Io {
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
}

impl ImageError {
    pub(crate) fn invalid(reference: &str, reason: impl std::fmt::Display) -> Self {
        ImageError::Invalid { reference: reference.to_string(), reason: reason.to_string() }
    }
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        ImageError::Io { path: path.display().to_string(), source }
    }
}

/// What every image operation answers.
pub type Result<T> = std::result::Result<T, ImageError>;

/// How a sandbox of this image runs, from the image's config.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct RunConfig {
    /// `KEY=value` entries.
    pub env: Vec<String>,
    /// The image's working directory.
    pub working_dir: Option<String>,
    /// The image's entrypoint.
    pub entrypoint: Vec<String>,
    /// The image's command.
    pub cmd: Vec<String>,
    /// The user the image runs as.
    pub user: Option<String>,
}

/// A resolved image, ready to be mounted.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    /// The image as named.
    pub reference: String,
    /// The manifest digest, or the directory for plain roots.
    pub id: String,
    /// The read-only lower layer of the sandbox's root.
    pub root: PathBuf,
    /// Host paths bound read-only into the sandbox: (source, destination).
    pub ro_binds: Vec<(PathBuf, PathBuf)>,
    /// How the image runs.
    pub config: RunConfig,
}

/// Images unpacked into a cache directory, shared by sandboxes.
pub struct ImageStore {
    cache: PathBuf,
    registry: RegistryOptions,
    /// Resolved references, so that repeated creates cost nothing.
    resolved: Mutex<HashMap<String, Image>>,
    /// One unpack at a time per digest.
    unpacking: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl ImageStore {
    /// A store caching under `cache`, pulling with `registry`'s options.
    pub fn new(cache: impl Into<PathBuf>, registry: RegistryOptions) -> Result<Self> {
        let cache = cache.into();
        for sub in ["rootfs", "blobs", "tmp"] {
            let dir = cache.join(sub);
            std::fs::create_dir_all(&dir).map_err(|e| ImageError::io(&dir, e))?;
        }
        // Half-finished unpacks from a crash.
        let tmp = cache.join("tmp");
        if let Ok(entries) = std::fs::read_dir(&tmp) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        Ok(ImageStore { cache, registry, resolved: Mutex::new(HashMap::new()), unpacking: Mutex::new(HashMap::new()) })
    }

    /// One async lock per key (a reference, a digest).
    fn lock_for(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.unpacking
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(())))
            .clone()
    }

    /// Where images are cached.
    pub fn cache_dir(&self) -> &Path {
        &self.cache
    }

    /// The image `reference` names, pulled or unpacked if not cached yet.
    pub async fn resolve(&self, reference: &str) -> Result<Image> {
        if let Some(image) = self.resolved.lock().unwrap_or_else(|p| p.into_inner()).get(reference) {
            return Ok(image.clone());
        }
        // Concurrent first uses of one reference resolve it once; the others wait, then find it.
        let lock = self.lock_for(&format!("ref:{reference}"));
        let _guard = lock.lock().await;
        if let Some(image) = self.resolved.lock().unwrap_or_else(|p| p.into_inner()).get(reference) {
            return Ok(image.clone());
        }
        let image = self.resolve_uncached(reference).await?;
        self.resolved.lock().unwrap_or_else(|p| p.into_inner()).insert(reference.to_string(), image.clone());
        Ok(image)
    }

    async fn resolve_uncached(&self, reference: &str) -> Result<Image> {
        let trimmed = reference.trim();
        if trimmed.is_empty() {
            return Err(ImageError::invalid(reference, "empty image reference"));
        }
        if trimmed == "host" {
            return host::host_image(&self.cache);
        }
        let (scheme, rest) = match trimmed.split_once(':') {
            Some((s @ ("dir" | "oci" | "oci-archive" | "docker-archive"), rest)) => (Some(s), rest),
            _ => (None, trimmed),
        };
        let looks_like_path =
            scheme.is_some() || rest.starts_with('/') || rest.starts_with("./") || rest.starts_with("../");
        if !looks_like_path {
            return registry::pull(self, reference).await;
        }
        // `oci:/path:tag` names one image of a layout.
        let (path, tag) = match (scheme, rest.rsplit_once(':')) {
            (Some("oci"), Some((p, t))) if !t.contains('/') => (PathBuf::from(p), Some(t.to_string())),
            _ => (PathBuf::from(rest), None),
        };
        let path = std::fs::canonicalize(&path)
            .map_err(|e| ImageError::invalid(reference, format!("{}: {e}", path.display())))?;
        if path.is_file() {
            return archive::resolve_archive(self, reference, &path).await;
        }
        if !path.is_dir() {
            return Err(ImageError::invalid(
                reference,
                format!("{} is neither a directory nor a tar file", path.display()),
            ));
        }
        if layout::is_layout(&path) || layout::is_docker_save(&path) {
            let parsed = layout::read(&path, tag.as_deref()).map_err(|e| ImageError::invalid(reference, e))?;
            return self.unpacked(reference, parsed).await;
        }
        if scheme == Some("oci") {
            return Err(ImageError::invalid(reference, format!("{} has no oci-layout file", path.display())));
        }
        Ok(Image {
            reference: reference.to_string(),
            id: path.display().to_string(),
            root: path,
            ro_binds: Vec::new(),
            config: RunConfig::default(),
        })
    }

    /// Makes sure the layers of `parsed` are unpacked, once, and returns the image.
    pub(crate) async fn unpacked(&self, reference: &str, parsed: layout::ParsedImage) -> Result<Image> {
        let key = parsed.manifest_digest.replace(':', "-");
        let root = self.cache.join("rootfs").join(&key);
        let lock = self.lock_for(&key);
        let _guard = lock.lock().await;
        if !root.exists() {
            let staging = self.cache.join("tmp").join(format!("{key}.{}", std::process::id()));
            let layers = parsed.layers.clone();
            let staging2 = staging.clone();
            let reference2 = reference.to_string();
            tokio::task::spawn_blocking(move || {
                layers::unpack_all(&reference2, &layers, &staging2)?;
                add_mount_points(&staging2)
            })
            .await
            .map_err(|e| ImageError::invalid(reference, format!("unpack task failed: {e}")))??;
            if let Err(e) = std::fs::rename(&staging, &root) {
                // Another host process sharing the cache finished the same image first.
                let _ = std::fs::remove_dir_all(&staging);
                if !root.is_dir() {
                    return Err(ImageError::io(&root, e));
                }
            }
            tracing::info!(image = reference, digest = %parsed.manifest_digest, "unpacked image");
        }
        Ok(Image {
            reference: reference.to_string(),
            id: parsed.manifest_digest,
            root,
            ro_binds: Vec::new(),
            config: parsed.config,
        })
    }
}

/// Creates the points every sandbox mounts on (/proc, /dev, the agent's file) in an image's
/// root, so that a sandbox start does not have to create them in its writable layer.
pub(crate) fn add_mount_points(root: &Path) -> Result<()> {
    for dir in ["proc", "dev", ".orchard", "tmp"] {
        let path = root.join(dir);
        if std::fs::symlink_metadata(&path).is_err() {
            std::fs::create_dir_all(&path).map_err(|e| ImageError::io(&path, e))?;
        }
    }
    let agent = root.join(".orchard/agent");
    if std::fs::symlink_metadata(&agent).is_err() {
        std::fs::write(&agent, b"").map_err(|e| ImageError::io(&agent, e))?;
    }
    Ok(())
}
