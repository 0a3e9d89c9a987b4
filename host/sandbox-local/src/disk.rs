//! Size limits on sandboxes' writable layers.
//!
//! A sandbox with a disk limit keeps its writable layer (the overlay's upper and work
//! directories) on a filesystem of its own: ext4 in a sparse file of exactly the limit's size,
//! attached through a loop device and mounted in the sandbox's private mount namespace by the
//! launcher's child (so the mount, and with it the loop device, goes when the sandbox's
//! processes do). A sandbox that writes past its limit gets ENOSPC from its own filesystem, and
//! the host's disk holds at most the limit (the file is sparse: it grows as the sandbox writes).
//!
//! Why not project quotas: they need the kernel's quota support for the filesystem holding the
//! layers (XFS_QUOTA, or QFMT_V2 for ext4), which not every kernel has — this machine's has
//! neither — while loop devices and ext4 are everywhere.
//!
//! Formatting costs ~15 ms, so each size is formatted once into a template, and a sandbox's
//! image is a sparse copy of it (a few MiB of metadata). The filesystems have no journal (a
//! sandbox's layer does not outlive a crash of its host) and are mounted with `noinit_itable`
//! (a sparse file's inode tables read as zeros already: nothing to initialise) and `nobarrier`:
//! for the same reason no write needs to reach the host's disk in order, and with barriers every
//! mount and unmount made the loop device fsync its backing file and flush the host's disk
//! (~1 ms an unmount measured alone, and queued behind other sandboxes' flushes in a storm).

use std::os::fd::AsRawFd;

use crate::disk_stock::{DiskStock, Prepared, STOCK_PER_SIZE};
use std::path::{Path, PathBuf};

/// Smallest limit that makes sense for a root filesystem's changes.
pub const MIN_DISK_BYTES: u64 = 16 << 20;
/// Mount options of a sandbox's layer filesystem.
pub const MOUNT_OPTIONS: &str = "noinit_itable,nobarrier";

pub struct Disks {
    templates: PathBuf,
    /// One template made at a time per size.
    making: std::sync::Mutex<()>,
    /// Images copied and attached ahead (see `disk_stock`).
    stock: DiskStock,
}

impl Disks {
    /// Disk limits on this host, or why not (no root, no loop devices, no mkfs.ext4).
    pub fn open(dir: &Path) -> Result<Disks, String> {
        supported()?;
        let templates = dir.join("templates");
        std::fs::create_dir_all(&templates).map_err(|e| format!("{}: {e}", templates.display()))?;
        let stock = DiskStock::open(&dir.join("stock"))?;
        Ok(Disks { templates, making: std::sync::Mutex::new(()), stock })
    }

    /// A disk of `bytes` copied and attached ahead, when the stock has one.
    pub fn take_prepared(&self, bytes: u64) -> Option<Prepared> {
        self.stock.take(bytes)
    }

    /// Whether the stock of `bytes` is short of [`STOCK_PER_SIZE`].
    pub fn stock_short(&self, bytes: u64) -> bool {
        self.stock.count(bytes) < STOCK_PER_SIZE
    }

    /// Fills the stock of `bytes` up to [`STOCK_PER_SIZE`] (blocking; one refill per size at
    /// a time, a second caller returns at once).
    pub fn refill(&self, bytes: u64) -> Result<(), String> {
        if bytes < MIN_DISK_BYTES || !self.stock.start_filling(bytes) {
            return Ok(());
        }
        let filled = (|| {
            let template = self.template(bytes)?;
            while self.stock_short(bytes) {
                self.stock.add(bytes, &template)?;
            }
            Ok(())
        })();
        self.stock.done_filling(bytes);
        filled
    }
}

/// Whether this host can limit a sandbox's disk, or why not.
pub fn supported() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("disk limits need root (loop devices)".into());
    }
    if !Path::new("/dev/loop-control").exists() {
        return Err("disk limits need loop devices (/dev/loop-control is missing)".into());
    }
    let mkfs = std::process::Command::new("mkfs.ext4").arg("-V").output();
    if !mkfs.is_ok_and(|o| o.status.success()) {
        return Err("disk limits need mkfs.ext4 (apt-get install e2fsprogs)".into());
    }
    Ok(())
}

impl Disks {
    /// Makes `image`, an empty filesystem of `bytes`, for one sandbox.
    pub fn make(&self, bytes: u64, image: &Path) -> Result<(), String> {
        if bytes < MIN_DISK_BYTES {
            return Err(format!("disk: {bytes} bytes is too small (at least {} MiB)", MIN_DISK_BYTES >> 20));
        }
        let template = self.template(bytes)?;
        sparse_copy(&template, image).map_err(|e| format!("{}: {e}", image.display()))
    }

    fn template(&self, bytes: u64) -> Result<PathBuf, String> {
        let path = self.templates.join(format!("ext4-v2-{bytes}.img"));
        if path.is_file() {
            return Ok(path);
        }
        let _one = self.making.lock().unwrap_or_else(|p| p.into_inner());
        if path.is_file() {
            return Ok(path);
        }
        let staging = self.templates.join(format!("ext4-{bytes}.img.{}", std::process::id()));
        let file = std::fs::File::create(&staging).map_err(|e| format!("{}: {e}", staging.display()))?;
        file.set_len(bytes).map_err(|e| format!("{}: {e}", staging.display()))?;
        drop(file);
        let out = std::process::Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-b",
                "4096",
                "-O",
                "^has_journal",
                "-E",
                "lazy_itable_init=1,nodiscard",
                "-m",
                "0",
                "-L",
                "orchard",
            ])
            .arg(&staging)
            .output()
            .map_err(|e| format!("mkfs.ext4: {e}"))?;
        if !out.status.success() {
            let _ = std::fs::remove_file(&staging);
            return Err(format!("mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        std::fs::rename(&staging, &path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(path)
    }
}

/// Copies `from` to `to` keeping holes: only the data extents are read and written.
pub fn sparse_copy(from: &Path, to: &Path) -> std::io::Result<()> {
    let src = std::fs::File::open(from)?;
    let len = src.metadata()?.len();
    let dst = std::fs::OpenOptions::new().write(true).create_new(true).open(to)?;
    dst.set_len(len)?;
    let mut offset: i64 = 0;
    while (offset as u64) < len {
        // SAFETY: lseek on a descriptor we own.
        let data = unsafe { libc::lseek(src.as_raw_fd(), offset, libc::SEEK_DATA) };
        if data < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENXIO) {
                break; // only a hole is left
            }
            return Err(err);
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data, libc::SEEK_HOLE) };
        if hole < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let (mut from_off, mut to_off) = (data, data);
        while from_off < hole {
            // SAFETY: copy_file_range between two descriptors we own, with offsets we own.
            let n = unsafe {
                libc::copy_file_range(
                    src.as_raw_fd(),
                    &mut from_off,
                    dst.as_raw_fd(),
                    &mut to_off,
                    (hole - from_off) as usize,
                    0,
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if n == 0 {
                break;
            }
        }
        offset = hole;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sparse_copy_keeps_data_and_holes() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        {
            use std::io::{Seek, Write};
            let mut f = std::fs::File::create(&a).unwrap();
            f.write_all(b"head").unwrap();
            f.seek(std::io::SeekFrom::Start(64 << 20)).unwrap();
            f.write_all(b"tail").unwrap();
        }
        super::sparse_copy(&a, &b).unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        use std::os::unix::fs::MetadataExt;
        assert!(std::fs::metadata(&b).unwrap().blocks() * 512 < 1 << 20, "the hole was written out");
    }
}
