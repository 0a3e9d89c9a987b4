//! Which images an API client may name.
//!
//! Over the API a local path as an image is a door into the host's filesystem (`"/"` is the
//! host's root), and a registry reference is a request the server makes on its own network.
//! So: registry references only to allowed registries; `host` only when the operator allows it;
//! names the operator registered; and local paths only when they resolve (symlinks and `..`
//! followed) to somewhere under one of the operator's image roots.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::AdmissionError;

/// Registries allowed when the operator names none: the public ones images usually come from.
pub const DEFAULT_REGISTRIES: &[&str] = &[
    "docker.io",
    "ghcr.io",
    "quay.io",
    "gcr.io",
    "mirror.gcr.io",
    "registry.k8s.io",
    "mcr.microsoft.com",
    "public.ecr.aws",
    "nvcr.io",
];

/// Local image forms: a scheme prefix, or a path.
const LOCAL_SCHEMES: &[&str] = &["dir", "oci", "oci-archive", "docker-archive"];

#[derive(Debug, Clone)]
/// Which images an API client may name, and what each becomes (see the module doc).
pub struct ImagePolicy {
    /// `host` (the host's /usr, /bin and /lib read-only) may be used.
    pub allow_host: bool,
    /// Canonical directories under which local images (rootfs directories, OCI layouts and
    /// archives) may be named.
    roots: Vec<PathBuf>,
    /// Names the operator registered, and the (local or registry) reference each stands for.
    registered: BTreeMap<String, String>,
    /// Registries pulls may go to (`host` or `host:port`, lower case); `*` allows any.
    registries: Vec<String>,
}

impl Default for ImagePolicy {
    fn default() -> Self {
        ImagePolicy {
            allow_host: true,
            roots: Vec::new(),
            registered: BTreeMap::new(),
            registries: DEFAULT_REGISTRIES.iter().map(|r| r.to_string()).collect(),
        }
    }
}

impl ImagePolicy {
    /// Adds a directory under which local images may be named. It must exist.
    pub fn add_root(&mut self, dir: &Path) -> Result<(), String> {
        let canonical = std::fs::canonicalize(dir).map_err(|e| format!("image root {}: {e}", dir.display()))?;
        if !canonical.is_dir() {
            return Err(format!("image root {} is not a directory", dir.display()));
        }
        if canonical == Path::new("/") {
            return Err("image root /: the host's root cannot be an image root".into());
        }
        self.roots.push(canonical);
        Ok(())
    }

    /// Registers `name` (what clients send) for `reference` (what the backend uses; any form).
    pub fn register(&mut self, name: &str, reference: &str) -> Result<(), String> {
        if name.trim().is_empty() || reference.trim().is_empty() {
            return Err(format!("image {name:?}={reference:?}: both the name and the reference are needed"));
        }
        self.registered.insert(name.to_string(), reference.to_string());
        Ok(())
    }

    /// Replaces the allowed registries (`*` allows any).
    pub fn set_registries(&mut self, registries: &[String]) {
        self.registries = registries.iter().map(|r| r.trim().to_ascii_lowercase()).filter(|r| !r.is_empty()).collect();
    }

    /// Allows one more registry (e.g. the operator's own insecure test registry).
    pub fn allow_registry(&mut self, registry: &str) {
        let registry = registry.trim().to_ascii_lowercase();
        if !self.registries.contains(&registry) {
            self.registries.push(registry);
        }
    }

    /// The registries pulls may go to.
    pub fn registries(&self) -> &[String] {
        &self.registries
    }

    /// The reference the backend should use for `image`, or why it is refused.
    pub fn admit(&self, image: &str) -> Result<String, AdmissionError> {
        let image = image.trim();
        if image.is_empty() {
            return Err(AdmissionError::refused("image", "must not be empty"));
        }
        if let Some(reference) = self.registered.get(image) {
            return Ok(reference.clone());
        }
        if image == "host" {
            return if self.allow_host {
                Ok(image.to_string())
            } else {
                Err(AdmissionError::refused("image", "the host image is not allowed on this server"))
            };
        }
        if let Some(local) = LocalImage::parse(image) {
            return self.admit_local(image, local);
        }
        self.admit_registry(image)
    }

    fn admit_local(&self, image: &str, local: LocalImage<'_>) -> Result<String, AdmissionError> {
        let refuse = |why: String| AdmissionError::refused("image", format!("{image:?}: {why}"));
        if self.roots.is_empty() {
            return Err(refuse(
                "local paths are not images a client may use on this server (use a registry reference \
                 or an image the operator registered)"
                    .into(),
            ));
        }
        if !local.path.starts_with('/') {
            return Err(refuse("a local image path must be absolute".into()));
        }
        // Symlinks and `..` are resolved before the check, so neither can lead out of a root.
        let canonical =
            std::fs::canonicalize(local.path).map_err(|_| refuse("no such image under the image roots".into()))?;
        if !self.roots.iter().any(|root| canonical.starts_with(root) && canonical != *root) {
            return Err(refuse("not under any of this server's image roots".into()));
        }
        let path = canonical.display();
        Ok(match (local.scheme, local.tag) {
            (Some(scheme), Some(tag)) => format!("{scheme}:{path}:{tag}"),
            (Some(scheme), None) => format!("{scheme}:{path}"),
            (None, _) => path.to_string(),
        })
    }

    fn admit_registry(&self, image: &str) -> Result<String, AdmissionError> {
        let reference: oci_client::Reference = image
            .parse()
            .map_err(|e| AdmissionError::refused("image", format!("{image:?} is not an image reference: {e}")))?;
        let registry = reference.registry().to_ascii_lowercase();
        let allowed = self.registries.iter().any(|r| r == "*" || *r == registry)
            // docker.io is also known by the names of its endpoints.
            || (["index.docker.io", "registry-1.docker.io"].contains(&registry.as_str())
                && self.registries.iter().any(|r| r == "docker.io"));
        if !allowed {
            return Err(AdmissionError::refused(
                "image",
                format!(
                    "{image:?}: registry {registry} is not one this server pulls from (allowed: {})",
                    self.registries.join(", ")
                ),
            ));
        }
        Ok(image.to_string())
    }
}

/// A local image reference taken apart: `dir:/p`, `oci:/p[:tag]`, `oci-archive:/p`,
/// `docker-archive:/p`, or a bare path.
struct LocalImage<'a> {
    scheme: Option<&'a str>,
    path: &'a str,
    tag: Option<&'a str>,
}

impl<'a> LocalImage<'a> {
    fn parse(image: &'a str) -> Option<LocalImage<'a>> {
        if let Some((scheme, rest)) = image.split_once(':')
            && LOCAL_SCHEMES.contains(&scheme)
        {
            let (path, tag) = match (scheme, rest.rsplit_once(':')) {
                ("oci", Some((p, t))) if !t.contains('/') => (p, Some(t)),
                _ => (rest, None),
            };
            return Some(LocalImage { scheme: Some(scheme), path, tag });
        }
        let pathish = image.starts_with('/')
            || image.starts_with("./")
            || image.starts_with("../")
            || image == "."
            || image == "..";
        pathish.then_some(LocalImage { scheme: None, path: image, tag: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &ImagePolicy, image: &str) -> String {
        match policy.admit(image) {
            Err(AdmissionError::Refused { field: "image", reason }) => reason,
            other => panic!("{image}: expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn host_paths_are_refused_without_image_roots() {
        let policy = ImagePolicy::default();
        for image in
            ["/", "/etc", "dir:/", "oci:/var/lib", "oci-archive:/x.tar", "docker-archive:/x.tar", "./x", "../x"]
        {
            assert!(refused(&policy, image).contains("not images a client may use"), "{image}");
        }
    }

    #[test]
    fn local_images_under_a_root_are_admitted_and_escapes_are_not() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("images");
        std::fs::create_dir_all(root.join("alpine/etc")).unwrap();
        std::fs::write(root.join("app.tar"), b"").unwrap();
        std::os::unix::fs::symlink("/", root.join("escape")).unwrap();
        std::os::unix::fs::symlink(root.join("alpine"), root.join("inside")).unwrap();
        let mut policy = ImagePolicy::default();
        policy.add_root(&root).unwrap();
        let canonical = std::fs::canonicalize(&root).unwrap();
        let alpine = canonical.join("alpine").display().to_string();
        assert_eq!(policy.admit(&root.join("alpine").display().to_string()).unwrap(), alpine);
        assert_eq!(policy.admit(&format!("dir:{}", root.join("inside").display())).unwrap(), format!("dir:{alpine}"));
        assert_eq!(
            policy.admit(&format!("oci:{}:v1", root.join("alpine").display())).unwrap(),
            format!("oci:{alpine}:v1")
        );
        for escape in [
            root.join("escape").display().to_string(),
            format!("dir:{}/escape/etc", root.display()),
            format!("{}/alpine/../..", root.display()),
            format!("{}/../..", root.display()),
            root.display().to_string(),
            "/etc".into(),
            "alpine".replace("alpine", "relative/x"),
        ] {
            let image = if escape.starts_with("relative") { format!("dir:{escape}") } else { escape };
            let reason = refused(&policy, &image);
            assert!(reason.contains("image roots") || reason.contains("absolute"), "{image}: {reason}");
        }
    }

    #[test]
    fn registries_outside_the_allowlist_are_refused() {
        let mut policy = ImagePolicy::default();
        assert_eq!(policy.admit("python:3.12").unwrap(), "python:3.12");
        assert_eq!(policy.admit("ghcr.io/org/app:1").unwrap(), "ghcr.io/org/app:1");
        for image in ["127.0.0.1:5000/x:1", "localhost:5000/x", "10.0.0.5/app", "metadata.internal/x:1"] {
            assert!(refused(&policy, image).contains("not one this server pulls from"), "{image}");
        }
        policy.allow_registry("127.0.0.1:5000");
        assert_eq!(policy.admit("127.0.0.1:5000/x:1").unwrap(), "127.0.0.1:5000/x:1");
        assert!(refused(&policy, "Not A Ref!").contains("not an image reference"));
    }

    #[test]
    fn registered_names_and_the_host_image_follow_the_operator() {
        let mut policy = ImagePolicy::default();
        policy.register("swe-base", "/srv/images/swe-base").unwrap();
        assert_eq!(policy.admit("swe-base").unwrap(), "/srv/images/swe-base");
        assert_eq!(policy.admit("host").unwrap(), "host");
        policy.allow_host = false;
        assert!(refused(&policy, "host").contains("not allowed"));
    }
}
