//! Graph threads, run the one way every host runs them (the `graph` command, `serve`'s threads
//! API): bind the thread's blueprint — a new thread's from its source, a stored thread's pinned
//! text, with the sub-graphs it pinned — take the thread's lease, record a new thread with what
//! it pins, run (between a `run_started` and a `run_finished` event), release the lease — the
//! store's one way of running a durable run ([`recursive_store::durable`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use recursive_core::{EventKind, FinishReason, RunScope};
use recursive_graph::blueprint::{self, Source};
use recursive_graph::{GraphError, GraphOutcome, Start, Thread};
use recursive_store::{Checkpointer, DurableKey, LeaseError, Runner, StoreError, ThreadInfo};

use crate::{Harness, sibling_graphs};

/// Where a blueprint's sub-graphs come from.
#[derive(Debug, Clone)]
pub enum SubGraphs {
    /// Files: the blueprints in this directory (by file stem) and the extra named ones.
    Files(Option<PathBuf>, Vec<(String, Source)>),
    /// The texts a thread pinned when it started (no file is read).
    Pinned(BTreeMap<String, Source>),
}

impl SubGraphs {
    /// A stored thread's: its pinned texts, or for a thread stored before sub-graphs were
    /// pinned, the files next to its blueprint's origin.
    pub fn of(info: &ThreadInfo, origin: &str) -> Self {
        match &info.subgraphs {
            Some(pinned) => SubGraphs::Pinned(pinned.clone()),
            None => SubGraphs::Files(std::path::Path::new(origin).parent().map(PathBuf::from), Vec::new()),
        }
    }

    /// The named sources a blueprint may bind as sub-graphs.
    pub fn sources(&self) -> Vec<(String, Source)> {
        match self {
            SubGraphs::Pinned(pinned) => pinned.iter().map(|(n, s)| (n.clone(), s.clone())).collect(),
            SubGraphs::Files(dir, extra) => {
                let mut graphs = dir.as_deref().map(sibling_graphs).unwrap_or_default();
                graphs.extend(extra.iter().cloned());
                graphs
            }
        }
    }
}

/// Why a thread did not run.
#[derive(Debug, thiserror::Error)]
pub enum ThreadError {
    /// The blueprint (or a sub-graph) does not bind: the caller's to fix.
    #[error("{0}")]
    Bind(String),
    /// Another runner holds the thread.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The run failed (the thread keeps what finished).
    #[error(transparent)]
    Graph(#[from] GraphError),
}

/// One run of a thread: what it runs and how it starts.
pub struct ThreadRun {
    /// The blueprint's source (a stored thread's pinned text).
    pub source: Source,
    /// Where its sub-graphs come from.
    pub subgraphs: SubGraphs,
    /// For a new thread: its record, stored once the blueprint binds (with the sub-graphs it
    /// pins).
    pub new_thread: Option<ThreadInfo>,
    /// The thread's id.
    pub thread: String,
    /// How the run starts.
    pub start: Start,
    /// Wait for another runner's lease instead of failing.
    pub wait: bool,
}

impl Harness {
    /// Runs a thread in `scope` (see the module docs); `store` keeps it.
    pub async fn run_thread(
        &self,
        store: Arc<dyn Checkpointer>,
        run: ThreadRun,
        scope: &RunScope,
    ) -> Result<GraphOutcome, ThreadError> {
        let (graph, allow) = self.bind_thread(&run.source, &run.subgraphs)?;
        let runner = Runner::take(store.clone(), &DurableKey::thread(&run.thread).waiting(run.wait)).await?;
        if let Some(mut info) = run.new_thread {
            info.graph = graph.name().to_string();
            info.subgraphs = Some(allow.reachable_graphs(&run.source));
            if let Some(old) = store.thread(&run.thread).await? {
                info.created_at = old.created_at;
            }
            if let Err(e) = runner.store().put_thread(&info).await {
                runner.release().await;
                return Err(e.into());
            }
        }
        let held = runner.open(scope).await?;
        let scope = &held.scope().clone();
        scope.emit(0, EventKind::RunStarted { goal: format!("graph {} on thread {}", graph.name(), run.thread) });
        let outcome = graph.run(run.start, &Thread::new(held.store(), &run.thread), scope).await;
        // A run that ended whole (done, paused, asking, cancelled) closes the journal: a later run
        // of the thread starts afresh. One that failed (a node, the store, a lost lease) leaves it
        // for the resume to read back — and a runner that lost its lease must not close its
        // successor's journal.
        if let Err(e) = held.close(outcome.is_ok()).await {
            scope.emit(0, EventKind::Error { message: e });
        }
        let (finish_reason, error) = match &outcome {
            Ok(o) => (o.finish.finish_reason(), None),
            Err(e) => (FinishReason::Fault, Some(e.to_string())),
        };
        scope
            .emit(0, EventKind::RunFinished { finish_reason, error, usage: scope.usage(), cost_usd: scope.cost_usd() });
        Ok(outcome?)
    }

    /// Binds a thread's blueprint with its sub-graphs: the graph, and what it may bind. Every
    /// model and provider its nodes name is noted with the provider, so a command that binds
    /// before it sets its budget refuses an unpriced one under a USD cap at start (exit 2).
    pub fn bind_thread(
        &self,
        source: &Source,
        subgraphs: &SubGraphs,
    ) -> Result<(recursive_graph::Graph, recursive_graph::blueprint::Allowlist), ThreadError> {
        let allow = self.allowlist(subgraphs.sources()).map_err(|e| ThreadError::Bind(e.to_string()))?;
        let graph = blueprint::load(source, &allow).map_err(|d| ThreadError::Bind(d.to_string()))?;
        Ok((graph, allow))
    }

    /// A stored thread's next run: its pinned blueprint and sub-graphs.
    pub async fn stored_thread(
        store: &dyn Checkpointer,
        thread: &str,
        start: Start,
    ) -> Result<Option<ThreadRun>, ThreadError> {
        let Some(info) = store.thread(thread).await? else { return Ok(None) };
        let text =
            info.blueprint.clone().ok_or_else(|| ThreadError::Bind("the thread has no stored blueprint".into()))?;
        let origin = info.origin.clone().unwrap_or_else(|| info.graph.clone());
        let subgraphs = SubGraphs::of(&info, &origin);
        Ok(Some(ThreadRun {
            source: Source { origin, text },
            subgraphs,
            new_thread: None,
            thread: thread.to_string(),
            start,
            wait: false,
        }))
    }
}
