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
    /// Wall-clock limit for each snippet, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub timeout: f64,
    /// Write the trajectory (code and observations) as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub trajectory: Option<PathBuf>,
    /// Memory the sandbox's Python values may take beyond the inputs, in MiB (0: no limit).
    /// Past it a snippet gets a `MemoryError` and the run goes on.
    #[arg(long, value_name = "MIB", default_value_t = 512)]
    pub memory_limit: u64,
    /// Deepest Python call stack in the sandbox (at most 8192).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub recursion_limit: usize,
    /// Printed characters kept per snippet (head and tail; the middle is dropped).
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_output_chars: usize,
    /// Print one JSON object on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    /// Workspace for the read-only host tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Approve every host-tool call that would ask.
    #[arg(long, conflicts_with = "no_ask")]
    pub yes: bool,
    /// Deny every host-tool call that would ask, without prompting.
    #[arg(long)]
    pub no_ask: bool,
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
    let text = if path == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).context("reading stdin")?;
        s
    } else {
        std::fs::read_to_string(&path).with_context(|| format!("reading input {path}"))?
    };
    let value = if path.ends_with(".json") {
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ConfigError(format!("input {path} is not valid JSON: {e}")))?;
        recursive_rlm::InputValue::Json(v)
    } else {
        recursive_rlm::InputValue::Text(text)
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

/// Runs the command.
pub async fn execute(args: RlmArgs) -> anyhow::Result<u8> {
    let config = config::load(args.provider.config.as_deref())?;
    let (provider, settings) = provider::build(&args.provider, &config).await?;
    let inputs = load_inputs(&args.inputs)?;
    let mut rlm_config = recursive_rlm::RlmConfig {
        max_iterations: args.max_iterations,
        max_llm_calls: args.max_llm_calls,
        max_depth: args.max_depth,
        snippet_timeout: super::seconds("--timeout", args.timeout)?,
        memory_limit_bytes: memory_limit(args.memory_limit)?,
        recursion_limit: recursion_limit(args.recursion_limit)?,
        max_output_chars: args.max_output_chars.max(1),
        ..Default::default()
    };
    if let Some(path) = &args.schema {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading schema {}", path.display()))?;
        rlm_config.output_schema = serde_json::from_str(&text)
            .map_err(|e| ConfigError(format!("schema {} is not valid JSON: {e}", path.display())))?;
    }
    let model = settings.model.clone().unwrap_or_default();
    rlm_config.primary_options = ChatOptions { model: model.clone(), ..Default::default() };
    rlm_config.sub_options = ChatOptions { model: args.sub_model.clone().unwrap_or(model), ..Default::default() };

    let setup = super::ToolSetup::load(&config, args.workspace.as_deref(), args.yes, args.no_ask, 0)?;
    let scope = super::root_scope("rlm", &args.provider, false, BudgetLimits::default(), None)?;
    let host_tools = setup.invoker(setup.read_only.clone());
    let rlm = recursive_rlm::Rlm::new(provider.clone(), provider, rlm_config)?.with_host_tools(host_tools)?;
    let (result, error) = match rlm.run(&args.question, inputs, &scope).await {
        Ok(r) => (r, None),
        Err(e) => (*e.partial, Some(format!("{:#}", anyhow::Error::new(e.error)))),
    };
    let finish = result.outcome.finish_reason();

    if let Some(path) = &args.trajectory {
        std::fs::write(path, serde_json::to_string_pretty(&result.trajectory)?)
            .with_context(|| format!("writing trajectory {}", path.display()))?;
    }
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
