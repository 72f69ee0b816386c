//! `recursive serve`: the runs API, its live events and the OpenAI-compatible endpoint
//! ([`recursive_serve`]), with runs built by the harness from this program's config exactly as
//! `run`, `rlm` and `goal` build them (with `--enqueue`, the runs API queues its runs for
//! `recursive worker` processes instead, see [`recursive_serve::queued`]). Nobody can be asked
//! in server mode: a tool call that would ask is denied with a reason saying to allow it in the
//! server's `[permissions]` rules.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use recursive_harness::RlmOptions;
use recursive_serve::{ServeConfig, Served, Server};

use crate::ConfigError;
use crate::ProviderArgs;

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
    #[arg(long, default_value_t = 8, value_parser = crate::flags::concurrency)]
    pub max_concurrent_runs: usize,
    /// Runs that may wait for a slot; beyond it requests get 429 with Retry-After.
    #[arg(long, default_value_t = 32, value_parser = crate::flags::queued)]
    pub max_queued_runs: usize,
    /// Largest request body, in MiB.
    #[arg(long, default_value_t = 32, value_parser = crate::flags::body_mib)]
    pub max_body_mib: usize,
    /// Most model turns of an agent run.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    /// Workspace of the tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Seconds a shutdown (SIGTERM, SIGINT) gives cancelled runs to write their final events;
    /// a second later the server exits, closing streams whose readers stopped reading.
    #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = crate::flags::whole_secs)]
    pub shutdown_grace: u64,
    /// A host name requests may name in `Host` besides the loopback names and the listening
    /// address (repeatable); other names are refused with 403 (DNS rebinding). Off loopback with
    /// a token, any name is answered unless names are given here.
    #[arg(long = "allowed-host", value_name = "NAME")]
    pub allowed_hosts: Vec<String>,
    /// A browser origin (`https://app.example.com`) whose pages may call the server (CORS;
    /// repeatable). Without it, requests carrying another site's `Origin` are refused with 403.
    #[arg(long = "cors-origin", value_name = "ORIGIN")]
    pub cors_origins: Vec<String>,
    /// Where runs are kept past their flight: a SQLite file or a `postgres://` URL (default: the
    /// workspace's graph store, `.recursive/graphs.db`); `memory:` keeps them in this process only.
    #[arg(long, value_name = "ADDRESS")]
    pub store: Option<String>,
    /// Retention of finished runs: a count (`1000`), an age (`7d`, `12h`, `30m`, `90s`) or both
    /// (`1000,7d`). Without it every run is kept.
    #[arg(long, value_name = "COUNT|AGE")]
    pub keep: Option<String>,
    /// Offer graph threads over HTTP: every blueprint in DIR by its file stem (`/v1/graphs`,
    /// `/v1/threads`), kept in the store of `--store`.
    #[arg(long, value_name = "DIR")]
    pub graphs: Option<PathBuf>,
    /// Queue the runs of `POST /v1/runs` for `recursive worker` processes instead of running
    /// them here (needs a PostgreSQL `--store`); the runs API shows, lists, streams and cancels
    /// them from the store. The OpenAI-compatible endpoints and MCP still run here.
    #[arg(long)]
    pub enqueue: bool,
    /// The queue `--enqueue` puts runs in (workers claim from their `--queue`).
    #[arg(long, default_value = recursive_store::queue::DEFAULT_QUEUE, requires = "enqueue")]
    pub queue: String,
    /// How many attempts a queued run may use (a worker that dies mid-run costs one); then it
    /// ends failed.
    #[arg(
        long,
        default_value_t = recursive_store::queue::DEFAULT_MAX_ATTEMPTS,
        value_name = "N",
        requires = "enqueue",
        value_parser = crate::flags::attempts
    )]
    pub max_attempts: i32,
    /// Let clients answer permission asks: a tool call that would ask sends an `ask` event on its
    /// run's stream and waits up to SECS for `POST /v1/runs/{id}/asks/{ask}`; no answer denies.
    /// Without it, asks are denied at once with how to allow the tool.
    #[arg(long, value_name = "SECS", value_parser = crate::flags::whole_secs)]
    pub client_asks: Option<u64>,
    /// Offer a named runnable (agent, RLM, goal or graph, as for `run --agent`): NAME=FILE,
    /// repeatable. Each is a model of the OpenAI-compatible endpoint, a runnable of the runs API
    /// (`agent` of a request) and an MCP tool.
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// The runner of `serve` and `mcp`: this program's configuration through the harness — its
/// agent, RLM and goal pursuer as the kinds' defaults, the `--agent` runnables by name — with
/// asks denied (nobody can be asked in server mode); the configured MCP servers started (stop
/// them when the command ends).
async fn served(
    provider_args: &ProviderArgs,
    workspace: Option<&std::path::Path>,
    max_steps: u32,
    runnable_specs: &[String],
    approver: Arc<dyn recursive_tools::ApprovalHandler>,
) -> anyhow::Result<(Served, Arc<recursive_harness::Harness>, recursive_harness::McpServers)> {
    let mut harness =
        super::harness(provider_args, workspace, approver, max_steps, runnable_specs, RlmOptions::default()).await?;
    let mcp = super::start_mcp(&mut harness, provider_args).await?;
    let served = super::served::served_by(&harness)?;
    Ok((served, Arc::new(harness), mcp))
}

/// Arguments of `mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// Runs at once; more wait in a queue.
    #[arg(long, default_value_t = 4, value_parser = crate::flags::concurrency)]
    pub max_concurrent_runs: usize,
    /// Most model turns of an agent run.
    #[arg(long, default_value_t = 32)]
    pub max_steps: u32,
    /// Workspace of the tools (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Let the client answer permission asks: a tool call that would ask is put to the client
    /// by elicitation (when it declared the capability) and waits up to SECS; no answer denies.
    /// Without it, asks are denied at once with how to allow the tool.
    #[arg(long, value_name = "SECS", value_parser = crate::flags::whole_secs)]
    pub client_asks: Option<u64>,
    #[command(flatten)]
    pub runnables: super::RunnableArgs,
    #[command(flatten)]
    pub provider: ProviderArgs,
}

/// Who answers the permission asks of served runs: with `--client-asks SECS`, the clients
/// (through the board the server keeps), else nobody (denied at once, saying how to allow).
fn asks_of(
    client_asks: Option<u64>,
) -> (Option<Arc<recursive_core::AnswerBoard>>, Arc<dyn recursive_tools::ApprovalHandler>) {
    match client_asks {
        Some(secs) => {
            let board = Arc::new(recursive_core::AnswerBoard::default());
            let approver = recursive_tools::ClientApprover::new(board.clone(), std::time::Duration::from_secs(secs));
            (Some(board), Arc::new(approver))
        }
        None => (None, Arc::new(recursive_tools::ServerApprover)),
    }
}

/// The `--cors-origin` values, each checked to be an origin (`http(s)://host[:port]`).
fn cors_origins(given: &[String]) -> Result<Vec<String>, ConfigError> {
    given
        .iter()
        .map(|o| {
            let trimmed = o.trim().trim_end_matches('/').to_ascii_lowercase();
            let authority = trimmed.strip_prefix("http://").or_else(|| trimmed.strip_prefix("https://"));
            match authority {
                Some(a) if !a.is_empty() && !a.contains(['/', '?', '#', '@', ' ']) => Ok(trimmed),
                _ => {
                    Err(ConfigError(format!("--cors-origin {o}: an origin is `http(s)://host[:port]`, without a path")))
                }
            }
        })
        .collect()
}

/// `recursive mcp`: the MCP server on stdin/stdout until the client closes them, or until
/// SIGINT or SIGTERM (which cancel the runs and exit 0).
pub async fn execute_mcp(args: McpArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    let (answers, approver) = asks_of(args.client_asks);
    let (runner, harness, mcp) =
        served(&args.provider, args.workspace.as_deref(), args.max_steps, &args.runnables.agents, approver).await?;
    let config = ServeConfig { max_concurrent_runs: args.max_concurrent_runs, answers, ..Default::default() };
    // Runs called as MCP tools export their spans as every command's runs do.
    let telemetry = exports.telemetry_sink(&harness, args.provider.otel_content)?;
    let server = Server::observed(Arc::new(runner), config, telemetry);
    tokio::select! {
        served = recursive_serve::mcp::serve_stdio(server.clone()) => {
            served.map_err(|e| anyhow::anyhow!("MCP over stdio: {e}"))?;
        }
        () = shutdown_signal() => server.shutdown().await,
    }
    mcp.shutdown().await;
    Ok(0)
}

/// The longest age `--keep` takes.
const KEEP_MAX_SECS: u64 = 1000 * 365 * 86_400;

/// The retention `--keep` gives: a count, an age (`s`, `m`, `h`, `d`), or both, comma-separated.
fn keep(spec: Option<&str>) -> Result<recursive_serve::Retention, ConfigError> {
    let mut retention = recursive_serve::Retention::default();
    let Some(spec) = spec else { return Ok(retention) };
    let bad = |part: &str| {
        ConfigError(format!("--keep {spec}: `{part}` is neither a count (1000) nor an age (7d, 12h, 30m, 90s)"))
    };
    for part in spec.split(',').map(str::trim) {
        if let Ok(count) = part.parse::<u64>() {
            retention.count = Some(count);
            continue;
        }
        let (number, unit) = part.split_at(part.find(|c: char| !c.is_ascii_digit()).ok_or_else(|| bad(part))?);
        let n: u64 = number.parse().map_err(|_| bad(part))?;
        let unit = match unit {
            "s" => 1,
            "m" => 60,
            "h" => 3600,
            "d" => 86_400,
            _ => return Err(bad(part)),
        };
        let seconds = n
            .checked_mul(unit)
            .filter(|s| *s <= KEEP_MAX_SECS)
            .ok_or_else(|| ConfigError(format!("--keep {spec}: `{part}` is longer than 1000 years")))?;
        retention.age = Some(std::time::Duration::from_secs(seconds));
    }
    Ok(retention)
}

/// Runs the command: serves until SIGINT or SIGTERM, then cancels the runs and lets their
/// final events out.
pub async fn execute(args: ServeArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    keep(args.keep.as_deref())?;
    let address = match &args.store {
        Some(address) => address.clone(),
        None => super::stores::default_store(args.workspace.as_deref())?,
    };
    let shown = super::stores::shown_address(&address);
    let queue = run_queue(&address, &args).await?;
    let (answers, approver) = asks_of(args.client_asks);
    // The archive and the checkpoints are opened one after the other: on a new SQLite file each
    // sets it up (its schema, its journal mode), which two connections must not race to do.
    let stores = async { (recursive_store::open_archive(&address).await, recursive_store::open(&address).await) };
    let (runner, (archive, store)) = tokio::join!(
        served(&args.provider, args.workspace.as_deref(), args.max_steps, &args.runnables.agents, approver),
        stores
    );
    let ((runner, harness, mcp), archive) =
        (runner?, archive.map_err(|e| anyhow::anyhow!("the run store ({shown}): {e}"))?);
    // Runs are held and journaled in the same store: a killed server resumes them.
    let store = store.map_err(|e| anyhow::anyhow!("the run store ({shown}): {e}"))?;
    // LangGraph's store API keeps its items in the workspace memory of `remember` and `recall`.
    let items: Arc<dyn recursive_core::items::ItemStore> =
        Arc::new(recursive_tools::MemoryStore::in_workspace(&harness.setup.workspace));
    let telemetry = exports.telemetry_sink(&harness, args.provider.otel_content)?;
    let graphs: Option<Arc<dyn recursive_serve::threads::GraphHost>> = match &args.graphs {
        Some(dir) => Some(Arc::new(super::served_graphs::ServedGraphs::load(harness, store.clone(), dir)?)),
        None => None,
    };
    let token = recursive_core::env::var(&args.token_env).filter(|t| !t.is_empty());
    let serve_config = ServeConfig {
        listen: args.listen,
        token,
        max_concurrent_runs: args.max_concurrent_runs,
        max_queued_runs: args.max_queued_runs,
        max_body_bytes: args.max_body_mib.saturating_mul(1024 * 1024),
        allowed_hosts: args.allowed_hosts.clone(),
        shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace),
        cors_origins: cors_origins(&args.cors_origins)?,
        archive: Some(archive),
        retention: keep(args.keep.as_deref())?,
        answers,
        graphs,
        queue,
        items: Some(items),
        // A store kept in this process only outlives no server: its runs are not durable.
        journals: (address != "memory:").then_some(store),
    };
    let server = Server::observed(Arc::new(runner), serve_config, telemetry);
    let quiet = args.provider.quiet;
    let recovered = server.recover().await.map_err(|e| anyhow::anyhow!("the run store ({shown}): {e}"))?;
    if recovered.resumed > 0 && !quiet {
        eprintln!("recursive serve: {} run(s) left unfinished by a stopped server resume", recovered.resumed);
    }
    if recovered.interrupted > 0 && !quiet {
        eprintln!(
            "recursive serve: {} run(s) left unfinished by a stopped server are marked interrupted",
            recovered.interrupted
        );
    }
    let served = server
        .serve(shutdown_signal(), move |addr| {
            // The first line on stdout, for scripts and tests that start the server on port 0.
            println!("listening on http://{addr}");
            if !quiet {
                eprintln!("recursive serve: http://{addr}  (runs API /v1/runs, OpenAI API /v1, /openapi.json)");
            }
        })
        .await;
    mcp.shutdown().await;
    match served {
        Ok(()) => Ok(0),
        Err(e @ recursive_serve::ServeError::NoToken(_)) => Err(ConfigError(e.to_string()).into()),
        Err(e) => Err(e.into()),
    }
}

/// The job queue of a PostgreSQL store (workers' runs are cancelled through it and are not
/// taken for runs a stopped server left), where `--enqueue` queues runs; `--enqueue` with
/// another store is refused (workers claim from PostgreSQL only).
async fn run_queue(address: &str, args: &ServeArgs) -> anyhow::Result<Option<recursive_serve::queued::RunQueue>> {
    if !(address.starts_with("postgres://") || address.starts_with("postgresql://")) {
        if !args.enqueue {
            return Ok(None);
        }
        let shown = super::stores::shown_address(address);
        return Err(ConfigError(format!(
            "--enqueue queues runs for `recursive worker` processes, which claim them from PostgreSQL: \
             give --store postgres://user:pw@host/db (the store is {shown})"
        ))
        .into());
    }
    let shown = super::stores::shown_address(address);
    let failed = |e: recursive_store::StoreError| anyhow::anyhow!("the job queue ({shown}): {e}");
    let store = recursive_store::PostgresCheckpointer::connect(address).await.map_err(failed)?;
    let queue = recursive_store::queue::JobQueue::open(&store).await.map_err(failed)?;
    Ok(Some(recursive_serve::queued::RunQueue {
        queue,
        enqueue: args.enqueue,
        name: args.queue.clone(),
        max_attempts: args.max_attempts.max(1),
    }))
}

/// Resolves at the first SIGINT or SIGTERM. The handlers are registered when this is called,
/// not when the future is first polled, so a signal right after start is not lost.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let (term, int) = (signal(SignalKind::terminate()).ok(), signal(SignalKind::interrupt()).ok());
    async move {
        let wait = |s: Option<tokio::signal::unix::Signal>| async move {
            match s {
                Some(mut s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = wait(term) => {}
            () = wait(int) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_reads_a_count_an_age_or_both() {
        assert_eq!(keep(Some("1000")).unwrap().count, Some(1000));
        assert_eq!(keep(Some("7d")).unwrap().age, Some(std::time::Duration::from_secs(7 * 86_400)));
        let both = keep(Some("50, 90s")).unwrap();
        assert_eq!((both.count, both.age), (Some(50), Some(std::time::Duration::from_secs(90))));
        assert!(keep(Some("7w")).unwrap_err().0.contains("`7w`"));
        assert!(keep(Some("d")).is_err());
    }
}
