use orchard_agent_client::AgentClientError;

#[derive(Debug, thiserror::Error)]
/// Why a backend operation failed.
pub enum SandboxError {
    #[error("sandbox {0} not found")]
    /// No such sandbox.
    NotFound(String),
    #[error("sandbox {0} already exists")]
    /// The id is taken.
    AlreadyExists(String),
    /// A field of the request is wrong; the message names it.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("image {image}: {reason}")]
    /// The image could not be had.
    Image {
        /// The image as named.
        image: String,
        /// Why.
        reason: String,
    },
    /// No room for more sandboxes right now.
    #[error("at capacity: {0}")]
    Capacity(String),
    #[error("sandbox {id} is not ready: {reason}")]
    /// The sandbox exists but cannot be used yet (or any more).
    NotReady {
        /// The sandbox.
        id: String,
        /// Why.
        reason: String,
    },
    #[error(transparent)]
    /// Its agent failed.
    Agent(#[from] AgentClientError),
    /// The backend itself failed (a system call, the isolation tool, the cluster).
    #[error("{0}")]
    Backend(String),
}

impl SandboxError {
    /// A backend failure, with what was being done.
    pub fn backend(context: &str, err: impl std::fmt::Display) -> Self {
        SandboxError::Backend(format!("{context}: {err}"))
    }
}
