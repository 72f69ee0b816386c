//! `recursive.toml`: the project's configuration file, looked up in the working directory and
//! then in the user's config directory. Each table is handed to the crate that owns it. A file
//! found in the working directory needs the user's trust for what would run commands or widen
//! permissions ([`crate::trust`]). Every problem with a file is a [`ConfigError`] (exit 2).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ConfigError;

/// The whole configuration file. Unknown tables are rejected so typos are caught.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[provider]`: which model API to use.
    pub provider: Option<toml::Table>,
    /// `[pricing."model"]`: extra or overriding prices.
    pub pricing: Option<toml::Table>,
    /// `[permissions]`: tool permission rules.
    pub permissions: Option<toml::Table>,
    /// `[mcp]`: MCP servers.
    pub mcp: Option<toml::Table>,
    /// `[tools]`: built-in tool settings.
    pub tools: Option<toml::Table>,
    /// `[limits]`: default run limits.
    pub limits: Option<toml::Table>,
    /// `[rlm]`: defaults for `recursive rlm`.
    pub rlm: Option<toml::Table>,
}

/// A loaded configuration and where it came from.
#[derive(Debug, Default)]
pub struct LoadedConfig {
    /// The parsed file (empty when none was found).
    pub file: FileConfig,
    /// The file it came from.
    pub path: Option<PathBuf>,
}

impl LoadedConfig {
    /// Deserializes one table into its typed form (default when absent).
    pub fn section<T: for<'de> Deserialize<'de> + Default>(
        &self,
        table: &Option<toml::Table>,
        name: &str,
    ) -> Result<T, ConfigError> {
        match table {
            None => Ok(T::default()),
            Some(t) => t.clone().try_into().map_err(|e: toml::de::Error| {
                let file = self.path.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_default();
                ConfigError(format!("invalid [{name}] table in {file}: {}", e.message()))
            }),
        }
    }
}

/// Where configuration files are looked for, in order.
pub fn candidate_paths(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let mut out = vec![PathBuf::from("recursive.toml")];
    if let Some(dir) = dirs::config_dir() {
        out.push(dir.join("recursive").join("recursive.toml"));
    }
    out
}

/// Loads the first configuration file that exists (an explicit `--config` must exist). A file
/// from the working directory keeps what needs trust only when `trust` (`--trust`), an earlier
/// trust in the same contents, or a yes on the terminal says so.
pub fn load(explicit: Option<&Path>, trust: bool) -> Result<LoadedConfig, ConfigError> {
    for path in candidate_paths(explicit) {
        if !path.exists() {
            if explicit.is_some() {
                return Err(ConfigError(format!("config file {} does not exist", path.display())));
            }
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
        let mut file: FileConfig =
            toml::from_str(&text).map_err(|e| ConfigError(format!("cannot parse {}: {e}", path.display())))?;
        if explicit.is_none() && path.is_relative() {
            file = trusted_parts(&path, &text, file, trust);
        }
        return Ok(LoadedConfig { file, path: Some(path) });
    }
    Ok(LoadedConfig::default())
}

/// The project file as it may be used: whole when trusted, else without what needs trust.
fn trusted_parts(path: &Path, text: &str, file: FileConfig, trust: bool) -> FileConfig {
    let mut stripped = file.clone();
    let needs = crate::trust::strip(&mut stripped);
    if needs.is_empty() || crate::trust::is_trusted(path, text) {
        return file;
    }
    if trust || crate::trust::ask(path, &needs) {
        if let Err(e) = crate::trust::record(path, text) {
            eprintln!("warning: trusted for this run only; could not record the trust: {e}");
        }
        return file;
    }
    eprintln!(
        "warning: {} in this directory is not trusted, so these parts of it are left out: {}. \
         Pass --trust to trust the file as it is now (recorded until it changes).",
        path.display(),
        needs.join("; ")
    );
    stripped
}
