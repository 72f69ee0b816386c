//! The process environment as the program reads it, and the environment its children start with.
//!
//! A program may move variables out of its visible environment at start (the `recursive` CLI
//! wipes them from its environment block, or re-executes itself without them, so a child cannot
//! read them from `/proc/<pid>/environ`) and
//! hand them to [`hold`]; [`var`] then still finds them. Children never inherit the process's
//! environment wholesale: [`ChildEnv`] builds theirs from an allowlist plus what the
//! configuration passes explicitly.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::sync::OnceLock;

use globset::{Glob, GlobSet, GlobSetBuilder};

static HELD: OnceLock<BTreeMap<OsString, OsString>> = OnceLock::new();

/// Keeps variables taken out of the visible environment (first call wins).
pub fn hold(vars: BTreeMap<OsString, OsString>) {
    let _ = HELD.set(vars);
}

/// A variable, from the held ones first, then the visible environment.
pub fn var_os(name: impl AsRef<OsStr>) -> Option<OsString> {
    let name = name.as_ref();
    HELD.get().and_then(|h| h.get(name).cloned()).or_else(|| std::env::var_os(name))
}

/// A variable as UTF-8 text (`None` when unset or not UTF-8).
pub fn var(name: impl AsRef<OsStr>) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

/// Every variable, held and visible.
pub fn vars_os() -> BTreeMap<OsString, OsString> {
    let mut all: BTreeMap<OsString, OsString> = std::env::vars_os().collect();
    if let Some(held) = HELD.get() {
        all.extend(held.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    all
}

/// Variables a child gets from this process by default: what programs need to find their
/// tools, files and locale — never credentials, agent sockets or proxies.
pub const DEFAULT_CHILD_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "TZ",
    "TMPDIR",
    "COLUMNS",
    "LINES",
    "NO_COLOR",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "JAVA_HOME",
    "VIRTUAL_ENV",
    "PYTHONPATH",
    "NODE_PATH",
    "EDITOR",
    "PAGER",
];

/// Variables the process itself keeps visible besides [`DEFAULT_CHILD_ENV`]: read by libraries
/// directly (proxies by the HTTP client, certificate paths, Rust's own switches).
pub const PROCESS_ENV: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_MIN_STACK",
];

/// Whether a variable stays in the process's own visible environment: one of
/// [`DEFAULT_CHILD_ENV`] or [`PROCESS_ENV`] (a trailing `*` matches any rest).
pub fn process_keeps(name: &OsStr) -> bool {
    let Some(name) = name.to_str() else { return false };
    DEFAULT_CHILD_ENV.iter().chain(PROCESS_ENV).any(|pattern| match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == *pattern,
    })
}

/// An invalid allowlist glob.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error("invalid environment name pattern `{pattern}`: {message}")]
pub struct EnvPatternError {
    /// The pattern.
    pub pattern: String,
    /// The parser's message.
    pub message: String,
}

/// The environment a child process starts with: this process's variables whose names match the
/// allowlist ([`DEFAULT_CHILD_ENV`] plus extra globs), then explicit values.
#[derive(Debug, Clone)]
pub struct ChildEnv {
    pass: GlobSet,
    set: BTreeMap<String, String>,
}

impl ChildEnv {
    /// The default allowlist, plus `extra` name globs (case-sensitive), plus explicit values.
    pub fn new(extra: &[String], set: &BTreeMap<String, String>) -> Result<Self, EnvPatternError> {
        let mut builder = GlobSetBuilder::new();
        let defaults = DEFAULT_CHILD_ENV.iter().map(|s| s.to_string());
        for pattern in defaults.chain(extra.iter().cloned()) {
            let glob = Glob::new(&pattern)
                .map_err(|e| EnvPatternError { pattern: pattern.clone(), message: e.kind().to_string() })?;
            builder.add(glob);
        }
        let pass = builder.build().map_err(|e| EnvPatternError { pattern: extra.join(","), message: e.to_string() })?;
        Ok(Self { pass, set: set.clone() })
    }

    /// The default allowlist alone.
    pub fn defaults() -> Self {
        Self::new(&[], &BTreeMap::new()).unwrap_or_else(|_| Self { pass: GlobSet::empty(), set: BTreeMap::new() })
    }

    /// Whether a variable of this process passes to the child.
    pub fn passes(&self, name: &OsStr) -> bool {
        name.to_str().is_some_and(|n| self.pass.is_match(n))
    }

    /// The child's variables.
    pub fn vars(&self) -> BTreeMap<OsString, OsString> {
        let mut out: BTreeMap<OsString, OsString> = vars_os().into_iter().filter(|(k, _)| self.passes(k)).collect();
        out.extend(self.set.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))));
        out
    }

    /// Replaces a command's environment with the child's.
    pub fn apply(&self, command: &mut std::process::Command) {
        command.env_clear().envs(self.vars());
    }

    /// Replaces a tokio command's environment with the child's.
    pub fn apply_tokio(&self, command: &mut tokio::process::Command) {
        command.env_clear().envs(self.vars());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn children_get_the_allowlist_and_explicit_values_only() {
        let set = BTreeMap::from([("EXPLICIT".to_string(), "1".to_string())]);
        let env = ChildEnv::new(&["MY_TOOL_*".into()], &set).unwrap();
        assert!(env.passes(OsStr::new("PATH")));
        assert!(env.passes(OsStr::new("LC_ALL")));
        assert!(env.passes(OsStr::new("MY_TOOL_HOME")));
        for secret in ["OPENAI_API_KEY", "DATABASE_URL", "DB_PASSWD", "SESSION_COOKIE", "GITHUB_PAT", "SSH_AUTH_SOCK"] {
            assert!(!env.passes(OsStr::new(secret)), "{secret}");
        }
        assert_eq!(env.vars().get(OsStr::new("EXPLICIT")).map(|v| v.to_str()), Some(Some("1")));
    }

    #[test]
    fn bad_patterns_are_reported() {
        let e = ChildEnv::new(&["A[".into()], &BTreeMap::new()).unwrap_err();
        assert_eq!(e.pattern, "A[");
    }
}
