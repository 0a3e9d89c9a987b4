//! Building real OCI images for tests, without docker: a layer holding a static busybox.

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// An image's blobs: gzip layers, its config and its OCI manifest.
pub struct TestImage {
    pub layers: Vec<Vec<u8>>,
    pub config: Vec<u8>,
    pub manifest: Vec<u8>,
}

impl TestImage {
    pub fn new(layers: Vec<Vec<u8>>, env: &[&str], workdir: &str) -> TestImage {
        let config = json!({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": env, "WorkingDir": workdir, "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": []},
        });
        let config = serde_json::to_vec(&config).expect("config");
        let layer_descs: Vec<_> = layers
            .iter()
            .map(|l| json!({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": format!("sha256:{}", sha(l)), "size": l.len()}))
            .collect();
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": format!("sha256:{}", sha(&config)), "size": config.len()},
            "layers": layer_descs,
        });
        TestImage { layers, config, manifest: serde_json::to_vec(&manifest).expect("manifest") }
    }

    /// Writes an OCI image layout at `dir`, the image tagged `tag`.
    pub fn write_layout(&self, dir: &Path, tag: &str) {
        std::fs::create_dir_all(dir.join("blobs/sha256")).expect("layout dir");
        std::fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
        for layer in &self.layers {
            write_blob(dir, layer);
        }
        write_blob(dir, &self.config);
        let manifest_digest = write_blob(dir, &self.manifest);
        let index = json!({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest,
                "size": self.manifest.len(),
                "annotations": {"org.opencontainers.image.ref.name": tag},
            }],
        });
        let mut f = std::fs::File::create(dir.join("index.json")).expect("index");
        f.write_all(&serde_json::to_vec(&index).expect("index json")).expect("index write");
    }

    /// Writes what `docker save` writes: manifest.json, the config and uncompressed layer tars.
    pub fn write_docker_save(&self, archive: &Path) {
        let mut tar = tar::Builder::new(Vec::new());
        let mut add = |name: &str, bytes: &[u8]| {
            let mut h = header();
            h.set_mode(0o644);
            h.set_size(bytes.len() as u64);
            tar.append_data(&mut h, name, bytes).expect("entry");
        };
        let config_name = format!("{}.json", sha(&self.config));
        add(&config_name, &self.config);
        let mut layer_names = Vec::new();
        for layer in &self.layers {
            let mut plain = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(layer.as_slice()), &mut plain)
                .expect("gunzip");
            let name = format!("{}/layer.tar", sha(&plain));
            add(&name, &plain);
            layer_names.push(name);
        }
        let manifest = json!([{"Config": config_name, "RepoTags": ["test/busybox:latest"], "Layers": layer_names}]);
        add("manifest.json", &serde_json::to_vec(&manifest).expect("manifest"));
        std::fs::write(archive, tar.into_inner().expect("tar")).expect("archive");
    }

    /// Pushes the image to a registry over its HTTP API.
    pub async fn push(&self, client: &reqwest::Client, registry: &str, name: &str, tag: &str) {
        for blob in self.layers.iter().chain(std::iter::once(&self.config)) {
            let start =
                client.post(format!("http://{registry}/v2/{name}/blobs/uploads/")).send().await.expect("upload start");
            assert_eq!(start.status(), 202, "{:?}", start.text().await);
            let location = start.headers()["location"].to_str().expect("location").to_string();
            let url = if location.starts_with("http") { location } else { format!("http://{registry}{location}") };
            let sep = if url.contains('?') { '&' } else { '?' };
            let put = client
                .put(format!("{url}{sep}digest=sha256:{}", sha(blob)))
                .body(blob.clone())
                .send()
                .await
                .expect("upload");
            assert_eq!(put.status(), 201, "{:?}", put.text().await);
        }
        let put = client
            .put(format!("http://{registry}/v2/{name}/manifests/{tag}"))
            .header("content-type", "application/vnd.oci.image.manifest.v1+json")
            .body(self.manifest.clone())
            .send()
            .await
            .expect("manifest");
        assert_eq!(put.status(), 201, "{:?}", put.text().await);
    }
}

/// Tars a directory (an OCI layout becomes an OCI archive).
pub fn tar_dir(dir: &Path) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.append_dir_all(".", dir).expect("tar dir");
    tar.into_inner().expect("tar")
}

/// An OCI image layout at `dir` with the given layers (applied in order) and config.
pub fn oci_layout(dir: &Path, layers: &[Vec<u8>], env: &[&str], workdir: &str, tag: &str) {
    TestImage::new(layers.to_vec(), env, workdir).write_layout(dir, tag);
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

/// A real registry (`docker-registry`) on a loopback port, stopped on drop.
pub struct Registry {
    child: Child,
    pub addr: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `docker-registry` on a free loopback port. The port is chosen by binding and
/// releasing it, so another process may take it first: then the registry exits (or something
/// else answers there), and it is started again on another port — a test must never push to
/// whatever else listens there.
pub fn start_registry() -> Registry {
    for _ in 0..5 {
        if let Some(registry) = try_start_registry() {
            return registry;
        }
    }
    panic!("docker-registry did not start on any of 5 free ports");
}

fn try_start_registry() -> Option<Registry> {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("docker-registry is installed (cargo xtask setup)");
    let mut registry = Registry { child, addr, _dir: dir };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if registry.child.try_wait().ok().flatten().is_some() {
            // It could not listen (the port was taken): `Registry`'s drop reaps it.
            return None;
        }
        if let Some(answer) = registry_answer(&registry.addr) {
            // Ours, or another server that took the port first.
            return answer.then_some(registry);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("docker-registry did not start within 10 s");
}

/// Whether what listens on `addr` is a registry (`/v2/` answers with the distribution API's
/// header); `None` while nothing accepts.
fn registry_answer(addr: &str) -> Option<bool> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    if stream.write_all(b"GET /v2/ HTTP/1.0\r\nHost: registry\r\n\r\n").is_err() {
        return Some(false);
    }
    let mut answer = Vec::new();
    let _ = stream.take(64 * 1024).read_to_end(&mut answer);
    Some(String::from_utf8_lossy(&answer).to_ascii_lowercase().contains("docker-distribution-api-version"))
}

/// A gzip layer of files owned by the given (uid, gid): `(path, uid, gid, content)`.
pub fn owned_files_layer(files: &[(&str, u64, u64, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(GzEncoder::new(Vec::new(), Compression::fast()));
    for (name, uid, gid, content) in files {
        let mut h = header();
        h.set_mode(0o644);
        h.set_uid(*uid);
        h.set_gid(*gid);
        h.set_size(content.len() as u64);
        tar.append_data(&mut h, name, *content).expect("file");
    }
    tar.into_inner().expect("tar").finish().expect("gzip")
}
