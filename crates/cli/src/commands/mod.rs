//! One module per subcommand, and the wiring they share: the root run scope with its sinks,
//! budget and signal handling, and the tool executor every command gives its tools through
//! (the same permission policy and limits for `run`, `rlm` and `goal`).

pub mod chat;
pub mod goal;
pub mod graph;
pub mod patch;
pub mod rlm;
pub mod run;
pub mod serve;
pub mod sessions;
pub mod trace;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use recursive_core::{
    Budget, BudgetLimits, EventSink, FanoutSink, JsonlSink, RunLimits, RunScope, ToolGate, ToolInvoker, ToolRegistry,
};
use serde::Deserialize;

use crate::ProviderArgs;
use crate::config::LoadedConfig;
use crate::output::CliSink;
use crate::provider::ConfigError;

/// How long a run may take to wind down after SIGTERM before the process exits anyway.
const TERM_GRACE: Duration = Duration::from_secs(5);

/// Builds the root run scope: sinks (stderr/stdout, optional JSONL), the tree budget, and the
/// signals: the first Ctrl-C or a SIGTERM cancels the run (which then ends with its final
/// event and exit status 8); a second Ctrl-C exits at once with 130. SIGTERM and the second
/// Ctrl-C kill the process groups of running shell commands first.
pub fn root_scope(
    name: &str,
    args: &ProviderArgs,
    stream_text: bool,
    limits: BudgetLimits,
    extra: Option<Arc<dyn EventSink>>,
) -> anyhow::Result<RunScope> {
    limits.validate().map_err(|e| ConfigError(e.to_string()))?;
    let mut sink = FanoutSink::new().with(Arc::new(CliSink::new(stream_text, args.quiet)));
    if let Some(path) = &args.events {
        fresh_output("--events", path, args.append)?;
        let jsonl = Arc::new(
            JsonlSink::create(path).map_err(|e| anyhow::anyhow!("cannot open events file {}: {e}", path.display()))?,
        );
        let watched = jsonl.clone();
        watch_log("--events", Box::new(move || watched.error()));
        sink.push(jsonl);
    }
    if let Some(extra) = extra {
        sink.push(extra);
    }
    let scope = RunScope::root(name, Arc::new(sink), Arc::new(Budget::new(limits)));
    watch_signals(scope.cancel_token().clone());
    Ok(scope)
}

/// Reports the first failed write of a log file, if any.
type LogCheck = Box<dyn Fn() -> Option<String> + Send>;

/// The log files of this run (`--events`, `--trajectory`) and how to ask each for a failed write.
static LOGS: std::sync::Mutex<Vec<(&'static str, LogCheck)>> = std::sync::Mutex::new(Vec::new());

/// Has a log file checked when the command ends: a failed write makes the exit status non-zero.
pub fn watch_log(flag: &'static str, check: LogCheck) {
    if let Ok(mut logs) = LOGS.lock() {
        logs.push((flag, check));
    }
}

/// Why a log file of this run is incomplete, if one is.
pub fn incomplete_log() -> Option<String> {
    let logs = LOGS.lock().ok()?;
    logs.iter().find_map(|(flag, check)| check().map(|e| format!("the {flag} file is incomplete: {e}")))
}

/// Refuses an output file that already exists unless `append` (`--append`) asks to add to it.
pub fn fresh_output(flag: &str, path: &std::path::Path, append: bool) -> Result<(), ConfigError> {
    let occupied = std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() > 0);
    if occupied && !append {
        return Err(ConfigError(format!(
            "{flag} {} already exists; remove it, choose another file, or pass --append to add to it",
            path.display()
        )));
    }
    Ok(())
}

fn watch_signals(token: tokio_util::sync::CancellationToken) {
    let interrupt = token.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("\ninterrupted: cancelling the run (press Ctrl-C again to abort)");
            interrupt.cancel();
            if tokio::signal::ctrl_c().await.is_ok() {
                recursive_tools::kill_running_commands();
                std::process::exit(130);
            }
        }
    });
    tokio::spawn(async move {
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            return;
        };
        if term.recv().await.is_some() {
            eprintln!("\nterminated: cancelling the run");
            recursive_tools::kill_running_commands();
            token.cancel();
            tokio::time::sleep(TERM_GRACE).await;
            std::process::exit(143);
        }
    });
}

/// The `[limits]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsFile {
    max_depth: Option<u32>,
    tool_concurrency: Option<usize>,
    stuck_threshold: Option<u32>,
    max_transcript_chars: Option<usize>,
    max_permission_denials: Option<u32>,
    tool_timeout_secs: Option<f64>,
    max_tool_output_chars: Option<usize>,
}

impl LimitsFile {
    /// Run limits: the defaults, with what the table sets.
    pub fn run_limits(&self, max_steps: u32, default_denials: u32) -> anyhow::Result<RunLimits> {
        let mut limits = RunLimits { max_steps, ..Default::default() };
        if let Some(d) = self.max_depth {
            limits.max_depth = d;
        }
        if let Some(c) = self.tool_concurrency {
            limits.tool_concurrency = c;
        }
        if let Some(s) = self.stuck_threshold {
            limits.stuck_threshold = s;
        }
        if let Some(c) = self.max_tool_output_chars {
            limits.max_tool_output_chars = c;
        }
        limits.max_transcript_chars = self.max_transcript_chars;
        limits.max_permission_denials = self.max_permission_denials.unwrap_or(default_denials);
        limits.tool_timeout = self.tool_timeout_secs.map(|s| seconds("[limits] tool_timeout_secs", s)).transpose()?;
        if limits.tool_concurrency == 0 {
            return Err(ConfigError("[limits] tool_concurrency must be at least 1".into()).into());
        }
        Ok(limits)
    }
}

/// The tools of a command and the permission policy and limits every call of the run tree
/// goes through.
pub struct ToolSetup {
    /// The built-in tools (all of them; commands pick what they offer).
    pub builtin: ToolRegistry,
    /// The read-only built-in tools.
    pub read_only: ToolRegistry,
    /// The permission policy of the whole tree.
    pub gate: Arc<dyn ToolGate>,
    /// Run limits from `[limits]`.
    pub limits: RunLimits,
    /// `[tools.shell] sandbox`.
    pub shell_sandbox: recursive_core::confine::SandboxMode,
    /// `[tools.shell] shell`.
    pub shell: String,
    /// The workspace the tools are confined to.
    pub workspace: recursive_tools::Workspace,
}

impl ToolSetup {
    /// Reads `[tools]`, `[permissions]` and `[limits]`; `approval` (`--yes`, `--no-ask`) answers
    /// the policy's questions without a terminal.
    pub fn load(
        config: &LoadedConfig,
        workspace: Option<&Path>,
        approval: ApprovalArgs,
        max_steps: u32,
    ) -> anyhow::Result<Self> {
        let approver = recursive_tools::approver_for_flags(approval.yes, approval.no_ask);
        Self::load_with(config, workspace, approver, max_steps)
    }

    /// As [`ToolSetup::load`], with `approver` answering the policy's questions.
    pub fn load_with(
        config: &LoadedConfig,
        workspace: Option<&Path>,
        approver: Arc<dyn recursive_tools::ApprovalHandler>,
        max_steps: u32,
    ) -> anyhow::Result<Self> {
        let limits_file: LimitsFile = config.section(&config.file.limits, "limits")?;
        let permissions: recursive_tools::PermissionsConfig =
            config.section(&config.file.permissions, "permissions")?;
        let tools_config: recursive_tools::ToolsConfig = config.section(&config.file.tools, "tools")?;
        tools_config.validate().map_err(|e| ConfigError(format!("invalid [tools] table: {e}")))?;
        let limits = limits_file.run_limits(max_steps, permissions.max_denials)?;
        let workspace = recursive_tools::Workspace::new(workspace_dir(workspace)?)?;
        let gate: Arc<dyn ToolGate> = Arc::new(
            recursive_tools::PermissionPolicy::new(permissions, approver)
                .map_err(|e| ConfigError(format!("invalid [permissions] table: {e}")))?
                .with_workspace(workspace.clone()),
        );
        Ok(Self {
            builtin: recursive_tools::builtin_tools(&workspace, &tools_config),
            read_only: recursive_tools::read_only_tools(&workspace, &tools_config),
            gate,
            limits,
            shell_sandbox: tools_config.shell.sandbox,
            shell: tools_config.shell.shell.clone(),
            workspace,
        })
    }

    /// The system prompt for an agent offered `tools`: `system` replaces the default one,
    /// `append` adds to it.
    pub fn system_prompt(&self, tools: &ToolRegistry, system: Option<&str>, append: Option<&str>) -> String {
        let facts = crate::system_prompt::PromptFacts {
            workspace: self.workspace.root(),
            shell: &self.shell,
            confinement: tools.get("run_shell").and_then(|t| t.confinement()),
            tools: tools.names(),
        };
        crate::system_prompt::system_prompt(&facts, system, append)
    }

    /// An executor over these tools with the policy and the limits.
    pub fn invoker(&self, tools: ToolRegistry) -> ToolInvoker {
        ToolInvoker::new(tools).with_gate(self.gate.clone()).with_limits(self.limits.tool_limits())
    }
}

/// Says at start how `what` will run when the OS sandbox is not available: with `auto`, a
/// warning (it runs unconfined); with `required`, a usage error naming `setting`.
pub fn check_sandbox(mode: recursive_core::confine::SandboxMode, what: &str, setting: &str) -> Result<(), ConfigError> {
    use recursive_core::confine::{Plan, SandboxMode};
    match Plan::for_mode(mode) {
        Err(e) => Err(ConfigError(format!("{e}; {what} cannot run because {setting} = \"required\""))),
        Ok(Plan::Unconfined(why)) if mode == SandboxMode::Auto => {
            eprintln!(
                "warning: {what} run UNCONFINED: {why} ({setting} = \"auto\"; \"required\" refuses to run, \"off\" \
                 silences this)"
            );
            Ok(())
        }
        Ok(_) => Ok(()),
    }
}

fn workspace_dir(arg: Option<&Path>) -> anyhow::Result<PathBuf> {
    let dir = match arg {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir()?,
    };
    if !dir.is_dir() {
        return Err(ConfigError(format!("workspace {} is not a directory", dir.display())).into());
    }
    Ok(dir)
}

/// Compaction for `model`: at `--context-window` tokens when given, else at the model's known
/// window; `None` for an unknown model without the flag.
pub fn compaction(
    context_window: Option<usize>,
    model: &str,
) -> Result<Option<recursive_core::compact::CompactionConfig>, ConfigError> {
    if let Some(tokens) = context_window
        && tokens < 256
    {
        return Err(ConfigError(format!("--context-window {tokens}: must be at least 256 tokens")));
    }
    let window = context_window.or_else(|| recursive_llm::models::context_window(model).map(|w| w as usize));
    Ok(window.map(recursive_core::compact::CompactionConfig::for_window))
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
}

impl ApprovalArgs {
    /// Deny whatever would ask (for commands that run nothing).
    pub fn none() -> Self {
        Self { yes: false, no_ask: true }
    }
}

/// A cost cap in USD: finite and not negative; a usage error otherwise.
pub fn usd(flag: &str, usd: f64) -> anyhow::Result<f64> {
    if usd.is_finite() && usd >= 0.0 {
        Ok(usd)
    } else {
        Err(ConfigError(format!("{flag} {usd}: expected a number of USD >= 0")).into())
    }
}

/// A positive number of seconds as a duration; a usage error otherwise (NaN, infinite,
/// negative or too large).
pub fn seconds(flag: &str, secs: f64) -> anyhow::Result<Duration> {
    if !(secs.is_finite() && secs > 0.0) {
        return Err(ConfigError(format!("{flag} {secs}: expected a positive number of seconds")).into());
    }
    Duration::try_from_secs_f64(secs).map_err(|_| ConfigError(format!("{flag} {secs}: too large")).into())
}
