//! The `host` image: the host's own programs, read-only, under a minimal root of our making.
//!
//! Good for tests and quick starts: nothing to pull, every tool the host has. The sandbox still
//! sees none of the host's files outside /usr, /bin, /sbin, /lib*, and a handful from /etc.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::{Image, ImageError, Result, RunConfig};

/// Top-level host directories that programs need.
const PROGRAM_DIRS: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// Files copied from the host's /etc (a copy: the sandbox may edit its own).
const ETC_FILES: &[&str] = &[
    "passwd",
    "group",
    "hosts",
    "nsswitch.conf",
    "resolv.conf",
    "ld.so.cache",
    "ld.so.conf",
    "localtime",
    "mime.types",
];
/// /etc directories copied too (certificates, alternatives symlinks, the loader's config). A
/// copy, not a bind: they are small, and every bind mount costs each sandbox start a mount, a
/// read-only remount and a parse of its mount table.
const ETC_DIRS: &[&str] = &[
    "ssl",
    "ca-certificates",
    "alternatives",
    "ld.so.conf.d",
    "profile.d",
    // What desktop apps read: fontconfig (text renders in the fonts asked for), LibreOffice's
    // registry (it aborts without it), X and XDG defaults, GTK's settings.
    "fonts",
    "libreoffice",
    "X11",
    "xdg",
    "gtk-3.0",
];

pub(crate) fn host_image(cache: &Path) -> Result<Image> {
    // Versioned: a skeleton from an older layout is rebuilt, not reused.
    let skeleton = cache.join("host-skeleton-v4");
    let mut ro_binds = Vec::new();
    let staging = cache.join("tmp").join(format!("host-skeleton.{}", std::process::id()));
    let build = !skeleton.exists();
    if build {
        let _ = std::fs::remove_dir_all(&staging);
        make_dirs(&staging)?;
    }
    for name in PROGRAM_DIRS {
        let host = Path::new("/").join(name);
        match std::fs::symlink_metadata(&host) {
            // Merged /usr: /bin -> usr/bin and so on; mirror the link.
            Ok(m) if m.file_type().is_symlink() && build => {
                let target = std::fs::read_link(&host).map_err(|e| ImageError::io(&host, e))?;
                std::os::unix::fs::symlink(&target, staging.join(name)).map_err(|e| ImageError::io(&staging, e))?;
            }
            Ok(m) if m.file_type().is_symlink() => {}
            Ok(m) if m.is_dir() => ro_binds.push((host.clone(), host)),
            _ => {}
        }
    }
    if build {
        // Mount points exist in the (shared, read-only) lower layer, so that starting a sandbox
        // creates no directory in its own writable layer.
        for (_, dst) in &ro_binds {
            let point = staging.join(dst.strip_prefix("/").unwrap_or(dst));
            std::fs::create_dir_all(&point).map_err(|e| ImageError::io(&point, e))?;
        }
        crate::add_mount_points(&staging)?;
        for name in ETC_DIRS {
            let host = Path::new("/etc").join(name);
            if host.is_dir() {
                copy_tree(&host, &staging.join("etc").join(name))?;
            }
        }
        for name in ETC_FILES {
            let host = Path::new("/etc").join(name);
            if host.is_file() {
                std::fs::copy(&host, staging.join("etc").join(name)).map_err(|e| ImageError::io(&host, e))?;
            }
        }
        if std::fs::rename(&staging, &skeleton).is_err() {
            // Another host process built it first.
            let _ = std::fs::remove_dir_all(&staging);
        }
    }
    Ok(Image {
        reference: "host".into(),
        id: "host".into(),
        root: skeleton,
        ro_binds,
        config: RunConfig {
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            working_dir: None,
            entrypoint: vec![],
            cmd: vec![],
            user: None,
        },
    })
}

fn make_dirs(root: &Path) -> Result<()> {
    let dirs: &[(&str, u32)] = &[
        ("", 0o755),
        ("etc", 0o755),
        ("tmp", 0o1777),
        ("var", 0o755),
        ("var/tmp", 0o1777),
        ("root", 0o700),
        ("home", 0o755),
        ("run", 0o755),
        ("opt", 0o755),
        ("srv", 0o755),
        ("mnt", 0o755),
        ("workspace", 0o755),
    ];
    for (dir, mode) in dirs {
        let path: PathBuf = root.join(dir);
        std::fs::create_dir_all(&path).map_err(|e| ImageError::io(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| ImageError::io(&path, e))?;
    }
    Ok(())
}

/// Copies a directory tree, keeping symlinks as symlinks. What this user may not read (such as
/// /etc/ssl/private without root) is left out: a sandbox has no business with it anyway.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| ImageError::io(to, e))?;
    let entries = match std::fs::read_dir(from) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => return Ok(()),
        Err(e) => return Err(ImageError::io(from, e)),
    };
    for entry in entries.flatten() {
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type().map_err(|e| ImageError::io(&src, e))?;
        if kind.is_symlink() {
            let target = std::fs::read_link(&src).map_err(|e| ImageError::io(&src, e))?;
            std::os::unix::fs::symlink(target, &dst).map_err(|e| ImageError::io(&dst, e))?;
        } else if kind.is_dir() {
            copy_tree(&src, &dst)?;
        } else if kind.is_file() {
            match std::fs::copy(&src, &dst) {
                Err(e) if e.kind() != std::io::ErrorKind::PermissionDenied => return Err(ImageError::io(&src, e)),
                _ => {}
            }
        }
    }
    Ok(())
}
