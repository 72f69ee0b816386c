//! `recursive.toml`: the project's configuration file, looked up in the working directory and
//! then in the user's config directory. Each table is handed to the crate that owns it. A file
//! found in the working directory needs the user's trust for what would run commands or widen
//! permissions ([`crate::trust`]). Every problem with a file is a [`ConfigError`] (exit 2).

use std::path::{Path, PathBuf};

use recursive_core::config_trust::KeyClass;
use serde::{Deserialize, Serialize};

use crate::ConfigError;

/// The whole configuration file. Unknown tables are rejected so typos are caught. Each table
/// stays raw here (the crate that owns it deserializes it); its schema is the owner's type, whose
/// keys each carry a [`recursive_core::config_trust::KeyClass`] — what [`crate::trust`] merges an
/// untrusted layer by.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `[provider]`: which model API to use.
    #[schemars(with = "Option<recursive_llm::config::ProviderSettings>")]
    pub provider: Option<toml::Table>,
    /// `[providers.NAME]`: more providers, each chosen by its name (`provider = "NAME"` in a
    /// runnable file, a blueprint node, `[rlm] sub_provider`; `--provider NAME`).
    #[schemars(with = "Option<std::collections::BTreeMap<String, recursive_llm::config::NamedProviderSettings>>")]
    pub providers: Option<toml::Table>,
    /// `[pricing."model"]`: extra or overriding prices.
    #[schemars(
        with = "Option<std::collections::BTreeMap<String, serde_json::Value>>",
        extend("x-trust" = KeyClass::loosening("prices decide what a cost cap counts"))
    )]
    pub pricing: Option<toml::Table>,
    /// `[permissions]`: tool permission rules.
    #[schemars(with = "Option<recursive_tools::PermissionsConfig>")]
    pub permissions: Option<toml::Table>,
    /// `[mcp]`: MCP servers.
    #[schemars(with = "Option<recursive_tools::McpConfig>")]
    pub mcp: Option<toml::Table>,
    /// `[tools]`: built-in tool settings.
    #[schemars(with = "Option<recursive_tools::ToolsConfig>")]
    pub tools: Option<toml::Table>,
    /// `[limits]`: default run limits.
    #[schemars(with = "Option<crate::LimitsFile>")]
    pub limits: Option<toml::Table>,
    /// `[rlm]`: defaults for `recursive rlm`.
    #[schemars(with = "Option<crate::rlm::RlmFile>")]
    pub rlm: Option<toml::Table>,
    /// `[telemetry]`: OpenTelemetry export.
    #[schemars(with = "Option<recursive_telemetry::TelemetryFile>")]
    pub telemetry: Option<toml::Table>,
}

impl FileConfig {
    /// The tables, by section name.
    pub fn sections(&self) -> toml::Table {
        match toml::Value::try_from(self) {
            Ok(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        }
    }

    /// A configuration of these sections (empty when they do not make one).
    pub fn from_sections(sections: toml::Table) -> Self {
        toml::Value::Table(sections).try_into().unwrap_or_default()
    }
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
            Some(t) => serde_path_to_error::deserialize(toml::Value::Table(t.clone())).map_err(|e| {
                let file = self.path.as_deref().map(Path::display).map(|d| d.to_string()).unwrap_or_default();
                let key = e.path().to_string();
                let at = if key == "." { String::new() } else { format!("`{key}`: ") };
                ConfigError(format!("invalid [{name}] table in {file}: {at}{}", e.inner().message()))
            }),
        }
    }
}

/// The user's configuration file (`<config dir>/recursive/recursive.toml`).
pub fn user_path() -> Option<PathBuf> {
    dirs::config_dir().map(|dir| dir.join("recursive").join("recursive.toml"))
}

/// The project's configuration file, in the working directory.
const PROJECT_FILE: &str = "recursive.toml";

/// Loads the configuration. An explicit `--config` file (which must exist) is the whole
/// configuration. Otherwise the user's file comes first and the project's `./recursive.toml`
/// is layered on top ([`layer`]): the project may narrow what the user allows, and widens only
/// the parts it is trusted for — with `trust` (`--trust`), an earlier trust in the same file
/// and contents, or a yes on the terminal.
pub fn load(explicit: Option<&Path>, trust: bool) -> Result<LoadedConfig, ConfigError> {
    if let Some(path) = explicit {
        if !path.exists() {
            return Err(ConfigError(format!("config file {} does not exist", path.display())));
        }
        let (file, _) = read(path)?;
        return Ok(LoadedConfig { file, path: Some(path.to_path_buf()) });
    }
    let user = match user_path().filter(|p| p.exists()) {
        Some(path) => Some((read(&path)?.0, path)),
        None => None,
    };
    let project_path = Path::new(PROJECT_FILE);
    if project_path.symlink_metadata().is_err() {
        return Ok(match user {
            Some((file, path)) => LoadedConfig { file, path: Some(path) },
            None => LoadedConfig::default(),
        });
    }
    let (project, text) = read(project_path)?;
    let user = user.map(|(file, _)| file).unwrap_or_default();
    let file = layer_project(user, project_path, &text, project, trust);
    Ok(LoadedConfig { file, path: Some(project_path.to_path_buf()) })
}

/// Reads and parses one configuration file: a regular file of bounded size.
fn read(path: &Path) -> Result<(FileConfig, String), ConfigError> {
    let text = crate::read_text_file(path).map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
    let file = toml::from_str(&text).map_err(|e| ConfigError(format!("cannot parse {}: {e}", path.display())))?;
    Ok((file, text))
}

/// The project's file layered on the user's: whole when the file is trusted, else only what
/// tightens ([`crate::trust::tighten`]), with one warning naming what was left out.
fn layer_project(user: FileConfig, path: &Path, text: &str, project: FileConfig, trust: bool) -> FileConfig {
    let (tightening, left_out) = crate::trust::tighten(&user, project.clone());
    if left_out.is_empty() {
        return layer(user, tightening);
    }
    if let Err(why) = crate::trust::trustable(path) {
        eprintln!(
            "warning: {} cannot be trusted ({why}), so these parts of it are left out: {}",
            path.display(),
            left_out.join("; ")
        );
        return layer(user, tightening);
    }
    if crate::trust::is_trusted(path, text) {
        return layer(user, project);
    }
    if trust || crate::trust::ask(path, &left_out) {
        if let Err(e) = crate::trust::record(path, text) {
            eprintln!("warning: trusted for this run only; could not record the trust: {e}");
        }
        return layer(user, project);
    }
    eprintln!(
        "warning: {} in this directory is not trusted, so these parts of it are left out: {}. \
         Pass --trust to trust the file as it is now (recorded until it changes).",
        path.display(),
        left_out.join("; ")
    );
    layer(user, tightening)
}

/// The project's configuration on top of the user's: tables merge key by key (the project's
/// value wins), permission rules add up (the user's deny and ask rules always apply). An
/// untrusted project is first reduced to what tightens ([`crate::trust::tighten`]).
pub fn layer(user: FileConfig, project: FileConfig) -> FileConfig {
    let mut merged = user.sections();
    merge_into(&mut merged, project.sections(), "");
    FileConfig::from_sections(merged)
}

/// Merges `over` into `base`: tables recursively, `permissions.rules` appended, other values
/// replaced.
fn merge_into(base: &mut toml::Table, over: toml::Table, at: &str) {
    for (key, value) in over {
        let here = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_into(b, o, &here),
            (Some(toml::Value::Array(b)), toml::Value::Array(o)) if here == "permissions.rules" => b.extend(o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}
