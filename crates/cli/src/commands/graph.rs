//! `recursive graph`: check, run and resume durable graphs written as blueprints, and read,
//! replay and fork a thread's checkpoint history. A blueprint binds only what this command
//! allows: the configured model (`default`), the default agent and `--agent` sub-agents, the
//! built-in tools (under the permission policy), the default RLM and goal pursuer, and the
//! blueprints next to it or named with `--graph`. Threads live in a checkpoint store: by
//! default `.recursive/graphs.db` in the workspace, or `--store postgres://…`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use recursive_graph::blueprint::{self, Source};
use recursive_graph::jobs::{EnqueueError, enqueue_graph, enqueue_resume};
use recursive_graph::{Finish, GraphError, GraphOutcome, Schema, Start};
use recursive_harness::{RlmOptions, SubGraphs, ThreadError, ThreadRun};
use recursive_store::queue::{JobQueue, QueueError};
use recursive_store::{Checkpointer, PostgresCheckpointer, ThreadInfo, ThreadStatus};
use serde_json::{Value, json};

use super::binding::{BindArgs, allowlist, files, read_source, stored};
use super::stores::{default_store, shown_address};
use crate::ConfigError;
use crate::ProviderArgs;

/// Arguments of `graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    #[command(subcommand)]
    pub command: GraphCommand,
}

/// What `graph` does.
#[derive(Debug, Subcommand)]
pub enum GraphCommand {
    /// Compile a blueprint and bind it against what this command allows; print every problem.
    Check(FileArgs),
    /// Have the model write a blueprint for an objective (checked, bound, saved under
    /// `.recursive/blueprints/`); print it, or run it with `--run`.
    New(NewArgs),
    /// Run a blueprint on a thread (new, or one whose run finished) with input.
    Run(RunArgs),
    /// Continue a thread: after a crash, a pause, or with the value a node asked for.
    Resume(ResumeArgs),
    /// List a thread's checkpoints, newest first.
    History(ThreadArgs),
    /// Print the state at a thread's latest (or a given) checkpoint.
    State(StateArgs),
    /// Copy a checkpoint, with channels edited, to a new thread (or the same one) to resume.
    Fork(ForkArgs),
    /// List the threads of the store.
    Threads(StoreArgs),
    /// List the jobs of a PostgreSQL store's queue (what `recursive worker` claims), newest
    /// first, with how many are in each status.
    Jobs(JobsArgs),
    /// Print a blueprint as a Mermaid flowchart.
    Show(FileArgs),
    /// Print a blueprint in canonical form (`--write` rewrites the file).
    Format(FormatArgs),
    /// Print the JSON Schema of the blueprint format.
    Schema,
}

/// A blueprint file.
#[derive(Debug, Args)]
pub struct FileArgs {
    /// The blueprint (TOML).
    pub file: PathBuf,
    #[command(flatten)]
    pub bind: BindArgs,
}

/// The checkpoint store.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// Checkpoint store: a SQLite path (`sqlite:PATH` or a path) or `postgres://user:pw@host/db`
    /// (default: .recursive/graphs.db in the workspace).
    #[arg(long, value_name = "URL", env = "RECURSIVE_GRAPH_STORE")]
    pub store: Option<String>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A thread of the store.
#[derive(Debug, Args)]
pub struct ThreadArgs {
    /// The thread.
    #[arg(long)]
    pub thread: String,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `graph state`.
#[derive(Debug, Args)]
pub struct StateArgs {
    /// The thread.
    #[arg(long)]
    pub thread: String,
    /// A checkpoint id (default: the latest).
    #[arg(long)]
    pub checkpoint: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `graph fork`.
#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The thread to fork from.
    #[arg(long)]
    pub thread: String,
    /// The checkpoint to fork from (default: the latest).
    #[arg(long)]
    pub checkpoint: Option<String>,
    /// Channel values to replace, as a JSON object.
    #[arg(long, value_name = "JSON")]
    pub set: Option<String>,
    /// The thread the fork goes to (default: a new one; the same id rewrites that thread's
    /// future).
    #[arg(long, value_name = "THREAD")]
    pub into: Option<String>,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `graph jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// Only the jobs of this queue.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only the jobs in this status: queued, running, done or failed.
    #[arg(long)]
    pub status: Option<String>,
    /// At most this many jobs.
    #[arg(long, default_value_t = 50, value_parser = crate::flags::rows)]
    pub limit: i64,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// `graph format`.
#[derive(Debug, Args)]
pub struct FormatArgs {
    /// The blueprint.
    pub file: PathBuf,
    /// Rewrite the file instead of printing.
    #[arg(long)]
    pub write: bool,
}

/// `graph new`.
#[derive(Debug, Args)]
pub struct NewArgs {
    /// What the graph should do.
    pub objective: String,
    /// Run the blueprint as the model writes it (a child run), not only check and save it.
    #[arg(long)]
    pub run: bool,
    /// Most model turns of the writing.
    #[arg(long)]
    pub max_steps: Option<u32>,
    #[command(flatten)]
    pub exec: ExecArgs,
}

/// What the model writing a blueprint is told.
const NEW_GRAPH_PROMPT: &str = "You design graphs. Write a blueprint for the user's objective and pass it to the \
`blueprint` tool. When the tool reports problems, fix each one (they are located by line and column) and call it \
again. Use only the model, tools and runnables the tool says are allowed. Once the tool accepts the blueprint, \
answer with one sentence saying what the graph does.";

/// `graph run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The blueprint (TOML).
    pub file: PathBuf,
    /// The thread (default: a new id, printed).
    #[arg(long)]
    pub thread: Option<String>,
    /// Input: a JSON object of channel values.
    #[arg(long, value_name = "JSON", default_value = "{}")]
    pub input: String,
    /// Do not run: queue the run for `recursive worker` processes (needs a PostgreSQL
    /// `--store`); prints the thread's id.
    #[arg(long)]
    pub enqueue: bool,
    /// With --enqueue: the queue.
    #[arg(long, default_value = recursive_store::queue::DEFAULT_QUEUE, requires = "enqueue")]
    pub queue: String,
    /// With --enqueue: how many attempts the job may use before it fails for good.
    #[arg(
        long,
        default_value_t = recursive_store::queue::DEFAULT_MAX_ATTEMPTS,
        requires = "enqueue",
        value_parser = crate::flags::attempts
    )]
    pub max_attempts: i32,
    #[command(flatten)]
    pub run: ExecArgs,
}

/// `graph resume`.
#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The thread.
    #[arg(long)]
    pub thread: String,
    /// The value a node asked for (JSON; plain text is taken as a string).
    #[arg(long, value_name = "JSON")]
    pub value: Option<String>,
    /// Run again from this earlier checkpoint (time travel; the history branches).
    #[arg(long, value_name = "ID")]
    pub checkpoint: Option<String>,
    /// Continue a thread that stopped on its `[limits]` (exit 17): visits per node and
    /// supersteps count afresh from its latest checkpoint.
    #[arg(long, conflicts_with = "checkpoint")]
    pub raise_limits: bool,
    /// Do not run: queue the resume for `recursive worker` processes (needs a PostgreSQL
    /// `--store`).
    #[arg(long, conflicts_with_all = ["checkpoint", "raise_limits"])]
    pub enqueue: bool,
    /// With --enqueue: the queue.
    #[arg(long, default_value = recursive_store::queue::DEFAULT_QUEUE, requires = "enqueue")]
    pub queue: String,
    /// With --enqueue: how many attempts the job may use before it fails for good.
    #[arg(
        long,
        default_value_t = recursive_store::queue::DEFAULT_MAX_ATTEMPTS,
        requires = "enqueue",
        value_parser = crate::flags::attempts
    )]
    pub max_attempts: i32,
    #[command(flatten)]
    pub run: ExecArgs,
}

/// What running a graph needs.
#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub bind: BindArgs,
    #[command(flatten)]
    pub store: StoreArgs,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
    #[command(flatten)]
    pub approval: super::ApprovalArgs,
    /// When another process is running the thread, wait for it to end instead of failing.
    #[arg(long)]
    pub wait: bool,
}

/// Runs the command.
pub async fn execute(args: GraphArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    match args.command {
        GraphCommand::Check(a) => check(a).await,
        GraphCommand::New(a) => new_graph(a, exports).await,
        GraphCommand::Run(a) => run(a, exports).await,
        GraphCommand::Resume(a) => resume(a, exports).await,
        GraphCommand::History(a) => history(a).await,
        GraphCommand::State(a) => state(a).await,
        GraphCommand::Fork(a) => fork(a).await,
        GraphCommand::Threads(a) => threads(a).await,
        GraphCommand::Jobs(a) => jobs(a).await,
        GraphCommand::Show(a) => {
            let source = read_source(&a.file)?;
            let bp = blueprint::compile(&source.text, &source.origin).map_err(|d| ConfigError(d.to_string()))?;
            print!("{}", blueprint::mermaid(&bp));
            Ok(0)
        }
        GraphCommand::Format(a) => {
            let source = read_source(&a.file)?;
            let text = blueprint::format(&source.text, &source.origin).map_err(|d| ConfigError(d.to_string()))?;
            if a.write {
                std::fs::write(&a.file, text).with_context(|| format!("writing {}", a.file.display()))?;
            } else {
                print!("{text}");
            }
            Ok(0)
        }
        GraphCommand::Schema => {
            println!("{}", serde_json::to_string_pretty(&blueprint::schema())?);
            Ok(0)
        }
    }
}

/// `graph new`: a run whose one tool is `blueprint`; prints the blueprint it saved.
async fn new_graph(args: NewArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let exec = &args.exec;
    let max_steps = args.max_steps.unwrap_or(recursive_core::RunLimits::default().max_steps);
    let mut harness = super::harness(
        &exec.provider,
        exec.bind.workspace.as_deref(),
        exec.approval.approver(),
        max_steps,
        &exec.bind.agents,
        RlmOptions::default(),
    )
    .await?;
    exec.approval.apply(&harness);
    let limits = exec.budget.limits(&harness.provider)?;
    let scope = super::root_scope(exports, &harness, "graph-new", &exec.provider, false, limits, None)?;
    harness.check_shell_sandbox(None)?;
    let mcp = harness.start_mcp(&scope).await?;
    let tool = harness.blueprint_tool(&harness.tools());
    let tool = std::sync::Arc::new(if args.run { tool } else { tool.check_only() });
    let mut tools = recursive_core::ToolRegistry::new();
    tools.register(tool.clone());
    // The writer's one tool saves only under `.recursive/blueprints/`; what a blueprint runs
    // goes through the policy as every tool call does.
    let config = harness.agent_config("graph-new", Some(NEW_GRAPH_PROMPT.into()));
    let agent = recursive_core::Agent::new(harness.provider.provider.clone()).with_tools(tools).with_config(config);
    let ran = agent.run_in(&args.objective, &scope).await;
    mcp.shutdown().await;
    let (result, error) = match ran {
        Ok(r) => (r, None),
        Err(e) => (*e.partial, Some(format!("{:#}", anyhow::Error::new(e.error)))),
    };
    if let Some(e) = &error {
        eprintln!("error: {e}");
        return Ok(crate::EXIT_ERROR);
    }
    let Some(path) = tool.last_saved() else {
        eprintln!("no valid blueprint was written ({})", result.finish_reason);
        let code = if result.finish_reason.is_success() {
            recursive_core::FinishReason::NoAnswer
        } else {
            result.finish_reason
        };
        return Ok(u8::try_from(code.exit_code()).unwrap_or(crate::EXIT_ERROR));
    };
    print!("{}", std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?);
    if !exec.provider.quiet {
        eprintln!("saved {}: run it with `recursive graph run {}`", path.display(), path.display());
    }
    Ok(u8::try_from(result.finish_reason.exit_code()).unwrap_or(crate::EXIT_ERROR))
}

async fn check(args: FileArgs) -> anyhow::Result<u8> {
    let source = read_source(&args.file)?;
    // Binding checks names only: the placeholder model is never called.
    let provider = ProviderArgs::placeholder();
    let approver = super::ApprovalArgs::none().approver();
    let harness = super::harness(
        &provider,
        args.bind.workspace.as_deref(),
        approver,
        recursive_core::RunLimits::default().max_steps,
        &args.bind.agents,
        RlmOptions::default(),
    )
    .await?;
    let allow = allowlist(&harness, &args.bind, args.file.parent())?;
    match blueprint::load(&source, &allow) {
        Ok(graph) => {
            println!("{}: ok ({} nodes)", source.origin, graph.node_names().count());
            Ok(0)
        }
        Err(d) => {
            eprintln!("{d}");
            Ok(crate::EXIT_CONFIG)
        }
    }
}

async fn open_store(args: &StoreArgs, workspace: Option<&Path>) -> anyhow::Result<Arc<dyn Checkpointer>> {
    let address = store_address(args, workspace)?;
    recursive_store::open(&address).await.map_err(|e| anyhow::anyhow!("{e}"))
}

fn store_address(args: &StoreArgs, workspace: Option<&Path>) -> anyhow::Result<String> {
    match &args.store {
        Some(s) => Ok(s.clone()),
        None => default_store(workspace),
    }
}

fn parse_json(flag: &str, text: &str) -> Result<Value, ConfigError> {
    serde_json::from_str(text).map_err(|e| ConfigError(format!("{flag}: not JSON: {e}")))
}

async fn run(args: RunArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let source = read_source(&args.file)?;
    let input = parse_json("--input", &args.input)?;
    let thread = args.thread.clone().unwrap_or_else(crate::sessions::new_id);
    let origin = std::fs::canonicalize(&args.file).unwrap_or_else(|_| args.file.clone());
    let dir = origin.parent().map(Path::to_path_buf);
    let info = ThreadInfo {
        thread: thread.clone(),
        graph: String::new(),
        blueprint: Some(source.text.clone()),
        origin: Some(origin.display().to_string()),
        // Pinned once the blueprint binds (what it reaches of the files, now).
        subgraphs: None,
        created_at: chrono::Utc::now(),
    };
    if args.enqueue {
        return enqueue(&args, source, dir, info, input).await;
    }
    let store = open_store(&args.run.store, args.run.bind.workspace.as_deref()).await?;
    let subgraphs = files(&args.run.bind, dir.as_deref())?;
    execute_graph((&args.run, exports), source, subgraphs, store, Some(info), &thread, Start::Input(input)).await
}

/// The PostgreSQL store of `--enqueue` and `graph jobs`, and its job queue.
async fn open_queue(args: &StoreArgs, flag: &str) -> anyhow::Result<(PostgresCheckpointer, JobQueue)> {
    let address = args.store.clone().unwrap_or_default();
    if !(address.starts_with("postgres://") || address.starts_with("postgresql://")) {
        return Err(ConfigError(format!(
            "{flag} needs a PostgreSQL store (--store postgres://user:pw@host/db): workers claim jobs from it"
        ))
        .into());
    }
    let store = PostgresCheckpointer::connect(&address).await?;
    let queue = JobQueue::open(&store).await?;
    Ok((store, queue))
}

/// `graph run --enqueue`: binds the blueprint (names only: no model is called), checks the
/// input, records the thread with its blueprint and queues the run; prints the thread's id.
async fn enqueue(
    args: &RunArgs,
    source: Source,
    dir: Option<PathBuf>,
    mut info: ThreadInfo,
    input: Value,
) -> anyhow::Result<u8> {
    let (store, queue) = open_queue(&args.run.store, "--enqueue").await?;
    let harness = super::harness(
        &ProviderArgs::placeholder(),
        args.run.bind.workspace.as_deref(),
        super::ApprovalArgs::none().approver(),
        recursive_core::RunLimits::default().max_steps,
        &args.run.bind.agents,
        RlmOptions::default(),
    )
    .await?;
    let allow = allowlist(&harness, &args.run.bind, dir.as_deref())?;
    let graph = blueprint::load(&source, &allow).map_err(|d| ConfigError(d.to_string()))?;
    info.graph = graph.name().to_string();
    // The worker binds what is pinned here, wherever it runs.
    info.subgraphs = Some(allow.reachable_graphs(&source));
    if let Some(old) = store.thread(&info.thread).await? {
        info.created_at = old.created_at;
    }
    let id = match enqueue_graph(&queue, &store, &graph, &info, input, (&args.queue, args.max_attempts)).await {
        Ok(id) => id,
        Err(EnqueueError::Queue(QueueError::Store(e))) => return Err(e.into()),
        Err(e) => return Err(ConfigError(e.to_string()).into()),
    };
    queued(&args.run, &info.thread, id, &args.queue)
}

/// The value of `--value`: JSON, or plain text as a string.
fn resume_value(value: Option<&str>) -> Option<Value> {
    value.map(|v| serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.into())))
}

/// `graph resume --enqueue`: queues the resume of a thread; prints its id.
async fn enqueue_resumed(args: &ResumeArgs) -> anyhow::Result<u8> {
    let (store, queue) = open_queue(&args.run.store, "--enqueue").await?;
    let value = resume_value(args.value.as_deref());
    let id = match enqueue_resume(&queue, &store, &args.thread, value, (&args.queue, args.max_attempts)).await {
        Ok(id) => id,
        Err(EnqueueError::Queue(QueueError::Store(e))) => return Err(e.into()),
        Err(e) => return Err(ConfigError(e.to_string()).into()),
    };
    queued(&args.run, &args.thread, id, &args.queue)
}

/// Says what was queued: the thread's id on stdout (with `--json`, the job and queue too).
fn queued(args: &ExecArgs, thread: &str, id: i64, queue: &str) -> anyhow::Result<u8> {
    if args.store.json {
        println!("{}", json!({"thread": thread, "job": id, "queue": queue}));
    } else {
        println!("{thread}");
        if !args.provider.quiet {
            eprintln!("queued job {id} on queue {queue}: thread {thread}");
        }
    }
    Ok(0)
}

async fn resume(args: ResumeArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    if args.enqueue {
        return enqueue_resumed(&args).await;
    }
    let store = open_store(&args.run.store, args.run.bind.workspace.as_deref()).await?;
    let info = store
        .thread(&args.thread)
        .await?
        .ok_or_else(|| ConfigError(format!("no thread `{}` in the store", args.thread)))?;
    let text = info.blueprint.clone().ok_or_else(|| ConfigError("the thread has no stored blueprint".into()))?;
    let origin = info.origin.clone().unwrap_or_else(|| info.graph.clone());
    let subgraphs = stored(&args.run.bind, &info, &origin)?;
    let value = resume_value(args.value.as_deref());
    let start = match args.checkpoint {
        Some(checkpoint) => Start::From { checkpoint, value },
        None if args.raise_limits => Start::RaiseLimits(value),
        None => Start::Resume(value),
    };
    execute_graph((&args.run, exports), Source { origin, text }, subgraphs, store, None, &args.thread, start).await
}

async fn execute_graph(
    (args, exports): (&ExecArgs, &super::Exports),
    source: Source,
    subgraphs: SubGraphs,
    store: Arc<dyn Checkpointer>,
    new_thread: Option<ThreadInfo>,
    thread: &str,
    start: Start,
) -> anyhow::Result<u8> {
    let mut harness = super::harness(
        &args.provider,
        args.bind.workspace.as_deref(),
        args.approval.approver(),
        50,
        &args.bind.agents,
        RlmOptions::default(),
    )
    .await?;
    args.approval.apply(&harness);
    // Bound once before the budget is set, so a node naming an unpriced model or provider is
    // refused under --max-cost now, before any node runs. What does not bind yet (a node naming
    // an MCP server's tool, whose servers start below) is reported by the run's own binding.
    let _noted = harness.bind_thread(&source, &subgraphs);
    let limits = args.budget.limits(&harness.provider)?;
    // The tree's one depth cap; the blueprint's `max_depth` is a narrower cap its executor
    // checks for its own nodes.
    let scope = super::root_scope(exports, &harness, "graph", &args.provider, false, limits, None)?;
    harness.check_shell_sandbox(None)?;
    let mcp = harness.start_mcp(&scope).await?;
    if !args.provider.quiet {
        let address = store_address(&args.store, args.bind.workspace.as_deref())?;
        eprintln!("thread {thread} (store: {})", shown_address(&address));
    }
    // One runner per thread: a second one is refused (exit 2) or, with --wait, waits.
    let run = ThreadRun { source, subgraphs, new_thread, thread: thread.to_string(), start, wait: args.wait };
    let ran = harness.run_thread(store, run, &scope).await;
    mcp.shutdown().await;
    match ran {
        Ok(o) => report(&o, args.store.json, &scope),
        Err(ThreadError::Bind(e)) => Err(ConfigError(e).into()),
        Err(ThreadError::Lease(e @ recursive_store::LeaseError::Held { .. })) => Err(ConfigError(e.to_string()).into()),
        Err(ThreadError::Lease(e)) => Err(e.into()),
        Err(ThreadError::Store(e)) => Err(e.into()),
        Err(ThreadError::Graph(GraphError::Input(e))) => Err(ConfigError(format!("input: {e}")).into()),
        Err(ThreadError::Graph(GraphError::Unfinished(t))) => Err(ConfigError(format!(
            "thread `{t}` has an unfinished run: continue it with `recursive graph resume --thread {t}` (with \
             --raise-limits if it stopped on its [limits]), or start a new thread"
        ))
        .into()),
        Err(ThreadError::Graph(GraphError::NothingAsks(t))) => {
            Err(ConfigError(format!("thread `{t}` does not wait for a value: resume it without --value")).into())
        }
        Err(ThreadError::Graph(e)) => Err(anyhow::anyhow!(
            "{e} (the thread keeps what finished: resume it with `recursive graph resume --thread {thread}`)"
        )),
    }
}

fn report(o: &GraphOutcome, json_out: bool, scope: &recursive_core::RunScope) -> anyhow::Result<u8> {
    let code = u8::try_from(o.finish.finish_reason().exit_code()).unwrap_or(1);
    if let limit @ (Finish::SuperstepLimit { .. } | Finish::VisitLimit { .. }) = &o.finish {
        eprintln!(
            "thread {}: {limit}\nto go on past the blueprint's [limits]: recursive graph resume --thread {} --raise-limits",
            o.thread, o.thread
        );
    }
    if json_out {
        let out = json!({
            "thread": o.thread,
            "finish": o.finish.as_str(),
            "detail": o.finish,
            "state": o.state,
            "checkpoint": o.checkpoint,
            "step": o.step,
            "usage": crate::output::usage_json(&scope.usage()),
            "cost_usd": scope.cost_usd(),
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(code);
    }
    println!("{}", serde_json::to_string_pretty(&Value::Object(o.state.clone()))?);
    match &o.finish {
        Finish::Done => eprintln!("thread {}: done after {} supersteps", o.thread, o.step),
        Finish::Interrupted(i) => {
            let hint = if i.when == recursive_store::When::Ask { " --value JSON" } else { "" };
            eprintln!(
                "thread {}: waiting {} {}: {}\ncontinue it with: recursive graph resume --thread {}{hint}",
                o.thread,
                i.when,
                i.at(),
                i.payload.get("question").cloned().unwrap_or_else(|| i.payload.clone()),
                o.thread
            );
        }
        Finish::SuperstepLimit { .. } | Finish::VisitLimit { .. } => {}
        other => eprintln!("thread {}: {other}", o.thread),
    }
    Ok(code)
}

async fn history(args: ThreadArgs) -> anyhow::Result<u8> {
    let store = open_store(&args.store, None).await?;
    let list = store.list(&args.thread, "").await?;
    if list.is_empty() {
        return Err(ConfigError(format!("no thread `{}` in the store", args.thread)).into());
    }
    if args.store.json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(0);
    }
    for c in &list {
        let pause = c.pause.as_ref().map(|p| format!("  (pause {} {})", p.when, p.nodes.join(","))).unwrap_or_default();
        let next = if c.next.is_empty() { "END".to_string() } else { c.next.join(",") };
        println!(
            "{}  step {:>3}  {:<6}  next: {next}{pause}  {}",
            c.id,
            c.step,
            format!("{:?}", c.source).to_lowercase(),
            c.created_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
    Ok(0)
}

async fn state(args: StateArgs) -> anyhow::Result<u8> {
    let store = open_store(&args.store, None).await?;
    let cp = match &args.checkpoint {
        Some(id) => store.get(&args.thread, id).await?,
        None => store.latest(&args.thread, "").await?,
    }
    .ok_or_else(|| ConfigError(format!("no such checkpoint on thread `{}`", args.thread)))?;
    let pending = store.writes(&args.thread, &cp.id).await?;
    let out = json!({
        "thread": cp.thread,
        "checkpoint": cp.id,
        "step": cp.step,
        "next": cp.next,
        "pause": cp.pause,
        "state": cp.state,
        "pending_writes": pending,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}

async fn fork(args: ForkArgs) -> anyhow::Result<u8> {
    let store = open_store(&args.store, None).await?;
    let info = store
        .thread(&args.thread)
        .await?
        .ok_or_else(|| ConfigError(format!("no thread `{}` in the store", args.thread)))?;
    let text = info.blueprint.clone().unwrap_or_default();
    let origin = info.origin.clone().unwrap_or_default();
    let bp = blueprint::compile(&text, &origin).map_err(|d| ConfigError(d.to_string()))?;
    let mut schema = Schema::new();
    for (name, channel) in blueprint::compile::channels(&bp) {
        schema = schema.with(name, channel);
    }
    let edits = match &args.set {
        Some(text) => match parse_json("--set", text)? {
            Value::Object(m) => m,
            other => return Err(ConfigError(format!("--set: expected a JSON object, got {other}")).into()),
        },
        None => Default::default(),
    };
    let from = match &args.checkpoint {
        Some(id) => id.clone(),
        None => store.latest(&args.thread, "").await?.map(|c| c.id).unwrap_or_default(),
    };
    let into = args.into.clone().unwrap_or_else(crate::sessions::new_id);
    let forked = recursive_graph::fork(&schema, &store, &args.thread, &from, &edits, &into)
        .await
        .map_err(|e| ConfigError(e.to_string()))?;
    store.put_thread(&ThreadInfo { thread: into.clone(), created_at: chrono::Utc::now(), ..info }).await?;
    if args.store.json {
        println!("{}", json!({"thread": into, "checkpoint": forked.id}));
    } else {
        println!("forked to thread {into} at checkpoint {}", forked.id);
        eprintln!("continue it with: recursive graph resume --thread {into}");
    }
    Ok(0)
}

async fn threads(args: StoreArgs) -> anyhow::Result<u8> {
    let store = open_store(&args, None).await?;
    let list = store.threads().await?;
    // As `ls` does: every readable thread is listed; an unreadable record is named on stderr
    // and makes the exit status 1.
    let unreadable: Vec<&recursive_store::Unreadable> = list.iter().filter_map(|t| t.as_ref().err()).collect();
    for u in &unreadable {
        eprintln!("error: thread {}: its record in the store is unreadable: {}", u.thread, u.error);
    }
    let readable = list.iter().filter_map(|t| t.as_ref().ok());
    if args.json {
        let brief: Vec<Value> = readable
            .map(|t| json!({"thread": t.thread, "graph": t.graph, "origin": t.origin, "created_at": t.created_at}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&brief)?);
    } else {
        for t in readable {
            let status = thread_status(store.as_ref(), &t.thread).await.unwrap_or_else(|e| format!("unreadable: {e}"));
            println!("{}  {}  {status}  {}", t.thread, t.graph, t.created_at.format("%Y-%m-%d %H:%M:%S"));
        }
    }
    Ok(if unreadable.is_empty() { 0 } else { crate::EXIT_ERROR })
}

async fn jobs(args: JobsArgs) -> anyhow::Result<u8> {
    let (_store, queue) = open_queue(&args.store, "graph jobs").await?;
    let counts = queue.counts(args.queue.as_deref()).await?;
    let rows = queue.list(args.queue.as_deref(), args.status.as_deref(), args.limit.max(0)).await?;
    if args.store.json {
        let counts: serde_json::Map<String, Value> = counts.into_iter().map(|(s, n)| (s, json!(n))).collect();
        println!("{}", serde_json::to_string_pretty(&json!({"counts": counts, "jobs": rows}))?);
        return Ok(0);
    }
    let summary: Vec<String> = counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    eprintln!("jobs: {}", if summary.is_empty() { "none".to_string() } else { summary.join(", ") });
    for j in rows {
        let detail = if j.status == "done" { j.outcome.as_deref() } else { j.error.as_deref() }.unwrap_or("");
        println!(
            "{:>6}  {:<7}  {}/{}  {} {}  {}  {}  {detail}",
            j.id,
            j.status,
            j.attempts,
            j.max_attempts,
            j.kind,
            j.target,
            j.queue,
            j.claimed_by.as_deref().unwrap_or("-"),
        );
    }
    Ok(0)
}

/// Where a thread stands ([`ThreadStatus::of`], the rule every view of a thread uses), with the
/// step a pending thread is at.
async fn thread_status(store: &dyn Checkpointer, thread: &str) -> Result<String, recursive_store::StoreError> {
    Ok(match ThreadStatus::read(store, thread).await? {
        (ThreadStatus::Pending, Some(latest), _) => format!("pending at step {}", latest.step),
        (status, _, _) => status.to_string(),
    })
}
