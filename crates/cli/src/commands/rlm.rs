//! `recursive rlm`: answers a question over long inputs with a Recursive Language Model. The
//! inputs live in a sandboxed Python REPL; the model never sees them whole.

use std::path::PathBuf;

use clap::Args;
use recursive_harness::{RlmOptions, load_inputs};
use serde_json::json;

use crate::ConfigError;
use crate::ProviderArgs;
use crate::output;

/// Arguments of `rlm`.
#[derive(Debug, Args)]
pub struct RlmArgs {
    /// The question to answer (taken from the checkpoint with `--resume`).
    #[arg(required_unless_present = "resume")]
    pub question: Option<String>,
    /// An input file: PATH (named after the file stem) or NAME=PATH; `-` reads stdin.
    /// JSON files (`.json`) are parsed; anything else is text. Repeatable.
    #[arg(long = "input", short = 'i', value_name = "[NAME=]PATH", required_unless_present = "resume")]
    pub inputs: Vec<String>,
    /// Resume the checkpointed run RUN (after a crash or a kill): its conversation, spend and
    /// REPL variables come back, and no finished model call is made again. The question and
    /// inputs are the run's (inputs given again replace them).
    #[arg(long, value_name = "RUN")]
    pub resume: Option<String>,
    /// Where the run's checkpoints are kept: a SQLite path or `postgres://…` (default:
    /// .recursive/graphs.db in the workspace, the graph store).
    #[arg(long, value_name = "URL", env = "RECURSIVE_GRAPH_STORE")]
    pub store: Option<String>,
    /// Keep no checkpoints (the run cannot be resumed).
    #[arg(long, conflicts_with = "resume")]
    pub no_checkpoint: bool,
    /// JSON Schema file for the output (default: `{"answer": string}`).
    #[arg(long, value_name = "FILE")]
    pub schema: Option<PathBuf>,
    /// Model for sub-calls (`llm_query`), e.g. a cheaper one (default: the primary model).
    #[arg(long)]
    pub sub_model: Option<String>,
    /// The configured provider (`[providers.NAME]`) of sub-calls, e.g. a local model while the
    /// root runs on a hosted one (default: `[rlm] sub_provider`, else the root's provider).
    #[arg(long, value_name = "NAME")]
    pub sub_provider: Option<String>,
    /// Most REPL iterations before the answer is extracted (default 20).
    #[arg(long)]
    pub max_iterations: Option<u32>,
    /// Budget of sub-model calls shared by the whole RLM tree (default 50).
    #[arg(long)]
    pub max_llm_calls: Option<u32>,
    /// How deep `rlm_query` may nest (0: no child RLMs; default 1).
    #[arg(long)]
    pub max_depth: Option<u32>,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
    #[command(flatten)]
    pub sandbox: super::SandboxArgs,
    /// Wall-clock limit for each snippet, in seconds (default 60); past it the snippet gets a
    /// `TimeoutError` and the run goes on.
    #[arg(long, value_name = "SECS", value_parser = crate::flags::secs)]
    pub snippet_timeout: Option<f64>,
    /// Write the trajectory as JSONL to this file as the run goes: every reply, code block,
    /// observation, sub-call (with the heads of its prompt and answer) and submit.
    #[arg(long, value_name = "PATH")]
    pub trajectory: Option<PathBuf>,
    /// Deepest Python call stack in the sandbox (at most 8192; default 1000).
    #[arg(long, value_name = "N")]
    pub recursion_limit: Option<usize>,
    /// Printed characters kept per snippet (head and tail; default 100000).
    #[arg(long, value_name = "N")]
    pub max_output_chars: Option<usize>,
    /// Replace the default working rules of the prompt with this file's text.
    #[arg(long, value_name = "FILE")]
    pub instructions: Option<PathBuf>,
    /// Expose this tool (built-in or from a configured MCP server) as a sandbox function,
    /// through the permission rules. Repeatable. By default the read-only built-in tools except
    /// `web_fetch` are exposed.
    #[arg(long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// Sub-model calls in flight at once over the whole RLM tree (default 64: a batch of 50 goes
    /// out in one wave; lower it for a provider that caps requests in flight — BENCHMARKS.md has
    /// the sweep).
    #[arg(long, value_name = "N", value_parser = crate::flags::concurrency)]
    pub concurrency: Option<usize>,
    /// Print one JSON object on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    /// Workspace for the read-only host tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

impl RlmArgs {
    /// The RLM settings the flags give (the rest come from `[rlm]` and the defaults).
    fn options(&self) -> RlmOptions {
        RlmOptions {
            model: None,
            sub_model: self.sub_model.clone(),
            sub_provider: self.sub_provider.clone(),
            max_iterations: self.max_iterations,
            max_llm_calls: self.max_llm_calls,
            max_depth: self.max_depth,
            snippet_timeout_secs: self.snippet_timeout,
            memory_limit_mib: self.sandbox.memory_limit,
            recursion_limit: self.recursion_limit,
            max_output_chars: self.max_output_chars,
            dialect: self.sandbox.dialect.clone(),
            instructions: self.instructions.clone(),
            tools: (!self.tools.is_empty()).then(|| self.tools.clone()),
            concurrency: self.concurrency,
            sandbox: self.sandbox.sandbox.clone(),
            python: self.sandbox.python.clone(),
            schema: self.schema.clone(),
        }
    }
}

/// Whether the named host tools need the MCP servers (a name is not a built-in tool or a
/// runnable).
fn needs_mcp(names: Option<&Vec<String>>, harness: &recursive_harness::Harness) -> bool {
    let known = |n: &String| harness.setup.builtin.get(n).is_some() || harness.runnables().get(n).is_some();
    names.is_some_and(|names| !names.iter().all(known))
}

/// Runs the command.
pub async fn execute(args: RlmArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    recursive_rlm::schema::warm_up();
    // The store opens (a file and its schema, or a connection) while the harness is built.
    let opening = tokio::spawn(durable_run(DurableArgs {
        off: args.no_checkpoint,
        store: args.store.clone(),
        workspace: args.workspace.clone(),
        resume: args.resume.clone(),
    }));
    let mut harness = super::harness(
        &args.provider,
        args.workspace.as_deref(),
        args.approval.approver(),
        recursive_core::RunLimits::default().max_steps,
        &args.runnables.agents,
        args.options(),
    )
    .await?;
    args.approval.apply(&harness);
    let budget = args.budget.limits(&harness.provider)?;
    let durable = opening.await??;
    let (question, input_specs) = match &durable {
        Some((_, Some(meta), _)) => resumed_invocation(&args, meta)?,
        _ => (args.question.clone().unwrap_or_default(), args.inputs.clone()),
    };
    let inputs = load_inputs(&input_specs)?;
    let tool_names = harness.rlm_options.tool_names(&harness.rlm_file);
    if let Some(names) = &tool_names {
        harness.check_shell_sandbox(Some(names))?;
    }
    let trajectory = match &args.trajectory {
        Some(path) => {
            super::fresh_output("--trajectory", path, args.provider.append)?;
            let sink = recursive_rlm::trajectory::TrajectorySink::create(path)
                .map_err(|e| ConfigError(format!("cannot open --trajectory {}: {e}", path.display())))?;
            let sink = std::sync::Arc::new(sink);
            let watched = sink.clone();
            exports.watch_log("--trajectory", Box::new(move || watched.error()));
            Some(sink)
        }
        None => None,
    };
    let extra = trajectory.clone().map(|t| t as std::sync::Arc<dyn recursive_core::EventSink>);
    let mut scope = super::root_scope(exports, &harness, "rlm", &args.provider, false, budget, extra)?;
    // A resumed run's journal holds what its earlier processes spent and what their calls
    // answered (a new run's is empty).
    let (durable, held) = match durable {
        Some((mut store, meta, runner)) => {
            let held = runner.open(&scope).await?;
            store.spend_restored = held.resumed();
            scope = held.scope().clone();
            (Some((store, meta)), Some(held))
        }
        None => (None, None),
    };
    let mcp = match needs_mcp(tool_names.as_ref(), &harness) {
        true => harness.start_mcp(&scope).await?,
        false => recursive_harness::McpServers::default(),
    };
    let rlm = match harness.rlm(None) {
        Ok(rlm) => rlm,
        Err(e) => {
            mcp.shutdown().await;
            return Err(e.into());
        }
    };
    let rlm = match durable {
        Some((store, _)) => {
            let (key, shown) = (store.slot.name(), store.meta["store"].as_str().unwrap_or_default().to_string());
            if !args.json && !args.provider.quiet {
                eprintln!("checkpointed as {key} in {shown}; after a crash: recursive rlm --resume {key}");
            }
            rlm.with_durable(recursive_rlm::Durable { meta: invocation_meta(&question, &input_specs, &shown), ..store })
        }
        None => rlm,
    };
    let run_key = rlm.durable_key();
    let ran = rlm.run(&question, inputs, &scope).await;
    // The run's key is this run's alone: its journal is never ended, so a `--resume` of it
    // (after a kill, a cancel or a limit) restores all of it.
    if let Some(held) = held {
        held.close(false).await.map_err(anyhow::Error::msg)?;
    }
    mcp.shutdown().await;
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
            "run": run_key,
        });
        println!("{}", serde_json::to_string(&out)?);
    } else if result.outcome.has_output() {
        println!("{}", result.text());
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

/// The durable run of this invocation: the store and key (a new key, or `--resume`'s) and, when
/// resuming, the checkpoint's record of how the run was started. `None` with `--no-checkpoint`.
/// What [`durable_run`] needs of the arguments (owned: it runs as a task of its own).
struct DurableArgs {
    off: bool,
    store: Option<String>,
    workspace: Option<std::path::PathBuf>,
    resume: Option<String>,
}

/// The durable run, the invocation recorded with a resumed one, and this process's hold on the
/// run (one runner per run: a second `--resume` of a run in progress is refused).
type DurableRun = (recursive_rlm::Durable, Option<serde_json::Value>, recursive_store::Runner);

async fn durable_run(args: DurableArgs) -> anyhow::Result<Option<DurableRun>> {
    if args.off {
        return Ok(None);
    }
    let address = match &args.store {
        Some(s) => s.clone(),
        None => super::stores::default_store(args.workspace.as_deref())?,
    };
    let checkpointer = recursive_store::open(&address).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let shown = super::stores::shown_address(&address);
    let key = match &args.resume {
        Some(key) => key.clone(),
        None => format!("rlm-{}", recursive_core::run::new_run_id()),
    };
    let runner = match recursive_store::Runner::take(checkpointer, &recursive_store::DurableKey::own(&key)).await {
        Ok(runner) => runner,
        Err(recursive_store::LeaseError::Held { holder, .. }) => {
            return Err(ConfigError(format!(
                "run `{key}` is being run by another process ({holder}); wait for it to end"
            ))
            .into());
        }
        Err(e) => return Err(anyhow::anyhow!("{e}")),
    };
    let slot = recursive_store::StoreSlot::standalone(runner.store(), &key, "rlm");
    let durable = recursive_rlm::Durable {
        slot: std::sync::Arc::new(slot),
        meta: json!({"store": shown}),
        strict: true,
        spend_restored: false,
    };
    let meta = match &args.resume {
        Some(key) => {
            let found = durable
                .load()
                .await
                .map_err(|e| anyhow::anyhow!("reading run {key}: {e}"))?
                .ok_or_else(|| ConfigError(format!("no checkpointed run `{key}` in {shown}")))?;
            Some(found.meta)
        }
        None => None,
    };
    Ok(Some((durable, meta, runner)))
}

/// How a run was started, kept with its checkpoints: the question and the inputs (as absolute
/// paths, so a resume from another directory finds them).
fn invocation_meta(question: &str, inputs: &[String], store: &str) -> serde_json::Value {
    let absolute: Vec<String> = inputs
        .iter()
        .map(|spec| {
            let (name, path) = match spec.split_once('=') {
                Some((n, p)) => (Some(n), p),
                None => (None, spec.as_str()),
            };
            let path = if path == "-" {
                path.to_string()
            } else {
                std::path::absolute(path).map(|p| p.display().to_string()).unwrap_or_else(|_| path.to_string())
            };
            match name {
                Some(n) => format!("{n}={path}"),
                None => path,
            }
        })
        .collect();
    json!({"question": question, "inputs": absolute, "store": store})
}

/// The question and inputs of a resumed run: the checkpoint's, the inputs replaced by any
/// given again.
fn resumed_invocation(args: &RlmArgs, meta: &serde_json::Value) -> anyhow::Result<(String, Vec<String>)> {
    let question = meta["question"].as_str().unwrap_or_default().to_string();
    if let Some(given) = &args.question
        && given != &question
    {
        return Err(ConfigError(format!(
            "run {} answers another question: {question:?}",
            args.resume.as_deref().unwrap_or("")
        ))
        .into());
    }
    let inputs = if args.inputs.is_empty() {
        let kept: Vec<String> =
            meta["inputs"].as_array().into_iter().flatten().filter_map(|v| v.as_str().map(str::to_string)).collect();
        if kept.iter().any(|spec| spec.ends_with("=-") || spec == "-") {
            return Err(
                ConfigError("the run read an input from stdin; give the inputs again with --input".into()).into()
            );
        }
        kept
    } else {
        args.inputs.clone()
    };
    Ok((question, inputs))
}
