//! Graph jobs on the store's queue: [`GraphJobs`] runs `graph` jobs — it takes the thread's
//! lease, applies the enqueued input the first time (an attempt after a crash resumes from the
//! last checkpoint instead, so no finished node runs again), and runs the thread's pinned
//! blueprint. [`enqueue_graph`] queues a run of a thread with new input; [`enqueue_resume`]
//! continues one (after a failure for good, a pause, or with the value a node asked for).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::RunScope;
use recursive_store::checkpoint::{Checkpointer, StoreError, ThreadInfo};
use recursive_store::durable::{DurableKey, Runner};
use recursive_store::lease::LeaseError;
use recursive_store::queue::{Job, JobQueue, KIND_GRAPH, NewJob, QueueError};
use recursive_store::worker::{Attempt, JobHandler};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::exec::{Finish, GraphError, Start, Thread};
use crate::graph::Graph;

/// Binds a thread's pinned blueprint into a graph (the caller's allowlist).
pub type LoadGraph = Box<dyn Fn(&ThreadInfo) -> Result<Graph, String> + Send + Sync>;

/// Makes the root run scope of a job's run (its sink and budget).
pub type MakeScope = Box<dyn Fn(&Job) -> RunScope + Send + Sync>;

/// Runs `graph` jobs: a thread of the store, from its pinned blueprint.
pub struct GraphJobs {
    store: Arc<dyn Checkpointer>,
    load: LoadGraph,
    scope: MakeScope,
    lease_ttl: Duration,
}

impl GraphJobs {
    /// Runs threads of `store`, binding their blueprints with `load`, under scopes from `scope`,
    /// holding each thread's lease for `lease_ttl` at a time.
    pub fn new(store: Arc<dyn Checkpointer>, load: LoadGraph, scope: MakeScope, lease_ttl: Duration) -> Self {
        Self { store, load, scope, lease_ttl }
    }

    /// How the attempt starts: with the enqueued input when the thread is still where it was
    /// when enqueued, otherwise (an earlier attempt applied it) from its latest checkpoint.
    /// A queued resume gives its value only while the thread is still at the checkpoint it
    /// was queued at.
    async fn start(&self, job: &Job) -> Result<Start, StoreError> {
        let latest = self.store.latest(&job.target, "").await?.map(|c| c.id);
        let unmoved = |key: &str| latest.as_deref() == job.payload.get(key).and_then(Value::as_str);
        if let Some(input) = job.payload.get("input") {
            return Ok(if unmoved("after") { Start::Input(input.clone()) } else { Start::Resume(None) });
        }
        let value = job.payload.get("resume").filter(|v| !v.is_null() && unmoved("at")).cloned();
        Ok(Start::Resume(value))
    }

    /// Runs the thread as the store runs every durable run ([`recursive_store::durable`]): under
    /// its lease, journaled — an attempt after a worker died reads back every call the dead one
    /// finished, and its spend counts. A run that ended (not stopped to be taken up again) ends
    /// the journal's run.
    async fn run(&self, job: &Job, graph: &Graph, cancel: CancellationToken) -> Attempt {
        let key = DurableKey::thread(&job.target).with_ttl(self.lease_ttl);
        let runner = match Runner::take(self.store.clone(), &key).await {
            Ok(runner) => runner,
            Err(LeaseError::Held { .. }) => return Attempt::Release(self.lease_ttl / 3),
            Err(e) => return Attempt::Failed { error: e.to_string(), retry: true },
        };
        let start = match self.start(job).await {
            Ok(start) => start,
            Err(e) => {
                runner.release().await;
                return Attempt::Failed { error: e.to_string(), retry: true };
            }
        };
        let scope = (self.scope)(job).with_cancel(cancel.clone());
        let held = match runner.open(&scope).await {
            Ok(held) => held,
            Err(e) => return Attempt::Failed { error: e.to_string(), retry: true },
        };
        let outcome = graph.run(start, &Thread::new(held.store(), job.target.clone()), held.scope()).await;
        let taken_up_again =
            cancel.is_cancelled() && outcome.as_ref().is_ok_and(|o| matches!(o.finish, Finish::Stopped { .. }));
        let ending = held.close(outcome.is_ok() && !taken_up_again).await;
        match (outcome, ending) {
            (Ok(_), _) if taken_up_again => Attempt::Release(Duration::ZERO),
            (Ok(_), Err(e)) => Attempt::Failed { error: format!("ending the thread's journal: {e}"), retry: true },
            (Ok(o), Ok(())) => Attempt::Done(o.finish.to_string()),
            (Err(e @ (GraphError::Store(_) | GraphError::Node { .. })), _) => {
                Attempt::Failed { error: e.to_string(), retry: true }
            }
            (Err(e), _) => Attempt::Failed { error: e.to_string(), retry: false },
        }
    }
}

#[async_trait]
impl JobHandler for GraphJobs {
    fn kinds(&self) -> Vec<&'static str> {
        vec![KIND_GRAPH]
    }

    async fn handle(&self, job: &Job, cancel: CancellationToken) -> Attempt {
        let info = match self.store.thread(&job.target).await {
            Ok(Some(info)) => info,
            Ok(None) => {
                return Attempt::Failed { error: format!("no thread `{}` in the store", job.target), retry: false };
            }
            Err(e) => return Attempt::Failed { error: e.to_string(), retry: true },
        };
        match (self.load)(&info) {
            Ok(graph) => self.run(job, &graph, cancel).await,
            Err(error) => Attempt::Failed { error, retry: false },
        }
    }
}

/// Why a thread could not be enqueued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The thread's last run has not finished.
    #[error("thread `{0}` has an unfinished run: resume it, or use another thread")]
    Unfinished(String),
    /// The thread has no checkpoint to continue from.
    #[error("thread `{0}` has no checkpoints")]
    NoThread(String),
    /// A value was given but the thread's run has finished.
    #[error("thread `{0}` does not wait for a value: resume it without one")]
    NothingAsks(String),
    /// The input does not fit the graph's state.
    #[error("input: {0}")]
    Input(String),
    /// The queue refused it, or the store failed.
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<StoreError> for EnqueueError {
    fn from(e: StoreError) -> Self {
        EnqueueError::Queue(QueueError::Store(e))
    }
}

/// Enqueues a run of `graph` on the thread of `info` (recorded with its pinned blueprint) with
/// `input`, checked against the graph's state first; the job's id.
pub async fn enqueue_graph(
    queue: &JobQueue,
    store: &dyn Checkpointer,
    graph: &Graph,
    info: &ThreadInfo,
    input: Value,
    (queue_name, max_attempts): (&str, i32),
) -> Result<i64, EnqueueError> {
    let thread = &info.thread;
    let latest = store.latest(thread, "").await?;
    if latest.as_ref().is_some_and(|l| !l.is_done()) {
        return Err(EnqueueError::Unfinished(thread.clone()));
    }
    let Value::Object(update) = &input else {
        return Err(EnqueueError::Input(format!("expected an object of channel values, got {input}")));
    };
    let mut state = latest.as_ref().map(|l| l.state.clone()).unwrap_or_else(|| graph.schema().empty_state());
    graph.schema().apply(&mut state, update).map_err(|e| EnqueueError::Input(e.to_string()))?;
    if queue.is_open(KIND_GRAPH, thread).await? {
        return Err(QueueError::AlreadyQueued { kind: KIND_GRAPH.into(), target: thread.clone() }.into());
    }
    store.put_thread(info).await?;
    let job = NewJob {
        queue: queue_name.into(),
        kind: KIND_GRAPH.into(),
        target: thread.clone(),
        payload: json!({ "input": input, "after": latest.map(|l| l.id) }),
        max_attempts,
    };
    Ok(queue.enqueue(&job).await?)
}

/// Enqueues a resume of `thread` from its latest checkpoint, with the value a node asked for;
/// the job's id.
pub async fn enqueue_resume(
    queue: &JobQueue,
    store: &dyn Checkpointer,
    thread: &str,
    value: Option<Value>,
    (queue_name, max_attempts): (&str, i32),
) -> Result<i64, EnqueueError> {
    let latest = store.latest(thread, "").await?.ok_or_else(|| EnqueueError::NoThread(thread.into()))?;
    if value.is_some() && latest.is_done() {
        return Err(EnqueueError::NothingAsks(thread.into()));
    }
    let job = NewJob {
        queue: queue_name.into(),
        kind: KIND_GRAPH.into(),
        target: thread.into(),
        payload: json!({ "resume": value, "at": latest.id }),
        max_attempts,
    };
    Ok(queue.enqueue(&job).await?)
}
