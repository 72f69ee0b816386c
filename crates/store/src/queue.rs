//! The job queue on PostgreSQL: work that `recursive worker` processes claim, on any number of
//! machines. One table, `recursive_jobs`; a job has a `kind` — `graph` (run a graph thread from
//! its checkpoint) or `run` (a run `serve --enqueue` accepted: its request is the payload) — and
//! the `target` it works on (the thread, the run).
//!
//! A claim is one statement (so one short transaction): the oldest ready job of a queue is
//! picked with `FOR UPDATE SKIP LOCKED` — claimers never wait for each other — and marked
//! `running` with the claimer's name and a lease expiry that the claimer's heartbeat renews.
//! A job ends `done` (with the run's outcome), goes back to `queued` with a backoff after a
//! failure, or ends `failed` with its last error once it has used its attempts. A job whose
//! claimer stopped heartbeating (killed, lost machine) is put back by [`JobQueue::reap`] once
//! its lease expired; its next claimer resumes the thread from its last checkpoint. The server's
//! clock decides every expiry, so workers whose clocks differ agree.
//!
//! A job row carries the format version of its payload (`format`, [`crate::FORMAT`]; 0 for jobs
//! queued before jobs were versioned, whose payloads have the same shape): a worker claims only
//! jobs of a format it reads, so a job queued by a newer build waits for a newer worker.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;
use tokio_postgres::Client;

use crate::checkpoint::StoreError;
use crate::postgres::{PostgresCheckpointer, pg, timed};

/// The job table, its indexes, and the guard of one open job per target.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS recursive_jobs (
    id BIGSERIAL PRIMARY KEY,
    queue TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL,
    not_before TIMESTAMPTZ NOT NULL DEFAULT now(),
    claimed_by TEXT,
    heartbeat TIMESTAMPTZ,
    expires TIMESTAMPTZ,
    outcome TEXT,
    error TEXT,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at TIMESTAMPTZ,
    format INTEGER NOT NULL DEFAULT 0
);
ALTER TABLE recursive_jobs ADD COLUMN IF NOT EXISTS format INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS recursive_jobs_ready ON recursive_jobs (queue, not_before, id) WHERE status = 'queued';
CREATE INDEX IF NOT EXISTS recursive_jobs_claimed ON recursive_jobs (expires) WHERE status = 'running';
CREATE UNIQUE INDEX IF NOT EXISTS recursive_jobs_open ON recursive_jobs (kind, target)
    WHERE status IN ('queued', 'running');
";

/// [`crate::FORMAT`] as the `format` column holds it.
const FORMAT_COLUMN: i32 = crate::format::FORMAT as i32;

/// An arbitrary, fixed key for the advisory lock that serialises creating the job table.
const SCHEMA_LOCK: i64 = 0x7265_6375_726a_6f62;

/// The kind of a job that runs a graph thread.
pub const KIND_GRAPH: &str = "graph";

/// The kind of a job that runs a served run (the target is the run's id, the payload its request).
pub const KIND_RUN: &str = "run";

/// The error of a job a client cancelled ([`JobQueue::cancel`]).
pub const CANCELLED: &str = "cancelled by a client";

/// The queue a job goes to unless told otherwise.
pub const DEFAULT_QUEUE: &str = "default";

/// How often a job is tried before it fails for good, unless told otherwise.
pub const DEFAULT_MAX_ATTEMPTS: i32 = 5;

/// The longest wait between two attempts of a failing job.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

/// A claimed job.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Its id.
    pub id: i64,
    /// Its kind (`graph`, `run`).
    pub kind: String,
    /// What it works on (the thread).
    pub target: String,
    /// What the kind needs to know (JSON).
    pub payload: Value,
    /// This attempt's number, from 1.
    pub attempt: i32,
    /// How many attempts it may use.
    pub max_attempts: i32,
    /// The worker that claimed it for this attempt.
    pub worker: String,
}

/// A job as listed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    /// Its id.
    pub id: i64,
    /// Its queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// What it works on.
    pub target: String,
    /// `queued`, `running`, `done` or `failed`.
    pub status: String,
    /// Attempts used.
    pub attempts: i32,
    /// Attempts it may use.
    pub max_attempts: i32,
    /// Who claimed it last.
    pub claimed_by: Option<String>,
    /// How its run ended (`done`, `interrupted`, a limit...), once `done`.
    pub outcome: Option<String>,
    /// Its last error.
    pub error: Option<String>,
}

/// What a new job is.
#[derive(Debug, Clone)]
pub struct NewJob {
    /// The queue.
    pub queue: String,
    /// Its kind.
    pub kind: String,
    /// What it works on.
    pub target: String,
    /// What the kind needs to know.
    pub payload: Value,
    /// How many attempts it may use (at least 1).
    pub max_attempts: i32,
}

/// A job could not be enqueued or moved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum QueueError {
    /// The target already has a queued or running job of this kind.
    #[error("`{target}` already has a queued or running {kind} job")]
    AlreadyQueued {
        /// The kind.
        kind: String,
        /// The target.
        target: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The job queue in the PostgreSQL database of a checkpointer (the same connection).
#[derive(Clone)]
pub struct JobQueue {
    client: Arc<Client>,
}

impl std::fmt::Debug for JobQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobQueue").finish_non_exhaustive()
    }
}

/// Milliseconds of a duration, as PostgreSQL's `make_interval` takes them (in seconds, below).
fn millis(d: Duration) -> f64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX) as f64
}

/// The wait before attempt `attempt + 1`: `base` doubled per attempt used, at most
/// [`MAX_BACKOFF`].
pub fn backoff(base: Duration, attempt: i32) -> Duration {
    let doublings = u32::try_from(attempt.saturating_sub(1)).unwrap_or(0).min(20);
    base.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

impl JobQueue {
    /// The queue in `store`'s database; creates its table when missing.
    pub async fn open(store: &PostgresCheckpointer) -> Result<Self, StoreError> {
        let client = store.client();
        // One batch, one message: nothing else on the connection runs inside it.
        let batch = format!("BEGIN; SELECT pg_advisory_xact_lock({SCHEMA_LOCK}); {SCHEMA} COMMIT;");
        timed(client.batch_execute(&batch)).await?;
        Ok(Self { client })
    }

    /// Whether the connection to the server is gone for good (nothing on it can succeed).
    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Adds a job; refused when its target already has an open job of its kind.
    pub async fn enqueue(&self, job: &NewJob) -> Result<i64, QueueError> {
        let payload = serde_json::to_string(&job.payload).map_err(StoreError::from)?;
        let inserted = timed(self.client.query_opt(
            "INSERT INTO recursive_jobs (queue, kind, target, payload, max_attempts, format)
                 VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (kind, target) WHERE status IN ('queued', 'running') DO NOTHING
                 RETURNING id",
            &[&job.queue, &job.kind, &job.target, &payload, &job.max_attempts.max(1), &FORMAT_COLUMN],
        ))
        .await?;
        match inserted {
            Some(row) => Ok(row.try_get(0).map_err(pg)?),
            None => Err(QueueError::AlreadyQueued { kind: job.kind.clone(), target: job.target.clone() }),
        }
    }

    /// Whether `target` has a queued or running job of `kind`.
    pub async fn is_open(&self, kind: &str, target: &str) -> Result<bool, StoreError> {
        let row = timed(self.client.query_opt(
            "SELECT 1 FROM recursive_jobs WHERE kind = $1 AND target = $2 AND status IN ('queued', 'running')",
            &[&kind, &target],
        ))
        .await?;
        Ok(row.is_some())
    }

    /// Cancels the open job of `kind` on `target`: it ends `failed` with [`CANCELLED`], so no
    /// worker claims it, and a worker running it finds it gone at its next heartbeat and cancels
    /// the run. A running job keeps its lease's expiry: should its worker be dead, [`Self::reap`]
    /// reports it once that passes. The status it was in (`queued` or `running`), `None` when it
    /// had no open job.
    pub async fn cancel(&self, kind: &str, target: &str) -> Result<Option<String>, StoreError> {
        let row = timed(self.client.query_opt(
            "UPDATE recursive_jobs j SET status = 'failed', error = $3, finished_at = now(),
                     expires = CASE WHEN open.status = 'running' THEN j.expires END
                 FROM (SELECT id, status FROM recursive_jobs
                       WHERE kind = $1 AND target = $2 AND status IN ('queued', 'running') FOR UPDATE) open
                 WHERE j.id = open.id
                 RETURNING open.status",
            &[&kind, &target, &CANCELLED],
        ))
        .await?;
        row.map(|r| r.try_get(0).map_err(pg)).transpose()
    }

    /// A job by id, as listed.
    pub async fn job(&self, id: i64) -> Result<Option<JobRow>, StoreError> {
        let row =
            timed(self.client.query_opt(&format!("SELECT {ROW} FROM recursive_jobs WHERE id = $1"), &[&id])).await?;
        row.as_ref().map(job_row).transpose()
    }

    /// Claims the oldest ready job of `queue` among `kinds` for `worker`, with a lease of
    /// `ttl`; `None` when no job is ready.
    pub async fn claim(
        &self,
        queue: &str,
        kinds: &[&str],
        worker: &str,
        ttl: Duration,
    ) -> Result<Option<Job>, StoreError> {
        let kinds: Vec<String> = kinds.iter().map(|k| k.to_string()).collect();
        let row = timed(self.client.query_opt(
            "UPDATE recursive_jobs j
                 SET status = 'running', attempts = j.attempts + 1, claimed_by = $3, heartbeat = now(),
                     expires = now() + make_interval(secs => $4::float8 / 1000.0)
                 FROM (SELECT id FROM recursive_jobs
                       WHERE queue = $1 AND status = 'queued' AND not_before <= now() AND kind = ANY($2)
                             AND format <= $5
                       ORDER BY not_before, id
                       LIMIT 1
                       FOR UPDATE SKIP LOCKED) ready
                 WHERE j.id = ready.id
                 RETURNING j.id, j.kind, j.target, j.payload, j.attempts, j.max_attempts",
            &[&queue, &kinds, &worker, &millis(ttl), &FORMAT_COLUMN],
        ))
        .await?;
        let Some(row) = row else { return Ok(None) };
        let payload: String = row.try_get(3).map_err(pg)?;
        Ok(Some(Job {
            id: row.try_get(0).map_err(pg)?,
            kind: row.try_get(1).map_err(pg)?,
            target: row.try_get(2).map_err(pg)?,
            payload: serde_json::from_str(&payload)?,
            attempt: row.try_get(4).map_err(pg)?,
            max_attempts: row.try_get(5).map_err(pg)?,
            worker: worker.to_string(),
        }))
    }

    /// Renews the leases of every job `worker` runs; the ids it still holds (a job missing
    /// from them was taken back after its lease expired).
    pub async fn heartbeat(&self, worker: &str, ttl: Duration) -> Result<Vec<i64>, StoreError> {
        let rows = timed(self.client.query(
            "UPDATE recursive_jobs SET heartbeat = now(), expires = now() + make_interval(secs => $2::float8 / 1000.0)
                 WHERE claimed_by = $1 AND status = 'running' RETURNING id",
            &[&worker, &millis(ttl)],
        ))
        .await?;
        rows.iter().map(|r| r.try_get(0).map_err(pg)).collect()
    }

    /// Whether `worker` still holds job `id` for its attempt `attempt` (it is running it and its
    /// lease was not taken back — nor the job claimed again, even by the same worker): the fence
    /// a worker's writes for the job check first.
    pub async fn holds(&self, id: i64, worker: &str, attempt: i32) -> Result<bool, StoreError> {
        let row = timed(self.client.query_opt(
            "SELECT 1 FROM recursive_jobs WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'running'",
            &[&id, &worker, &attempt],
        ))
        .await?;
        Ok(row.is_some())
    }

    /// Marks a job `worker` holds done, with how its run ended; `false` when it no longer holds it.
    pub async fn complete(&self, id: i64, worker: &str, outcome: &str) -> Result<bool, StoreError> {
        let n = timed(self.client.execute(
            "UPDATE recursive_jobs SET status = 'done', outcome = $3, finished_at = now(), expires = NULL
                 WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
            &[&id, &worker, &outcome],
        ))
        .await?;
        Ok(n == 1)
    }

    /// Records a failed attempt: the job is tried again after `delay`, or — when `retry` is
    /// false or it has used its attempts — ends `failed` with `error`. The status it ends in,
    /// `None` when `worker` no longer holds it.
    pub async fn fail(
        &self,
        id: i64,
        worker: &str,
        error: &str,
        delay: Duration,
        retry: bool,
    ) -> Result<Option<String>, StoreError> {
        let row = timed(self.client.query_opt(
            "UPDATE recursive_jobs SET
                 status = CASE WHEN $5 AND attempts < max_attempts THEN 'queued' ELSE 'failed' END,
                 not_before = now() + make_interval(secs => $4::float8 / 1000.0),
                 finished_at = CASE WHEN $5 AND attempts < max_attempts THEN NULL ELSE now() END,
                 error = $3, expires = NULL
                 WHERE id = $1 AND claimed_by = $2 AND status = 'running'
                 RETURNING status",
            &[&id, &worker, &error, &millis(delay), &retry],
        ))
        .await?;
        row.map(|r| r.try_get(0).map_err(pg)).transpose()
    }

    /// Puts a job back unrun, its attempt not counted (a drain, or its target busy elsewhere),
    /// ready again after `delay`; `false` when `worker` no longer holds it.
    pub async fn release(&self, id: i64, worker: &str, delay: Duration) -> Result<bool, StoreError> {
        let n = timed(self.client.execute(
            "UPDATE recursive_jobs SET status = 'queued', attempts = attempts - 1, expires = NULL,
                 not_before = now() + make_interval(secs => $3::float8 / 1000.0)
                 WHERE id = $1 AND claimed_by = $2 AND status = 'running'",
            &[&id, &worker, &millis(delay)],
        ))
        .await?;
        Ok(n == 1)
    }

    /// Puts back every running job whose lease expired (its claimer stopped heartbeating), or
    /// fails it for good when it has used its attempts; the jobs it moved, as they are now, with
    /// the cancelled jobs whose lease expired since (their worker may be gone without a word).
    pub async fn reap(&self) -> Result<Vec<JobRow>, StoreError> {
        let rows = timed(self.client.query(
            &format!(
                "WITH moved AS (
                     UPDATE recursive_jobs SET
                     status = CASE WHEN attempts < max_attempts THEN 'queued' ELSE 'failed' END,
                     finished_at = CASE WHEN attempts < max_attempts THEN NULL ELSE now() END,
                     error = 'the lease of ' || coalesce(claimed_by, '?') || ' expired (the worker stopped heartbeating)',
                     not_before = now(), expires = NULL
                     WHERE status = 'running' AND expires < now()
                     RETURNING {ROW}
                 ), cancelled AS (
                     UPDATE recursive_jobs SET expires = NULL
                     WHERE status = 'failed' AND expires < now()
                     RETURNING {ROW}
                 )
                 SELECT * FROM moved UNION ALL SELECT * FROM cancelled"
            ),
            &[],
        ))
        .await?;
        rows.iter().map(job_row).collect()
    }

    /// The jobs, newest first, at most `limit`; only those of `queue` and `status` when given.
    pub async fn list(&self, queue: Option<&str>, status: Option<&str>, limit: i64) -> Result<Vec<JobRow>, StoreError> {
        let rows = timed(self.client.query(
            &format!(
                "SELECT {ROW} FROM recursive_jobs
                 WHERE ($1::text IS NULL OR queue = $1) AND ($2::text IS NULL OR status = $2)
                 ORDER BY id DESC LIMIT $3"
            ),
            &[&queue, &status, &limit],
        ))
        .await?;
        rows.iter().map(job_row).collect()
    }

    /// How many jobs are in each status (of `queue` when given).
    pub async fn counts(&self, queue: Option<&str>) -> Result<Vec<(String, i64)>, StoreError> {
        let rows = timed(self.client.query(
            "SELECT status, count(*) FROM recursive_jobs WHERE ($1::text IS NULL OR queue = $1)
                 GROUP BY status ORDER BY status",
            &[&queue],
        ))
        .await?;
        rows.iter().map(|r| Ok((r.try_get(0).map_err(pg)?, r.try_get(1).map_err(pg)?))).collect()
    }
}

/// The columns of a [`JobRow`].
const ROW: &str = "id, queue, kind, target, status, attempts, max_attempts, claimed_by, outcome, error";

fn job_row(r: &tokio_postgres::Row) -> Result<JobRow, StoreError> {
    Ok(JobRow {
        id: r.try_get(0).map_err(pg)?,
        queue: r.try_get(1).map_err(pg)?,
        kind: r.try_get(2).map_err(pg)?,
        target: r.try_get(3).map_err(pg)?,
        status: r.try_get(4).map_err(pg)?,
        attempts: r.try_get(5).map_err(pg)?,
        max_attempts: r.try_get(6).map_err(pg)?,
        claimed_by: r.try_get(7).map_err(pg)?,
        outcome: r.try_get(8).map_err(pg)?,
        error: r.try_get(9).map_err(pg)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_attempt_up_to_its_ceiling() {
        let base = Duration::from_secs(2);
        assert_eq!(backoff(base, 1), Duration::from_secs(2));
        assert_eq!(backoff(base, 2), Duration::from_secs(4));
        assert_eq!(backoff(base, 4), Duration::from_secs(16));
        assert_eq!(backoff(base, 40), MAX_BACKOFF);
        assert_eq!(backoff(base, 0), base);
    }
}
