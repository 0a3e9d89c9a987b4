//! One Chromium per rollout, for the `browser` import.
//!
//! - Its network is the sandbox's: it is started inside the sandbox's network namespace
//!   (`nsenter --net=…`), so it reaches what the task serves on the sandbox's own loopback,
//!   obeys the sandbox's network policy, and cannot reach the host's loopback. Proxies, resolver
//!   rules and request interception are all bypassable; the namespace is the boundary.
//! - It is controlled over `--remote-debugging-pipe` (file descriptors 3 and 4 of the browser,
//!   the other ends held by the host): no DevTools port is ever opened, so nothing inside the
//!   sandbox can drive it. (chromiumoxide speaks DevTools only over a WebSocket, which would be a
//!   port in the sandbox's namespace; hence the small client in [`pipe`].)
//! - Its own profile directory, deleted with it; its whole process group is killed when it is
//!   dropped.

#![warn(missing_docs)]

pub mod pipe;
pub mod policy;
mod session;

pub use session::{Browser, BrowserOptions, PageEvent, Tab, command_line, pss_kb};

#[derive(Debug, thiserror::Error)]
/// Why a browser call failed.
pub enum BrowserError {
    /// This run has no browser (its backend cannot place one in the sandbox's network).
    #[error("{0}")]
    Unconfigured(String),
    /// Chromium could not be started.
    #[error("starting chromium: {0}")]
    Launch(String),
    /// The browser is gone (crashed or killed): what it said last.
    #[error("the browser exited: {0}")]
    Gone(String),
    /// The tab's renderer died (killed at the sandbox's memory limit, or a crash).
    #[error("{0}")]
    Crashed(String),
    #[error("{method} did not answer within {seconds} s")]
    /// The browser did not answer a call in time.
    Timeout {
        /// The DevTools method called.
        method: String,
        /// How long it was waited for.
        seconds: f64,
    },
    /// A method a plugin may not call.
    #[error("{0}")]
    Refused(String),
    /// The browser's own error answer.
    #[error("{method}: {message}")]
    Protocol {
        /// The DevTools method called.
        method: String,
        /// What the browser answered.
        message: String,
    },
    #[error("{method}: the answer is {size} bytes, over the {limit} allowed")]
    /// An answer larger than a plugin may receive.
    TooLarge {
        /// The DevTools method called.
        method: String,
        /// The answer's size in bytes.
        size: usize,
        /// The most accepted.
        limit: usize,
    },
}
