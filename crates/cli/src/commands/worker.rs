//! `recursive worker`: claims queued jobs from a PostgreSQL store and runs them — graph threads
//! enqueued with `recursive graph run FILE --enqueue`, and runs `serve --enqueue` accepted —
//! until SIGTERM or Ctrl-C, which drain it: it stops claiming, lets its running jobs finish
//! (cancelled and put back after `--drain-timeout`), and exits 0. A thread's blueprint is the
//! one pinned when it was enqueued, bound against what this command allows (as `graph run`); a
//! served run is run by the runner `serve` builds, from this command's harness (its provider,
//! workspace and `--agent` runnables), its events and result written to the store as it goes.

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use recursive_core::{Budget, RunScope};
use recursive_graph::blueprint::{self, Source};
use recursive_graph::jobs::{GraphJobs, LoadGraph, MakeScope};
use recursive_harness::{Harness, RlmOptions};
use recursive_serve::queued::RunJobs;
use recursive_store::queue::{DEFAULT_QUEUE, JobQueue};
use recursive_store::worker::{JobHandlers, Worker, WorkerEvent, WorkerOptions};
use recursive_store::{Checkpointer, PostgresCheckpointer};
use tokio_util::sync::CancellationToken;

use super::binding::{BindArgs, stored};
use super::stores::shown_address;
use crate::{ConfigError, ProviderArgs};

/// Arguments of `worker`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// The PostgreSQL store to claim jobs from: `postgres://user:pw@host/db`.
    #[arg(long, value_name = "URL", env = "RECURSIVE_GRAPH_STORE")]
    pub store: String,
    /// The queue to claim from.
    #[arg(long, default_value = DEFAULT_QUEUE)]
    pub queue: String,
    /// Jobs run at once by this process.
    #[arg(long, default_value_t = 1, value_name = "N", value_parser = crate::flags::concurrency)]
    pub concurrency: usize,
    /// How long a job's lease (and its thread's) lasts without a heartbeat: a killed worker's
    /// job is taken over after this long. Heartbeats go every third of it.
    #[arg(long, default_value = "30", value_name = "SECS", value_parser = crate::flags::lease_ttl)]
    pub lease_ttl: Duration,
    /// How long to wait before asking again when no job is ready.
    #[arg(long, default_value = "1", value_name = "SECS", value_parser = crate::flags::duration)]
    pub poll: Duration,
    /// The wait after a job's first failed attempt, doubled per attempt (at most 10 minutes).
    #[arg(long, default_value = "2", value_name = "SECS", value_parser = crate::flags::duration)]
    pub backoff: Duration,
    /// On SIGTERM or Ctrl-C, how long running jobs may take to finish before they are
    /// cancelled at their checkpoint and put back for another worker.
    #[arg(long, default_value = "30", value_name = "SECS", value_parser = crate::flags::duration)]
    pub drain_timeout: Duration,
    /// Most model turns of an agent run (a served run's agent, an agent a graph runs).
    #[arg(long, default_value_t = recursive_core::RunLimits::default().max_steps, value_name = "N")]
    pub max_steps: u32,
    /// Approve every tool call that would ask (a worker has no one to ask: without this, such
    /// calls are denied).
    #[arg(long)]
    pub yes: bool,
    #[command(flatten)]
    pub provider: ProviderArgs,
    #[command(flatten)]
    pub bind: BindArgs,
    #[command(flatten)]
    pub budget: super::BudgetArgs,
}

/// Runs the command.
pub async fn execute(args: WorkerArgs, exports: &super::Exports) -> anyhow::Result<u8> {
    if !(args.store.starts_with("postgres://") || args.store.starts_with("postgresql://")) {
        return Err(ConfigError(
            "recursive worker needs a PostgreSQL store: --store postgres://user:pw@host/db".into(),
        )
        .into());
    }
    let options = options(&args);
    let approver = super::ApprovalArgs { yes: args.yes, no_ask: !args.yes, mode: None }.approver();
    let mut harness = super::harness(
        &args.provider,
        args.bind.workspace.as_deref(),
        approver,
        args.max_steps,
        &args.bind.agents,
        RlmOptions::default(),
    )
    .await?;
    let limits = args.budget.limits(&harness.provider)?;
    harness.check_shell_sandbox(None)?;
    let mcp = super::start_mcp(&mut harness, &args.provider).await?;
    let template = super::scope_with(
        exports,
        &harness,
        "worker",
        &args.provider,
        Arc::new(recursive_core::NullSink),
        limits.clone(),
        None,
    )?;
    let max_depth = harness.limits().max_depth;
    let runner = Arc::new(super::served::served_by(&harness)?);
    let pg = PostgresCheckpointer::connect(&args.store).await?;
    let queue = JobQueue::open(&pg).await?;
    let archive = recursive_store::open_archive(&args.store).await?;
    let store: Arc<dyn Checkpointer> = Arc::new(pg);
    let telemetry = exports.telemetry_sink(&harness, args.provider.otel_content)?;
    let runs = RunJobs::new(runner, archive, store.clone(), queue.clone(), telemetry);
    let sink = template.sink().clone();
    let scope: MakeScope = Box::new(move |job| {
        RunScope::root(&format!("job-{}", job.id), sink.clone(), Arc::new(Budget::new(limits.clone())))
            .with_max_depth(max_depth)
    });
    let graphs = GraphJobs::new(store, loader(Arc::new(harness), args.bind.clone()), scope, options.lease_ttl);
    let handler = JobHandlers(vec![Arc::new(graphs), Arc::new(runs)]);
    let (drain, abort) = (CancellationToken::new(), CancellationToken::new());
    watch_drain(drain.clone(), abort.clone());
    // Said once the signals drain the worker.
    if !args.provider.quiet {
        eprintln!("worker {} on queue {} (store: {})", options.name, options.queue, shown_address(&args.store));
    }
    let name = options.name.clone();
    let worker = Worker::new(queue, Arc::new(handler), options, watcher(args.provider.quiet));
    let report = worker.run(drain, abort).await;
    mcp.shutdown().await;
    if !args.provider.quiet {
        eprintln!(
            "worker {name}: stopped: {} done, {} failed, {} put back",
            report.done, report.failed, report.released
        );
    }
    if report.connection_lost {
        return Err(anyhow::anyhow!("worker {name}: the connection to the store was lost; start the worker again"));
    }
    Ok(0)
}

/// The worker's options from the flags (their numbers checked as they were parsed:
/// [`crate::flags`]); its name is unique (host, pid and a UUIDv7).
fn options(args: &WorkerArgs) -> WorkerOptions {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let host = if host.trim().is_empty() { "localhost" } else { host.trim() };
    WorkerOptions {
        name: format!("{host}/{}/{}", std::process::id(), uuid::Uuid::now_v7()),
        queue: args.queue.clone(),
        concurrency: args.concurrency,
        lease_ttl: args.lease_ttl,
        poll: args.poll,
        backoff: args.backoff,
        drain_timeout: args.drain_timeout,
    }
}

/// Binds a thread's pinned blueprint as `graph resume` does: against the harness and the
/// sub-graphs the thread pinned (for a thread stored before they were pinned, the blueprints
/// next to where it was read from, and `--graph`).
fn loader(harness: Arc<Harness>, bind: BindArgs) -> LoadGraph {
    Box::new(move |info| {
        let text = info.blueprint.clone().ok_or("the thread has no stored blueprint")?;
        let origin = info.origin.clone().unwrap_or_else(|| info.graph.clone());
        let subgraphs = stored(&bind, info, &origin).map_err(|e| format!("{e:#}"))?;
        let allow = harness.allowlist(subgraphs.sources()).map_err(|e| e.to_string())?;
        blueprint::load(&Source { origin, text }, &allow).map_err(|d| d.to_string())
    })
}

/// One line on stderr per claim and per finished attempt (none with `-q`); store errors always.
fn watcher(quiet: bool) -> recursive_store::worker::Watcher {
    Arc::new(move |event| match event {
        WorkerEvent::StoreError(e) => eprintln!("worker: {e} (trying again)"),
        _ if quiet => {}
        WorkerEvent::Claimed { id, kind, target, attempt } => {
            let what = if kind == recursive_store::queue::KIND_GRAPH { "thread" } else { kind.as_str() };
            eprintln!("job {id}: {what} {target}, attempt {attempt}")
        }
        WorkerEvent::Finished { id, status, detail } => eprintln!("job {id}: {status} ({detail})"),
        WorkerEvent::Lost { id } => {
            eprintln!("job {id}: taken back (lease expired, or cancelled); its run is cancelled")
        }
        WorkerEvent::Draining { running } => eprintln!("worker: draining ({running} running)"),
        _ => {}
    })
}

/// The first SIGTERM or Ctrl-C drains; a second cancels the running jobs at once (they are put
/// back at their checkpoint). The handlers are registered before this returns.
fn watch_drain(drain: CancellationToken, abort: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        return;
    };
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            tokio::select! {
                got = term.recv() => if got.is_none() { return },
                got = int.recv() => if got.is_none() { return },
            }
            seen += 1;
            if seen == 1 {
                drain.cancel();
            } else {
                abort.cancel();
                return;
            }
        }
    });
}
