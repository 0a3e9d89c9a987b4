//! Disks made ahead: filesystem images already copied from their template and attached to a
//! loop device, so that a create with a disk limit only renames a file and mounts a device.
//!
//! Attaching a loop device (`LOOP_CONFIGURE`) costs ~5 ms here and the sparse copy ~1–3 ms:
//! together, half of a cold create. A small stock per size, refilled in the background after
//! every take, moves both off the create's path (measured in `--suite sandboxes`).
//!
//! Invariants:
//! - A stocked device is attached with auto-clear and this process holds its only descriptor:
//!   if the host dies, the kernel detaches it, and the stock's files are removed at the next
//!   start ([`DiskStock::open`]). Nothing stocked can outlive the host process as a device.
//! - A taken disk keeps its descriptor until the sandbox's own mount holds the device (the
//!   caller drops the [`Prepared`] after the launch's setup is done); from then on the device
//!   lives exactly as long as the sandbox's mount namespace, like one attached by the sandbox.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Disks kept ready per size.
pub const STOCK_PER_SIZE: usize = 4;

/// A disk image attached to a loop device, ready to mount.
#[derive(Debug)]
pub struct Prepared {
    /// The image file (moved into the sandbox's layer directory when taken).
    pub image: PathBuf,
    /// Its loop device's number (`/dev/loopN`).
    pub loop_index: u32,
    /// Holds the device attached until the sandbox's mount does.
    _device: std::fs::File,
}

/// The stock of prepared disks, by size.
pub struct DiskStock {
    dir: PathBuf,
    ready: Mutex<HashMap<u64, Vec<Prepared>>>,
    /// Sizes a refill is running for (one at a time per size).
    filling: Mutex<HashSet<u64>>,
    next: AtomicU64,
}

impl DiskStock {
    /// An empty stock in `dir`; whatever an earlier process stocked there is removed (its
    /// devices were detached when that process's descriptors closed).
    pub fn open(dir: &Path) -> Result<DiskStock, String> {
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        Ok(DiskStock {
            dir: dir.to_path_buf(),
            ready: Mutex::new(HashMap::new()),
            filling: Mutex::new(HashSet::new()),
            next: AtomicU64::new(0),
        })
    }

    /// A prepared disk of `bytes`, when one is in stock.
    pub fn take(&self, bytes: u64) -> Option<Prepared> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&bytes)?.pop()
    }

    /// Disks in stock of `bytes`.
    pub fn count(&self, bytes: u64) -> usize {
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).get(&bytes).map_or(0, Vec::len)
    }

    /// Claims the refill of `bytes` for the caller; `false` when one is running already.
    pub fn start_filling(&self, bytes: u64) -> bool {
        self.filling.lock().unwrap_or_else(|p| p.into_inner()).insert(bytes)
    }

    /// Ends the caller's refill of `bytes`.
    pub fn done_filling(&self, bytes: u64) {
        self.filling.lock().unwrap_or_else(|p| p.into_inner()).remove(&bytes);
    }

    /// Copies `template` and attaches the copy: one disk into the stock (blocking: call it off
    /// the runtime's threads).
    pub fn add(&self, bytes: u64, template: &Path) -> Result<(), String> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let image = self.dir.join(format!("{bytes}-{n}.img"));
        crate::disk::sparse_copy(template, &image).map_err(|e| format!("{}: {e}", image.display()))?;
        let (loop_index, device) = match crate::rootfs::attach_loop(&image, None) {
            Ok(a) => a,
            Err(e) => {
                let _ = std::fs::remove_file(&image);
                return Err(format!("attaching {} to a loop device: {e}", image.display()));
            }
        };
        let prepared = Prepared { image, loop_index, _device: device };
        self.ready.lock().unwrap_or_else(|p| p.into_inner()).entry(bytes).or_default().push(prepared);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stock_left_by_an_earlier_process_is_cleared_at_open() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("stock");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("1-0.img"), b"left").unwrap();
        let stock = DiskStock::open(&dir).unwrap();
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        assert!(stock.take(1).is_none());
        assert!(stock.start_filling(1));
        assert!(!stock.start_filling(1), "one refill per size at a time");
        stock.done_filling(1);
        assert!(stock.start_filling(1));
    }
}
