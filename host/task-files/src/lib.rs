//! Task folders read beneath their root.
//!
//! A task folder may come from a stranger (an uploaded `.tar.gz`), yet the host reads it: its
//! `task.toml` and `instruction.md`, the `tests/` and `solution/` it copies into sandboxes,
//! whatever its Dockerfile `COPY`s. This crate is the one door to those files.
//!
//! Invariants:
//!
//! - **Every read resolves beneath the root.** A [`TaskFiles`] holds its root open as a
//!   [`cap_std::fs::Dir`]; every path is resolved relative to it with the kernel's help
//!   (`openat2` with `RESOLVE_BENEATH` where the kernel has it, cap-std's checked walk where it
//!   does not), so no link — however it is chained — reads a file outside the root. Links that
//!   stay inside (a task sharing its sibling's `environment/`) keep working.
//! - **Reads are bounded.** [`TaskFiles::read_string`] and [`TaskFiles::pack`] take a cap and
//!   refuse what is larger, before reading it whole.
//! - **Uploads are checked when unpacked.** [`unpack`] refuses archives over its [`Limits`]
//!   (uncompressed bytes, entries, bytes per file) while it reads them, anything but files,
//!   folders and symlinks, and any symlink whose whole chain does not resolve to something
//!   inside the archive. A half-unpacked folder is never used.
//! - **Errors name only paths relative to the root, under the label the caller gave it**, and
//!   never quote a file's content: a tenant learns nothing about the server's own files.

#![warn(missing_docs)]

mod files;
mod unpack;

pub use files::{FileError, TaskFiles};
pub use unpack::{Limits, UnpackError, unpack};
