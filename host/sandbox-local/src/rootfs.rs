//! The sandbox's root, mounted by the launcher's child (real root, in the sandbox's private mount
//! namespace) before bubblewrap starts inside the sandbox's user namespace.
//!
//! - The image's lower layer (and the `host` image's read-only binds) id-mapped to the sandbox's
//!   user namespace, so that files owned by any uid in the image belong to the same uid inside
//!   (root's files to the sandbox's root), while on the host they stay as they are, shared by
//!   every sandbox of the image.
//! - The overlay: that lower, the sandbox's own upper and work directories.
//! - `/sys` as `docker run` has it: sysfs read-only (mounted here, in the sandbox's network
//!   namespace, so it shows the sandbox's interfaces), `/sys/firmware` masked, and
//!   `/sys/fs/cgroup` showing the sandbox's own cgroups read-only (JVMs, `nproc`, build tools
//!   size themselves from it).
//!
//! Everything mounted here belongs to a mount namespace owned by the host's user namespace: from
//! inside the sandbox these mounts are locked (no unmounting to see what is under them).

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MsFlags, mount};
use serde::{Deserialize, Serialize};

/// Where the launcher's child assembles the sandbox's root, in its own mount namespace: a tmpfs
/// over the host's /run, so that the path is one bubblewrap can resolve from inside the
/// sandbox's user namespace (whose root may not traverse the state directory).
pub const STAGE: &str = "/run";
/// The root, as bubblewrap finds it (it binds this as `/`).
pub const STAGED_ROOT: &str = "/run/orchard-root";
/// The agent binary, bound where bubblewrap finds it.
pub const STAGED_AGENT: &str = "/run/orchard-agent";
/// Where the assistant domain's mock services binary is staged, when it sits next to the agent.
pub const STAGED_MOCK_SERVICES: &str = "/run/orchard-mock-services";
/// The mock services' file name, beside the agent on the host and in every sandbox at
/// `/.orchard/bin/`.
pub const MOCK_SERVICES: &str = "orchard-mock-services";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RootSpec {
    /// The image's root directory (read-only, shared).
    pub lower: PathBuf,
    /// An empty directory where the id-mapped view of `lower` is mounted.
    pub mapped_lower: PathBuf,
    pub upper: PathBuf,
    pub work: PathBuf,
    /// With a disk limit: the layer's filesystem image, mounted (through a loop device) where
    /// `upper` and `work` are, before they are made.
    pub disk: Option<DiskMount>,
    /// Owner (host ids) and mode of the upper directory, which is the merged root's `/`: the
    /// sandbox's root and the image root's mode.
    pub upper_owner: Option<u32>,
    pub upper_mode: u32,
    /// Host directories bound read-only into the root: (source, destination inside).
    pub ro_binds: Vec<(PathBuf, PathBuf)>,
    /// The agent binary.
    pub agent: PathBuf,
    /// The sandbox's cgroup directories, by controller (`""` for a unified hierarchy).
    pub cgroups: Vec<(String, PathBuf)>,
    /// A forked child's starting layer (already owned by its ids), copied into `upper` once
    /// the disk is mounted.
    #[serde(default)]
    pub seed: Option<PathBuf>,
}

fn cstr(path: &Path) -> std::io::Result<CString> {
    CString::new(path.as_os_str().as_bytes()).map_err(|_| std::io::Error::other("a path contains a NUL byte"))
}

fn check(ret: libc::c_long) -> std::io::Result<libc::c_long> {
    if ret < 0 { Err(std::io::Error::last_os_error()) } else { Ok(ret) }
}

fn context(what: String) -> impl FnOnce(std::io::Error) -> std::io::Error {
    move |e| std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Mounts `source` at `target` as a recursive bind, read-only, id-mapped to `userns` when given.
fn bind(source: &Path, target: &Path, userns: Option<&OwnedFd>, read_only: bool) -> std::io::Result<()> {
    let Some(userns) = userns else {
        mount(Some(source), target, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)?;
        if read_only {
            let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
            mount(None::<&str>, target, None::<&str>, flags, None::<&str>)?;
        }
        return Ok(());
    };
    let source_c = cstr(source)?;
    let target_c = cstr(target)?;
    // SAFETY: plain system calls on valid C strings and descriptors.
    unsafe {
        let tree = check(libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source_c.as_ptr(),
            libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint,
        ))?;
        let tree = OwnedFd::from_raw_fd(tree as i32);
        let mut attr: libc::mount_attr = std::mem::zeroed();
        attr.attr_set = libc::MOUNT_ATTR_IDMAP | if read_only { libc::MOUNT_ATTR_RDONLY } else { 0 };
        attr.userns_fd = userns.as_raw_fd() as u64;
        check(libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        ))?;
        check(libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
    }
    Ok(())
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DiskMount {
    pub image: PathBuf,
    pub mount_point: PathBuf,
    /// The loop device holding the image.
    pub device: LoopDevice,
}

/// The loop device of a sandbox's disk.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum LoopDevice {
    /// The setup attaches the image: to this device (its own, derived from its slot: creates
    /// running at once never race for one; any free one when it is held), or to any free one.
    Attach(Option<u32>),
    /// The host attached it ahead (a stocked disk): the setup mounts this device.
    Attached(u32),
}

/// `struct loop_info64` and `struct loop_config` (linux/loop.h).
#[repr(C)]
struct LoopInfo64 {
    device: u64,
    inode: u64,
    rdevice: u64,
    offset: u64,
    sizelimit: u64,
    number: u32,
    encrypt_type: u32,
    encrypt_key_size: u32,
    flags: u32,
    file_name: [u8; 64],
    crypt_name: [u8; 64],
    encrypt_key: [u8; 32],
    init: [u64; 2],
}

#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
const LOOP_CTL_ADD: libc::c_ulong = 0x4C80;
/// The device frees itself when its last user (the mount) goes.
const LO_FLAGS_AUTOCLEAR: u32 = 4;

/// `/dev/loopN`.
pub(crate) fn loop_path(n: u32) -> PathBuf {
    PathBuf::from(format!("/dev/loop{n}"))
}

/// Attaches `image` to a free loop device; returns the device's number and an open descriptor
/// of it, which must stay open until the mount holds the device (auto-clear frees a device at
/// its last close).
pub(crate) fn attach_loop(image: &Path, index: Option<u32>) -> std::io::Result<(u32, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let open =
        |path: &Path| std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_CLOEXEC).open(path);
    let control = open(Path::new("/dev/loop-control"))?;
    let backing = open(image)?;
    // Our own device first; any free one when it is still held (by a sandbox being deleted).
    let mut candidates: Vec<Option<u32>> = index.map(Some).into_iter().collect();
    candidates.extend(std::iter::repeat_n(None, 256));
    for candidate in candidates {
        let n = match candidate {
            Some(n) => {
                // SAFETY: an ioctl with an integer argument on the loop control device.
                let added = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_ADD, n as libc::c_ulong) };
                if added < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                    continue;
                }
                n
            }
            None => {
                // SAFETY: an ioctl without arguments on the loop control device.
                let free = check(unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) } as libc::c_long)?;
                u32::try_from(free).map_err(std::io::Error::other)?
            }
        };
        let Ok(device) = open(&loop_path(n)) else { continue };
        // SAFETY: a zeroed plain-data struct, then an ioctl that reads it.
        let result = unsafe {
            let mut config: LoopConfig = std::mem::zeroed();
            config.fd = backing.as_raw_fd() as u32;
            // Not LO_FLAGS_DIRECT_IO: it would keep the layer's pages out of the host's cache
            // twice over, but attaching with it flushes the freshly copied image first (~8 ms).
            config.info.flags = LO_FLAGS_AUTOCLEAR;
            libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE, &config as *const LoopConfig)
        };
        if result == 0 {
            return Ok((n, device));
        }
        match std::io::Error::last_os_error().raw_os_error() {
            // Another sandbox holds it (or took it between GET_FREE and CONFIGURE).
            Some(libc::EBUSY) => continue,
            _ => return Err(std::io::Error::last_os_error()),
        }
    }
    Err(std::io::Error::other("no free loop device"))
}

/// Mounts the layer filesystem of a disk-limited sandbox.
fn mount_disk(disk: &DiskMount) -> std::io::Result<()> {
    let (n, _held) = match disk.device {
        LoopDevice::Attached(n) => (n, None),
        LoopDevice::Attach(index) => {
            let (n, held) = attach_loop(&disk.image, index)
                .map_err(context(format!("attaching {} to a loop device", disk.image.display())))?;
            (n, Some(held))
        }
    };
    let device = loop_path(n);
    mount(Some(&device), &disk.mount_point, Some("ext4"), MsFlags::MS_NOATIME, Some(crate::disk::MOUNT_OPTIONS))
        .map_err(std::io::Error::from)
        .map_err(context(format!("mounting {}", disk.image.display())))
}

/// Makes the directory a mount point needs, when the image lacks it.
fn ensure_dir(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(std::io::Error::other(format!("{} is not a directory", path.display()))),
        Err(_) => std::fs::create_dir_all(path),
    }
}

/// Assembles the root at [`STAGED_ROOT`], and binds the agent at [`STAGED_AGENT`].
pub fn mount_root(spec: &RootSpec, userns: Option<&OwnedFd>) -> std::io::Result<()> {
    if let Some(disk) = &spec.disk {
        mount_disk(disk)?;
    }
    for dir in [&spec.upper, &spec.work] {
        ensure_dir(dir)?;
    }
    if let Some(owner) = spec.upper_owner {
        std::os::unix::fs::chown(&spec.upper, Some(owner), Some(owner))?;
    }
    std::fs::set_permissions(&spec.upper, std::os::unix::fs::PermissionsExt::from_mode(spec.upper_mode))?;
    if let Some(seed) = &spec.seed {
        crate::fork::copy_tree(&seed.join("."), &spec.upper).map_err(std::io::Error::other)?;
    }
    let stage_flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("tmpfs"), STAGE, Some("tmpfs"), stage_flags, Some("mode=755,size=64k"))
        .map_err(std::io::Error::from)
        .map_err(context(format!("mounting a tmpfs on {STAGE}")))?;
    let target = Path::new(STAGED_ROOT);
    std::fs::create_dir(target)?;
    std::fs::write(STAGED_AGENT, b"")?;
    bind(&spec.agent, Path::new(STAGED_AGENT), None, true)
        .map_err(context(format!("binding {}", spec.agent.display())))?;
    // Every sandbox carries the mock services (an assistant task's entrypoint starts them), so
    // tasks need not copy the binary into their images.
    let mocks = spec.agent.with_file_name(MOCK_SERVICES);
    if mocks.is_file() {
        std::fs::write(STAGED_MOCK_SERVICES, b"")?;
        bind(&mocks, Path::new(STAGED_MOCK_SERVICES), None, true)
            .map_err(context(format!("binding {}", mocks.display())))?;
    }
    let lower = if userns.is_some() {
        bind(&spec.lower, &spec.mapped_lower, userns, true)
            .map_err(context(format!("id-mapping the image {}", spec.lower.display())))?;
        &spec.mapped_lower
    } else {
        &spec.lower
    };
    let options =
        format!("lowerdir={},upperdir={},workdir={}", lower.display(), spec.upper.display(), spec.work.display());
    mount(Some("overlay"), target, Some("overlay"), MsFlags::empty(), Some(options.as_str()))
        .map_err(std::io::Error::from)
        .map_err(context("mounting the overlay root".into()))?;
    for (source, dest) in &spec.ro_binds {
        let point = target.join(dest.strip_prefix("/").unwrap_or(dest));
        ensure_dir(&point)?;
        bind(source, &point, userns, true).map_err(context(format!("binding {}", source.display())))?;
    }
    mount_sys(target, spec).map_err(context("mounting /sys".into()))
}

fn mount_sys(root: &Path, spec: &RootSpec) -> std::io::Result<()> {
    let sys = root.join("sys");
    ensure_dir(&sys)?;
    let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("sysfs"), &sys, Some("sysfs"), ro, None::<&str>)?;
    for masked in ["firmware", "devices/virtual/powercap"] {
        let path = sys.join(masked);
        if path.is_dir() {
            mount(Some("tmpfs"), &path, Some("tmpfs"), ro, Some("size=0"))?;
        }
    }
    let cgroup = sys.join("fs/cgroup");
    if spec.cgroups.is_empty() || !cgroup.is_dir() {
        return Ok(());
    }
    if let [(name, dir)] = spec.cgroups.as_slice()
        && name.is_empty()
    {
        // Unified hierarchy: the sandbox's cgroup is the whole view.
        return bind(dir, &cgroup, None, true);
    }
    let rw = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(Some("tmpfs"), &cgroup, Some("tmpfs"), rw, Some("mode=755,size=64k"))?;
    for (name, dir) in &spec.cgroups {
        let point = cgroup.join(name);
        std::fs::create_dir_all(&point)?;
        bind(dir, &point, None, true)?;
    }
    if spec.cgroups.iter().any(|(n, _)| n == "cpu") {
        let _ = std::os::unix::fs::symlink("cpu", cgroup.join("cpuacct"));
        let _ = std::os::unix::fs::symlink("cpu", cgroup.join("cpu,cpuacct"));
    }
    mount(None::<&str>, &cgroup, None::<&str>, MsFlags::MS_REMOUNT | ro, Some("mode=755,size=64k"))?;
    Ok(())
}
