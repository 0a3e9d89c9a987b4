//! Building real OCI images for tests, without docker: a layer holding a static busybox.

use std::io::Write;
use std::path::Path;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::json;
use sha2::{Digest, Sha256};

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn write_blob(dir: &Path, bytes: &[u8]) -> String {
    let digest = sha(bytes);
    std::fs::write(dir.join("blobs/sha256").join(&digest), bytes).expect("blob");
    format!("sha256:{digest}")
}

/// A gzip layer with busybox as /bin/busybox, /bin/sh and friends, plus `files`.
pub fn busybox_layer(files: &[(&str, &[u8])]) -> Vec<u8> {
    let busybox = std::fs::read("/bin/busybox").expect("busybox-static is installed (cargo xtask setup)");
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    let mut dir = |name: &str| {
        let mut h = header();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        tar.append_data(&mut h, name, std::io::empty()).expect("dir");
    };
    for d in ["bin", "etc", "tmp", "app", "root"] {
        dir(d);
    }
    let mut h = header();
    h.set_mode(0o755);
    h.set_size(busybox.len() as u64);
    tar.append_data(&mut h, "bin/busybox", busybox.as_slice()).expect("busybox");
    for applet in ["sh", "ls", "cat", "echo", "env", "pwd", "sleep", "ps", "id", "true", "wc", "head", "ip", "kill"] {
        let mut h = header();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        tar.append_link(&mut h, format!("bin/{applet}"), "busybox").expect("link");
    }
    for (name, content) in files {
        let mut h = header();
        h.set_mode(0o644);
        h.set_size(content.len() as u64);
        tar.append_data(&mut h, name, *content).expect("file");
    }
    tar.into_inner().expect("tar").finish().expect("gzip")
}

/// An OCI image layout at `dir` with the given layers (applied in order) and config.
pub fn oci_layout(dir: &Path, layers: &[Vec<u8>], env: &[&str], workdir: &str, tag: &str) {
    std::fs::create_dir_all(dir.join("blobs/sha256")).expect("layout dir");
    std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    let layer_descs: Vec<_> = layers
        .iter()
        .map(|l| json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": write_blob(dir, l), "size": l.len()}))
        .collect();
    let config = json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env, "WorkingDir": workdir, "Cmd": ["sh"]},
        "rootfs": {"type": "layers", "diff_ids": []},
    });
    let config_bytes = serde_json::to_vec(&config).expect("config");
    let config_digest = write_blob(dir, &config_bytes);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config_bytes.len()},
        "layers": layer_descs,
    });
    let manifest_bytes = serde_json::to_vec(&manifest).expect("manifest");
    let manifest_digest = write_blob(dir, &manifest_bytes);
    let index = json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest_bytes.len(),
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    });
    let mut f = std::fs::File::create(dir.join("index.json")).expect("index");
    f.write_all(&serde_json::to_vec(&index).expect("index json")).expect("index write");
}

/// A layer that deletes `path` from lower layers (an OCI whiteout).
pub fn whiteout_layer(path: &str) -> Vec<u8> {
    let p = Path::new(path);
    let name = format!(
        "{}/.wh.{}",
        p.parent().map(|d| d.display().to_string()).unwrap_or_default(),
        p.file_name().expect("name").to_string_lossy()
    );
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    let mut h = header();
    h.set_mode(0o644);
    h.set_size(0);
    tar.append_data(&mut h, name.trim_start_matches('/'), std::io::empty()).expect("whiteout");
    tar.into_inner().expect("tar").finish().expect("gzip")
}

/// A header with the numeric fields that real image layers always carry.
fn header() -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    h
}
