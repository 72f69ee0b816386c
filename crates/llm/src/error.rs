//! Errors of building and configuring providers (settings, keys, cassettes, price tables).
//! Faults of a model call itself are [`recursive_core::ProviderError`].

use std::path::PathBuf;

/// Why a provider, a cassette or a price table could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LlmError {
    /// The provider needs an API key and none was configured or found in the environment.
    #[error("{provider}: no API key; set {env_var} or `api_key` in the [provider] settings")]
    MissingApiKey {
        /// Provider name.
        provider: String,
        /// The environment variable that would supply it.
        env_var: String,
    },
    /// The provider needs credentials (AWS) and no source of its chain had any.
    #[error("{provider}: no credentials found; tried {tried}")]
    MissingCredentials {
        /// Provider name.
        provider: String,
        /// The sources tried, in order.
        tried: String,
    },
    /// A setting has a value that cannot work.
    #[error("invalid provider setting: {0}")]
    InvalidSetting(String),
    /// The HTTP client could not be built.
    #[error("{provider}: cannot build the HTTP client: {message}")]
    HttpClient {
        /// Provider name.
        provider: String,
        /// Details.
        message: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A cassette line is not a recorded interaction.
    #[error("cassette {path}, line {line}: {message}")]
    Cassette {
        /// The cassette file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// A price table in TOML could not be read.
    #[error("price table: {0}")]
    Pricing(String),
}

impl LlmError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LlmError::Io { path: path.into(), source }
    }
}
