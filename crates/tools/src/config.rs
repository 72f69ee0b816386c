//! Settings of the built-in tools (timeouts and output caps), readable from the `[tools]`
//! table of `recursive.toml`. Every field has a default, so an empty table is valid.

use std::collections::BTreeMap;
use std::path::PathBuf;

use recursive_core::config_trust::KeyClass;
use recursive_core::confine::{Confinement, ProcessLimits, SandboxMode};
use serde::{Deserialize, Serialize};

impl ToolsConfig {
    /// Checks every number is in range and every pattern parses; says what is wrong otherwise.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("read.default_lines", self.read.default_lines as u64),
            ("read.max_bytes", self.read.max_bytes as u64),
            ("read.max_line_chars", self.read.max_line_chars as u64),
            ("list.default_depth", self.list.default_depth as u64),
            ("list.max_depth", self.list.max_depth as u64),
            ("list.max_entries", self.list.max_entries as u64),
            ("shell.default_timeout_secs", self.shell.default_timeout_secs),
            ("shell.max_timeout_secs", self.shell.max_timeout_secs),
            ("shell.max_output_bytes", self.shell.max_output_bytes as u64),
            ("shell.max_memory_mb", self.shell.max_memory_mb),
            ("shell.max_processes", self.shell.max_processes),
            ("shell.max_file_size_mb", self.shell.max_file_size_mb),
            ("shell.max_cpu_secs", self.shell.max_cpu_secs),
            ("search.max_results", self.search.max_results as u64),
            ("search.max_line_chars", self.search.max_line_chars as u64),
            ("web.timeout_secs", self.web.timeout_secs),
            ("web.max_bytes", self.web.max_bytes as u64),
            ("web.max_chars", self.web.max_chars as u64),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        // Past these, a timeout would overflow the clock.
        for (name, secs) in [
            ("shell.default_timeout_secs", self.shell.default_timeout_secs),
            ("shell.max_timeout_secs", self.shell.max_timeout_secs),
            ("web.timeout_secs", self.web.timeout_secs),
        ] {
            if secs > 365 * 24 * 3600 {
                return Err(format!("{name} = {secs} is more than a year"));
            }
        }
        recursive_core::env::ChildEnv::new(&self.shell.env_pass, &self.shell.env)
            .map_err(|e| format!("shell.env_pass: {e}"))?;
        Ok(())
    }
}

/// Settings of every built-in tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// `read_file`.
    pub read: ReadConfig,
    /// `list_dir`.
    pub list: ListConfig,
    /// `run_shell`.
    pub shell: ShellConfig,
    /// `search_files`.
    pub search: SearchConfig,
    /// `web_fetch`.
    pub web: WebConfig,
    /// The memory database of `remember`/`recall`; relative paths are taken from the
    /// workspace root. Default: `.recursive/memory.db`.
    #[schemars(extend("x-trust" = KeyClass::InsideProject))]
    pub memory_path: Option<PathBuf>,
    /// Offer `run` the `blueprint` tool: the model writes graphs and runs them as child runs
    /// (with nothing beyond what the run itself may use). Off by default.
    #[schemars(extend("x-trust" = KeyClass::switch_on_loosens()))]
    pub blueprints: bool,
}

/// Settings of `read_file`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReadConfig {
    /// Lines returned when the call gives no `limit`.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub default_lines: usize,
    /// Most bytes of numbered text one call returns.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_bytes: usize,
    /// Lines longer than this many characters are cut.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_line_chars: usize,
}

impl Default for ReadConfig {
    fn default() -> Self {
        Self { default_lines: 2000, max_bytes: 64 * 1024, max_line_chars: 2000 }
    }
}

/// Settings of `list_dir`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ListConfig {
    /// Depth when the call gives none (1 = the directory's own entries).
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub default_depth: usize,
    /// Deepest listing a call may ask for.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_depth: usize,
    /// Most entries one listing shows.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_entries: usize,
}

impl Default for ListConfig {
    fn default() -> Self {
        Self { default_depth: 2, max_depth: 10, max_entries: 500 }
    }
}

/// Settings of `run_shell`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ShellConfig {
    /// The shell, run as `<shell> -c <command>`.
    #[schemars(extend("x-trust" = KeyClass::loosening("it chooses the program commands run in")))]
    pub shell: String,
    /// Seconds a command may run when the call gives no timeout.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub default_timeout_secs: u64,
    /// Longest timeout a call may ask for (longer requests are lowered to this).
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_timeout_secs: u64,
    /// Most bytes kept of each of stdout and stderr (half from the start, half from the end).
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_output_bytes: usize,
    /// Variables of this process passed to commands besides the default allowlist
    /// ([`recursive_core::env::DEFAULT_CHILD_ENV`]: `PATH`, `HOME`, locale, toolchain homes —
    /// never credentials): globs over names, e.g. `["NPM_CONFIG_*"]`.
    #[schemars(extend("x-trust" = KeyClass::loosening("it passes variables to commands")))]
    pub env_pass: Vec<String>,
    /// Variables set for every command, with these values.
    #[schemars(extend("x-trust" = KeyClass::loosening("it sets variables for commands")))]
    pub env: BTreeMap<String, String>,
    /// Whether commands run in the OS sandbox ([`recursive_core::confine`]): `auto` (when
    /// available, else unconfined with a warning), `required`, or `off`.
    pub sandbox: SandboxMode,
    /// In the sandbox, share the host's network (unfiltered); by default commands have none.
    #[schemars(extend("x-trust" = KeyClass::switch_on_loosens()))]
    pub network: bool,
    /// Further paths commands may read in the sandbox (`~/` is the home directory), e.g. a
    /// toolchain: `["~/.rustup", "~/.cargo"]`.
    #[schemars(extend("x-trust" = KeyClass::loosening("it widens what commands may read in the sandbox")))]
    pub read_only: Vec<String>,
    /// Further directories commands may write in the sandbox, besides the workspace.
    #[schemars(extend("x-trust" = KeyClass::loosening("it widens what commands may write in the sandbox")))]
    pub writable: Vec<String>,
    /// Address space of each process in the sandbox, in MiB.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_memory_mb: u64,
    /// Processes (and threads) of one command in the sandbox.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_processes: u64,
    /// Largest file a command may write in the sandbox, in MiB.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_file_size_mb: u64,
    /// CPU seconds of each process in the sandbox.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_cpu_secs: u64,
}

impl Default for ShellConfig {
    fn default() -> Self {
        Self {
            shell: "sh".into(),
            default_timeout_secs: 120,
            max_timeout_secs: 600,
            max_output_bytes: 32 * 1024,
            env_pass: Vec::new(),
            env: BTreeMap::new(),
            sandbox: SandboxMode::Auto,
            network: false,
            read_only: Vec::new(),
            writable: Vec::new(),
            max_memory_mb: 8192,
            max_processes: 1024,
            max_file_size_mb: 4096,
            max_cpu_secs: 1200,
        }
    }
}

impl ShellConfig {
    /// What a command may reach in the sandbox, for a workspace at `root`.
    pub fn confinement(&self, root: &std::path::Path) -> Confinement {
        let mib = |v: u64| v.saturating_mul(1024 * 1024);
        let mut writable = vec![root.to_path_buf()];
        writable.extend(self.writable.iter().map(|p| expand_home(p)));
        Confinement {
            writable,
            read_only: self.read_only.iter().map(|p| expand_home(p)).collect(),
            network: self.network,
            limits: ProcessLimits {
                cpu_secs: Some(self.max_cpu_secs),
                address_space_bytes: Some(mib(self.max_memory_mb)),
                processes: Some(self.max_processes),
                file_size_bytes: Some(mib(self.max_file_size_mb)),
            },
        }
    }
}

/// `~/x` as a path under the home directory; other paths as they are.
fn expand_home(path: &str) -> std::path::PathBuf {
    match (path.strip_prefix("~/"), recursive_core::env::var_os("HOME")) {
        (Some(rest), Some(home)) => std::path::Path::new(&home).join(rest),
        _ => std::path::PathBuf::from(path),
    }
}

/// Settings of `search_files`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// Most matches one search returns.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_results: usize,
    /// Matched lines longer than this many characters are cut.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_line_chars: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        Self { max_results: 200, max_line_chars: 300 }
    }
}

/// Settings of `web_fetch`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct WebConfig {
    /// Seconds allowed for the whole request.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub timeout_secs: u64,
    /// Most bytes downloaded; the rest of the body is not read.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_bytes: usize,
    /// Most characters of text returned.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    pub max_chars: usize,
    /// The `User-Agent` header.
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub user_agent: String,
    /// Hosts (names or IP addresses, as written in URLs) that may be fetched although they are
    /// or resolve to loopback, private or link-local addresses, e.g. `["localhost", "10.0.0.5"]`.
    #[schemars(extend("x-trust" = KeyClass::loosening("it opens private addresses to web_fetch")))]
    pub allow_hosts: Vec<String>,
}

impl Default for WebConfig {
    fn default() -> Self {
        Self {
            timeout_secs: 30,
            max_bytes: 5 * 1024 * 1024,
            max_chars: 50_000,
            user_agent: concat!("recursive/", env!("CARGO_PKG_VERSION")).into(),
            allow_hosts: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_table_gives_defaults() {
        let c: ToolsConfig = toml::from_str("").unwrap();
        assert_eq!(c, ToolsConfig::default());
    }

    #[test]
    fn partial_tables_override_only_their_fields() {
        let c: ToolsConfig = toml::from_str("[shell]\ndefault_timeout_secs = 5\n[read]\nmax_bytes = 10\n").unwrap();
        assert_eq!(c.shell.default_timeout_secs, 5);
        assert_eq!(c.shell.max_timeout_secs, 600);
        assert_eq!(c.read.max_bytes, 10);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        assert!(toml::from_str::<ToolsConfig>("[shell]\ntimeout = 5\n").is_err());
    }
}
