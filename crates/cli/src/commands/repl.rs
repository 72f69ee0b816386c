//! `recursive repl`: an interactive Python session for a person on the RLM's sandbox (Monty, or
//! the confined CPython backend), with the run tree's functions — `model_query`, `tool_call`,
//! `agent_query`, `rlm_query`, `goal_query`, `graph_run` — and `inputs` from `--input`. Line
//! editing and history come from rustyline; a cell that opens a block (or a bracket or a triple
//! quote) continues until it is complete, as the sandbox's parser judges it. Ctrl-C at the prompt clears the line; during a cell it
//! interrupts the cell, not the session. With stdin not a terminal, the whole input runs as one
//! script and the exit status says how it went.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use recursive_core::{AgentEvent, EventKind, EventSink, FinishReason, RunScope, ToolRegistry};
use recursive_harness::{FileLoader, Harness, RlmOptions, load_inputs};
use recursive_rlm::{RlmEvent, RlmSession, SnippetErrorKind, SnippetOutcome};
use rustyline::error::ReadlineError;
use rustyline::history::DefaultHistory;
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{Completer, Editor, Helper, Highlighter, Hinter};
use tokio_util::sync::CancellationToken;

use crate::ProviderArgs;
use crate::output::CliSink;

/// A cell's wall-clock limit when neither `--snippet-timeout` nor `[rlm]` sets one: a person's
/// cell may run agents and graphs.
const CELL_TIMEOUT_SECS: f64 = 3600.0;

/// Arguments of `repl`.
#[derive(Debug, Args)]
pub struct ReplArgs {
    /// An input file bound in `inputs` (as in `recursive rlm`): PATH or NAME=PATH. Repeatable.
    #[arg(long = "input", short = 'i', value_name = "[NAME=]PATH")]
    pub inputs: Vec<String>,
    /// Model of `model_query` / `llm_query` (default: the configuration's).
    #[arg(long)]
    pub sub_model: Option<String>,
    /// The configured provider (`[providers.NAME]`) of sub-calls, e.g. a local model while the
    /// root runs on a hosted one (default: `[rlm] sub_provider`, else the root's provider).
    #[arg(long, value_name = "NAME")]
    pub sub_provider: Option<String>,
    /// Budget of sub-model calls for the whole session (default: none beyond the run's budget).
    #[arg(long)]
    pub max_llm_calls: Option<u32>,
    /// Wall-clock limit of each cell, in seconds (default 3600).
    #[arg(long, value_name = "SECS", value_parser = crate::flags::secs)]
    pub snippet_timeout: Option<f64>,
    /// A tool the session may call (built-in or from a configured MCP server), through the
    /// permission rules. Repeatable. By default every built-in tool is offered.
    #[arg(long = "tool", value_name = "NAME")]
    pub tools: Vec<String>,
    /// Workspace of the tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
    #[command(flatten)]
    pub sandbox: super::SandboxArgs,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

impl ReplArgs {
    fn options(&self, tools: Option<Vec<String>>) -> RlmOptions {
        RlmOptions {
            sub_model: self.sub_model.clone(),
            sub_provider: self.sub_provider.clone(),
            max_llm_calls: Some(self.max_llm_calls.unwrap_or(u32::MAX)),
            snippet_timeout_secs: Some(self.snippet_timeout.unwrap_or(CELL_TIMEOUT_SECS)),
            memory_limit_mib: self.sandbox.memory_limit,
            dialect: self.sandbox.dialect.clone(),
            tools,
            sandbox: self.sandbox.sandbox.clone(),
            python: self.sandbox.python.clone(),
            ..RlmOptions::default()
        }
    }
}

/// Runs the command.
pub async fn execute(args: ReplArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let harness = build_harness(&args).await?;
    let budget = args.budget.limits(&harness.provider)?;
    let inputs = load_inputs(&args.inputs)?;
    let display = Arc::new(ReplDisplay(CliSink::new(false, args.provider.quiet)));
    let scope = super::scope_with(exports, &harness, "repl", &args.provider, display, budget, None)?;
    super::watch_terminate(scope.cancel_token().clone());
    let rlm = harness.rlm(None)?;
    let reach = rlm.reach().clone().with_loader(Arc::new(FileLoader(harness.clone())));
    let session = rlm.with_reach(reach).session(inputs, &scope).await?;
    scope.emit(0, EventKind::RunStarted { goal: "repl".into() });
    let interactive = std::io::stdin().is_terminal();
    let finish = if interactive { interactive_loop(&session, &args).await } else { run_script(&session).await? };
    scope.emit(
        session.cells(),
        EventKind::RunFinished {
            finish_reason: finish.clone(),
            error: None,
            usage: scope.usage(),
            cost_usd: scope.cost_usd(),
        },
    );
    Ok(finish.exit_code() as u8)
}

/// The harness with the session's tools: the named ones, else every built-in tool (`run_shell`
/// only when the shell sandbox allows it). Named tools bound everything the session starts: the
/// built-in tools of the harness are narrowed to them, so a graph run from a file (`graph_run`),
/// the default agent and the goal pursuer may use only those.
async fn build_harness(args: &ReplArgs) -> anyhow::Result<Arc<Harness>> {
    let approver = args.approval.approver();
    let max_steps = recursive_core::RunLimits::default().max_steps;
    let agents = &args.runnables.agents;
    let probe = super::harness(
        &args.provider,
        args.workspace.as_deref(),
        approver.clone(),
        max_steps,
        agents,
        args.options(None),
    )
    .await?;
    args.approval.apply(&probe);
    let named = (!args.tools.is_empty()).then(|| args.tools.clone());
    let shell_ok = recursive_core::confine::Plan::for_mode(probe.setup.shell_sandbox).is_ok();
    let tools = match named {
        Some(names) => {
            probe.check_shell_sandbox(Some(&names))?;
            names
        }
        None => probe.setup.builtin.names().into_iter().filter(|n| n != "run_shell" || shell_ok).collect(),
    };
    let mut harness = probe;
    if !args.tools.is_empty() {
        harness.setup.builtin = only(&harness.setup.builtin, &tools);
        harness.setup.read_only = only(&harness.setup.read_only, &tools);
    }
    harness.rlm_options = args.options(Some(tools));
    Ok(Arc::new(harness))
}

/// The tools of `registry` that are `named` (names it does not have are left out).
fn only(registry: &ToolRegistry, named: &[String]) -> ToolRegistry {
    let mut out = ToolRegistry::new();
    for tool in named.iter().filter_map(|name| registry.get(name)) {
        out.register(tool.clone());
    }
    out
}

/// Reads cells at the prompt until end of input (Ctrl-D) or `exit`.
async fn interactive_loop(session: &RlmSession, args: &ReplArgs) -> FinishReason {
    let mut editor = match Editor::<CellInput, DefaultHistory>::new() {
        Ok(mut e) => {
            e.set_helper(Some(CellInput));
            Some(e)
        }
        Err(e) => {
            eprintln!("error: no line editor: {e}");
            return FinishReason::Fault;
        }
    };
    let history = history_path();
    if let (Some(e), Some(path)) = (editor.as_mut(), &history) {
        let _ = e.load_history(path);
    }
    if !args.provider.quiet {
        eprintln!("{BANNER}");
    }
    loop {
        let Some(mut e) = editor.take() else { break };
        let (e, line) = match tokio::task::spawn_blocking(move || {
            let line = e.readline(">>> ");
            (e, line)
        })
        .await
        {
            Ok(pair) => pair,
            Err(_) => break,
        };
        editor = Some(e);
        let code = match line {
            Ok(code) => code,
            Err(ReadlineError::Interrupted) => {
                eprintln!("KeyboardInterrupt");
                continue;
            }
            Err(_) => break,
        };
        if code.trim().is_empty() {
            continue;
        }
        if let Some(e) = editor.as_mut() {
            let _ = e.add_history_entry(code.as_str());
        }
        if matches!(code.trim(), "exit" | "quit" | "exit()" | "quit()") {
            break;
        }
        let before = (session.scope().usage().total(), session.scope().cost_usd());
        let outcome = run_interruptible(session, &code).await;
        show(&outcome, true);
        if !args.provider.quiet {
            show_cost(session.scope(), before, &outcome);
        }
        if let Some(reason) = session.scope().stop_reason() {
            eprintln!("the session must stop: {reason}");
            return reason;
        }
    }
    if let (Some(mut e), Some(path)) = (editor, history) {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = e.save_history(&path);
    }
    FinishReason::Completed
}

/// Runs stdin as one script; the finish reason says whether it ran to its end.
async fn run_script(session: &RlmSession) -> anyhow::Result<FinishReason> {
    let mut code = String::new();
    std::io::stdin().read_to_string(&mut code).map_err(|e| anyhow::anyhow!("cannot read the script on stdin: {e}"))?;
    let outcome = run_interruptible(session, &code).await;
    show(&outcome, false);
    Ok(match (session.scope().stop_reason(), &outcome.error) {
        (Some(reason), _) => reason,
        (None, None) => FinishReason::Completed,
        (None, Some(e)) if matches!(e.kind, SnippetErrorKind::Interrupted | SnippetErrorKind::Cancelled) => {
            FinishReason::Cancelled
        }
        (None, Some(_)) => FinishReason::Fault,
    })
}

/// Runs one cell; Ctrl-C meanwhile interrupts it.
async fn run_interruptible(session: &RlmSession, code: &str) -> SnippetOutcome {
    let interrupt = CancellationToken::new();
    let trigger = interrupt.clone();
    let watcher = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            trigger.cancel();
        }
    }));
    let outcome = session.run_cell(code, &interrupt).await;
    drop(watcher);
    outcome
}

/// Prints what a cell printed, its value (interactively), a submitted result, and its error.
fn show(outcome: &SnippetOutcome, interactive: bool) {
    if !outcome.stdout.is_empty() {
        print!("{}", outcome.stdout);
        if !outcome.stdout.ends_with('\n') {
            println!();
        }
    }
    if outcome.dropped_output_chars > 0 {
        eprintln!("[{} printed characters were cut from the middle]", outcome.dropped_output_chars);
    }
    match (&outcome.value, &outcome.finished) {
        (_, Some(payload)) => println!("submitted: {payload}"),
        (Some(value), None) if interactive => println!("{value}"),
        _ => {}
    }
    if let Some(error) = &outcome.error {
        eprintln!("{}", error.message);
    }
}

/// The cell's cost on stderr, when it called anything: what the session's tokens and USD were
/// `before` it, and are now.
fn show_cost(scope: &RunScope, (before_tokens, before_cost): (u64, f64), outcome: &SnippetOutcome) {
    let (tokens, cost) = (scope.usage().total(), scope.cost_usd());
    if outcome.host_calls == 0 {
        return;
    }
    eprintln!(
        "[{} call(s), {} tokens, ${:.4} · session {} tokens, ${cost:.4} · {} ms]",
        outcome.host_calls,
        tokens - before_tokens,
        cost - before_cost,
        tokens,
        outcome.duration_ms
    );
}

/// Shown when an interactive session starts.
const BANNER: &str = "recursive repl — Python on the RLM sandbox. Functions: model_query, tool_call, agent_query, \
rlm_query, goal_query, graph_run; `inputs` holds the --input files. Ctrl-C interrupts a cell, Ctrl-D exits.";

fn history_path() -> Option<PathBuf> {
    dirs::data_dir().map(|d| d.join("recursive").join("repl-history"))
}

/// Shows the run tree's events but the session's own cells (the person typed them and sees
/// their output).
struct ReplDisplay(CliSink);

impl EventSink for ReplDisplay {
    fn emit(&self, event: &AgentEvent) {
        let own_cell = event.ids.depth == 0
            && match &event.kind {
                EventKind::Extension(e) => {
                    matches!(e.get::<RlmEvent>(), Some(RlmEvent::RlmSnippet { .. } | RlmEvent::RlmObservation { .. }))
                }
                EventKind::RunStarted { .. } | EventKind::RunFinished { .. } | EventKind::Usage { .. } => true,
                _ => false,
            };
        if !own_cell {
            self.0.emit(event);
        }
    }
}

/// The prompt's helper: decides when a cell is complete.
#[derive(Completer, Helper, Highlighter, Hinter)]
struct CellInput;

impl Validator for CellInput {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        let more = recursive_rlm::needs_more_input(ctx.input());
        Ok(if more { ValidationResult::Incomplete } else { ValidationResult::Valid(None) })
    }
}
