//! Reading an image out of an OCI image layout, or out of a `docker save` directory.

use std::path::{Path, PathBuf};

use oci_client::config::ConfigFile;
use oci_client::manifest::{OciImageIndex, OciImageManifest};
use serde::Deserialize;

use crate::RunConfig;
use crate::layers::Layer;

pub(crate) struct ParsedImage {
    pub manifest_digest: String,
    pub layers: Vec<Layer>,
    pub config: RunConfig,
}

pub(crate) fn is_layout(dir: &Path) -> bool {
    dir.join("oci-layout").is_file() && dir.join("index.json").is_file()
}

pub(crate) fn is_docker_save(dir: &Path) -> bool {
    dir.join("manifest.json").is_file()
}

pub(crate) fn read(dir: &Path, tag: Option<&str>) -> Result<ParsedImage, String> {
    if is_layout(dir) { read_layout(dir, tag) } else { read_docker_save(dir) }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<(T, Vec<u8>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let value = serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((value, bytes))
}

pub(crate) fn blob_path(dir: &Path, digest: &str) -> Result<PathBuf, String> {
    let (algo, hex) = digest.split_once(':').ok_or_else(|| format!("bad digest {digest:?}"))?;
    if algo != "sha256" || hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("unsupported digest {digest:?} (sha256 only)"));
    }
    Ok(dir.join("blobs").join(algo).join(hex))
}

fn read_layout(dir: &Path, tag: Option<&str>) -> Result<ParsedImage, String> {
    let (index, _): (OciImageIndex, _) = read_json(&dir.join("index.json"))?;
    let name_of = |e: &oci_client::manifest::ImageIndexEntry| {
        e.annotations.as_ref().and_then(|a| a.get("org.opencontainers.image.ref.name")).cloned()
    };
    let entry = match tag {
        Some(tag) => index.manifests.iter().find(|e| name_of(e).as_deref() == Some(tag)).ok_or_else(|| {
            let names: Vec<_> = index.manifests.iter().filter_map(name_of).collect();
            format!("no image tagged {tag:?} in the layout (tags: {})", names.join(", "))
        })?,
        None => match index.manifests.as_slice() {
            [one] => one,
            [] => return Err("the layout's index.json lists no image".into()),
            many => many
                .iter()
                .find(|e| e.platform.as_ref().is_none_or(|p| p.architecture.to_string() == "amd64"))
                .unwrap_or(&many[0]),
        },
    };
    let mut digest = entry.digest.clone();
    let (mut manifest_value, _): (serde_json::Value, _) = read_json(&blob_path(dir, &digest)?)?;
    // A nested index (multi-platform image): take the linux/amd64 entry.
    if manifest_value.get("manifests").is_some() {
        let nested: OciImageIndex = serde_json::from_value(manifest_value).map_err(|e| e.to_string())?;
        let pick = nested
            .manifests
            .iter()
            .find(|e| e.platform.as_ref().is_some_and(|p| p.architecture.to_string() == "amd64"))
            .or(nested.manifests.first())
            .ok_or("nested index lists no image")?;
        digest = pick.digest.clone();
        manifest_value = read_json(&blob_path(dir, &digest)?)?.0;
    }
    let manifest: OciImageManifest = serde_json::from_value(manifest_value).map_err(|e| format!("manifest: {e}"))?;
    let (config, _): (ConfigFile, _) = read_json(&blob_path(dir, &manifest.config.digest)?)?;
    let layers = manifest
        .layers
        .iter()
        .map(|l| Ok(Layer { path: blob_path(dir, &l.digest)?, digest: Some(l.digest.clone()) }))
        .collect::<Result<Vec<_>, String>>()?;
    Ok(ParsedImage { manifest_digest: digest, layers, config: run_config(&config) })
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerSaveEntry {
    config: String,
    layers: Vec<String>,
}

fn read_docker_save(dir: &Path) -> Result<ParsedImage, String> {
    let (entries, manifest_bytes): (Vec<DockerSaveEntry>, _) = read_json(&dir.join("manifest.json"))?;
    let entry = entries.first().ok_or("manifest.json lists no image")?;
    let inside = |name: &str| {
        if name.contains("..") || name.starts_with('/') {
            return Err(format!("manifest.json names {name:?} outside the archive"));
        }
        Ok(dir.join(name))
    };
    let (config, _): (ConfigFile, _) = read_json(&inside(&entry.config)?)?;
    let layers =
        entry.layers.iter().map(|l| Ok(Layer { path: inside(l)?, digest: None })).collect::<Result<_, String>>()?;
    use sha2::Digest;
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&manifest_bytes)));
    Ok(ParsedImage { manifest_digest: digest, layers, config: run_config(&config) })
}

pub(crate) fn run_config(file: &ConfigFile) -> RunConfig {
    let Some(c) = &file.config else { return RunConfig::default() };
    RunConfig {
        env: c.env.clone().unwrap_or_default(),
        working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
        entrypoint: c.entrypoint.clone().unwrap_or_default(),
        cmd: c.cmd.clone().unwrap_or_default(),
        user: c.user.clone().filter(|u| !u.is_empty()),
    }
}
