//! `recursive chat`: a conversation with the agent that people stay in — the terminal UI when
//! stdin and stdout are terminals (see `crate::chat::tui`), else one message per line (see
//! `crate::chat::plain`). `recursive sessions` lists sessions; `chat --resume ID` (or `run
//! --resume ID`) continues one in another process.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use recursive_core::{BudgetLimits, Message};
use recursive_harness::RlmOptions;

use crate::ProviderArgs;
use crate::chat::tui::approval::TuiApprover;
use crate::chat::{ChannelSink, Chat, ChatParts};
use crate::sessions::Session;

/// Arguments of `chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// The first message (the chat goes on after it).
    pub prompt: Option<String>,
    /// Continue the session ID instead of starting one; without ID, pick one of this
    /// workspace's sessions from a list.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "")]
    pub resume: Option<String>,
    /// Continue the most recent session of this workspace.
    #[arg(long = "continue", conflicts_with = "resume")]
    pub continue_session: bool,
    /// Most model turns per message.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    /// Workspace the tools are confined to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// One message per line, even on a terminal (no full-screen UI).
    #[arg(long)]
    pub plain: bool,
    /// How hard a reasoning model thinks (OpenAI's `reasoning_effort`), for every turn.
    #[arg(long, value_parser = ["minimal", "low", "medium", "high"])]
    pub reasoning_effort: Option<String>,
    /// Wall-clock limit of each turn (one message and all it sets off), in seconds; a turn that
    /// reaches it stops and the chat goes on.
    #[arg(long, alias = "max-time", value_name = "SECS", value_parser = crate::flags::secs)]
    pub timeout: Option<f64>,
    /// Token budget of each turn (one message and all it sets off).
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// USD budget of each turn (one message and all it sets off; refused when the model's price
    /// is unknown).
    #[arg(long, value_parser = crate::flags::usd)]
    pub max_cost: Option<f64>,
    #[command(flatten)]
    pub conversation: super::ConversationArgs,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// What applies to every turn of a chat: `--reasoning-effort` and the budget flags (a turn is
/// the chat's counterpart of a `run`: one message and everything it sets off).
#[derive(Debug, Clone, Default)]
pub struct TurnSettings {
    /// `--reasoning-effort`.
    pub reasoning_effort: Option<String>,
    /// `--timeout`, `--max-tokens`, `--max-cost`, for each turn.
    pub limits: BudgetLimits,
}

/// Runs the command.
pub async fn execute(args: ChatArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let tui = !args.plain && std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let (approver, asks): (Arc<dyn recursive_tools::ApprovalHandler>, _) =
        if tui && !args.approval.yes && !args.approval.no_ask {
            let (approver, asks) = TuiApprover::new();
            (Arc::new(approver), Some(asks))
        } else {
            (args.approval.approver(), None)
        };
    let harness = super::harness(
        &args.provider,
        args.workspace.as_deref(),
        approver,
        args.max_steps,
        &args.runnables.agents,
        RlmOptions::default(),
    )
    .await?;
    args.approval.apply(&harness);
    let budget = super::BudgetArgs { timeout: args.timeout, max_tokens: args.max_tokens, max_cost: args.max_cost };
    let settings =
        TurnSettings { reasoning_effort: args.reasoning_effort.clone(), limits: budget.limits(&harness.provider)? };
    settings.limits.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
    let setup = &harness.setup;
    harness.check_shell_sandbox(None)?;
    let model = harness.provider.model();
    let (scope, events) = if tui {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let scope = super::scope_with(
            exports,
            &harness,
            "chat",
            &args.provider,
            Arc::new(ChannelSink(tx)),
            BudgetLimits::default(),
            None,
        )?;
        super::watch_terminate(scope.cancel_token().clone());
        (scope, Some(rx))
    } else {
        (super::root_scope(exports, &harness, "chat", &args.provider, true, BudgetLimits::default(), None)?, None)
    };
    let (session, history): (Session, Vec<Message>) = match (args.resume.as_deref(), args.continue_session) {
        (Some(""), _) => continued(pick_session(setup.workspace.root()).await?)?,
        (Some(id), _) => continued(Session::open(id).await?)?,
        (None, true) => continued(Session::latest_for(setup.workspace.root()).await?)?,
        (None, false) => {
            let title = args.prompt.as_deref().unwrap_or_default();
            (Session::create(setup.workspace.root(), &model, title, None).await?, Vec::new())
        }
    };
    let mut chat = Chat::new(ChatParts {
        harness,
        session,
        history,
        scope,
        system: args.conversation.system.clone(),
        append_system: args.conversation.append_system.clone(),
        context_window: args.conversation.context_window,
    })
    .await?;
    chat.first = args.prompt.clone().filter(|p| !p.trim().is_empty());
    match events {
        Some(events) => {
            let asks = asks.unwrap_or_else(|| tokio::sync::mpsc::unbounded_channel().1);
            crate::chat::tui::run(chat, events, asks, settings).await
        }
        None => crate::chat::plain::run(chat, settings).await,
    }
}

/// A session and its conversation so far.
fn continued(session: Session) -> anyhow::Result<(Session, Vec<Message>)> {
    let history = session.history()?;
    Ok((session, history))
}

/// `chat --resume` without an id: this workspace's sessions, newest first, each with its title,
/// age, size and cost; the person picks one by number (on a terminal only).
async fn pick_session(workspace: &std::path::Path) -> anyhow::Result<Session> {
    let sessions: Vec<_> =
        crate::sessions::list()?.into_iter().filter(|m| m.workspace == workspace).take(PICKER_SIZE).collect();
    if sessions.is_empty() {
        return Err(crate::ConfigError(format!("no earlier session in {}", workspace.display())).into());
    }
    if !std::io::stdin().is_terminal() {
        return Err(crate::ConfigError(
            "`--resume` without an id picks a session on a terminal; give the id (`recursive sessions` lists them)"
                .into(),
        )
        .into());
    }
    let now = chrono::Local::now();
    for (i, m) in sessions.iter().enumerate() {
        eprintln!("{:>3}. {}", i + 1, crate::sessions::picker_line(m, now));
    }
    eprint!("session to continue [1-{}]: ", sessions.len());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let chosen = line.trim().parse::<usize>().ok().and_then(|n| n.checked_sub(1)).and_then(|i| sessions.get(i));
    match chosen {
        Some(meta) => Session::open(&meta.id).await,
        None => Err(crate::ConfigError(format!("`{}` is not one of the numbers listed", line.trim())).into()),
    }
}

/// Most sessions the picker lists.
const PICKER_SIZE: usize = 20;
