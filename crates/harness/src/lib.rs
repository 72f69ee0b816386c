//! The library harness: one configuration — `recursive.toml` (trusted as the CLI trusts it)
//! plus a command's settings — turned once into the configured provider, tools, permission
//! policy, run limits and runnables: the main agent, the RLM, the goal pursuer, the graph
//! allowlist, and every runnable file (`--agent NAME=FILE`, any kind). Every command of the
//! CLI and the server build through it, so library users get the same defaults as the CLI.
//!
//! ```no_run
//! # async fn demo() -> Result<(), recursive_harness::ConfigError> {
//! use recursive_harness::{Harness, HarnessOptions};
//! let harness = Harness::build(HarnessOptions::default()).await?;
//! let agent = harness.agent("main");
//! let scope = harness.root_scope("main", std::sync::Arc::new(recursive_core::NullSink), Default::default())?;
//! let result = agent.run_in("Summarise README.md", &scope).await;
//! # Ok(()) }
//! ```

pub mod blueprint_tool;
pub mod config;
pub mod files;
pub mod mcp;
pub mod provider;
pub mod rlm;
pub mod setup;
pub mod system_prompt;
pub mod threads;
pub mod trust;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use recursive_core::{
    Agent, AgentConfig, Budget, BudgetLimits, ChatOptions, EventSink, RunLimits, RunScope, Runnable, RunnableKind,
    RunnableTool, Runnables, SubAgent, ToolInvoker, ToolRegistry,
};
use recursive_goal::{DelegateAction, GoalConfig, GoalPursuer};
use recursive_graph::GraphRunnable;
use recursive_graph::blueprint::{Allowlist, Source};
use recursive_rlm::{Reach, Rlm};

pub use blueprint_tool::{BlueprintTool, RunCapabilities};
pub use config::{FileConfig, LoadedConfig};
pub use files::{RunnableFile, RunnableSpec};
pub use mcp::{McpServers, StartingMcp};
pub use provider::{BuiltProvider, ChosenProvider, HOW_TO_CONFIGURE, ProviderOptions};
pub use rlm::{RlmFile, RlmOptions, load_inputs, rlm_config};
pub use setup::{LimitsFile, ToolSetup, check_sandbox, fresh_output, seconds, usd, workspace_dir};
pub use threads::{SubGraphs, ThreadError, ThreadRun};

/// A configuration problem: the CLI's exit status 2, and a message saying how to fix it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// Most bytes of a configuration or runnable file read.
const MAX_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a text file a configuration names: a regular file (no FIFO or device), at most 4 MiB.
pub fn read_text_file(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_FILE_BYTES {
        return Err(format!("{} bytes, more than the {MAX_FILE_BYTES} allowed", meta.len()));
    }
    std::fs::read_to_string(path).map_err(|e| e.to_string())
}

/// What a command gives the harness besides the configuration file.
#[derive(Clone)]
pub struct HarnessOptions {
    /// `--config`: this file instead of `./recursive.toml` and the user's.
    pub config: Option<PathBuf>,
    /// `--trust`: trust the working directory's `recursive.toml` as it is now.
    pub trust: bool,
    /// How the provider is chosen.
    pub provider: ProviderOptions,
    /// The workspace of the tools (default: the current directory).
    pub workspace: Option<PathBuf>,
    /// Who answers the permission policy's questions.
    pub approver: Arc<dyn recursive_tools::ApprovalHandler>,
    /// Model turns of an agent run.
    pub max_steps: u32,
    /// Runnable files, `NAME=FILE` each.
    pub runnables: Vec<String>,
    /// The command's RLM settings (over `[rlm]`).
    pub rlm: RlmOptions,
}

impl Default for HarnessOptions {
    fn default() -> Self {
        Self {
            config: None,
            trust: false,
            provider: ProviderOptions::default(),
            workspace: None,
            approver: recursive_tools::approver_for_flags(false, false),
            max_steps: RunLimits::default().max_steps,
            runnables: Vec::new(),
            rlm: RlmOptions::default(),
        }
    }
}

/// One configuration, built: see the crate docs.
pub struct Harness {
    /// The configuration file.
    pub config: LoadedConfig,
    /// The provider.
    pub provider: BuiltProvider,
    /// The tools, the permission policy and the limits.
    pub setup: ToolSetup,
    /// `[rlm]`.
    pub rlm_file: RlmFile,
    /// The command's RLM settings.
    pub rlm_options: RlmOptions,
    runnables: Runnables,
    /// The runnable files, in order (built again once MCP servers start).
    files: Vec<RunnableFile>,
    /// The tools of the MCP servers started by [`Harness::start_mcp`].
    mcp_tools: ToolRegistry,
    /// The tools of the MCP servers [`Harness::spawn_mcp`] starts, as they become ready.
    mcp_late: recursive_core::LateTools,
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Harness").field("config", &self.config.path).field("runnables", &self.runnables).finish()
    }
}

impl Harness {
    /// Loads the configuration, builds the provider and the tools, and every runnable file.
    /// Bad files are reported before anything is started.
    pub async fn build(options: HarnessOptions) -> Result<Self, ConfigError> {
        let config = config::load(options.config.as_deref(), options.trust)?;
        let files = options.runnables.iter().map(|s| RunnableFile::load(s)).collect::<Result<Vec<_>, _>>()?;
        let provider = provider::build(&options.provider, &config).await?;
        let setup =
            ToolSetup::load(&config, options.workspace.as_deref(), options.approver.clone(), options.max_steps)?;
        let mut rlm_file: RlmFile = config.section(&config.file.rlm, "rlm")?;
        // `--sub-provider` over `[rlm] sub_provider`.
        if let Some(name) = &options.rlm.sub_provider {
            rlm_file.sub_provider = Some(name.clone());
        }
        let mut harness = Self {
            config,
            provider,
            setup,
            rlm_file,
            rlm_options: options.rlm,
            runnables: Runnables::new(),
            files: Vec::new(),
            mcp_tools: ToolRegistry::new(),
            mcp_late: recursive_core::LateTools::new(),
        };
        let sub_provider = harness.rlm_file.sub_provider.clone();
        for (provider, model, origin) in [
            (None, &harness.rlm_options.model, "--model"),
            (sub_provider.as_deref(), &harness.rlm_options.sub_model, "--sub-model"),
        ] {
            let model = model.as_deref().unwrap_or_default();
            let origin = if provider.is_some() { "[rlm] sub_provider" } else { origin };
            harness.provider.note_model_of(provider, model, origin)?;
        }
        for file in &files {
            for (provider, model) in file.choices(sub_provider.as_deref()) {
                harness.provider.note_model_of(provider, model, &format!("named by {}", file.path.display()))?;
            }
        }
        harness.files = files;
        harness.rebuild_runnables()?;
        Ok(harness)
    }

    /// Builds the runnables of the runnable files, each using those of earlier files.
    fn rebuild_runnables(&mut self) -> Result<(), ConfigError> {
        self.runnables = Runnables::new();
        for file in &self.files {
            if self.runnables.get(&file.name).is_some() {
                return Err(ConfigError(format!("--agent {}: two runnables have that name", file.name)));
            }
            let runnable = self.runnable_from(file)?;
            self.runnables.register(runnable);
        }
        Ok(())
    }

    /// Call options of the configuration's model.
    pub fn options(&self) -> ChatOptions {
        ChatOptions { model: self.provider.model(), ..Default::default() }
    }

    /// The runnables of the runnable files.
    pub fn runnables(&self) -> &Runnables {
        &self.runnables
    }

    /// Says at start how `run_shell` will run when it is among `tools` (`None`: the built-in
    /// tools) and the OS sandbox is not available: a warning with `[tools.shell] sandbox =
    /// "auto"`, a usage error with `"required"`. Every command that runs agents calls it.
    pub fn check_shell_sandbox(&self, tools: Option<&[String]>) -> Result<(), ConfigError> {
        let offered = match tools {
            Some(names) => names.iter().any(|t| t == "run_shell"),
            None => self.setup.builtin.get("run_shell").is_some(),
        };
        if !offered {
            return Ok(());
        }
        check_sandbox(self.setup.shell_sandbox, "run_shell commands", "[tools.shell] sandbox")
    }

    /// Run limits of `[limits]`.
    pub fn limits(&self) -> &RunLimits {
        &self.setup.limits
    }

    /// The root of a run tree: `sink` sees every event, `budget` limits the whole tree, and
    /// `[limits] max_depth` caps its depth.
    pub fn root_scope(
        &self,
        name: &str,
        sink: Arc<dyn EventSink>,
        budget: BudgetLimits,
    ) -> Result<RunScope, ConfigError> {
        budget.validate().map_err(|e| ConfigError(e.to_string()))?;
        Ok(RunScope::root(name, sink, Arc::new(Budget::new(budget))).with_max_depth(self.setup.limits.max_depth))
    }

    /// The built-in tools with every runnable as a tool.
    pub fn tools(&self) -> ToolRegistry {
        let mut tools = self.setup.builtin.clone();
        for tool in self.runnables.tools() {
            tools.register(tool);
        }
        tools
    }

    /// The main agent: every tool and runnable, the policy, `[limits]`, the default system
    /// prompt.
    pub fn agent(&self, name: &str) -> Agent {
        self.agent_with(name, self.tools())
    }

    /// An agent of this configuration offered `tools`, with the default system prompt.
    pub fn agent_with(&self, name: &str, tools: ToolRegistry) -> Agent {
        let system_prompt = self.setup.system_prompt(&tools, None, None);
        self.agent_from(tools, self.agent_config(name, Some(system_prompt)))
    }

    /// The configuration of an agent named `name`: the configuration's model, `[limits]` and
    /// this system prompt.
    pub fn agent_config(&self, name: &str, system_prompt: Option<String>) -> AgentConfig {
        AgentConfig {
            name: name.to_string(),
            system_prompt,
            options: self.options(),
            limits: self.setup.limits.clone(),
            ..Default::default()
        }
    }

    /// An agent offered `tools` under the permission policy, configured by `config`.
    pub fn agent_from(&self, tools: ToolRegistry, config: AgentConfig) -> Agent {
        self.agent_on(self.provider.provider.clone(), tools, config)
    }

    /// [`Self::agent_from`] calling `provider`.
    fn agent_on(
        &self,
        provider: Arc<dyn recursive_core::ChatProvider>,
        tools: ToolRegistry,
        config: AgentConfig,
    ) -> Agent {
        Agent::new(provider).with_tools(tools).with_gate(self.setup.gate.clone()).with_config(config)
    }

    /// The RLM of this configuration: the command's settings over `[rlm]`; its host tools are
    /// the ones named (built-in, in `extra`, or runnables), else the read-only built-ins but
    /// `web_fetch`; every runnable whose name can be a Python function is one too.
    pub fn rlm(&self, extra: Option<&ToolRegistry>) -> Result<Rlm, ConfigError> {
        self.rlm_of(&self.rlm_options, (None, None), extra, &self.runnables)
    }

    /// An RLM of `options` whose root calls the provider `providers.0` and whose sub-calls go to
    /// `providers.1`, else `[rlm] sub_provider`, else the root's (`None`: the main provider).
    fn rlm_of(
        &self,
        options: &RlmOptions,
        providers: (Option<&str>, Option<&str>),
        extra: Option<&ToolRegistry>,
        runnables: &Runnables,
    ) -> Result<Rlm, ConfigError> {
        let (root_name, sub_name) = providers;
        let sub_name = sub_name.or(self.rlm_file.sub_provider.as_deref()).or(root_name);
        let root = self.provider.choose(root_name, None)?;
        let sub = if sub_name == root_name { root.clone() } else { self.provider.choose(sub_name, None)? };
        let sub_model = (sub_name != root_name).then_some(sub.model.as_str());
        let config = rlm_config(options, &self.rlm_file, &root.model, sub_model)?;
        let mut tools = ToolRegistry::new();
        match options.tool_names(&self.rlm_file) {
            Some(names) => {
                for name in names {
                    let tool = self
                        .setup
                        .builtin
                        .get(&name)
                        .or_else(|| extra.and_then(|e| e.get(&name)))
                        .cloned()
                        .or_else(|| runnables.get(&name).map(|r| Arc::new(RunnableTool::new(r.clone())) as _));
                    let Some(tool) = tool else {
                        let mut known = self.setup.builtin.names();
                        known.extend(extra.map(ToolRegistry::names).unwrap_or_default());
                        known.extend(runnables.names());
                        known.sort();
                        return Err(ConfigError(format!(
                            "--tool {name}: no such tool (available: {})",
                            known.join(", ")
                        )));
                    };
                    tools.register(tool);
                }
            }
            None => {
                for name in self.setup.read_only.names().into_iter().filter(|n| n != "web_fetch") {
                    if let Some(tool) = self.setup.read_only.get(&name) {
                        tools.register(tool.clone());
                    }
                }
            }
        }
        for runnable in runnables.iter().filter(|r| is_identifier(r.name())) {
            if tools.get(runnable.name()).is_none() {
                tools.register(Arc::new(RunnableTool::new(runnable.clone())));
            }
        }
        // Its code may start the runnables, the default agent (offered the RLM's own tools) and
        // the default goal pursuer.
        let reach = Reach::new(runnables.clone())
            .with_default(Arc::new(self.agent_with("agent", tools.clone())))
            .with_default(Arc::new(self.pursuer_with(GoalConfig::default(), runnables)));
        Rlm::new(root.provider, sub.provider, config)
            .and_then(|rlm| rlm.with_host_tools(self.setup.invoker(tools)))
            .map(|rlm| rlm.with_reach(reach))
            .map_err(|e| ConfigError(e.to_string()))
    }

    /// A goal pursuer of this configuration: the read-only tools and those of started MCP
    /// servers, and every runnable as a delegate.
    pub fn pursuer(&self, config: GoalConfig) -> GoalPursuer {
        self.pursuer_with(config, &self.runnables)
    }

    /// A goal pursuer of this configuration delegating to `delegates`.
    pub fn pursuer_with(&self, mut config: GoalConfig, delegates: &Runnables) -> GoalPursuer {
        if config.options.model.is_empty() {
            config.options.model = self.provider.model();
        }
        self.pursuer_on(self.provider.provider.clone(), config, delegates)
    }

    /// [`Self::pursuer_with`] calling `provider` with the model `config` names.
    fn pursuer_on(
        &self,
        provider: Arc<dyn recursive_core::ChatProvider>,
        config: GoalConfig,
        delegates: &Runnables,
    ) -> GoalPursuer {
        let mut tools = self.setup.read_only.clone();
        tools.extend(&self.mcp_tools);
        let tools = self.setup.invoker(tools);
        let mut pursuer = GoalPursuer::new(provider, tools, config);
        if !delegates.is_empty() {
            let action = delegates.iter().fold(DelegateAction::new(), |a, r| a.with(r.clone()));
            pursuer.actions_mut().register(Arc::new(action));
        }
        pursuer
    }

    /// What blueprints may use: the configuration's model, agent, RLM and goal pursuer as
    /// `default`, its tools, every runnable, and the given sub-graph sources.
    pub fn allowlist(&self, graphs: Vec<(String, Source)>) -> Result<Allowlist, ConfigError> {
        self.allowlist_of(graphs, &self.runnables)
    }

    fn allowlist_of(&self, graphs: Vec<(String, Source)>, runnables: &Runnables) -> Result<Allowlist, ConfigError> {
        let names = self.setup.builtin.names();
        let tools: ToolInvoker = self.setup.invoker(self.setup.builtin.clone());
        let agent = self.agent_with("agent", self.setup.builtin.clone());
        let rlm = self.rlm_of(&self.rlm_options, (None, None), None, runnables)?;
        let pursuer = self.pursuer_with(GoalConfig::default(), runnables);
        let providers = self.provider.clone();
        let allow = Allowlist::new()
            .model("default", self.provider.provider.clone(), self.options())
            .providers(Arc::new(move |name: &str| {
                providers.choose_for_node(name).map(|c| (c.provider, c.model)).map_err(|e| e.0)
            }))
            .tools(tools, names)
            .runnable_as("default", Arc::new(agent))
            .runnable_as("default", Arc::new(rlm))
            .runnable_as("default", Arc::new(pursuer))
            .runnables(runnables);
        Ok(graphs.into_iter().fold(allow, |allow, (name, source)| allow.graph(name, source)))
    }

    /// The `blueprint` tool for a run offered `tools`: blueprints it writes may use the run's
    /// model, these tools (under the policy) and the runnables, nothing else.
    pub fn blueprint_tool(&self, tools: &ToolRegistry) -> BlueprintTool {
        let capabilities = RunCapabilities {
            provider: self.provider.provider.clone(),
            options: self.options(),
            tools: self.setup.invoker(tools.clone()),
            runnables: self.runnables.clone(),
        };
        BlueprintTool::new(capabilities, self.setup.workspace.root().to_path_buf())
    }

    /// The runnable of `kind` the file at `path` declares: a runnable file, or for a graph also
    /// a bare blueprint (bound like `recursive graph run` binds it). It may use every runnable
    /// of the harness.
    pub fn runnable_at(&self, kind: RunnableKind, path: &Path) -> Result<Arc<dyn Runnable>, ConfigError> {
        let text = read_text_file(path).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or(kind.as_str()).to_string();
        let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError(format!("{}: {e}", path.display())))?;
        let runnable = if kind == RunnableKind::Graph && !table.contains_key("kind") {
            let source = Source { origin: path.display().to_string(), text };
            let allow = self.allowlist(sibling_graphs(path.parent().unwrap_or(Path::new("."))))?;
            let graph = recursive_graph::blueprint::load(&source, &allow)
                .map_err(|d| ConfigError(format!("{}: the blueprint does not bind:\n{d}", path.display())))?;
            Arc::new(GraphRunnable::new(Arc::new(graph)).with_identity(stem, None)) as Arc<dyn Runnable>
        } else {
            self.runnable_from(&RunnableFile::parse(&stem, path, &text)?)?
        };
        if runnable.kind() != kind {
            return Err(ConfigError(format!("{} declares {}, not {kind}", path.display(), runnable.kind())));
        }
        Ok(runnable)
    }

    /// The runnable a file declares, using the runnables of earlier files.
    fn runnable_from(&self, file: &RunnableFile) -> Result<Arc<dyn Runnable>, ConfigError> {
        let earlier = &self.runnables;
        let named = |what: &str| format!("--agent {} ({}): {what}", file.name, file.path.display());
        Ok(match &file.spec {
            RunnableSpec::Agent(spec) => {
                let mut tools = ToolRegistry::new();
                let mut waits_for_mcp = false;
                for name in &spec.tools {
                    match (self.setup.builtin.get(name), earlier.get(name)) {
                        (Some(tool), _) => tools.register(tool.clone()),
                        (None, Some(r)) => tools.register(Arc::new(RunnableTool::new(r.clone()))),
                        // Offered once the servers start: `start_mcp` builds the files again, and
                        // the servers `spawn_mcp` starts join as they become ready.
                        (None, None) if self.may_be_mcp_tool(name) => {
                            waits_for_mcp = true;
                            &mut tools
                        }
                        (None, None) => return Err(ConfigError(named(&format!("unknown tool `{name}`")))),
                    };
                }
                let chosen = self
                    .provider
                    .choose(spec.provider.as_deref(), spec.model.as_deref())
                    .map_err(|e| ConfigError(named(&e.0)))?;
                let mut config = self.agent_config(&file.name, spec.system_prompt.clone());
                config.options.model = chosen.model;
                config.limits.max_steps = spec.max_steps.unwrap_or(config.limits.max_steps);
                let mut agent = self.agent_on(chosen.provider, tools, config);
                if waits_for_mcp {
                    agent = agent.with_late_tools(self.mcp_late.clone());
                }
                Arc::new(SubAgent::new(file.name.clone(), spec.description.clone(), agent))
            }
            RunnableSpec::Rlm(spec) => {
                let mut options = RlmOptions::clone(&spec.options);
                options.instructions = options.instructions.map(|p| file.relative(&p));
                options.schema = options.schema.map(|p| file.relative(&p));
                let providers = (spec.provider.as_deref(), spec.sub_provider.as_deref());
                let rlm = self.rlm_of(&options, providers, None, earlier).map_err(|e| ConfigError(named(&e.0)))?;
                Arc::new(rlm.with_identity(file.name.clone(), spec.description.clone()))
            }
            RunnableSpec::Goal(spec) => {
                let chosen = self
                    .provider
                    .choose(spec.provider.as_deref(), spec.model.as_deref())
                    .map_err(|e| ConfigError(named(&e.0)))?;
                let mut config = GoalConfig::default();
                config.options.model = chosen.model;
                config.constraints.max_depth = spec.max_depth.unwrap_or(config.constraints.max_depth);
                config.constraints.max_goals = spec.max_goals.unwrap_or(config.constraints.max_goals);
                if let Some(cap) = spec.max_cost {
                    config.constraints.max_cost_usd = usd("max_cost", cap).map_err(|e| ConfigError(named(&e.0)))?;
                }
                if let Some(secs) = spec.max_time_secs {
                    config.constraints.max_time =
                        seconds("max_time_secs", secs).map_err(|e| ConfigError(named(&e.0)))?;
                }
                let delegates = match &spec.delegates {
                    None => earlier.clone(),
                    Some(names) => names.iter().try_fold(Runnables::new(), |d, n| match earlier.get(n) {
                        Some(r) => Ok(d.with(r.clone())),
                        None => Err(ConfigError(named(&format!("no earlier runnable `{n}` to delegate to")))),
                    })?,
                };
                Arc::new(
                    self.pursuer_on(chosen.provider, config, &delegates)
                        .with_identity(file.name.clone(), spec.description.clone()),
                )
            }
            RunnableSpec::Graph(spec) => {
                let path = file.relative(&spec.blueprint);
                let text = read_text_file(&path)
                    .map_err(|e| ConfigError(named(&format!("blueprint {}: {e}", path.display()))))?;
                let source = Source { origin: path.display().to_string(), text };
                let dir = path.parent().unwrap_or(Path::new("."));
                let allow = self.allowlist_of(sibling_graphs(dir), earlier)?;
                let graph = recursive_graph::blueprint::load(&source, &allow)
                    .map_err(|d| ConfigError(named(&format!("the blueprint does not bind:\n{d}"))))?;
                Arc::new(GraphRunnable::new(Arc::new(graph)).with_identity(file.name.clone(), spec.description.clone()))
            }
        })
    }
}

/// Loads the runnable files a person names in `recursive repl` (see [`Harness::runnable_at`]).
pub struct FileLoader(pub Arc<Harness>);

impl recursive_rlm::RunnableLoader for FileLoader {
    fn load(&self, kind: RunnableKind, path: &Path) -> Result<Arc<dyn Runnable>, String> {
        self.0.runnable_at(kind, path).map_err(|e| e.0)
    }
}

/// The blueprints in `dir` (the possible sub-graphs of one there), by file stem.
pub fn sibling_graphs(dir: &Path) -> Vec<(String, Source)> {
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .filter_map(|path| {
            let stem = path.file_stem()?.to_str()?.to_string();
            let text = read_text_file(&path).ok()?;
            Some((stem, Source { origin: path.display().to_string(), text }))
        })
        .collect()
}

/// Whether `name` can be a Python function's name.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
