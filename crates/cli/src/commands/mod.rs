//! One module per subcommand, and the wiring they share: the harness every command builds its
//! provider, tools, policy and runnables with, the root run scope with its sinks, budget and
//! signal handling, and the flags several commands take.

pub mod binding;
pub mod chat;
pub mod exports;
pub mod goal;
pub mod graph;
pub mod patch;
pub mod repl;
pub mod rlm;
pub mod run;
pub mod serve;
pub mod served;
pub mod served_graphs;
pub mod sessions;
pub mod stores;
pub mod trace;
pub mod worker;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use recursive_core::{BudgetLimits, EventSink, FanoutSink, JsonlSink, RunScope};
pub use recursive_harness::setup::compaction;
use recursive_harness::{Harness, HarnessOptions, RlmOptions};
pub use recursive_harness::{fresh_output, seconds, usd};

use crate::ProviderArgs;
use crate::output::CliSink;
pub use exports::Exports;

/// What the model is told when its plan is approved (`run --plan`, and `/approve` in `chat`).
pub const PLAN_APPROVED: &str = "The plan is approved. Carry it out now; you may call tools.";

/// How long a run may take to wind down after SIGTERM before the process exits anyway.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// Builds the harness of a command: the configuration, the provider of `args`, the tools of
/// `workspace` under the policy (asks answered by `approver`), and the runnable files.
pub async fn harness(
    args: &ProviderArgs,
    workspace: Option<&Path>,
    approver: Arc<dyn recursive_tools::ApprovalHandler>,
    max_steps: u32,
    runnables: &[String],
    rlm: RlmOptions,
) -> anyhow::Result<Harness> {
    let options = HarnessOptions {
        config: args.config.clone(),
        trust: args.trust,
        provider: args.options(),
        workspace: workspace.map(Path::to_path_buf),
        approver,
        max_steps,
        runnables: runnables.to_vec(),
        rlm,
    };
    let harness = Harness::build(options).await?;
    exports::telemetry_file(&harness)?;
    Ok(harness)
}

/// Starts the configured MCP servers for a command whose runs have no root scope yet (`serve`,
/// `worker`): their start-up shows as the runs' events do; every agent built from `harness`
/// afterwards offers their tools.
pub async fn start_mcp(harness: &mut Harness, args: &ProviderArgs) -> anyhow::Result<recursive_harness::McpServers> {
    let display = Arc::new(CliSink::new(false, args.quiet));
    let scope = harness.root_scope("mcp", display, BudgetLimits::default())?;
    Ok(harness.start_mcp(&scope).await?)
}

/// Builds the root run scope: sinks (stderr/stdout, optional JSONL), the tree budget, and the
/// signals: the first Ctrl-C or a SIGTERM cancels the run (which then ends with its final
/// event and exit status 8); a second Ctrl-C exits at once with 130. SIGTERM and the second
/// Ctrl-C kill the process groups of running shell commands first.
pub fn root_scope(
    exports: &Exports,
    harness: &Harness,
    name: &str,
    args: &ProviderArgs,
    stream_text: bool,
    limits: BudgetLimits,
    extra: Option<Arc<dyn EventSink>>,
) -> anyhow::Result<RunScope> {
    let display = Arc::new(CliSink::new(stream_text, args.quiet));
    let scope = scope_with(exports, harness, name, args, display, limits, extra)?;
    watch_signals(scope.cancel_token().clone());
    Ok(scope)
}

/// The root run scope with `display` showing its events (and `--events`, `extra`, the span
/// exporter of `exports`, which watches the `--events` file), without
/// signal handling: the caller handles Ctrl-C (see [`watch_terminate`] for SIGTERM). The
/// harness sets its limits (the tree's depth cap).
pub fn scope_with(
    exports: &Exports,
    harness: &Harness,
    name: &str,
    args: &ProviderArgs,
    display: Arc<dyn EventSink>,
    limits: BudgetLimits,
    extra: Option<Arc<dyn EventSink>>,
) -> anyhow::Result<RunScope> {
    let mut sink = FanoutSink::new().with(display);
    if let Some(path) = &args.events {
        fresh_output("--events", path, args.append)?;
        let jsonl = Arc::new(
            JsonlSink::create(path).map_err(|e| anyhow::anyhow!("cannot open events file {}: {e}", path.display()))?,
        );
        let watched = jsonl.clone();
        exports.watch_log("--events", Box::new(move || watched.error()));
        sink.push(jsonl);
    }
    if let Some(extra) = extra {
        sink.push(extra);
    }
    if let Some(otlp) = exports.telemetry_sink(harness, args.otel_content)? {
        sink.push(otlp);
    }
    Ok(harness.root_scope(name, Arc::new(sink), limits)?)
}

/// Ctrl-C cancels the run; a second one kills running shell commands and exits with 130.
/// The handlers are registered before this returns, so a signal sent right after is caught.
fn watch_signals(token: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let interrupt = token.clone();
    if let Ok(mut sigint) = signal(SignalKind::interrupt()) {
        tokio::spawn(async move {
            if sigint.recv().await.is_some() {
                eprintln!("\ninterrupted: cancelling the run (press Ctrl-C again to abort)");
                interrupt.cancel();
                if sigint.recv().await.is_some() {
                    recursive_tools::kill_running_commands();
                    std::process::exit(130);
                }
            }
        });
    }
    watch_terminate(token);
}

/// SIGTERM cancels the run, kills the process groups of running shell commands, and exits
/// with 143 after [`TERM_GRACE`]. The handler is registered before this returns.
pub fn watch_terminate(token: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::spawn(async move {
        if term.recv().await.is_some() {
            eprintln!("\nterminated: cancelling the run");
            recursive_tools::kill_running_commands();
            token.cancel();
            tokio::time::sleep(TERM_GRACE).await;
            std::process::exit(143);
        }
    });
}

/// The conversation options of `run` and `chat`: the system prompt and the context window.
#[derive(Debug, Clone, clap::Args)]
pub struct ConversationArgs {
    /// Replace the default system prompt (the agent's environment, working rules and the
    /// AGENTS.md instructions) with this text.
    #[arg(long)]
    pub system: Option<String>,
    /// Add this text to the end of the system prompt.
    #[arg(long, value_name = "TEXT")]
    pub append_system: Option<String>,
    /// Compact the transcript when it nears this many tokens (default: the model's context
    /// window when known; otherwise only `[limits] max_transcript_chars` stops a long run).
    #[arg(long, value_name = "TOKENS")]
    pub context_window: Option<usize>,
}

/// How tool calls that would ask are answered without a terminal prompt.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct ApprovalArgs {
    /// Approve every tool call that would ask.
    #[arg(long, conflicts_with = "no_ask")]
    pub yes: bool,
    /// Deny every tool call that would ask, without prompting.
    #[arg(long)]
    pub no_ask: bool,
    /// How much is asked: ask (default: the rules decide), accept-edits (file edits approved,
    /// commands still ask), plan (read-only: nothing changes, the model proposes a plan) or auto
    /// (as --yes); default: `[permissions] mode`. Deny rules hold in every mode.
    #[arg(long, value_parser = recursive_tools::Mode::parse)]
    pub mode: Option<recursive_tools::Mode>,
}

impl ApprovalArgs {
    /// Deny whatever would ask (for commands that run nothing).
    pub fn none() -> Self {
        Self { yes: false, no_ask: true, mode: None }
    }

    /// Puts `--mode` in force on the harness's permission policy.
    pub fn apply(&self, harness: &recursive_harness::Harness) {
        if let Some(mode) = self.mode {
            harness.setup.mode.set(mode);
        }
    }

    /// The policy's answerer for these flags (a terminal prompt when neither is given).
    pub fn approver(&self) -> Arc<dyn recursive_tools::ApprovalHandler> {
        recursive_tools::approver_for_flags(self.yes, self.no_ask)
    }
}

/// Runnable files (`--agent NAME=FILE`, repeatable): agents, RLMs, goal pursuers or graphs the
/// command's engine may call by name.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RunnableArgs {
    /// A runnable the command may call by name: NAME=FILE, a TOML file declaring `kind =
    /// "agent"` (the default), `"rlm"`, `"goal"` or `"graph"` and its settings (repeatable).
    #[arg(long = "agent", value_name = "NAME=FILE")]
    pub agents: Vec<String>,
}

/// The RLM sandbox of `rlm` and `repl`: the interpreter, its memory and the conventions of its
/// functions.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SandboxArgs {
    /// The interpreter running the snippets: monty (default: a Python subset in this program's
    /// sandbox worker) or cpython (full Python with the interpreter's packages, in a worker
    /// confined by the OS sandbox).
    #[arg(long, value_name = "monty|cpython")]
    pub sandbox: Option<String>,
    /// The CPython interpreter for `--sandbox cpython` (default: `python3` on PATH).
    #[arg(long, value_name = "PATH")]
    pub python: Option<std::path::PathBuf>,
    /// Memory the sandbox's Python values may take beyond the inputs, in MiB (0: no limit;
    /// default 512). Past it a snippet gets a `MemoryError` and the session goes on.
    #[arg(long, value_name = "MIB")]
    pub memory_limit: Option<u64>,
    /// The conventions the sandbox (and an RLM's prompt) present: recursive (sub-calls return
    /// `{"result": ...}`, finish with `submit`), rlm (text, `FINAL`/`FINAL_VAR`) or dspy (text,
    /// `SUBMIT`). Every dialect's finishing forms are understood whatever this is.
    #[arg(long, value_name = "NAME")]
    pub dialect: Option<String>,
}

/// The budget of a whole run tree: its wall clock, tokens and USD.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BudgetArgs {
    /// Wall-clock limit of the whole run tree, in seconds (a snippet or tool still running
    /// then is stopped; exit 10).
    #[arg(long, alias = "max-time", value_name = "SECS", value_parser = crate::flags::secs)]
    pub timeout: Option<f64>,
    /// Token budget of the whole run tree.
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// USD budget of the whole run tree (refused when the model's price is unknown).
    #[arg(long, value_parser = crate::flags::usd)]
    pub max_cost: Option<f64>,
}

impl BudgetArgs {
    /// The limits, every number checked; a cost cap needs the model's price.
    pub fn limits(&self, provider: &recursive_harness::BuiltProvider) -> anyhow::Result<BudgetLimits> {
        if self.max_cost.is_some() {
            provider.require_price("--max-cost")?;
        }
        Ok(BudgetLimits {
            max_tokens: self.max_tokens,
            max_cost_usd: self.max_cost.map(|c| usd("--max-cost", c)).transpose()?,
            wall_clock: self.timeout.map(|t| seconds("--timeout", t)).transpose()?,
            ..Default::default()
        })
    }
}
