//! `recursive run`: the agent loop on one goal, with the built-in tools scoped to the
//! workspace, permission rules, MCP servers and sub-agents.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use std::io::IsTerminal;

use recursive_core::{FinishReason, ToolRegistry};
use recursive_harness::RlmOptions;
use recursive_tools::Mode;

use super::PLAN_APPROVED;
use crate::ProviderArgs;
use crate::output;

/// Arguments of `run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// What the agent should do. Without it, `--resume`/`--continue` goes on with the session's
    /// turn a kill cut off, where it was.
    #[arg(required_unless_present_any = ["resume", "continue_session"])]
    pub goal: Option<String>,
    #[command(flatten)]
    pub provider: ProviderArgs,
    /// Most model turns.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
    /// Append the transcript to this JSONL file as the run goes (instead of the session's own).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["continue_session", "resume"])]
    pub transcript: Option<PathBuf>,
    #[command(flatten)]
    pub conversation: super::ConversationArgs,
    /// Continue the most recent session of this workspace with this goal.
    #[arg(long = "continue", conflicts_with = "resume")]
    pub continue_session: bool,
    /// Continue the session ID (`recursive sessions` lists them) with this goal.
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// Print one JSON object on stdout and nothing else there.
    #[arg(long)]
    pub json: bool,
    /// Workspace the tools are confined to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    /// Offer no built-in tools (MCP servers and sub-agents still load).
    #[arg(long)]
    pub no_tools: bool,
    /// Offer the `blueprint` tool: the model writes a graph (checked, bound to what this run may
    /// use, saved under `.recursive/blueprints/`) and runs it as a child run (also `[tools]
    /// blueprints = true`).
    #[arg(long)]
    pub blueprints: bool,
    /// Plan mode (`--mode plan`): the model looks around with the read-only tools and proposes a
    /// plan; on a terminal you are asked to approve it and the run carries it out (`--yes`
    /// approves); otherwise the run stops with the plan pending (exit 7).
    #[arg(long)]
    pub plan: bool,
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    /// Temperature of model calls (0 to 2).
    #[arg(long, value_parser = crate::flags::temperature)]
    pub temperature: Option<f32>,
    /// Cap on tokens generated per model call.
    #[arg(long)]
    pub max_output_tokens: Option<u32>,
    /// How hard a reasoning model thinks (OpenAI's `reasoning_effort`).
    #[arg(long, value_parser = ["minimal", "low", "medium", "high"])]
    pub reasoning_effort: Option<String>,
}

/// How long the first model call waits for MCP servers to start; slower ones join later.
const MCP_START_GRACE: Duration = Duration::from_secs(3);

/// Most rounds of feedback on a plan before the run stops with it pending.
const MAX_PLAN_REVISIONS: usize = 5;

/// The answer to a pending plan.
#[derive(Debug, PartialEq, Eq)]
enum PlanAnswer {
    /// Carry it out.
    Approve,
    /// Leave it pending (exit status 7).
    Reject,
    /// Revise it with this feedback.
    Revise(String),
}

/// Reads an answer to "Carry out this plan?": yes, no, or anything else as feedback.
fn plan_answer(line: &str) -> PlanAnswer {
    match line.trim().to_lowercase().as_str() {
        "y" | "yes" => PlanAnswer::Approve,
        "" | "n" | "no" => PlanAnswer::Reject,
        _ => PlanAnswer::Revise(line.trim().to_string()),
    }
}

/// Asks what to do with a pending plan: `--yes` approves, `--no-ask` or no terminal leaves it
/// pending (exit status 7), otherwise the terminal is asked (y, n, or feedback to revise it).
async fn approve_plan(args: &RunArgs) -> PlanAnswer {
    if args.approval.yes {
        return PlanAnswer::Approve;
    }
    if args.approval.no_ask || args.json || !std::io::stdin().is_terminal() || !std::io::stderr().is_terminal() {
        return PlanAnswer::Reject;
    }
    eprint!("\nCarry out this plan? [y]es / [N]o / or type what to change: ");
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await;
    match answer {
        Ok(Ok(line)) => plan_answer(&line),
        _ => PlanAnswer::Reject,
    }
}

/// The session this run belongs to and its conversation so far: a new one, the latest of the
/// workspace (`--continue`) or the one named (`--resume ID`).
async fn open_session(
    args: &RunArgs,
    workspace: &std::path::Path,
    model: &str,
) -> anyhow::Result<(crate::sessions::Session, Vec<recursive_core::Message>)> {
    use crate::sessions::Session;
    let session = match (&args.resume, args.continue_session) {
        (Some(id), _) => Session::open(id).await?,
        (None, true) => Session::latest_for(workspace).await?,
        (None, false) => {
            let goal = args.goal.as_deref().unwrap_or_default();
            return Ok((Session::create(workspace, model, goal, args.transcript.as_deref()).await?, Vec::new()));
        }
    };
    if args.goal.is_some() {
        let history = session.history()?;
        return Ok((session, history));
    }
    let history = session.history_as_left()?;
    let balanced = recursive_core::Transcript::from_messages(history.clone()).is_ok_and(|t| t.is_balanced());
    if !recursive_core::runtime::cut_off(&history, balanced) {
        let id = &session.meta.id;
        return Err(crate::ConfigError(format!(
            "session {id} has no turn cut off to go on with; give a goal to continue it with"
        ))
        .into());
    }
    Ok((session, history))
}

/// Runs the command.
pub async fn execute(args: RunArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let harness = super::harness(
        &args.provider,
        args.workspace.as_deref(),
        args.approval.approver(),
        args.max_steps,
        &args.runnables.agents,
        RlmOptions::default(),
    )
    .await?;
    args.approval.apply(&harness);
    if args.plan {
        harness.setup.mode.set(Mode::Plan);
    }
    let budget = args.budget.limits(&harness.provider)?;
    harness.check_shell_sandbox(None)?;

    let scope = super::root_scope(exports, &harness, "main", &args.provider, !args.json, budget, None)?;

    // The built-in tools and every `--agent` runnable, as tools.
    let tools = if args.no_tools {
        let mut tools = ToolRegistry::new();
        for tool in harness.runnables().tools() {
            tools.register(tool);
        }
        tools
    } else {
        harness.tools()
    };
    let mut tools = tools;
    if args.blueprints || harness.setup.blueprints {
        let blueprint = harness.blueprint_tool(&tools);
        tools.register(std::sync::Arc::new(blueprint));
    }
    // MCP servers start in the background: the first model call does not wait for them, and
    // their tools join the run as they become ready.
    let mut mcp = harness.spawn_mcp(&scope)?;
    // Servers that start quickly are there for the first call; Ctrl-C stops the wait.
    mcp.wait(MCP_START_GRACE, &scope).await;

    let model_name = harness.provider.model();
    let (mut session, history) = open_session(&args, harness.setup.workspace.root(), &model_name).await?;
    // Each turn is a durable run of the session, held and journaled in the run store: killed,
    // its resume reads back what it had finished.
    let held = session.open_journal(&scope).await?;
    let scope = held.scope().clone();
    let system_prompt = harness.setup.system_prompt(
        &tools,
        args.conversation.system.as_deref(),
        args.conversation.append_system.as_deref(),
    );
    let mut config = harness.agent_config("main", Some(system_prompt));
    config.options.temperature = args.temperature;
    config.options.max_tokens = args.max_output_tokens;
    config.options.reasoning_effort = args.reasoning_effort.clone();
    config.plan_mode = harness.setup.mode.get() == Mode::Plan;
    config.transcript_path = Some(session.meta.transcript.clone());
    config.transcript_store = Some(session.transcript_store());
    config.compaction = super::compaction(args.conversation.context_window, &model_name)?;
    let agent = harness.agent_from(tools, config).with_late_tools(mcp.late());
    let mut outcome = agent.continue_in(history, args.goal.as_deref().unwrap_or_default(), &scope).await;
    for _ in 0..MAX_PLAN_REVISIONS {
        let Ok(result) = &outcome else { break };
        if result.finish_reason != FinishReason::PlanPending {
            break;
        }
        match approve_plan(&args).await {
            PlanAnswer::Reject => break,
            PlanAnswer::Revise(feedback) => {
                let revise = format!("Revise the plan: {feedback}");
                outcome = agent.continue_in(result.messages.clone(), &revise, &scope).await;
            }
            PlanAnswer::Approve => {
                // Carried out under a system prompt and a mode that allow changes again.
                harness.setup.mode.set(Mode::Ask);
                let mut executor = agent.clone();
                executor.config_mut().plan_mode = false;
                outcome = executor.continue_in(result.messages.clone(), PLAN_APPROVED, &scope).await;
                break;
            }
        }
    }
    mcp.shutdown().await;
    let (result, error) = match outcome {
        Ok(r) => (r, None),
        Err(e) => (*e.partial, Some(format!("{:#}", anyhow::Error::new(e.error)))),
    };
    // The session's record is written while this process still holds it.
    if let Err(e) = session.record(&model_name, &result) {
        eprintln!("warning: the session could not be updated: {e:#}");
    }
    if let Err(e) = held.close(true).await {
        eprintln!("warning: {e}");
    }
    if args.json {
        let mut v = output::run_json(&result, error.as_deref());
        if let Some(o) = v.as_object_mut() {
            o.insert("session".into(), serde_json::Value::String(session.meta.id.clone()));
            if harness.provider.unpriced.is_some() {
                // The model's price is unknown: its cost is not $0, it is not known.
                o.insert("cost_usd".into(), serde_json::Value::Null);
            }
        }
        println!("{}", serde_json::to_string(&v)?);
    } else if !args.provider.quiet {
        let cost = match &harness.provider.unpriced {
            Some(model) => format!("cost unknown (no price for {model})"),
            None => format!("${:.4}", result.cost_usd),
        };
        eprintln!(
            "finished: {} after {} step(s), {} tokens, {cost}; session {} (continue with --resume {})",
            result.finish_reason,
            result.steps,
            result.usage.total(),
            session.meta.id,
            session.meta.id,
        );
    }
    if let Some(e) = &error {
        eprintln!("error: {e}");
    }
    Ok(result.finish_reason.exit_code() as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_harness::LoadedConfig;

    #[test]
    fn a_plan_answer_is_yes_no_or_feedback() {
        assert_eq!(plan_answer("Y\n"), PlanAnswer::Approve);
        assert_eq!(plan_answer("\n"), PlanAnswer::Reject);
        assert_eq!(plan_answer("no"), PlanAnswer::Reject);
        assert_eq!(plan_answer("skip step 2\n"), PlanAnswer::Revise("skip step 2".into()));
    }

    #[test]
    fn loaded_config_defaults_when_table_absent() {
        let c = LoadedConfig::default();
        let l: recursive_harness::LimitsFile = c.section(&None, "limits").unwrap();
        assert_eq!(l.run_limits(5, 3).unwrap().max_steps, 5);
    }
}
