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
    /// `[telemetry]`: OpenTelemetry export.
    pub telemetry: Option<toml::Table>,
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
    let (project, trusted) = trusted_parts(project_path, &text, project, trust);
    let file = match user {
        Some((user, _)) => layer(user, project, trusted),
        None => project,
    };
    Ok(LoadedConfig { file, path: Some(project_path.to_path_buf()) })
}

/// Reads and parses one configuration file: a regular file of bounded size.
fn read(path: &Path) -> Result<(FileConfig, String), ConfigError> {
    let text = crate::read_text_file(path).map_err(|e| ConfigError(format!("cannot read {}: {e}", path.display())))?;
    let file = toml::from_str(&text).map_err(|e| ConfigError(format!("cannot parse {}: {e}", path.display())))?;
    Ok((file, text))
}

/// The project file as it may be used (whole when trusted, else without what needs trust),
/// and whether it is trusted.
fn trusted_parts(path: &Path, text: &str, file: FileConfig, trust: bool) -> (FileConfig, bool) {
    let mut stripped = file.clone();
    let needs = crate::trust::strip(&mut stripped);
    if needs.is_empty() {
        return (file, false);
    }
    if let Err(why) = crate::trust::trustable(path) {
        eprintln!(
            "warning: {} cannot be trusted ({why}), so these parts of it are left out: {}",
            path.display(),
            needs.join("; ")
        );
        return (stripped, false);
    }
    if crate::trust::is_trusted(path, text) {
        return (file, true);
    }
    if trust || crate::trust::ask(path, &needs) {
        if let Err(e) = crate::trust::record(path, text) {
            eprintln!("warning: trusted for this run only; could not record the trust: {e}");
        }
        return (file, true);
    }
    eprintln!(
        "warning: {} in this directory is not trusted, so these parts of it are left out: {}. \
         Pass --trust to trust the file as it is now (recorded until it changes).",
        path.display(),
        needs.join("; ")
    );
    (stripped, false)
}

/// The project's configuration on top of the user's: tables merge key by key (the project's
/// value wins), permission rules add up (the user's deny and ask rules always apply). An
/// untrusted project cannot loosen what the user set: permission defaults and `max_denials`,
/// the OS sandbox modes, the network, and the sandbox's resource limits keep the stricter of
/// the two.
pub fn layer(user: FileConfig, project: FileConfig, trusted: bool) -> FileConfig {
    let mut merged = FileConfig {
        provider: merge_tables(user.provider.clone(), project.provider),
        pricing: merge_tables(user.pricing.clone(), project.pricing),
        permissions: merge_tables(user.permissions.clone(), project.permissions),
        mcp: merge_tables(user.mcp.clone(), project.mcp),
        tools: merge_tables(user.tools.clone(), project.tools),
        limits: merge_tables(user.limits.clone(), project.limits),
        rlm: merge_tables(user.rlm.clone(), project.rlm),
        telemetry: merge_tables(user.telemetry.clone(), project.telemetry),
    };
    if !trusted {
        crate::trust::keep_stricter(&user, &mut merged);
    }
    merged
}

fn merge_tables(user: Option<toml::Table>, project: Option<toml::Table>) -> Option<toml::Table> {
    match (user, project) {
        (None, p) => p,
        (u, None) => u,
        (Some(mut u), Some(p)) => {
            merge_into(&mut u, p, "");
            Some(u)
        }
    }
}

/// Merges `over` into `base`: tables recursively, `permissions.rules` appended, other values
/// replaced.
fn merge_into(base: &mut toml::Table, over: toml::Table, at: &str) {
    for (key, value) in over {
        let here = if at.is_empty() { key.clone() } else { format!("{at}.{key}") };
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge_into(b, o, &here),
            (Some(toml::Value::Array(b)), toml::Value::Array(o)) if here == "rules" => b.extend(o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}
