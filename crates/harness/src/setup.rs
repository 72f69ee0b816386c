//! What every command of one configuration shares: the tools (built-in ones scoped to the
//! workspace), the permission policy every tool call of the run tree goes through, the run
//! limits of `[limits]`, and the checks of numbers and files that the flags give.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use recursive_core::config_trust::KeyClass;
use recursive_core::{RunLimits, ToolGate, ToolInvoker, ToolRegistry};
use serde::Deserialize;

use crate::ConfigError;
use crate::config::LoadedConfig;

/// The `[limits]` table.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsFile {
    #[schemars(extend("x-trust" = KeyClass::cap_of(f64::from(RunLimits::default().max_depth))))]
    max_depth: Option<u32>,
    #[schemars(extend("x-trust" = KeyClass::cap_of(RunLimits::default().tool_concurrency as f64)))]
    tool_concurrency: Option<usize>,
    #[schemars(extend("x-trust" = KeyClass::cap_of(f64::from(RunLimits::default().stuck_threshold))))]
    stuck_threshold: Option<u32>,
    /// Unset: no limit.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    max_transcript_chars: Option<usize>,
    #[schemars(extend("x-trust" = KeyClass::cap_of(f64::from(RunLimits::default().max_permission_denials))))]
    max_permission_denials: Option<u32>,
    /// Unset: no timeout of its own.
    #[schemars(extend("x-trust" = KeyClass::cap()))]
    tool_timeout_secs: Option<f64>,
    #[schemars(extend("x-trust" = KeyClass::cap_of(RunLimits::default().max_tool_output_chars as f64)))]
    max_tool_output_chars: Option<usize>,
}

impl LimitsFile {
    /// Run limits: the defaults, with what the table sets.
    pub fn run_limits(&self, max_steps: u32, default_denials: u32) -> Result<RunLimits, ConfigError> {
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
            return Err(ConfigError("[limits] tool_concurrency must be at least 1".into()));
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
    /// The policy's approval mode (`[permissions] mode`, `--mode`; a chat key cycles it).
    pub mode: recursive_tools::ModeSwitch,
    /// Run limits from `[limits]`.
    pub limits: RunLimits,
    /// `[tools.shell] sandbox`.
    pub shell_sandbox: recursive_core::confine::SandboxMode,
    /// `[tools.shell] shell`.
    pub shell: String,
    /// The workspace the tools are confined to.
    pub workspace: recursive_tools::Workspace,
    /// `[tools] blueprints`: offer the `blueprint` tool.
    pub blueprints: bool,
}

impl ToolSetup {
    /// Reads `[tools]`, `[permissions]` and `[limits]`; `approver` answers the policy's
    /// questions (a terminal prompt, `--yes`, `--no-ask`, or a server's refusal).
    pub fn load(
        config: &LoadedConfig,
        workspace: Option<&Path>,
        approver: Arc<dyn recursive_tools::ApprovalHandler>,
        max_steps: u32,
    ) -> Result<Self, ConfigError> {
        let limits_file: LimitsFile = config.section(&config.file.limits, "limits")?;
        let permissions: recursive_tools::PermissionsConfig =
            config.section(&config.file.permissions, "permissions")?;
        let tools_config: recursive_tools::ToolsConfig = config.section(&config.file.tools, "tools")?;
        tools_config.validate().map_err(|e| ConfigError(format!("invalid [tools] table: {e}")))?;
        let limits = limits_file.run_limits(max_steps, permissions.max_denials)?;
        let workspace = recursive_tools::Workspace::new(workspace_dir(workspace)?)
            .map_err(|e| ConfigError(format!("workspace: {e}")))?;
        let policy = recursive_tools::PermissionPolicy::new(permissions, approver)
            .map_err(|e| ConfigError(format!("invalid [permissions] table: {e}")))?
            .with_workspace(workspace.clone());
        let mode = policy.mode();
        let gate: Arc<dyn ToolGate> = Arc::new(policy);
        Ok(Self {
            builtin: recursive_tools::builtin_tools(&workspace, &tools_config),
            read_only: recursive_tools::read_only_tools(&workspace, &tools_config),
            gate,
            mode,
            limits,
            shell_sandbox: tools_config.shell.sandbox,
            shell: tools_config.shell.shell.clone(),
            workspace,
            blueprints: tools_config.blueprints,
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

/// The workspace directory: the one given, else the current one; it must be a directory.
pub fn workspace_dir(arg: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let dir = match arg {
        Some(d) => d.to_path_buf(),
        None => std::env::current_dir().map_err(|e| ConfigError(format!("no current directory: {e}")))?,
    };
    if !dir.is_dir() {
        return Err(ConfigError(format!("workspace {} is not a directory", dir.display())));
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

/// A cost cap in USD: finite and not negative; a usage error otherwise.
pub fn usd(flag: &str, usd: f64) -> Result<f64, ConfigError> {
    if usd.is_finite() && usd >= 0.0 {
        Ok(usd)
    } else {
        Err(ConfigError(format!("{flag} {usd}: expected a number of USD >= 0")))
    }
}

/// A positive number of seconds as a duration; a usage error otherwise (NaN, infinite,
/// negative or too large).
pub fn seconds(flag: &str, secs: f64) -> Result<Duration, ConfigError> {
    if !(secs.is_finite() && secs > 0.0) {
        return Err(ConfigError(format!("{flag} {secs}: expected a positive number of seconds")));
    }
    Duration::try_from_secs_f64(secs).map_err(|_| ConfigError(format!("{flag} {secs}: too large")))
}
