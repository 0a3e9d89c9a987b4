use orchard_agent_client::AgentClientError;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("sandbox {0} not found")]
    NotFound(String),
    #[error("sandbox {0} already exists")]
    AlreadyExists(String),
    /// A field of the request is wrong; the message names it.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("image {image}: {reason}")]
    Image { image: String, reason: String },
    /// No room for more sandboxes right now.
    #[error("at capacity: {0}")]
    Capacity(String),
    #[error("sandbox {id} is not ready: {reason}")]
    NotReady { id: String, reason: String },
    #[error(transparent)]
    Agent(#[from] AgentClientError),
    /// The backend itself failed (a system call, the isolation tool, the cluster).
    #[error("{0}")]
    Backend(String),
}

impl SandboxError {
    pub fn backend(context: &str, err: impl std::fmt::Display) -> Self {
        SandboxError::Backend(format!("{context}: {err}"))
    }
}
