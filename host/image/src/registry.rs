//! Pulling from a registry with `oci-client`.

use std::path::PathBuf;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::manifest::OciImageManifest;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

use crate::layers::Layer;
use crate::layout::{ParsedImage, run_config};
use crate::{Image, ImageError, ImageStore, Result, RunConfig};

/// How to reach registries.
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Registries spoken to over plain HTTP (e.g. `127.0.0.1:5000`).
    pub insecure: Vec<String>,
    /// Basic credentials, applied to every registry.
    pub username: Option<String>,
    /// The registry password or token.
    pub password: Option<String>,
}

/// The image's run config (entrypoint, cmd, env, workdir, user) from its registry, without
/// pulling any layer: what the Kubernetes backend needs to start the image's own command
/// behind the agent.
pub async fn registry_run_config(options: &RegistryOptions, reference: &str) -> Result<RunConfig> {
    let (_, _, _, config) = manifest_and_config(options, reference).await?;
    Ok(run_config(&config))
}

async fn manifest_and_config(
    options: &RegistryOptions,
    reference: &str,
) -> Result<(Client, Reference, (OciImageManifest, String), oci_client::config::ConfigFile)> {
    let fail = |reason: String| ImageError::Pull { reference: reference.to_string(), reason };
    let parsed: Reference =
        reference.parse().map_err(|e| ImageError::invalid(reference, format!("not an image reference: {e}")))?;
    // rustls needs a process-wide crypto provider; installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client = Client::new(ClientConfig {
        protocol: if options.insecure.is_empty() {
            ClientProtocol::Https
        } else {
            ClientProtocol::HttpsExcept(options.insecure.clone())
        },
        // A registry that accepts the connection and then says nothing must not hang a create:
        // no read may stall longer than this (a slow layer keeps arriving, so it is not cut).
        connect_timeout: Some(std::time::Duration::from_secs(15)),
        read_timeout: Some(std::time::Duration::from_secs(60)),
        ..Default::default()
    });
    let auth = match (&options.username, &options.password) {
        (Some(u), Some(p)) => RegistryAuth::Basic(u.clone(), p.clone()),
        _ => RegistryAuth::Anonymous,
    };
    let (manifest, digest, config_json) =
        client.pull_manifest_and_config(&parsed, &auth).await.map_err(|e| fail(e.to_string()))?;
    let config: oci_client::config::ConfigFile =
        serde_json::from_str(&config_json).map_err(|e| fail(format!("image config: {e}")))?;
    Ok((client, parsed, (manifest, digest), config))
}

pub(crate) async fn pull(store: &ImageStore, reference: &str) -> Result<Image> {
    let fail = |reason: String| ImageError::Pull { reference: reference.to_string(), reason };
    let (client, parsed, (manifest, digest), config) = manifest_and_config(&store.registry, reference).await?;
    let blobs = store.cache_dir().join("blobs");
    let mut layers = Vec::new();
    for descriptor in &manifest.layers {
        let hex = descriptor
            .digest
            .strip_prefix("sha256:")
            .ok_or_else(|| fail(format!("unsupported digest {}", descriptor.digest)))?;
        let path: PathBuf = blobs.join(hex);
        if !path.exists() {
            let partial = blobs.join(format!("{hex}.partial"));
            let file = tokio::fs::File::create(&partial).await.map_err(|e| ImageError::io(&partial, e))?;
            // pull_blob checks the digest as it writes.
            client
                .pull_blob(&parsed, descriptor, file)
                .await
                .map_err(|e| fail(format!("layer {}: {e}", descriptor.digest)))?;
            tokio::fs::rename(&partial, &path).await.map_err(|e| ImageError::io(&path, e))?;
        }
        layers.push(Layer { path, digest: Some(descriptor.digest.clone()) });
    }
    store.unpacked(reference, ParsedImage { manifest_digest: digest, layers, config: run_config(&config) }).await
}
