//! The run archive: served runs and their events, kept in the same store as graph threads
//! (SQLite by default, PostgreSQL when configured, memory for tests), so a server lists them
//! after a restart and holds in memory only the runs in flight. A run is a row of listing
//! columns (status, kind, creation time) with its record as JSON; its events are rows of their
//! own, written once each and read back in pages.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{OptionalExtension, params};

use crate::checkpoint::StoreError;
use crate::postgres::{PostgresCheckpointer, SCHEMA_LOCK, pg, timed};
use crate::sqlite::SqliteCheckpointer;

const SQLITE_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS served_runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS served_runs_created ON served_runs (created_ms, id);
CREATE TABLE IF NOT EXISTS served_run_events (
    run TEXT NOT NULL,
    idx INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run, idx)
) WITHOUT ROWID;
";

const POSTGRES_SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS served_runs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS served_runs_created ON served_runs (created_ms, id);
CREATE TABLE IF NOT EXISTS served_run_events (
    run TEXT NOT NULL,
    idx BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (run, idx)
);
";

/// The status of a run that has ended (what retention may delete).
pub const FINISHED: &str = "finished";

/// A run as the archive keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct ArchivedRun {
    /// Its id.
    pub id: String,
    /// Its kind, for filtering.
    pub kind: String,
    /// Its status, for filtering ([`FINISHED`] once it has ended).
    pub status: String,
    /// When it was created (Unix milliseconds): the listing order.
    pub created_ms: i64,
    /// The server's record of it, as JSON.
    pub body: String,
}

/// Which runs a listing returns: newest first, at most `limit`, created before `before`
/// (a run id), optionally of one status and kind.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only this status.
    pub status: Option<String>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only runs listed after this one (it is excluded).
    pub before: Option<String>,
    /// At most this many.
    pub limit: usize,
}

/// How many finished runs to keep, and for how long.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Retention {
    /// Keep at most this many finished runs (the newest).
    pub count: Option<u64>,
    /// Delete finished runs created before this time (Unix milliseconds).
    pub before_ms: Option<i64>,
}

/// One run's new state for [`RunArchive::save`]: its record, and its events from `first` on.
#[derive(Debug, Clone)]
pub struct RunWrite {
    /// The run's record.
    pub run: ArchivedRun,
    /// The index of the first of `events`.
    pub first: u64,
    /// Events not written before.
    pub events: Vec<Arc<str>>,
}

/// Where served runs are kept.
#[async_trait]
pub trait RunArchive: Send + Sync {
    /// Writes several runs' records and new events at once (one transaction where the store
    /// has them).
    async fn save(&self, writes: &[RunWrite]) -> Result<(), StoreError> {
        for write in writes {
            if !write.events.is_empty() {
                self.add_events(&write.run.id, write.first, &write.events).await?;
            }
            self.put_run(&write.run).await?;
        }
        Ok(())
    }
    /// Adds a run or replaces its record.
    async fn put_run(&self, run: &ArchivedRun) -> Result<(), StoreError>;
    /// Adds a run's events `first`, `first + 1`… (an event already kept is left as it is).
    async fn add_events(&self, run: &str, first: u64, events: &[Arc<str>]) -> Result<(), StoreError>;
    /// A run by id.
    async fn run(&self, id: &str) -> Result<Option<ArchivedRun>, StoreError>;
    /// At most `limit` events of a run from index `from` on.
    async fn events(&self, run: &str, from: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError>;
    /// The index the run's next event takes (one past its last kept event; 0 when it has none).
    async fn next_event(&self, run: &str) -> Result<u64, StoreError>;
    /// Runs, newest first (see [`RunQuery`]).
    async fn list(&self, query: &RunQuery) -> Result<Vec<ArchivedRun>, StoreError>;
    /// Deletes a run with its events; whether it was there.
    async fn delete(&self, id: &str) -> Result<bool, StoreError>;
    /// Deletes the finished runs retention no longer keeps; their ids.
    async fn prune(&self, retention: Retention) -> Result<Vec<String>, StoreError>;
    /// The runs not finished (left so by a server that stopped).
    async fn unfinished(&self) -> Result<Vec<ArchivedRun>, StoreError>;
}

/// Opens the archive at a store address (as [`crate::checkpoint::open`] reads it).
pub async fn open_archive(address: &str) -> Result<Arc<dyn RunArchive>, StoreError> {
    if address.starts_with("postgres://") || address.starts_with("postgresql://") {
        let store = PostgresCheckpointer::connect(address).await?;
        let client = store.client.clone();
        timed(client.batch_execute(&format!("SELECT pg_advisory_lock({SCHEMA_LOCK}); {POSTGRES_SCHEMA}"))).await?;
        timed(client.execute("SELECT pg_advisory_unlock($1)", &[&SCHEMA_LOCK])).await?;
        return Ok(Arc::new(store));
    }
    if address == "memory:" {
        return Ok(Arc::new(MemoryArchive::default()));
    }
    let path = address.strip_prefix("sqlite:").unwrap_or(address).to_string();
    if path.is_empty() {
        return Err(StoreError::Address("an empty SQLite path".into()));
    }
    let store = tokio::task::spawn_blocking(move || SqliteCheckpointer::open(&path))
        .await
        .map_err(|e| StoreError::Backend(format!("opening the SQLite store: {e}")))??;
    store.with(|conn| conn.execute_batch(SQLITE_SCHEMA).map_err(backend)).await?;
    Ok(Arc::new(store))
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn sqlite_run(row: &rusqlite::Row<'_>) -> rusqlite::Result<ArchivedRun> {
    Ok(ArchivedRun {
        id: row.get(0)?,
        kind: row.get(1)?,
        status: row.get(2)?,
        created_ms: row.get(3)?,
        body: row.get(4)?,
    })
}

const COLUMNS: &str = "id, kind, status, created_ms, body";

fn sqlite_put(conn: &rusqlite::Connection, run: &ArchivedRun) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO served_runs (id, kind, status, created_ms, body) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body",
    )
    .and_then(|mut put| put.execute(params![run.id, run.kind, run.status, run.created_ms, run.body]))
    .map_err(backend)?;
    Ok(())
}

fn sqlite_events(conn: &rusqlite::Connection, run: &str, first: u64, events: &[Arc<str>]) -> Result<(), StoreError> {
    let mut insert = conn
        .prepare_cached("INSERT OR IGNORE INTO served_run_events (run, idx, body) VALUES (?1, ?2, ?3)")
        .map_err(backend)?;
    for (i, event) in events.iter().enumerate() {
        let idx = i64::try_from(first + i as u64).map_err(backend)?;
        insert.execute(params![run, idx, event.as_ref()]).map_err(backend)?;
    }
    Ok(())
}

#[async_trait]
impl RunArchive for SqliteCheckpointer {
    async fn save(&self, writes: &[RunWrite]) -> Result<(), StoreError> {
        let writes = writes.to_vec();
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(backend)?;
            for write in &writes {
                sqlite_events(&tx, &write.run.id, write.first, &write.events)?;
                sqlite_put(&tx, &write.run)?;
            }
            tx.commit().map_err(backend)
        })
        .await
    }

    async fn put_run(&self, run: &ArchivedRun) -> Result<(), StoreError> {
        let run = run.clone();
        self.with(move |conn| sqlite_put(conn, &run)).await
    }

    async fn add_events(&self, run: &str, first: u64, events: &[Arc<str>]) -> Result<(), StoreError> {
        let (run, events) = (run.to_string(), events.to_vec());
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(backend)?;
            sqlite_events(&tx, &run, first, &events)?;
            tx.commit().map_err(backend)
        })
        .await
    }

    async fn run(&self, id: &str) -> Result<Option<ArchivedRun>, StoreError> {
        let id = id.to_string();
        self.with(move |conn| {
            conn.query_row(&format!("SELECT {COLUMNS} FROM served_runs WHERE id = ?1"), params![id], sqlite_run)
                .optional()
                .map_err(backend)
        })
        .await
    }

    async fn events(&self, run: &str, from: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        let run = run.to_string();
        self.with(move |conn| {
            let mut select = conn
                .prepare_cached("SELECT body FROM served_run_events WHERE run = ?1 AND idx >= ?2 ORDER BY idx LIMIT ?3")
                .map_err(backend)?;
            let from = i64::try_from(from).map_err(backend)?;
            let rows =
                select.query_map(params![run, from, limit as i64], |row| row.get::<_, String>(0)).map_err(backend)?;
            rows.map(|r| r.map(Arc::from).map_err(backend)).collect()
        })
        .await
    }

    async fn next_event(&self, run: &str) -> Result<u64, StoreError> {
        let run = run.to_string();
        self.with(move |conn| {
            let next: i64 = conn
                .query_row(
                    "SELECT COALESCE(MAX(idx) + 1, 0) FROM served_run_events WHERE run = ?1",
                    params![run],
                    |r| r.get(0),
                )
                .map_err(backend)?;
            Ok(u64::try_from(next).unwrap_or(0))
        })
        .await
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<ArchivedRun>, StoreError> {
        let query = query.clone();
        self.with(move |conn| {
            let cursor: Option<(i64, String)> = match &query.before {
                Some(id) => conn
                    .query_row("SELECT created_ms, id FROM served_runs WHERE id = ?1", params![id], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()
                    .map_err(backend)?,
                None => None,
            };
            let (at, id) = cursor.unwrap_or((i64::MAX, String::new()));
            let mut select = conn
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM served_runs
                     WHERE (?1 IS NULL OR status = ?1) AND (?2 IS NULL OR kind = ?2)
                       AND (created_ms < ?3 OR (created_ms = ?3 AND id < ?4))
                     ORDER BY created_ms DESC, id DESC LIMIT ?5"
                ))
                .map_err(backend)?;
            let rows = select
                .query_map(params![query.status, query.kind, at, id, query.limit as i64], sqlite_run)
                .map_err(backend)?;
            rows.map(|r| r.map_err(backend)).collect()
        })
        .await
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let id = id.to_string();
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(backend)?;
            tx.execute("DELETE FROM served_run_events WHERE run = ?1", params![id]).map_err(backend)?;
            let gone = tx.execute("DELETE FROM served_runs WHERE id = ?1", params![id]).map_err(backend)?;
            tx.commit().map_err(backend)?;
            Ok(gone > 0)
        })
        .await
    }

    async fn prune(&self, retention: Retention) -> Result<Vec<String>, StoreError> {
        self.with(move |conn| {
            let tx = conn.unchecked_transaction().map_err(backend)?;
            let doomed: Vec<String> = {
                let mut select = tx
                    .prepare_cached(
                        "SELECT id FROM served_runs WHERE status = ?1 ORDER BY created_ms DESC, id DESC LIMIT -1 OFFSET ?2",
                    )
                    .map_err(backend)?;
                let keep = retention.count.map_or(i64::MAX, |c| i64::try_from(c).unwrap_or(i64::MAX));
                let mut ids: Vec<String> = select
                    .query_map(params![FINISHED, keep], |r| r.get(0))
                    .map_err(backend)?
                    .collect::<Result<_, _>>()
                    .map_err(backend)?;
                if let Some(before) = retention.before_ms {
                    let mut old = tx
                        .prepare_cached("SELECT id FROM served_runs WHERE status = ?1 AND created_ms < ?2")
                        .map_err(backend)?;
                    let more: Vec<String> = old
                        .query_map(params![FINISHED, before], |r| r.get(0))
                        .map_err(backend)?
                        .collect::<Result<_, _>>()
                        .map_err(backend)?;
                    ids.extend(more);
                }
                ids.sort();
                ids.dedup();
                ids
            };
            for id in &doomed {
                tx.execute("DELETE FROM served_run_events WHERE run = ?1", params![id]).map_err(backend)?;
                tx.execute("DELETE FROM served_runs WHERE id = ?1", params![id]).map_err(backend)?;
            }
            tx.commit().map_err(backend)?;
            Ok(doomed)
        })
        .await
    }

    async fn unfinished(&self) -> Result<Vec<ArchivedRun>, StoreError> {
        self.with(move |conn| {
            let mut select = conn
                .prepare_cached(&format!("SELECT {COLUMNS} FROM served_runs WHERE status <> ?1"))
                .map_err(backend)?;
            let rows = select.query_map(params![FINISHED], sqlite_run).map_err(backend)?;
            rows.map(|r| r.map_err(backend)).collect()
        })
        .await
    }
}

fn postgres_run(row: &tokio_postgres::Row) -> Result<ArchivedRun, StoreError> {
    Ok(ArchivedRun {
        id: row.try_get(0).map_err(pg)?,
        kind: row.try_get(1).map_err(pg)?,
        status: row.try_get(2).map_err(pg)?,
        created_ms: row.try_get(3).map_err(pg)?,
        body: row.try_get(4).map_err(pg)?,
    })
}

fn as_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[async_trait]
impl RunArchive for PostgresCheckpointer {
    async fn put_run(&self, run: &ArchivedRun) -> Result<(), StoreError> {
        timed(self.client.execute(
            "INSERT INTO served_runs (id, kind, status, created_ms, body) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (id) DO UPDATE SET status = excluded.status, body = excluded.body",
            &[&run.id, &run.kind, &run.status, &run.created_ms, &run.body],
        ))
        .await?;
        Ok(())
    }

    async fn add_events(&self, run: &str, first: u64, events: &[Arc<str>]) -> Result<(), StoreError> {
        let indexes: Vec<i64> = (0..events.len() as u64).map(|i| as_i64(first + i)).collect();
        let bodies: Vec<&str> = events.iter().map(|e| e.as_ref()).collect();
        timed(self.client.execute(
            "INSERT INTO served_run_events (run, idx, body) SELECT $1, * FROM UNNEST($2::BIGINT[], $3::TEXT[])
             ON CONFLICT DO NOTHING",
            &[&run, &indexes, &bodies],
        ))
        .await?;
        Ok(())
    }

    async fn run(&self, id: &str) -> Result<Option<ArchivedRun>, StoreError> {
        let rows =
            timed(self.client.query(&format!("SELECT {COLUMNS} FROM served_runs WHERE id = $1"), &[&id])).await?;
        rows.first().map(postgres_run).transpose()
    }

    async fn events(&self, run: &str, from: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        let rows = timed(self.client.query(
            "SELECT body FROM served_run_events WHERE run = $1 AND idx >= $2 ORDER BY idx LIMIT $3",
            &[&run, &as_i64(from), &as_i64(limit as u64)],
        ))
        .await?;
        rows.iter().map(|r| r.try_get::<_, String>(0).map(Arc::from).map_err(pg)).collect()
    }

    async fn next_event(&self, run: &str) -> Result<u64, StoreError> {
        let row = timed(
            self.client
                .query_one("SELECT COALESCE(MAX(idx) + 1, 0)::BIGINT FROM served_run_events WHERE run = $1", &[&run]),
        )
        .await?;
        Ok(u64::try_from(row.try_get::<_, i64>(0).map_err(pg)?).unwrap_or(0))
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<ArchivedRun>, StoreError> {
        let cursor = match &query.before {
            Some(id) => {
                let rows =
                    timed(self.client.query("SELECT created_ms, id FROM served_runs WHERE id = $1", &[id])).await?;
                rows.first()
                    .map(|r| Ok::<_, StoreError>((r.try_get(0).map_err(pg)?, r.try_get(1).map_err(pg)?)))
                    .transpose()?
            }
            None => None,
        };
        let (at, id): (i64, String) = cursor.unwrap_or((i64::MAX, String::new()));
        let rows = timed(self.client.query(
            &format!(
                "SELECT {COLUMNS} FROM served_runs
                 WHERE ($1::TEXT IS NULL OR status = $1) AND ($2::TEXT IS NULL OR kind = $2)
                   AND (created_ms < $3 OR (created_ms = $3 AND id < $4))
                 ORDER BY created_ms DESC, id DESC LIMIT $5"
            ),
            &[&query.status, &query.kind, &at, &id, &as_i64(query.limit as u64)],
        ))
        .await?;
        rows.iter().map(postgres_run).collect()
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        timed(self.client.execute("DELETE FROM served_run_events WHERE run = $1", &[&id])).await?;
        Ok(timed(self.client.execute("DELETE FROM served_runs WHERE id = $1", &[&id])).await? > 0)
    }

    async fn prune(&self, retention: Retention) -> Result<Vec<String>, StoreError> {
        let keep = retention.count.map(as_i64);
        let before = retention.before_ms;
        let rows = timed(self.client.query(
            "WITH doomed AS (
                 SELECT id FROM served_runs WHERE status = $1 AND (
                     ($3::BIGINT IS NOT NULL AND created_ms < $3)
                     OR id IN (SELECT id FROM served_runs WHERE status = $1
                               ORDER BY created_ms DESC, id DESC OFFSET COALESCE($2::BIGINT, 9223372036854775807)))
             ), gone_events AS (
                 DELETE FROM served_run_events WHERE run IN (SELECT id FROM doomed)
             )
             DELETE FROM served_runs WHERE id IN (SELECT id FROM doomed) RETURNING id",
            &[&FINISHED, &keep, &before],
        ))
        .await?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    async fn unfinished(&self) -> Result<Vec<ArchivedRun>, StoreError> {
        let rows =
            timed(self.client.query(&format!("SELECT {COLUMNS} FROM served_runs WHERE status <> $1"), &[&FINISHED]))
                .await?;
        rows.iter().map(postgres_run).collect()
    }
}

/// Runs in memory (tests, and servers told not to keep runs past the process).
#[derive(Default)]
pub struct MemoryArchive {
    inner: Mutex<MemoryRuns>,
}

#[derive(Default)]
struct MemoryRuns {
    runs: BTreeMap<String, ArchivedRun>,
    events: BTreeMap<String, Vec<Arc<str>>>,
}

impl MemoryArchive {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryRuns> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Newest first.
fn newest_first(a: &ArchivedRun, b: &ArchivedRun) -> std::cmp::Ordering {
    (b.created_ms, &b.id).cmp(&(a.created_ms, &a.id))
}

#[async_trait]
impl RunArchive for MemoryArchive {
    async fn put_run(&self, run: &ArchivedRun) -> Result<(), StoreError> {
        self.lock().runs.insert(run.id.clone(), run.clone());
        Ok(())
    }

    async fn add_events(&self, run: &str, first: u64, events: &[Arc<str>]) -> Result<(), StoreError> {
        let mut inner = self.lock();
        let kept = inner.events.entry(run.to_string()).or_default();
        let skip = (kept.len() as u64).saturating_sub(first) as usize;
        kept.extend(events.iter().skip(skip).cloned());
        Ok(())
    }

    async fn run(&self, id: &str) -> Result<Option<ArchivedRun>, StoreError> {
        Ok(self.lock().runs.get(id).cloned())
    }

    async fn events(&self, run: &str, from: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        let inner = self.lock();
        let kept = inner.events.get(run).map(Vec::as_slice).unwrap_or_default();
        Ok(kept.iter().skip(from as usize).take(limit).cloned().collect())
    }

    async fn next_event(&self, run: &str) -> Result<u64, StoreError> {
        Ok(self.lock().events.get(run).map_or(0, |e| e.len() as u64))
    }

    async fn list(&self, query: &RunQuery) -> Result<Vec<ArchivedRun>, StoreError> {
        let inner = self.lock();
        let mut runs: Vec<&ArchivedRun> = inner.runs.values().collect();
        runs.sort_by(|a, b| newest_first(a, b));
        let start = match &query.before {
            Some(id) => runs.iter().position(|r| &r.id == id).map_or(0, |p| p + 1),
            None => 0,
        };
        Ok(runs[start..]
            .iter()
            .filter(|r| query.status.as_ref().is_none_or(|s| *s == r.status))
            .filter(|r| query.kind.as_ref().is_none_or(|k| *k == r.kind))
            .take(query.limit)
            .map(|r| (*r).clone())
            .collect())
    }

    async fn delete(&self, id: &str) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        inner.events.remove(id);
        Ok(inner.runs.remove(id).is_some())
    }

    async fn prune(&self, retention: Retention) -> Result<Vec<String>, StoreError> {
        let mut inner = self.lock();
        let mut finished: Vec<ArchivedRun> = inner.runs.values().filter(|r| r.status == FINISHED).cloned().collect();
        finished.sort_by(newest_first);
        let keep = retention.count.map_or(usize::MAX, |c| usize::try_from(c).unwrap_or(usize::MAX));
        let doomed: Vec<String> = finished
            .iter()
            .enumerate()
            .filter(|(i, r)| *i >= keep || retention.before_ms.is_some_and(|b| r.created_ms < b))
            .map(|(_, r)| r.id.clone())
            .collect();
        for id in &doomed {
            inner.runs.remove(id);
            inner.events.remove(id);
        }
        Ok(doomed)
    }

    async fn unfinished(&self) -> Result<Vec<ArchivedRun>, StoreError> {
        Ok(self.lock().runs.values().filter(|r| r.status != FINISHED).cloned().collect())
    }
}
