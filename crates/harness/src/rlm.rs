//! The RLM of a configuration: `[rlm]` in recursive.toml, then the command's own settings
//! ([`RlmOptions`], from flags or a runnable file), then the library defaults — every value
//! checked. One function builds it, so `rlm`, `goal`, `graph run`, `serve` and runnable files
//! get the same RLM (host tools, limits, dialect) from the same configuration.

use std::path::PathBuf;
use std::time::Duration;

use recursive_core::config_trust::KeyClass;
use recursive_core::confine::SandboxMode;
use recursive_rlm::cpython::CPythonConfig;
use recursive_rlm::repl::Backend;
use recursive_rlm::{Dialect, RlmConfig};
use serde::Deserialize;

use crate::ConfigError;
use crate::setup::{check_sandbox, seconds};

/// `[rlm]` in recursive.toml: defaults for every RLM of the configuration (settings of a
/// command or a runnable file win).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RlmFile {
    /// The conventions presented (`recursive`, `rlm`, `dspy`).
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub dialect: Option<String>,
    /// Host tools offered to snippets, by name.
    #[schemars(extend("x-trust" = KeyClass::loosening("it offers host tools to model-written code")))]
    pub tools: Option<Vec<String>>,
    /// Sub-model calls in flight at once.
    #[schemars(extend("x-trust" = KeyClass::cap_of(RlmConfig::default().batch_concurrency as f64)))]
    pub concurrency: Option<usize>,
    /// Wall-clock limit of one snippet, in seconds.
    #[serde(alias = "timeout_secs")]
    #[schemars(extend("x-trust" = KeyClass::cap_of(RlmConfig::default().snippet_timeout.as_secs_f64()), "x-aliases" = ["timeout_secs"]))]
    pub snippet_timeout_secs: Option<f64>,
    /// Memory a snippet may add, in MiB (0: no limit).
    #[schemars(extend("x-trust" = memory_cap()))]
    pub memory_limit_mib: Option<u64>,
    /// Deepest Python call stack.
    #[schemars(extend("x-trust" = KeyClass::cap_of(RlmConfig::default().recursion_limit as f64)))]
    pub recursion_limit: Option<usize>,
    /// Printed characters kept per snippet.
    #[schemars(extend("x-trust" = KeyClass::cap_of(RlmConfig::default().max_output_chars as f64)))]
    pub max_output_chars: Option<usize>,
    /// A file whose text replaces the default working rules.
    #[schemars(extend("x-trust" = KeyClass::InsideProject))]
    pub instructions: Option<PathBuf>,
    /// `monty` or `cpython`.
    #[schemars(extend("x-trust" = KeyClass::Scale { loosest_first: vec!["cpython".into(), "monty".into()], builtin: Some("monty".into()) }))]
    pub sandbox: Option<String>,
    /// The CPython interpreter.
    #[schemars(extend("x-trust" = KeyClass::loosening("it chooses a program to run")))]
    pub python: Option<PathBuf>,
    /// The OS sandbox of the CPython worker.
    #[schemars(extend("x-trust" = KeyClass::Scale { loosest_first: vec!["off".into(), "auto".into(), "required".into()], builtin: Some(SandboxMode::default().as_str().into()) }))]
    pub os_sandbox: Option<SandboxMode>,
    /// The provider of the sub-calls (`llm_query`), a `[providers.NAME]` (default: the root's);
    /// the sub-model is then that provider's unless one is named.
    #[schemars(extend("x-trust" = KeyClass::Neutral))]
    pub sub_provider: Option<String>,
}

/// `[rlm] memory_limit_mib`: lower is tighter, but 0 means no limit.
fn memory_cap() -> KeyClass {
    let builtin = RlmConfig::default().memory_limit_bytes.map_or(0, |b| b / (1024 * 1024));
    KeyClass::Cap { builtin: Some(builtin as f64), zero_is_unlimited: true }
}

/// An RLM's own settings (a command's flags, a runnable file); unset ones come from `[rlm]`
/// and then the defaults.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlmOptions {
    /// The primary model (default: the configuration's).
    pub model: Option<String>,
    /// The sub-model of `llm_query` (default: the primary model).
    pub sub_model: Option<String>,
    /// The named provider of `llm_query` (`--sub-provider`; default: `[rlm] sub_provider`, else
    /// the root's).
    pub sub_provider: Option<String>,
    /// Primary-model turns before the answer is extracted.
    pub max_iterations: Option<u32>,
    /// Sub-calls of the whole RLM tree.
    pub max_llm_calls: Option<u32>,
    /// Levels of child RLMs (`rlm_query`).
    pub max_depth: Option<u32>,
    /// Wall-clock limit of one snippet, in seconds.
    pub snippet_timeout_secs: Option<f64>,
    /// Memory a snippet may add, in MiB (0: no limit).
    pub memory_limit_mib: Option<u64>,
    /// Deepest Python call stack.
    pub recursion_limit: Option<usize>,
    /// Printed characters kept per snippet.
    pub max_output_chars: Option<usize>,
    /// `recursive`, `rlm` or `dspy`.
    pub dialect: Option<String>,
    /// A file whose text replaces the default working rules.
    pub instructions: Option<PathBuf>,
    /// Host tools offered to snippets, by name.
    pub tools: Option<Vec<String>>,
    /// Sub-model calls in flight at once.
    pub concurrency: Option<usize>,
    /// `monty` or `cpython`.
    pub sandbox: Option<String>,
    /// The CPython interpreter.
    pub python: Option<PathBuf>,
    /// A JSON Schema file for the result.
    pub schema: Option<PathBuf>,
}

impl RlmOptions {
    /// The host tools named here, else in `[rlm]` (`None`: the default set).
    pub fn tool_names(&self, file: &RlmFile) -> Option<Vec<String>> {
        self.tools.clone().or_else(|| file.tools.clone()).filter(|t| !t.is_empty())
    }
}

/// The RLM settings: `options`, then `file`, then the defaults; `model` is the configuration's
/// model (the primary model when `options` names none); `sub_model`, when the sub-calls go to
/// another provider than the root's, is that provider's model (the sub-model when `options`
/// names none; else it is the primary model).
pub fn rlm_config(
    options: &RlmOptions,
    file: &RlmFile,
    model: &str,
    sub_model: Option<&str>,
) -> Result<RlmConfig, ConfigError> {
    let defaults = RlmConfig::default();
    let dialect = match options.dialect.as_ref().or(file.dialect.as_ref()) {
        Some(name) => Dialect::parse(name).map_err(ConfigError)?,
        None => defaults.dialect,
    };
    let concurrency = options.concurrency.or(file.concurrency).unwrap_or(defaults.batch_concurrency);
    if !(1..=1024).contains(&concurrency) {
        return Err(ConfigError(format!("--concurrency must be between 1 and 1024, not {concurrency}")));
    }
    let snippet_timeout: Duration = match options.snippet_timeout_secs.or(file.snippet_timeout_secs) {
        Some(secs) => seconds("--snippet-timeout", secs)?,
        None => defaults.snippet_timeout,
    };
    let memory_limit_bytes = match options.memory_limit_mib.or(file.memory_limit_mib) {
        Some(mib) => memory_limit(mib)?,
        None => defaults.memory_limit_bytes,
    };
    let instructions = match options.instructions.as_ref().or(file.instructions.as_ref()) {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read --instructions {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let output_schema = match &options.schema {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read schema {}: {e}", path.display())))?;
            serde_json::from_str(&text)
                .map_err(|e| ConfigError(format!("schema {} is not valid JSON: {e}", path.display())))?
        }
        None => defaults.output_schema.clone(),
    };
    let primary = options.model.clone().unwrap_or_else(|| model.to_string());
    let sub = options.sub_model.clone().or(sub_model.map(str::to_string)).unwrap_or_else(|| primary.clone());
    let sub_prompt_chars = recursive_llm::models::context_window(&sub)
        .map(recursive_rlm::sub_prompt_chars_for_window)
        .unwrap_or(defaults.sub_prompt_chars);
    Ok(RlmConfig {
        backend: backend(options, file)?,
        max_iterations: options.max_iterations.unwrap_or(defaults.max_iterations),
        max_llm_calls: options.max_llm_calls.unwrap_or(defaults.max_llm_calls),
        max_depth: options.max_depth.unwrap_or(defaults.max_depth),
        batch_concurrency: concurrency,
        snippet_timeout,
        memory_limit_bytes,
        recursion_limit: recursion_limit(
            options.recursion_limit.or(file.recursion_limit).unwrap_or(defaults.recursion_limit),
        )?,
        max_output_chars: options
            .max_output_chars
            .or(file.max_output_chars)
            .unwrap_or(defaults.max_output_chars)
            .max(1),
        dialect,
        instructions,
        output_schema,
        sub_prompt_chars,
        primary_options: recursive_core::ChatOptions { model: primary, ..Default::default() },
        sub_options: recursive_core::ChatOptions { model: sub, ..Default::default() },
        ..defaults
    })
}

/// The REPL backend from the options, then `[rlm]`.
fn backend(options: &RlmOptions, file: &RlmFile) -> Result<Backend, ConfigError> {
    let python = options.python.clone().or(file.python.clone());
    match options.sandbox.as_deref().or(file.sandbox.as_deref()).unwrap_or("monty") {
        "monty" if python.is_some() => Err(ConfigError("--python needs --sandbox cpython".into())),
        "monty" => Ok(Backend::Monty),
        "cpython" => {
            let defaults = CPythonConfig::default();
            let sandbox = file.os_sandbox.unwrap_or(defaults.sandbox);
            check_sandbox(sandbox, "CPython snippets", "[rlm] os_sandbox")?;
            Ok(Backend::CPython(CPythonConfig { python: python.unwrap_or(defaults.python), sandbox }))
        }
        other => Err(ConfigError(format!("--sandbox must be monty or cpython, not `{other}`"))),
    }
}

/// `--memory-limit` in bytes (`None` for 0).
fn memory_limit(mib: u64) -> Result<Option<usize>, ConfigError> {
    if mib == 0 {
        return Ok(None);
    }
    mib.checked_mul(1 << 20)
        .and_then(|b| usize::try_from(b).ok())
        .map(Some)
        .ok_or_else(|| ConfigError(format!("--memory-limit {mib} MiB is too large")))
}

fn recursion_limit(n: usize) -> Result<usize, ConfigError> {
    let max = recursive_rlm::sandbox::MAX_RECURSION_LIMIT;
    if n == 0 || n > max {
        return Err(ConfigError(format!("--recursion-limit must be between 1 and {max}, not {n}")));
    }
    Ok(n)
}

/// One `--input` spec: `[NAME=]PATH` (`-` reads stdin).
fn load_input(spec: &str, index: usize, count: usize) -> Result<(String, recursive_rlm::InputValue), ConfigError> {
    let (name, path) = match spec.split_once('=') {
        Some((n, p)) if !n.is_empty() && !n.contains('/') => (n.to_string(), p.to_string()),
        _ => {
            let stem = if spec == "-" {
                "stdin".to_string()
            } else {
                std::path::Path::new(spec).file_stem().map(|s| s.to_string_lossy().to_string()).unwrap_or_default()
            };
            let name = if stem.is_empty() || count == 1 { "context".to_string() } else { stem };
            let name = if count > 1 && name == "context" { format!("input{index}") } else { name };
            (name, spec.to_string())
        }
    };
    let value = if path == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| ConfigError(format!("reading stdin: {e}")))?;
        recursive_rlm::InputValue::Text(String::from_utf8_lossy(&bytes).into_owned())
    } else {
        recursive_rlm::InputValue::from_file(&path).map_err(|e| ConfigError(e.to_string()))?
    };
    Ok((name, value))
}

/// Loads every `--input` spec; two inputs with the same name are an error.
pub fn load_inputs(specs: &[String]) -> Result<recursive_rlm::Inputs, ConfigError> {
    let mut inputs = recursive_rlm::Inputs::new();
    for (i, spec) in specs.iter().enumerate() {
        let (name, value) = load_input(spec, i + 1, specs.len())?;
        if inputs.get(&name).is_some() {
            return Err(ConfigError(format!("two inputs are named `{name}`; use NAME=PATH")));
        }
        inputs.insert(name, value);
    }
    Ok(inputs)
}
