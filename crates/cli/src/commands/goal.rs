//! `recursive goal`: pursues an objective by recursive decomposition, showing the goal tree
//! live on stderr, with tools, sub-agents and (given `--input`) an RLM to delegate to.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use clap::Args;
use recursive_core::{BudgetLimits, ChatOptions, ChatProvider, RunScope};
use recursive_goal::{ActionError, Delegate, DelegateAction, GoalConfig, GoalPursuer};
use serde_json::json;

use crate::ProviderArgs;
use crate::config;
use crate::provider::{self, ConfigError};

/// Arguments of `goal`.
#[derive(Debug, Args)]
pub struct GoalArgs {
    /// The objective.
    pub objective: String,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// Deepest goal level.
    #[arg(long, default_value_t = 15)]
    pub max_depth: u32,
    /// Wall clock for the whole pursuit, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = 3600.0)]
    pub max_time: f64,
    /// USD budget for the whole pursuit (default 10; refused when the model's price is unknown).
    #[arg(long)]
    pub max_cost: Option<f64>,
    /// Most goals in the tree.
    #[arg(long, default_value_t = 100)]
    pub max_goals: u32,
    /// Similarity above which a goal counts as a repeat of one on its stack (0..1).
    #[arg(long, default_value_t = 0.9)]
    pub similarity_threshold: f64,
    /// OpenAI-compatible embeddings endpoint (base URL ending in `/v1`) for semantic cycle
    /// detection; the key is read from `OPENAI_API_KEY`.
    #[arg(long, value_name = "URL")]
    pub embeddings_url: Option<String>,
    /// Embedding model for `--embeddings-url`.
    #[arg(long, default_value = "text-embedding-3-small")]
    pub embeddings_model: String,
    /// Append the goal execution log (JSONL) to this file.
    #[arg(long, value_name = "PATH")]
    pub log: Option<PathBuf>,
    /// Print the outcome tree as one JSON object on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    /// Workspace for the read-only tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Long inputs an `rlm` delegate may read ([NAME=]PATH, repeatable).
    #[arg(long = "input", short = 'i', value_name = "[NAME=]PATH")]
    pub inputs: Vec<String>,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
}

/// Delegates a goal to an RLM over the command's `--input` files.
struct RlmDelegate {
    rlm: recursive_rlm::Rlm,
    inputs: recursive_rlm::Inputs,
}

#[async_trait]
impl Delegate for RlmDelegate {
    fn description(&self) -> String {
        format!(
            "A recursive language model that answers a question by writing Python over the long inputs ({}) and \
             calling sub-models on the pieces. Use it for questions about those inputs.",
            self.inputs.iter().map(|(n, _)| n).collect::<Vec<_>>().join(", ")
        )
    }

    async fn run(&self, task: &str, scope: &RunScope) -> Result<String, ActionError> {
        let child = scope.child("rlm").map_err(|e| ActionError::Constrained(e.to_string()))?;
        let result = self.rlm.run(task, self.inputs.clone(), &child).await.map_err(|e| match e.error {
            recursive_rlm::RlmError::Provider(p) => ActionError::Fault(p.to_string()),
            other => ActionError::Failed(other.to_string()),
        })?;
        let finish = result.outcome.finish_reason();
        if finish.is_tree_stop() {
            return Err(ActionError::Constrained(format!("the RLM stopped: {finish}")));
        }
        if !result.outcome.has_output() {
            return Err(ActionError::Failed(format!("the RLM gave no valid answer ({})", result.outcome.as_str())));
        }
        Ok(match &result.output {
            serde_json::Value::Object(m) if m.len() == 1 && m.get("answer").is_some_and(|a| a.is_string()) => {
                m["answer"].as_str().unwrap_or_default().to_string()
            }
            other => other.to_string(),
        })
    }
}

/// The pursuit's USD budget when `--max-cost` is not given.
const DEFAULT_MAX_COST: f64 = 10.0;

/// Runs the command.
pub async fn execute(args: GoalArgs) -> anyhow::Result<u8> {
    let config = config::load(args.provider.config.as_deref(), args.provider.trust)?;
    let (provider, settings): (Arc<dyn ChatProvider>, _) = provider::build(&args.provider, &config).await?;
    let max_cost = match args.max_cost {
        Some(usd) => {
            super::usd("--max-cost", usd)?;
            provider::require_price("--max-cost")?;
            usd
        }
        None => {
            if let Some(model) = provider::unpriced_model() {
                eprintln!(
                    "warning: the price of model `{model}` is unknown, so the pursuit's default $10 budget cannot \
                     hold; add [pricing.\"{model}\"] to recursive.toml"
                );
            }
            DEFAULT_MAX_COST
        }
    };
    let mut goal_config = GoalConfig::default();
    goal_config.constraints.max_depth = args.max_depth;
    goal_config.constraints.max_time = super::seconds("--max-time", args.max_time)?;
    goal_config.constraints.max_cost_usd = max_cost;
    goal_config.constraints.max_goals = args.max_goals as usize;
    if !(0.0..=1.0).contains(&args.similarity_threshold) {
        return Err(ConfigError(format!(
            "--similarity-threshold {}: expected a number between 0 and 1",
            args.similarity_threshold
        ))
        .into());
    }
    goal_config.similarity_threshold = args.similarity_threshold;
    goal_config.options = ChatOptions { model: settings.model.clone().unwrap_or_default(), ..Default::default() };

    // The pursuit carves its own budget node (time, cost) from the root's. Each goal is one
    // level of the run tree, plus a level for the work a goal delegates.
    let scope = super::root_scope("goal", &args.provider, false, BudgetLimits::default(), None)?
        .with_max_depth(goal_config.run_tree_depth());
    let setup = super::ToolSetup::load(&config, args.workspace.as_deref(), args.approval, 0)?;
    let tools = setup.invoker(setup.read_only.clone());
    let mut pursuer = GoalPursuer::new(provider.clone(), tools.clone(), goal_config);
    if !args.inputs.is_empty() {
        let inputs = super::rlm::load_inputs(&args.inputs)?;
        let rlm_config = recursive_rlm::RlmConfig {
            primary_options: ChatOptions { model: settings.model.clone().unwrap_or_default(), ..Default::default() },
            sub_options: ChatOptions { model: settings.model.clone().unwrap_or_default(), ..Default::default() },
            ..Default::default()
        };
        let rlm = recursive_rlm::Rlm::new(provider.clone(), provider.clone(), rlm_config)?.with_host_tools(tools)?;
        pursuer
            .actions_mut()
            .register(Arc::new(DelegateAction::new().with("rlm", Arc::new(RlmDelegate { rlm, inputs }))));
    }
    if let Some(url) = &args.embeddings_url {
        let mut embedder = recursive_goal::HttpEmbedder::new(url.clone(), args.embeddings_model.clone());
        if let Some(key) = recursive_core::env::var("OPENAI_API_KEY") {
            embedder = embedder.with_api_key(key);
        }
        pursuer = pursuer.with_embedder(Arc::new(embedder));
    }
    if let Some(path) = &args.log {
        pursuer = pursuer.with_log(path)?;
    }
    let (outcome, finish) = pursuer.pursue_as_run(&args.objective, &scope).await?;
    if args.json {
        let mut v = serde_json::to_value(&outcome)?;
        if let Some(obj) = v.as_object_mut() {
            obj.insert("outcome".into(), json!(finish.as_str()));
            obj.insert("error".into(), json!(outcome.fault));
        }
        println!("{}", serde_json::to_string(&v)?);
    } else if outcome.result.summary.is_empty() {
        println!("{}", outcome.reason.clone().unwrap_or_default());
    } else {
        println!("{}", outcome.result.summary);
    }
    if !args.json && !args.provider.quiet {
        eprintln!(
            "goal {}{}: {} goal(s), {} tokens, ${:.4}",
            outcome.status.as_str(),
            outcome.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
            outcome.count(),
            outcome.usage.total(),
            outcome.cost_usd
        );
    }
    if let Some(fault) = &outcome.fault {
        eprintln!("error: {fault}");
    }
    Ok(finish.exit_code() as u8)
}
