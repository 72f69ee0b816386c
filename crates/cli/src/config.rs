//! `recursive.toml`: the project's configuration file, looked up in the working directory and
//! then in the user's config directory. Each table is handed to the crate that owns it.

use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;

/// The whole configuration file. Unknown tables are rejected so typos are caught.
#[derive(Debug, Default, Deserialize)]
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
    ) -> anyhow::Result<T> {
        match table {
            None => Ok(T::default()),
            Some(t) => t.clone().try_into().with_context(|| {
                format!(
                    "invalid [{name}] table in {}",
                    self.path.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_default()
                )
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

/// Loads the first configuration file that exists (an explicit `--config` must exist).
pub fn load(explicit: Option<&Path>) -> anyhow::Result<LoadedConfig> {
    for path in candidate_paths(explicit) {
        if !path.exists() {
            if explicit.is_some() {
                anyhow::bail!("config file {} does not exist", path.display());
            }
            continue;
        }
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file: FileConfig = toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        return Ok(LoadedConfig { file, path: Some(path) });
    }
    Ok(LoadedConfig::default())
}
