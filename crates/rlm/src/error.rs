//! The faults of an RLM run. Limits (iterations, sub-call budget, tree budget) are not
//! faults: they end a run normally and are reported in [`crate::RlmOutcome`].

use recursive_core::ProviderError;

use crate::sandbox::SandboxError;

/// A fault that stopped an RLM run, or a configuration that cannot run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RlmError {
    /// The primary model's provider failed (after its retries).
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The output schema is not a valid JSON Schema.
    #[error("invalid output schema: {0}")]
    InvalidSchema(String),
    /// A host tool cannot be registered under its name.
    #[error("host tool `{name}` cannot be registered: {reason}")]
    ToolName {
        /// The tool's name.
        name: String,
        /// Why.
        reason: String,
    },
    /// An input could not be loaded.
    #[error("input: {0}")]
    Input(String),
    /// The sandbox could not start.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// A durable run's checkpoint could not be read, written or used.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}

/// A fault ended an RLM run; `partial` holds everything gathered until then (the trajectory,
/// usage, sub-calls), with outcome `failed`.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RlmRunError {
    /// The fault.
    #[source]
    pub error: RlmError,
    /// What the run gathered before it.
    pub partial: Box<crate::result::RlmResult>,
}
