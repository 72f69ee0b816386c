//! The `recursive` command: parses arguments, wires providers, tools and sinks from the
//! library crates, runs, prints, and maps the outcome to an exit status.

mod chat;
mod commands;
mod flags;
mod output;
mod secrets;
mod sessions;

pub use recursive_harness::ConfigError;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Exit status for a fault (provider unreachable after retries, I/O, bad input file).
pub const EXIT_ERROR: u8 = 1;
/// Exit status for a usage or configuration error (including "no provider configured").
pub const EXIT_CONFIG: u8 = 2;

/// Recursive: an agent harness where agents call tools, agents call agents, goals decompose
/// into goals, and models read huge inputs through a sandboxed Python REPL.
#[derive(Debug, Parser)]
#[command(name = "recursive", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the agent loop on a goal, with the built-in tools scoped to the workspace.
    Run(commands::run::RunArgs),
    /// Talk with the agent in one session: a full-screen terminal UI, or one message per line when piped.
    ///
    /// On a terminal the chat is a full-screen UI: the conversation, a status line, an input box
    /// (Enter sends, Alt-Enter adds a line; during a turn Enter queues and Ctrl-S steers), the run
    /// tree (Ctrl-T), and tool approvals shown with what the call would do. When stdin or stdout
    /// is not a terminal (or with --plain) it reads one message per line and streams the answers
    /// to stdout. /help lists the commands.
    Chat(commands::chat::ChatArgs),
    /// List the sessions of `run` and `chat`, most recent first.
    Sessions(commands::sessions::SessionsArgs),
    /// Pursue an objective by recursive goal decomposition.
    Goal(commands::goal::GoalArgs),
    /// Durable graphs from blueprints: check, run, resume, history, state, fork, show.
    Graph(commands::graph::GraphArgs),
    /// Answer a question over long inputs with a Recursive Language Model (Python sandbox).
    Rlm(commands::rlm::RlmArgs),
    /// An interactive Python session on the RLM sandbox, with model, tool and runnable calls.
    Repl(commands::repl::ReplArgs),
    /// Claim queued graph threads from a PostgreSQL store and run them, until SIGTERM drains it.
    Worker(commands::worker::WorkerArgs),
    /// Serve runs over HTTP: a runs API with live events, and agents as OpenAI-compatible models.
    Serve(commands::serve::ServeArgs),
    /// Serve `run`, `rlm`, `goal` and the `--agent` runnables as MCP tools on stdin/stdout.
    Mcp(commands::serve::McpArgs),
    /// Print the tree of a run from its JSONL events (`--events`) or a goal log (`--log`).
    Trace(commands::trace::TraceArgs),
    /// Apply a V4A patch in the current directory (patch as argument, or on stdin).
    ApplyPatch(commands::patch::PatchArgs),
}

/// Options shared by every command that talks to a model.
#[derive(Debug, Clone, Args)]
pub struct ProviderArgs {
    /// Model API: openai, openai-responses, anthropic, gemini, bedrock, ollama, mock or replay, or the NAME of a
    /// [providers.NAME] table of recursive.toml (default: config file, then auto-detection from ANTHROPIC_API_KEY,
    /// OPENAI_API_KEY, a local Ollama).
    #[arg(long, value_name = "KIND|NAME")]
    pub provider: Option<String>,
    /// Model name.
    #[arg(long)]
    pub model: Option<String>,
    /// Base URL of the API (any OpenAI-compatible server with `--provider openai`).
    #[arg(long)]
    pub base_url: Option<String>,
    /// Per-request timeout in seconds.
    #[arg(long, value_name = "SECS", value_parser = flags::secs)]
    pub request_timeout: Option<f64>,
    /// Record every model call to this cassette file.
    #[arg(long, value_name = "PATH")]
    pub record: Option<PathBuf>,
    /// Replay model calls from this cassette file (no network).
    #[arg(long, value_name = "PATH", conflicts_with = "record")]
    pub replay: Option<PathBuf>,
    /// With `--provider mock`: answer with the replies scripted in this JSON file.
    #[arg(long, value_name = "PATH")]
    pub mock_script: Option<PathBuf>,
    /// Configuration file (default: ./recursive.toml, then the user config dir).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Write every event as JSONL to this file.
    #[arg(long, value_name = "PATH")]
    pub events: Option<PathBuf>,
    /// Append to an existing `--events`, `--record` or `--trajectory` file (otherwise an
    /// existing file is refused, so a run never mixes into an earlier one's log).
    #[arg(long)]
    pub append: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub quiet: bool,
    /// Trust the working directory's recursive.toml as it is now: its MCP servers and
    /// permission widenings take effect, and the trust is recorded until the file changes.
    #[arg(long)]
    pub trust: bool,
    /// With OpenTelemetry export on (`OTEL_EXPORTER_OTLP_ENDPOINT` or `[telemetry]`): put
    /// prompts, completions, inputs and code in the spans.
    #[arg(long)]
    pub otel_content: bool,
}

impl ProviderArgs {
    /// The mock provider and the default configuration, for commands that bind names but call
    /// no model (`graph check`).
    pub fn placeholder() -> Self {
        Self {
            provider: Some("mock".into()),
            model: None,
            base_url: None,
            request_timeout: None,
            record: None,
            replay: None,
            mock_script: None,
            config: None,
            events: None,
            append: false,
            quiet: true,
            trust: false,
            otel_content: false,
        }
    }

    /// How the harness chooses the provider.
    pub fn options(&self) -> recursive_harness::ProviderOptions {
        recursive_harness::ProviderOptions {
            provider: self.provider.clone(),
            model: self.model.clone(),
            base_url: self.base_url.clone(),
            request_timeout: self.request_timeout,
            record: self.record.clone(),
            replay: self.replay.clone(),
            mock_script: self.mock_script.clone(),
            append: self.append,
        }
    }
}

/// The system allocator while this binary is a host; the sandbox worker's limited allocator once
/// it is started as one (with [`recursive_rlm::WORKER_ARG`]), so that it can hold its memory
/// ceiling — and a host that runs out of memory says so as any program does.
#[global_allocator]
static ALLOC: recursive_alloc::HostOrWorker = recursive_alloc::HostOrWorker;

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|a| a == recursive_rlm::WORKER_ARG) {
        return recursive_rlm::worker::serve();
    }
    secrets::hide();
    output::end_quietly_on_broken_pipe();
    run()
}

/// Runs the command on a tokio runtime, then stops the runtime without waiting for blocking
/// reads that never end (stdin that an MCP or chat client keeps open).
fn run() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let code = runtime.block_on(command());
    runtime.shutdown_timeout(std::time::Duration::from_millis(250));
    code
}

/// Runs the parsed command with the exports of this run of the program ([`commands::Exports`]),
/// then flushes its span exporter and maps the outcome, and a log file left incomplete, to the
/// exit status.
async fn command() -> ExitCode {
    let cli = Cli::parse();
    let exports = commands::Exports::default();
    let outcome = match cli.command {
        Command::Run(args) => commands::run::execute(args, &exports).await,
        Command::Goal(args) => commands::goal::execute(args, &exports).await,
        Command::Chat(args) => commands::chat::execute(args, &exports).await,
        Command::Sessions(args) => commands::sessions::execute(args),
        Command::Rlm(args) => commands::rlm::execute(args, &exports).await,
        Command::Repl(args) => commands::repl::execute(args, &exports).await,
        Command::Graph(args) => commands::graph::execute(args, &exports).await,
        Command::Worker(args) => commands::worker::execute(args, &exports).await,
        Command::Serve(args) => commands::serve::execute(args, &exports).await,
        Command::Mcp(args) => commands::serve::execute_mcp(args, &exports).await,
        Command::Trace(args) => commands::trace::execute(args),
        Command::ApplyPatch(args) => commands::patch::execute(args),
    };
    exports.finish_telemetry();
    match outcome {
        Ok(code) => match exports.incomplete_log() {
            // A run that lost part of its log did not do all that was asked.
            Some(e) => {
                eprintln!("error: {e}");
                ExitCode::from(if code == 0 { EXIT_ERROR } else { code })
            }
            None => ExitCode::from(code),
        },
        Err(err) => {
            eprintln!("error: {err:#}");
            let code = if err.downcast_ref::<ConfigError>().is_some() { EXIT_CONFIG } else { EXIT_ERROR };
            ExitCode::from(code)
        }
    }
}
