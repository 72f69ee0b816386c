//! `recursive chat`: an interactive, line-based conversation with the agent — each line is a
//! turn of one session (streamed answer, tool approvals on the terminal), with slash commands
//! `/exit`, `/cost`, `/model NAME`, `/compact`, `/session`. `recursive sessions` lists sessions;
//! `chat --resume ID` (or `run --resume ID`) continues one in another process.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use recursive_core::{Agent, BudgetLimits, Message};
use recursive_harness::{Harness, RlmOptions};

use crate::ProviderArgs;
use crate::sessions::Session;

/// Arguments of `chat`.
#[derive(Debug, Args)]
pub struct ChatArgs {
    /// Continue the session ID instead of starting one.
    #[arg(long, value_name = "ID")]
    pub resume: Option<String>,
    /// Most model turns per message.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    /// Workspace the tools are confined to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    #[command(flatten)]
    pub conversation: super::ConversationArgs,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// What a line asks for.
enum Line {
    Exit,
    Cost,
    Model(String),
    Session,
    Compact,
    Unknown(String),
    Message(String),
}

fn parse(line: &str) -> Option<Line> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    let Some(command) = line.strip_prefix('/') else { return Some(Line::Message(line.to_string())) };
    let (name, rest) = command.split_once(' ').unwrap_or((command, ""));
    Some(match name {
        "exit" | "quit" => Line::Exit,
        "cost" => Line::Cost,
        "session" => Line::Session,
        "compact" => Line::Compact,
        "model" if !rest.trim().is_empty() => Line::Model(rest.trim().to_string()),
        other => Line::Unknown(other.to_string()),
    })
}

/// Reads prompt lines on a thread of its own, one line per request, so a blocked read neither
/// holds up the runtime nor keeps the process alive after Ctrl-C, and stdin is left alone
/// between requests (for the tool approvals of a turn).
struct Prompter {
    ask: std::sync::mpsc::Sender<()>,
    lines: tokio::sync::mpsc::Receiver<Option<String>>,
}

impl Prompter {
    fn start() -> Self {
        let (ask, asked) = std::sync::mpsc::channel::<()>();
        let (tx, lines) = tokio::sync::mpsc::channel(1);
        std::thread::spawn(move || {
            for () in asked {
                let mut line = String::new();
                let read = match std::io::stdin().read_line(&mut line) {
                    Ok(0) | Err(_) => None,
                    Ok(_) => Some(line),
                };
                if tx.blocking_send(read).is_err() {
                    break;
                }
            }
        });
        Prompter { ask, lines }
    }

    /// The next line; `None` at end of input.
    async fn next(&mut self) -> Option<String> {
        self.ask.send(()).ok()?;
        self.lines.recv().await.flatten()
    }
}

/// The agent of one turn: the chat's tools, policy, system prompt, model and session transcript.
/// The tools of a chat: the built-in ones and the runnables, and the configured MCP servers'
/// as they become ready.
struct ChatTools {
    tools: recursive_core::ToolRegistry,
    late: recursive_core::LateTools,
}

fn chat_agent(
    harness: &Harness,
    tools: &ChatTools,
    system: &str,
    model: &str,
    session: &Session,
    context_window: Option<usize>,
) -> anyhow::Result<Agent> {
    let mut config = harness.agent_config("chat", Some(system.to_string()));
    config.options.model = model.to_string();
    config.transcript_path = Some(session.meta.transcript.clone());
    config.compaction = super::compaction(context_window, model)?;
    Ok(harness.agent_from(tools.tools.clone(), config).with_late_tools(tools.late.clone()))
}

/// Runs the command.
pub async fn execute(args: ChatArgs) -> anyhow::Result<u8> {
    let harness = super::harness(
        &args.provider,
        args.workspace.as_deref(),
        args.approval.approver(),
        args.max_steps,
        &args.runnables.agents,
        RlmOptions::default(),
    )
    .await?;
    let setup = &harness.setup;
    super::check_sandbox(setup.shell_sandbox, "run_shell commands", "[tools.shell] sandbox")?;
    let scope = super::root_scope("chat", &args.provider, true, BudgetLimits::default(), None)?
        .with_max_depth(setup.limits.max_depth);
    let mut model = harness.provider.model();
    let (mut session, mut history): (Session, Vec<Message>) = match &args.resume {
        Some(id) => {
            let s = Session::open(id)?;
            let h = s.history()?;
            (s, h)
        }
        None => (Session::create(setup.workspace.root(), &model, "chat", None)?, Vec::new()),
    };
    let tools = harness.tools();
    let system =
        setup.system_prompt(&tools, args.conversation.system.as_deref(), args.conversation.append_system.as_deref());
    // MCP servers start in the background, as for `run`: their tools join when ready.
    let mcp_config: recursive_tools::McpConfig = harness.config.section(&harness.config.file.mcp, "mcp")?;
    let late = recursive_core::LateTools::new();
    let starting = {
        let (late, scope) = (late.clone(), scope.clone());
        tokio::spawn(async move {
            let mcp = recursive_tools::start_servers(&mcp_config, &scope).await;
            late.add(mcp.registry().clone());
            mcp
        })
    };
    let tools = ChatTools { tools, late };
    eprintln!(
        "recursive chat — session {} ({} earlier message(s)); /exit, /cost, /model NAME, /compact, /session",
        session.meta.id,
        history.len()
    );
    let mut code = 0u8;
    let mut prompter = Prompter::start();
    loop {
        eprint!("\n> ");
        let _ = std::io::stderr().flush();
        // Ctrl-C at the prompt ends the chat as it ends a turn (the blocked read is left behind).
        let line = tokio::select! {
            line = prompter.next() => line,
            _ = scope.cancel_token().cancelled() => {
                code = 8;
                break;
            }
        };
        let Some(line) = line else { break };
        let input = match parse(&line) {
            None => continue,
            Some(Line::Exit) => break,
            Some(Line::Cost) => {
                let m = &session.meta;
                eprintln!(
                    "{} turn(s), {} tokens in, {} out, ${:.4}",
                    m.turns, m.input_tokens, m.output_tokens, m.cost_usd
                );
                continue;
            }
            Some(Line::Session) => {
                eprintln!("session {} — continue it with `recursive chat --resume {0}`", session.meta.id);
                continue;
            }
            Some(Line::Compact) => {
                let agent = chat_agent(&harness, &tools, &system, &model, &session, args.conversation.context_window)?;
                let before = history.len();
                match agent.compact_now(std::mem::take(&mut history), &scope).await {
                    Ok(compacted) => {
                        eprintln!("compacted: {before} → {} message(s)", compacted.len());
                        if let Err(e) = session.save_compacted(&compacted) {
                            eprintln!("warning: the compaction could not be saved in the session: {e:#}");
                        }
                        history = compacted;
                    }
                    Err(e) => eprintln!("error: could not compact: {e}"),
                }
                continue;
            }
            Some(Line::Model(name)) => {
                eprintln!("model: {name}");
                model = name;
                continue;
            }
            Some(Line::Unknown(name)) => {
                eprintln!("unknown command /{name}; the commands are /exit, /cost, /model NAME, /compact, /session");
                continue;
            }
            Some(Line::Message(text)) => text,
        };
        let agent = chat_agent(&harness, &tools, &system, &model, &session, args.conversation.context_window)?;
        // The chat's scope spans every turn: a turn's usage is what it adds.
        let (usage_before, cost_before) = (scope.usage(), scope.cost_usd());
        let result = match agent.continue_in(std::mem::take(&mut history), &input, &scope).await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("\nerror: {:#}", anyhow::Error::new(e.error));
                code = 1;
                *e.partial
            }
        };
        println!();
        history = result.messages.clone();
        let mut turn = result;
        turn.usage = turn_usage(scope.usage(), usage_before);
        turn.cost_usd = (scope.cost_usd() - cost_before).max(0.0);
        if let Err(e) = session.record(&model, &turn) {
            eprintln!("warning: the session could not be updated: {e:#}");
        }
        if scope.cancel_token().is_cancelled() {
            code = 8;
            break;
        }
    }
    // Servers still starting are abandoned (their processes are killed as they are dropped).
    if starting.is_finished() {
        if let Ok(mcp) = starting.await {
            mcp.shutdown().await;
        }
    } else {
        starting.abort();
    }
    eprintln!("session {} saved; continue it with `recursive chat --resume {0}`", session.meta.id);
    Ok(code)
}

/// What a turn added to the chat's usage.
fn turn_usage(after: recursive_core::Usage, before: recursive_core::Usage) -> recursive_core::Usage {
    recursive_core::Usage {
        input_tokens: after.input_tokens.saturating_sub(before.input_tokens),
        output_tokens: after.output_tokens.saturating_sub(before.output_tokens),
        cache_read_tokens: after.cache_read_tokens.saturating_sub(before.cache_read_tokens),
        cache_write_tokens: after.cache_write_tokens.saturating_sub(before.cache_write_tokens),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_messages_and_commands() {
        assert!(parse("  ").is_none());
        assert!(matches!(parse("hello"), Some(Line::Message(m)) if m == "hello"));
        assert!(matches!(parse("/exit"), Some(Line::Exit)));
        assert!(matches!(parse("/model gpt-4o"), Some(Line::Model(m)) if m == "gpt-4o"));
        assert!(matches!(parse("/model"), Some(Line::Unknown(_))));
        assert!(matches!(parse("/cost"), Some(Line::Cost)));
    }
}
