//! A worker: claims jobs from the PostgreSQL [`JobQueue`] and runs them, any number of workers
//! on any number of machines. Up to `concurrency` jobs run at once; one heartbeat renews the
//! leases of all of them every third of the lease's time (and cancels a job whose lease was
//! taken back), and while idle the worker polls, putting back jobs whose claimer died.
//!
//! A failed attempt is tried again after a backoff that doubles per attempt, until the job has
//! used its attempts and ends `failed` with its error. A drain (SIGTERM in `recursive worker`)
//! stops claiming and lets the running jobs finish; those still running after the drain's time
//! are cancelled at their checkpoint and put back unrun, for another worker to resume.
//!
//! [`JobHandlers`] puts several handlers (kinds) behind one worker. A job whose last claimer
//! died after its last attempt ends `failed` when a worker puts it back; the handler of its kind
//! hears of it ([`JobHandler::abandoned`]) to mark what it ran as ended. The handlers live with
//! what they run (graph threads in `recursive-graph`, served runs in `recursive-serve`).

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::checkpoint::StoreError;
use crate::queue::{Job, JobQueue, JobRow, backoff};

/// How a worker works.
#[derive(Debug, Clone)]
pub struct WorkerOptions {
    /// Its name in the queue (`claimed_by`): unique among the workers.
    pub name: String,
    /// The queue it claims from.
    pub queue: String,
    /// Jobs it runs at once.
    pub concurrency: usize,
    /// How long a job's lease (and its thread's) lasts without a heartbeat.
    pub lease_ttl: Duration,
    /// How long it waits before asking again when no job is ready.
    pub poll: Duration,
    /// The wait after a first failed attempt (doubled per attempt).
    pub backoff: Duration,
    /// How long running jobs may take to finish once a drain starts.
    pub drain_timeout: Duration,
}

/// What became of one attempt of a job.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// It ran to its end; how it ended (`done`, `interrupted ask …`, a limit…).
    Done(String),
    /// It failed; tried again (after the backoff) when `retry` and attempts are left.
    Failed {
        /// Why.
        error: String,
        /// Whether another attempt may succeed.
        retry: bool,
    },
    /// It did not run (cancelled by a drain, or its target busy elsewhere): put back, its
    /// attempt not counted, ready again after this long.
    Release(Duration),
}

/// Runs the jobs of some kinds.
#[async_trait]
pub trait JobHandler: Send + Sync {
    /// The kinds it runs.
    fn kinds(&self) -> Vec<&'static str>;
    /// Runs one attempt of `job`; `cancel` fires on a drain's end or a lost lease.
    async fn handle(&self, job: &Job, cancel: CancellationToken) -> Attempt;
    /// A job of its kinds failed for good without an attempt saying so (its last claimer
    /// stopped heartbeating, or it was cancelled while running and its lease has expired
    /// since): whatever the job's target shows should say it ended (if it does not yet).
    async fn abandoned(&self, _job: &JobRow) {}
}

/// Several handlers as one: each job goes to the handler of its kind.
pub struct JobHandlers(pub Vec<Arc<dyn JobHandler>>);

#[async_trait]
impl JobHandler for JobHandlers {
    fn kinds(&self) -> Vec<&'static str> {
        self.0.iter().flat_map(|h| h.kinds()).collect()
    }

    async fn handle(&self, job: &Job, cancel: CancellationToken) -> Attempt {
        match self.0.iter().find(|h| h.kinds().contains(&job.kind.as_str())) {
            Some(handler) => handler.handle(job, cancel).await,
            None => Attempt::Failed { error: format!("no handler for jobs of kind `{}`", job.kind), retry: false },
        }
    }

    async fn abandoned(&self, job: &JobRow) {
        if let Some(handler) = self.0.iter().find(|h| h.kinds().contains(&job.kind.as_str())) {
            handler.abandoned(job).await;
        }
    }
}

/// What a worker tells whoever watches it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WorkerEvent {
    /// It claimed a job.
    Claimed {
        /// The job.
        id: i64,
        /// Its kind.
        kind: String,
        /// Its target.
        target: String,
        /// The attempt's number.
        attempt: i32,
    },
    /// An attempt ended and the job is now in `status` (`done`, `queued`, `failed`).
    Finished {
        /// The job.
        id: i64,
        /// Its status now.
        status: String,
        /// How the attempt ended.
        detail: String,
    },
    /// Its lease on a job was taken back (it stopped heartbeating too long, or a client cancelled
    /// the job): the job's run is cancelled.
    Lost {
        /// The job.
        id: i64,
    },
    /// The queue could not be reached; it tries again.
    StoreError(String),
    /// It stopped claiming; `running` jobs are finishing.
    Draining {
        /// Jobs still running.
        running: usize,
    },
}

/// What a worker did, once it stopped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerReport {
    /// Attempts that ran to their end.
    pub done: u64,
    /// Attempts that failed (tried again later, or failed for good).
    pub failed: u64,
    /// Jobs put back unrun (drain, busy target, lost lease).
    pub released: u64,
    /// It stopped because its connection to the store was gone.
    pub connection_lost: bool,
}

/// Who watches a worker.
pub type Watcher = Arc<dyn Fn(WorkerEvent) + Send + Sync>;

/// The jobs a worker runs now, by id, with what cancels each.
type Running = Arc<Mutex<BTreeMap<i64, CancellationToken>>>;

/// A worker over a queue.
pub struct Worker {
    queue: JobQueue,
    handler: Arc<dyn JobHandler>,
    options: WorkerOptions,
    watcher: Watcher,
}

impl Worker {
    /// A worker running `handler`'s kinds from `queue`.
    pub fn new(queue: JobQueue, handler: Arc<dyn JobHandler>, options: WorkerOptions, watcher: Watcher) -> Self {
        Self { queue, handler, options, watcher }
    }

    /// Claims and runs jobs until `drain` fires (or the connection to the store is gone), then
    /// lets the running ones finish (cancelling them at once when `abort` fires, or once the
    /// drain's time is up).
    pub async fn run(&self, drain: CancellationToken, abort: CancellationToken) -> WorkerReport {
        let running: Running = Arc::default();
        let heartbeat =
            tokio::spawn(heartbeat(self.queue.clone(), self.options.clone(), running.clone(), self.watcher.clone()));
        let mut tasks = JoinSet::new();
        let mut report = WorkerReport::default();
        self.claim_until(&drain, &abort, &running, &mut tasks, &mut report).await;
        (self.watcher)(WorkerEvent::Draining { running: tasks.len() });
        let deadline = tokio::time::sleep(self.options.drain_timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                next = tasks.join_next() => match next {
                    Some(done) => tally(&mut report, done.ok()),
                    None => break,
                },
                _ = &mut deadline, if !abort.is_cancelled() => abort.cancel(),
                _ = abort.cancelled(), if !abort.is_cancelled() => {}
            }
        }
        heartbeat.abort();
        report
    }

    /// The claim loop: one job per free slot, until `drain` fires.
    async fn claim_until(
        &self,
        drain: &CancellationToken,
        abort: &CancellationToken,
        running: &Running,
        tasks: &mut JoinSet<Option<Attempt>>,
        report: &mut WorkerReport,
    ) {
        let slots = Arc::new(Semaphore::new(self.options.concurrency.max(1)));
        let kinds = self.handler.kinds();
        let mut reaped: Option<Instant> = None;
        loop {
            let permit = tokio::select! {
                biased;
                _ = drain.cancelled() => return,
                permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => return },
            };
            while let Some(done) = tasks.try_join_next() {
                tally(report, done.ok());
            }
            if reaped.is_none_or(|at| at.elapsed() >= self.options.poll) {
                match self.queue.reap().await {
                    Ok(moved) => {
                        for job in moved.iter().filter(|j| j.status == "failed" && kinds.contains(&j.kind.as_str())) {
                            self.handler.abandoned(job).await;
                        }
                    }
                    Err(e) => (self.watcher)(WorkerEvent::StoreError(e.to_string())),
                }
                reaped = Some(Instant::now());
            }
            let o = &self.options;
            match self.queue.claim(&o.queue, &kinds, &o.name, o.lease_ttl).await {
                Ok(Some(job)) => {
                    let cancel = abort.child_token();
                    lock(running).insert(job.id, cancel.clone());
                    (self.watcher)(WorkerEvent::Claimed {
                        id: job.id,
                        kind: job.kind.clone(),
                        target: job.target.clone(),
                        attempt: job.attempt,
                    });
                    tasks.spawn(self.attempt(job, cancel, permit, running.clone()));
                }
                Ok(None) => idle(drain, self.options.poll).await,
                Err(e) => {
                    (self.watcher)(WorkerEvent::StoreError(e.to_string()));
                    if self.queue.is_closed() {
                        // No statement can succeed any more: stop, so a supervisor restarts us.
                        report.connection_lost = true;
                        return;
                    }
                    idle(drain, self.options.poll).await;
                }
            }
        }
    }

    /// Runs one attempt of `job` and records how it ended.
    fn attempt(
        &self,
        job: Job,
        cancel: CancellationToken,
        permit: OwnedSemaphorePermit,
        running: Running,
    ) -> impl std::future::Future<Output = Option<Attempt>> + Send + 'static {
        let (queue, handler, watcher) = (self.queue.clone(), self.handler.clone(), self.watcher.clone());
        let (name, base) = (self.options.name.clone(), self.options.backoff);
        async move {
            let attempt = handler.handle(&job, cancel).await;
            let status = record(&queue, &job, &name, base, &attempt).await;
            lock(&running).remove(&job.id);
            drop(permit);
            let detail = match &attempt {
                Attempt::Done(outcome) => outcome.clone(),
                Attempt::Failed { error, .. } => error.clone(),
                Attempt::Release(_) => "put back unrun".into(),
            };
            match status {
                Ok(Some(status)) => watcher(WorkerEvent::Finished { id: job.id, status, detail }),
                Ok(None) => watcher(WorkerEvent::Lost { id: job.id }),
                Err(e) => watcher(WorkerEvent::StoreError(e.to_string())),
            }
            Some(attempt)
        }
    }
}

/// The map of running jobs (a poisoned lock still holds a usable map).
fn lock(running: &Running) -> std::sync::MutexGuard<'_, BTreeMap<i64, CancellationToken>> {
    running.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits `poll`, or less when `drain` fires.
async fn idle(drain: &CancellationToken, poll: Duration) {
    tokio::select! {
        _ = drain.cancelled() => {}
        _ = tokio::time::sleep(poll) => {}
    }
}

fn tally(report: &mut WorkerReport, attempt: Option<Option<Attempt>>) {
    match attempt.flatten() {
        Some(Attempt::Done(_)) => report.done += 1,
        Some(Attempt::Failed { .. }) => report.failed += 1,
        Some(Attempt::Release(_)) | None => report.released += 1,
    }
}

/// Moves the job to where its attempt leaves it (tried a few times, so a blip of the server
/// does not leave it to its lease's expiry); its status then, `None` when the lease was lost.
async fn record(
    queue: &JobQueue,
    job: &Job,
    worker: &str,
    base: Duration,
    attempt: &Attempt,
) -> Result<Option<String>, StoreError> {
    let mut tries = 0;
    loop {
        let moved = match attempt {
            Attempt::Done(outcome) => queue.complete(job.id, worker, outcome).await.map(|ok| ok.then(|| "done".into())),
            Attempt::Failed { error, retry } => {
                queue.fail(job.id, worker, error, backoff(base, job.attempt), *retry).await
            }
            Attempt::Release(delay) => {
                queue.release(job.id, worker, *delay).await.map(|ok| ok.then(|| "queued".into()))
            }
        };
        tries += 1;
        match moved {
            Err(_) if tries < 3 => tokio::time::sleep(Duration::from_millis(200 * tries)).await,
            other => return other,
        }
    }
}

/// Renews the worker's leases every third of their time; a running job whose lease was taken
/// back is cancelled.
async fn heartbeat(queue: JobQueue, options: WorkerOptions, running: Running, watcher: Watcher) {
    loop {
        tokio::time::sleep(options.lease_ttl / 3).await;
        match queue.heartbeat(&options.name, options.lease_ttl).await {
            Ok(held) => {
                let held: HashSet<i64> = held.into_iter().collect();
                for (id, cancel) in lock(&running).iter() {
                    if !held.contains(id) && !cancel.is_cancelled() {
                        cancel.cancel();
                        watcher(WorkerEvent::Lost { id: *id });
                    }
                }
            }
            Err(e) => watcher(WorkerEvent::StoreError(e.to_string())),
        }
    }
}
