//! `recursive serve`: the runs API, its live events and the OpenAI-compatible endpoint
//! ([`recursive_serve`]), with runs wired from this program's config exactly as `run`, `rlm`
//! and `goal` wire them. Nobody can be asked in server mode: a tool call that would ask is
//! denied with a reason saying to allow it in the server's `[permissions]` rules.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use recursive_core::{Agent, AgentConfig, ChatOptions, ChatProvider, RunResult, RunScope};
use recursive_goal::{GoalConfig, GoalPursuer};
use recursive_serve::{RunKind, RunOutput, RunRequest, Runner, ServeConfig, Server};

use super::run::AgentFile;
use crate::provider::ConfigError;
use crate::{ProviderArgs, config, provider};

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on; any address off loopback needs a bearer token.
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// Environment variable holding the bearer token every request must carry.
    #[arg(long, value_name = "VAR", default_value = "RECURSIVE_SERVE_TOKEN")]
    pub token_env: String,
    /// Runs at once; more wait in a queue.
    #[arg(long, default_value_t = 8)]
    pub max_concurrent_runs: usize,
    /// Runs that may wait for a slot; beyond it requests get 429 with Retry-After.
    #[arg(long, default_value_t = 32)]
    pub max_queued_runs: usize,
    /// Largest request body, in MiB.
    #[arg(long, default_value_t = 32)]
    pub max_body_mib: usize,
    /// Most model turns of an agent run.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    /// Workspace of the tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Offer a named agent from a TOML definition (as for `run --agent`): NAME=FILE, repeatable.
    /// Each is a model of the OpenAI-compatible endpoint and an `agent` of the runs API.
    #[arg(long = "agent", value_name = "NAME=FILE")]
    pub agents: Vec<String>,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// Runs requests with the provider, tools and permissions of this program's config.
struct ConfiguredRunner {
    provider: Arc<dyn ChatProvider>,
    model: String,
    setup: super::ToolSetup,
    agents: BTreeMap<String, AgentFile>,
}

#[async_trait]
impl Runner for ConfiguredRunner {
    async fn run(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        match request.kind {
            RunKind::Run => self.agent(request, scope).await,
            RunKind::Rlm => self.rlm(request, scope).await,
            RunKind::Goal => self.goal(request, scope).await,
        }
    }

    fn agents(&self) -> Vec<String> {
        self.agents.keys().cloned().collect()
    }
}

impl ConfiguredRunner {
    fn options(&self) -> ChatOptions {
        ChatOptions { model: self.model.clone(), ..Default::default() }
    }

    /// The default agent, or the named one of the request.
    fn build_agent(&self, name: Option<&str>) -> Result<Agent, String> {
        let mut config = AgentConfig {
            name: "main".into(),
            options: self.options(),
            limits: self.setup.limits.clone(),
            system_prompt: Some(self.setup.system_prompt(&self.setup.builtin, None, None)),
            ..Default::default()
        };
        let mut tools = self.setup.builtin.clone();
        if let Some(name) = name {
            let def = self.agents.get(name).ok_or_else(|| format!("no agent `{name}` on this server"))?;
            tools = self.setup.builtin.subset(&def.tools).map_err(|e| format!("agent {name}: {e}"))?;
            config.name = name.to_string();
            config.system_prompt = def.system_prompt.clone();
            if let Some(model) = &def.model {
                config.options.model = model.clone();
            }
            config.limits.max_steps = def.max_steps.unwrap_or(config.limits.max_steps);
        }
        Ok(Agent::new(self.provider.clone()).with_tools(tools).with_gate(self.setup.gate.clone()).with_config(config))
    }

    async fn agent(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        let scope = scope.with_max_depth(self.setup.limits.max_depth);
        let agent = match self.build_agent(request.agent.as_deref()) {
            Ok(agent) => agent,
            Err(e) => return RunOutput::failed(e),
        };
        let outcome = if request.history.is_empty() {
            agent.run_in(&request.input, &scope).await
        } else {
            agent.continue_in(request.history, &request.input, &scope).await
        };
        match outcome {
            Ok(result) => agent_output(&result, None),
            Err(e) => agent_output(&e.partial, Some(format!("{:#}", anyhow::Error::new(e.error)))),
        }
    }

    async fn rlm(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        let mut inputs = recursive_rlm::Inputs::new();
        for (name, text) in request.inputs {
            inputs.insert(name, recursive_rlm::InputValue::Text(text));
        }
        let config = recursive_rlm::RlmConfig {
            primary_options: self.options(),
            sub_options: self.options(),
            ..Default::default()
        };
        let tools = self.setup.invoker(self.setup.read_only.clone());
        let rlm = match recursive_rlm::Rlm::new(self.provider.clone(), self.provider.clone(), config)
            .and_then(|r| r.with_host_tools(tools))
        {
            Ok(rlm) => rlm,
            Err(e) => return RunOutput::failed(e.to_string()),
        };
        let (result, error) = match rlm.run(&request.input, inputs, &scope).await {
            Ok(r) => (r, None),
            Err(e) => (*e.partial, Some(format!("{:#}", anyhow::Error::new(e.error)))),
        };
        let finish = result.outcome.finish_reason();
        let text = match &result.output {
            serde_json::Value::Object(o) if o.len() == 1 => match o.values().next() {
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            },
            serde_json::Value::Null => String::new(),
            other => other.to_string(),
        };
        RunOutput {
            ok: finish.is_success() && error.is_none(),
            outcome: if error.is_some() { "error".into() } else { finish.as_str().to_string() },
            text,
            output: result.output.clone(),
            error,
            input_tokens: result.usage.input_tokens,
            output_tokens: result.usage.output_tokens,
            cost_usd: Some(result.cost_usd),
        }
    }

    async fn goal(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        let config = GoalConfig { options: self.options(), ..Default::default() };
        let tools = self.setup.invoker(self.setup.read_only.clone());
        let scope = scope.with_max_depth(config.run_tree_depth());
        let pursuer = GoalPursuer::new(self.provider.clone(), tools, config);
        let (outcome, finish) = match pursuer.pursue_as_run(&request.input, &scope).await {
            Ok(done) => done,
            Err(e) => return RunOutput::failed(format!("{e:#}")),
        };
        let text = if outcome.result.summary.is_empty() {
            outcome.reason.clone().unwrap_or_default()
        } else {
            outcome.result.summary.clone()
        };
        RunOutput {
            ok: finish.is_success(),
            outcome: finish.as_str().to_string(),
            text,
            output: serde_json::to_value(&outcome).unwrap_or_default(),
            error: outcome.fault.clone(),
            input_tokens: outcome.usage.input_tokens,
            output_tokens: outcome.usage.output_tokens,
            cost_usd: Some(outcome.cost_usd),
        }
    }
}

fn agent_output(result: &RunResult, error: Option<String>) -> RunOutput {
    RunOutput {
        ok: result.finish_reason.is_success() && error.is_none(),
        outcome: if error.is_some() { "error".into() } else { result.finish_reason.as_str().to_string() },
        text: result.output.clone(),
        output: serde_json::Value::Null,
        error,
        input_tokens: result.usage.input_tokens,
        output_tokens: result.usage.output_tokens,
        cost_usd: Some(result.cost_usd),
    }
}

/// The runner for `serve` and `mcp`: this program's config, asks denied.
async fn configured_runner(
    provider_args: &ProviderArgs,
    workspace: Option<&std::path::Path>,
    max_steps: u32,
    agent_specs: &[String],
) -> anyhow::Result<ConfiguredRunner> {
    let agents =
        agent_specs.iter().map(|s| super::run::load_agent_file(s)).collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    if let Some(name) = agents.keys().find(|n| recursive_serve::openai::MODELS.contains(&n.as_str())) {
        return Err(ConfigError(format!("--agent {name}: the name is taken by a built-in model")).into());
    }
    let config = config::load(provider_args.config.as_deref(), provider_args.trust)?;
    let (provider, settings) = provider::build(provider_args, &config).await?;
    let approver: Arc<dyn recursive_tools::ApprovalHandler> = Arc::new(recursive_tools::ServerApprover);
    let setup = super::ToolSetup::load_with(&config, workspace, approver, max_steps)?;
    super::check_sandbox(setup.shell_sandbox, "run_shell commands", "[tools.shell] sandbox")?;
    for def in agents.values() {
        setup.builtin.subset(&def.tools).map_err(|e| ConfigError(format!("an --agent's tools: {e}")))?;
    }
    Ok(ConfiguredRunner { provider, model: settings.model.clone().unwrap_or_default(), setup, agents })
}

/// Arguments of `mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Runs at once; more wait in a queue.
    #[arg(long, default_value_t = 4)]
    pub max_concurrent_runs: usize,
    /// Most model turns of an agent run.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    /// Workspace of the tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// `recursive mcp`: the MCP server on stdin/stdout until the client closes them.
pub async fn execute_mcp(args: McpArgs) -> anyhow::Result<u8> {
    if args.max_concurrent_runs == 0 {
        return Err(ConfigError("--max-concurrent-runs must be at least 1".into()).into());
    }
    let runner = configured_runner(&args.provider, args.workspace.as_deref(), args.max_steps, &[]).await?;
    let config = ServeConfig { max_concurrent_runs: args.max_concurrent_runs, ..Default::default() };
    let server = Server::new(Arc::new(runner), config);
    recursive_serve::mcp::serve_stdio(server).await.map_err(|e| anyhow::anyhow!("MCP over stdio: {e}"))?;
    Ok(0)
}

/// Runs the command: serves until SIGINT or SIGTERM, then cancels the runs and lets their
/// final events out.
pub async fn execute(args: ServeArgs) -> anyhow::Result<u8> {
    if args.max_concurrent_runs == 0 || args.max_body_mib == 0 {
        return Err(ConfigError("--max-concurrent-runs and --max-body-mib must be at least 1".into()).into());
    }
    let runner = configured_runner(&args.provider, args.workspace.as_deref(), args.max_steps, &args.agents).await?;
    let token = recursive_core::env::var(&args.token_env).filter(|t| !t.is_empty());
    let serve_config = ServeConfig {
        listen: args.listen,
        token,
        max_concurrent_runs: args.max_concurrent_runs,
        max_queued_runs: args.max_queued_runs,
        max_body_bytes: args.max_body_mib.saturating_mul(1024 * 1024),
        ..Default::default()
    };
    let server = Server::new(Arc::new(runner), serve_config);
    let quiet = args.provider.quiet;
    let served = server
        .serve(shutdown_signal(), move |addr| {
            // The first line on stdout, for scripts and tests that start the server on port 0.
            println!("listening on http://{addr}");
            if !quiet {
                eprintln!("recursive serve: http://{addr}  (runs API /v1/runs, OpenAI API /v1, /openapi.json)");
            }
        })
        .await;
    match served {
        Ok(()) => Ok(0),
        Err(e @ recursive_serve::ServeError::NoToken(_)) => Err(ConfigError(e.to_string()).into()),
        Err(e) => Err(e.into()),
    }
}

/// Resolves at the first SIGINT or SIGTERM.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}
