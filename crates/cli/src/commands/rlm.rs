//! `recursive rlm`: answers a question over long inputs with a Recursive Language Model. The
//! inputs live in a sandboxed Python REPL; the model never sees them whole.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use recursive_core::{BudgetLimits, ChatOptions};
use serde_json::json;

use crate::ProviderArgs;
use crate::config;
use crate::output;
use crate::provider::{self, ConfigError};

/// Arguments of `rlm`.
#[derive(Debug, Args)]
pub struct RlmArgs {
    /// The question to answer.
    pub question: String,
    /// An input file: PATH (named after the file stem) or NAME=PATH; `-` reads stdin.
    /// JSON files (`.json`) are parsed; anything else is text. Repeatable.
    #[arg(long = "input", short = 'i', value_name = "[NAME=]PATH", required = true)]
    pub inputs: Vec<String>,
    /// JSON Schema file for the output (default: `{"answer": string}`).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Model for sub-calls (`llm_query`), e.g. a cheaper one (default: the primary model).
    #[arg(long)]
    pub sub_model: Option<String>,
    /// Most REPL iterations before the answer is extracted.
    #[arg(long, default_value_t = 20)]
    pub max_iterations: u32,
    /// Budget of sub-model calls shared by the whole RLM tree.
    #[arg(long, default_value_t = 50)]
    pub max_llm_calls: u32,
    /// How deep `rlm_query` may nest (0: no child RLMs).
    #[arg(long, default_value_t = 1)]
    pub max_depth: u32,
    /// Wall-clock limit for each snippet, in seconds (default 60).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Write the trajectory as JSONL to this file as the run goes: every reply, code block,
    /// observation, sub-call (with the heads of its prompt and answer) and submit.
    #[arg(long, value_name = "PATH")]
    pub trajectory: Option<PathBuf>,
    /// Memory the sandbox's Python values may take beyond the inputs, in MiB (0: no limit;
    /// default 512). Past it a snippet gets a `MemoryError` and the run goes on.
    #[arg(long, value_name = "MIB")]
    pub memory_limit: Option<u64>,
    /// Deepest Python call stack in the sandbox (at most 8192; default 1000).
    #[arg(long, value_name = "N")]
    pub recursion_limit: Option<usize>,
    /// Printed characters kept per snippet (head and tail; default 100000).
    #[arg(long, value_name = "N")]
    pub max_output_chars: Option<usize>,
    /// The conventions the sandbox and prompt present: recursive (sub-calls return
    /// `{"result": ...}`, finish with `submit`), rlm (text, `FINAL`/`FINAL_VAR`) or dspy (text,
    /// `SUBMIT`). Every dialect's finishing forms are understood whatever this is.
    #[arg(long, value_name = "NAME")]
    pub dialect: Option<String>,
    /// Replace the default working rules of the prompt with this file's text.
    #[arg(long, value_name = "FILE")]
    pub instructions: Option<PathBuf>,
    /// Expose this tool (built-in or from a configured MCP server) as a sandbox function,
    /// through the permission rules. Repeatable. By default the read-only built-in tools except
    /// `web_fetch` are exposed.
    #[arg(long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// Sub-model calls in flight at once over the whole RLM tree (default 32; BENCHMARKS.md has
    /// the measurement).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// The interpreter running the snippets: monty (default: a Python subset in this program's
    /// sandbox worker) or cpython (full Python with the interpreter's packages, in a worker
    /// confined by the OS sandbox).
    #[arg(long, value_name = "monty|cpython")]
    pub sandbox: Option<String>,
    /// The CPython interpreter for `--sandbox cpython` (default: `python3` on PATH).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Print one JSON object on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    /// Workspace for the read-only host tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

fn load_input(spec: &str, index: usize, count: usize) -> anyhow::Result<(String, recursive_rlm::InputValue)> {
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
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes).context("reading stdin")?;
        recursive_rlm::InputValue::Text(String::from_utf8_lossy(&bytes).into_owned())
    } else {
        recursive_rlm::InputValue::from_file(&path).map_err(|e| ConfigError(format!("input: {e}")))?
    };
    Ok((name, value))
}

/// Loads every `--input` spec; two inputs with the same name are an error.
pub fn load_inputs(specs: &[String]) -> anyhow::Result<recursive_rlm::Inputs> {
    let mut inputs = recursive_rlm::Inputs::new();
    for (i, spec) in specs.iter().enumerate() {
        let (name, value) = load_input(spec, i + 1, specs.len())?;
        if inputs.get(&name).is_some() {
            return Err(ConfigError(format!("two inputs are named `{name}`; use NAME=PATH")).into());
        }
        inputs.insert(name, value);
    }
    Ok(inputs)
}

/// `[rlm]` in recursive.toml: defaults for `recursive rlm` (flags win).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RlmFile {
    dialect: Option<String>,
    tools: Option<Vec<String>>,
    concurrency: Option<usize>,
    timeout_secs: Option<f64>,
    memory_limit_mib: Option<u64>,
    recursion_limit: Option<usize>,
    max_output_chars: Option<usize>,
    instructions: Option<PathBuf>,
    sandbox: Option<String>,
    python: Option<PathBuf>,
    os_sandbox: Option<recursive_core::confine::SandboxMode>,
}

/// The RLM settings from the flags, then `[rlm]`, then the defaults; every value checked.
fn rlm_config(args: &RlmArgs, file: &RlmFile) -> anyhow::Result<recursive_rlm::RlmConfig> {
    let defaults = recursive_rlm::RlmConfig::default();
    let dialect = match args.dialect.as_ref().or(file.dialect.as_ref()) {
        Some(name) => recursive_rlm::Dialect::parse(name).map_err(ConfigError)?,
        None => defaults.dialect,
    };
    let concurrency = args.concurrency.or(file.concurrency).unwrap_or(defaults.batch_concurrency);
    if !(1..=1024).contains(&concurrency) {
        return Err(ConfigError(format!("--concurrency must be between 1 and 1024, not {concurrency}")).into());
    }
    let timeout = match args.timeout.or(file.timeout_secs) {
        Some(secs) => super::seconds("--timeout", secs)?,
        None => defaults.snippet_timeout,
    };
    let memory_limit_bytes = match args.memory_limit.or(file.memory_limit_mib) {
        Some(mib) => memory_limit(mib)?,
        None => defaults.memory_limit_bytes,
    };
    let instructions = match args.instructions.as_ref().or(file.instructions.as_ref()) {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| ConfigError(format!("cannot read --instructions {}: {e}", path.display())))?,
        ),
        None => None,
    };
    let backend = backend(args, file)?;
    Ok(recursive_rlm::RlmConfig {
        backend,
        max_iterations: args.max_iterations,
        max_llm_calls: args.max_llm_calls,
        max_depth: args.max_depth,
        batch_concurrency: concurrency,
        snippet_timeout: timeout,
        memory_limit_bytes,
        recursion_limit: recursion_limit(
            args.recursion_limit.or(file.recursion_limit).unwrap_or(defaults.recursion_limit),
        )?,
        max_output_chars: args.max_output_chars.or(file.max_output_chars).unwrap_or(defaults.max_output_chars).max(1),
        dialect,
        instructions,
        ..defaults
    })
}

/// The REPL backend from `--sandbox`/`--python`, then `[rlm]`.
fn backend(args: &RlmArgs, file: &RlmFile) -> Result<recursive_rlm::repl::Backend, ConfigError> {
    let python = args.python.clone().or(file.python.clone());
    match args.sandbox.as_deref().or(file.sandbox.as_deref()).unwrap_or("monty") {
        "monty" if python.is_some() => Err(ConfigError("--python needs --sandbox cpython".into())),
        "monty" => Ok(recursive_rlm::repl::Backend::Monty),
        "cpython" => {
            let defaults = recursive_rlm::cpython::CPythonConfig::default();
            let sandbox = file.os_sandbox.unwrap_or(defaults.sandbox);
            super::check_sandbox(sandbox, "CPython snippets", "[rlm] os_sandbox")?;
            Ok(recursive_rlm::repl::Backend::CPython(recursive_rlm::cpython::CPythonConfig {
                python: python.unwrap_or(defaults.python),
                sandbox,
            }))
        }
        other => Err(ConfigError(format!("--sandbox must be monty or cpython, not `{other}`"))),
    }
}

/// The sandbox's host tools: the read-only built-ins except `web_fetch`, unless tools are named;
/// named ones come from the built-ins or the MCP servers (started only when a name needs them).
async fn sandbox_tools(
    names: &[String],
    setup: &super::ToolSetup,
    config: &config::LoadedConfig,
    scope: &recursive_core::RunScope,
) -> anyhow::Result<(recursive_core::ToolRegistry, Option<recursive_tools::McpTools>)> {
    let mut tools = recursive_core::ToolRegistry::new();
    if names.is_empty() {
        for name in setup.read_only.names().into_iter().filter(|n| n != "web_fetch") {
            if let Some(tool) = setup.read_only.get(&name) {
                tools.register(tool.clone());
            }
        }
        return Ok((tools, None));
    }
    let mut mcp = None;
    if names.iter().any(|n| setup.builtin.get(n).is_none()) {
        let mcp_config: recursive_tools::McpConfig = config.section(&config.file.mcp, "mcp")?;
        mcp = Some(recursive_tools::start_servers(&mcp_config, scope).await);
    }
    let mcp_tools = mcp.as_ref().map(|m| m.registry().clone()).unwrap_or_default();
    for name in names {
        match setup.builtin.get(name).or_else(|| mcp_tools.get(name)) {
            Some(tool) => {
                tools.register(tool.clone());
            }
            None => {
                let mut known: Vec<String> = setup.builtin.names().into_iter().chain(mcp_tools.names()).collect();
                known.sort();
                if let Some(m) = mcp {
                    m.shutdown().await;
                }
                return Err(
                    ConfigError(format!("--tool {name}: no such tool (available: {})", known.join(", "))).into()
                );
            }
        }
    }
    Ok((tools, mcp))
}

/// Runs the command.
pub async fn execute(args: RlmArgs) -> anyhow::Result<u8> {
    let config = config::load(args.provider.config.as_deref(), args.provider.trust)?;
    let rlm_file: RlmFile = config.section(&config.file.rlm, "rlm")?;
    let mut rlm_config = rlm_config(&args, &rlm_file)?;
    let (provider, settings) = provider::build(&args.provider, &config).await?;
    let inputs = load_inputs(&args.inputs)?;
    if let Some(path) = &args.schema {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading schema {}", path.display()))?;
        rlm_config.output_schema = serde_json::from_str(&text)
            .map_err(|e| ConfigError(format!("schema {} is not valid JSON: {e}", path.display())))?;
    }
    let model = settings.model.clone().unwrap_or_default();
    rlm_config.primary_options = ChatOptions { model: model.clone(), ..Default::default() };
    rlm_config.sub_options = ChatOptions { model: args.sub_model.clone().unwrap_or(model), ..Default::default() };
    if let Some(window) = recursive_llm::models::context_window(&rlm_config.sub_options.model) {
        rlm_config.sub_prompt_chars = recursive_rlm::sub_prompt_chars_for_window(window);
    }

    let setup = super::ToolSetup::load(&config, args.workspace.as_deref(), args.approval, 0)?;
    if args.tools.iter().any(|t| t == "run_shell") {
        super::check_sandbox(setup.shell_sandbox, "run_shell commands", "[tools.shell] sandbox")?;
    }
    let trajectory = match &args.trajectory {
        Some(path) => {
            super::fresh_output("--trajectory", path, args.provider.append)?;
            let sink = recursive_rlm::trajectory::TrajectorySink::create(path)
                .map_err(|e| ConfigError(format!("cannot open --trajectory {}: {e}", path.display())))?;
            let sink = std::sync::Arc::new(sink);
            let watched = sink.clone();
            super::watch_log("--trajectory", Box::new(move || watched.error()));
            Some(sink)
        }
        None => None,
    };
    let extra = trajectory.clone().map(|t| t as std::sync::Arc<dyn recursive_core::EventSink>);
    let scope = super::root_scope("rlm", &args.provider, false, BudgetLimits::default(), extra)?;
    let names = if args.tools.is_empty() { rlm_file.tools.clone().unwrap_or_default() } else { args.tools.clone() };
    let (tools, mcp) = sandbox_tools(&names, &setup, &config, &scope).await?;
    let built = recursive_rlm::Rlm::new(provider.clone(), provider, rlm_config)
        .and_then(|rlm| rlm.with_host_tools(setup.invoker(tools)));
    let rlm = match built {
        Ok(rlm) => rlm,
        Err(e) => {
            if let Some(m) = mcp {
                m.shutdown().await;
            }
            return Err(ConfigError(e.to_string()).into());
        }
    };
    let ran = rlm.run(&args.question, inputs, &scope).await;
    if let Some(m) = mcp {
        m.shutdown().await;
    }
    let (result, error) = match ran {
        Ok(r) => (r, None),
        Err(e) => (*e.partial, Some(format!("{:#}", anyhow::Error::new(e.error)))),
    };
    let finish = result.outcome.finish_reason();

    if args.json {
        let out = json!({
            "outcome": finish.as_str(),
            "error": error,
            "rlm_outcome": result.outcome,
            "output": result.output,
            "submitted": result.submitted,
            "extracted": result.extracted,
            "iterations": result.iterations,
            "llm_calls": result.sub_calls,
            "usage": output::usage_json(&result.usage),
            "cost_usd": result.cost_usd,
            "trajectory": result.trajectory,
        });
        println!("{}", serde_json::to_string(&out)?);
    } else if result.outcome.has_output() {
        println!("{}", answer_text(&result.output)?);
    }
    if !args.json && !args.provider.quiet {
        let how = match &result.outcome {
            recursive_rlm::RlmOutcome::Submitted => "submitted".to_string(),
            recursive_rlm::RlmOutcome::Extracted => "extracted (no valid submit)".to_string(),
            recursive_rlm::RlmOutcome::ExtractionFailed { errors } => {
                format!("no valid answer: the extraction failed ({})", errors.join("; "))
            }
            other => format!("no answer: {}", other.finish_reason()),
        };
        eprintln!(
            "{how} after {} iteration(s), {} sub-call(s), {} tokens, ${:.4}",
            result.iterations,
            result.sub_calls,
            result.usage.total(),
            result.cost_usd
        );
    }
    if let Some(e) = &error {
        eprintln!("error: {e}");
    }
    Ok(finish.exit_code() as u8)
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

/// The answer as printed: the text of a `{"answer": text}` result, pretty JSON otherwise.
fn answer_text(output: &serde_json::Value) -> anyhow::Result<String> {
    Ok(match output {
        serde_json::Value::Object(m) if m.len() == 1 && m.get("answer").is_some_and(|a| a.is_string()) => {
            m["answer"].as_str().unwrap_or_default().to_string()
        }
        other => serde_json::to_string_pretty(other)?,
    })
}
