//! Served runs through the PostgreSQL job queue (`serve --enqueue`, `recursive worker`): the
//! server records a run in the archive as `queued` and queues a job of kind `run` (the target is
//! the run's id, the payload its request) instead of running it; a worker claims the job and
//! runs the request with [`RunJobs`] under a record of the same id, written to the same archive
//! as it goes, so the server shows, lists and streams the run while a worker runs it.
//!
//! An agent run is journaled in the store ([`recursive_store::journal`]): a worker that dies
//! mid-run leaves the job to its lease's expiry, and the next attempt runs the request again
//! from the start, reading back every model call and tool call the dead worker finished (none
//! is sent or run again) and counting what it spent. The archive keeps the
//! earlier attempts' events; the retry numbers its own after them, behind an `attempt` event
//! (`attempt`, `first_event`), so a stream following the run never mixes them up and resumes
//! after `Last-Event-ID` as before. A run cancelled while queued never runs; one cancelled while
//! a worker runs it is cancelled there at the worker's next heartbeat (its job is ended in the
//! queue, which the heartbeat notices) — or, when that worker died, ended in the store by the
//! worker that reaps its lease. A run whose last attempt's worker died ends failed the same way.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::FinishReason;
use recursive_store::durable::{DurableKey, HeldRun};
use recursive_store::lease::LeaseError;
use recursive_store::queue::{CANCELLED, Job, JobQueue, JobRow, KIND_RUN, NewJob};
use recursive_store::worker::{Attempt, JobHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::runs::{RunOutput, RunRecord, RunRequest, RunStatus, RunView, Runner, title_of, unix_ms};
use crate::store::RunStore;

/// The job queue of a server's PostgreSQL store: where it queues the runs of its runs API
/// (with `enqueue`), and in any case how it cancels runs workers run and tells them from runs
/// a stopped server left unfinished.
#[derive(Clone, Debug)]
pub struct RunQueue {
    /// The job queue (the PostgreSQL store's).
    pub queue: JobQueue,
    /// Whether `POST /v1/runs` queues its runs (otherwise this process runs them).
    pub enqueue: bool,
    /// The queue's name (workers claim from `--queue`).
    pub name: String,
    /// How many attempts a run's job may use.
    pub max_attempts: i32,
}

impl RunQueue {
    /// Records `request` as a queued run in `store`'s archive and queues its job; the run.
    pub async fn enqueue(&self, store: &RunStore, request: RunRequest) -> Result<RunView, String> {
        let id = crate::runs::new_run_id();
        let created_ms = unix_ms();
        let view = RunView::queued(id.clone(), request.kind, created_ms, title_of(&request.input));
        let payload = serde_json::to_value(&request).map_err(|e| e.to_string())?;
        store.put_archived(&view, created_ms).await?;
        let job = NewJob {
            queue: self.name.clone(),
            kind: KIND_RUN.into(),
            target: id.clone(),
            payload,
            max_attempts: self.max_attempts,
        };
        if let Err(e) = self.queue.enqueue(&job).await {
            // Not queued: the run would wait for ever.
            let _ = store.finish_archived(&id, RunOutput::failed(format!("the run could not be queued: {e}"))).await;
            return Err(e.to_string());
        }
        Ok(view)
    }

    /// Cancels a run not in flight in this process: a queued one ends `cancelled` without
    /// running; a worker's is cancelled there at its next heartbeat; an ended one is left as
    /// it is. The run as it is now, `None` when there is none.
    pub async fn cancel(&self, store: &RunStore, id: &str) -> Result<Option<RunView>, String> {
        let was = self.queue.cancel(KIND_RUN, id).await.map_err(|e| e.to_string())?;
        if was.as_deref() == Some("queued") {
            let cancelled =
                RunOutput { outcome: FinishReason::Cancelled, ..RunOutput::failed("cancelled before it ran") };
            return store.finish_archived(id, cancelled).await;
        }
        store.view(id).await
    }
}

/// Runs `run` jobs: the request of a run `serve --enqueue` accepted, with the server's runner,
/// under a record of the run's id in a store over the same archive.
pub struct RunJobs {
    runner: Arc<dyn Runner>,
    archive: Arc<dyn recursive_store::RunArchive>,
    journals: Arc<dyn recursive_store::Checkpointer>,
    queue: JobQueue,
    observer: Option<Arc<dyn recursive_core::EventSink>>,
}

/// How often the last write of a run is tried before the attempt counts as failed.
const FINAL_WRITES: u32 = 3;

impl RunJobs {
    /// Runs requests with `runner`, keeping the runs in `archive` and their journals in
    /// `journals`; `queue` says whether a cancelled run was cancelled by a client; every event
    /// also goes to `observer`.
    pub fn new(
        runner: Arc<dyn Runner>,
        archive: Arc<dyn recursive_store::RunArchive>,
        journals: Arc<dyn recursive_store::Checkpointer>,
        queue: JobQueue,
        observer: Option<Arc<dyn recursive_core::EventSink>>,
    ) -> Self {
        Self { runner, archive, journals, queue, observer }
    }

    /// The record this attempt writes to: the run's id, its events after those kept of
    /// earlier attempts (behind an `attempt` event when there are some).
    async fn record(&self, store: &RunStore, job: &Job, cancel: CancellationToken) -> Result<Arc<RunRecord>, Attempt> {
        let retry = |e: String| Attempt::Failed { error: e, retry: true };
        let (view, created_ms) = match store.archived(&job.target).await {
            Ok(Some(found)) => found,
            Ok(None) => return Err(Attempt::Failed { error: format!("no run `{}`", job.target), retry: false }),
            Err(e) => return Err(retry(e)),
        };
        if view.status == RunStatus::Finished {
            let how = view.result.map_or_else(|| "finished".to_string(), |r| r.outcome.to_string());
            return Err(Attempt::Done(how));
        }
        let base = store.next_event(&job.target).await.map_err(retry)?;
        let record = RunRecord::resumed(view, created_ms, base, cancel);
        if base > 0 {
            record.note(&json!({"type": "attempt", "attempt": job.attempt, "first_event": base}));
        }
        Ok(record)
    }

    /// The fence of an attempt's writes: the worker still holds the job (a worker that stalled
    /// past its lease and was taken over must not write the run its successor now writes).
    fn fence(&self, job: &Job) -> crate::store::Fence {
        let (queue, id, worker, attempt) = (self.queue.clone(), job.id, job.worker.clone(), job.attempt);
        Arc::new(move || {
            let (queue, worker) = (queue.clone(), worker.clone());
            Box::pin(async move {
                match queue.holds(id, &worker, attempt).await {
                    Ok(true) => Ok(()),
                    Ok(false) => Err("the run was taken over by another worker after this one's lease ran out; this \
                                      worker stopped without writing"
                        .to_string()),
                    Err(e) => Err(e.to_string()),
                }
            })
        })
    }

    /// Whether a client cancelled the job (rather than a drain or a lost lease).
    async fn cancelled_by_client(&self, job: &Job) -> bool {
        matches!(self.queue.job(job.id).await, Ok(Some(row)) if row.error.as_deref() == Some(CANCELLED))
    }
}

#[async_trait]
impl JobHandler for RunJobs {
    fn kinds(&self) -> Vec<&'static str> {
        vec![KIND_RUN]
    }

    async fn handle(&self, job: &Job, cancel: CancellationToken) -> Attempt {
        let attempt = self.attempt(job, cancel).await;
        // An attempt that leaves the job failed for good ends the run with its error.
        if let Attempt::Failed { error, retry } = &attempt
            && (!retry || job.attempt >= job.max_attempts)
        {
            self.give_up(&job.target, RunOutput::failed(error.clone())).await;
        }
        attempt
    }

    async fn abandoned(&self, job: &JobRow) {
        let output = match job.error.as_deref() {
            Some(CANCELLED) => RunOutput { outcome: FinishReason::Cancelled, ..RunOutput::failed(CANCELLED) },
            error => {
                let error = error.unwrap_or("its workers stopped");
                RunOutput::failed(format!("gave up after {} attempt(s): {error}", job.attempts))
            }
        };
        self.give_up(&job.target, output).await;
    }
}

impl RunJobs {
    /// Runs one attempt of the run's request.
    async fn attempt(&self, job: &Job, cancel: CancellationToken) -> Attempt {
        let request: RunRequest = match serde_json::from_value(job.payload.clone()) {
            Ok(r) => r,
            Err(e) => return Attempt::Failed { error: format!("the run's request is unreadable: {e}"), retry: false },
        };
        let store = Arc::new(RunStore::new(self.archive.clone(), Default::default()).fenced(self.fence(job)));
        let record = match self.record(&store, job, cancel.clone()).await {
            Ok(record) => record,
            Err(attempt) => return attempt,
        };
        store.register(record.clone());
        record.set_running();
        // Run as the store runs every durable run (recursive_store::durable): under the run's
        // lease, journaled — an attempt after a worker died reads back every call the dead one
        // finished (none is sent or run again) and counts what it spent.
        let scope = crate::server::run_scope(&record, self.observer.clone());
        let held = match HeldRun::open(self.journals.clone(), &DurableKey::served(&job.target), &scope).await {
            Ok(held) => held,
            Err(LeaseError::Held { .. }) => return Attempt::Release(recursive_store::LEASE_TTL / 3),
            Err(e) => return Attempt::Failed { error: format!("the run's journal: {e}"), retry: true },
        };
        let output = self.runner.run(request, held.scope().clone()).await;
        let taken_up_again = cancel.is_cancelled() && !self.cancelled_by_client(job).await;
        if let Err(e) = held.close(!taken_up_again).await {
            tracing::warn!("ending the journal of run {}: {e}", job.target);
        }
        if taken_up_again {
            // A drain's end or a lost lease: the run is not over; another attempt runs it.
            return Attempt::Release(Duration::ZERO);
        }
        let outcome = output.outcome.to_string();
        record.finish(output);
        let mut tries = 0;
        while let Err(e) = store.flush().await {
            tries += 1;
            if tries >= FINAL_WRITES {
                return Attempt::Failed { error: format!("keeping the run in the store failed: {e}"), retry: true };
            }
            tokio::time::sleep(Duration::from_millis(200 * u64::from(tries))).await;
        }
        Attempt::Done(outcome)
    }

    /// Ends the run `id` in the store with `output`, unless it has ended (its job will not run
    /// again).
    async fn give_up(&self, id: &str, output: RunOutput) {
        let store = RunStore::new(self.archive.clone(), Default::default());
        if let Err(e) = store.finish_archived(id, output).await {
            tracing::warn!("ending the run {id} in the store failed: {e}");
        }
    }
}
