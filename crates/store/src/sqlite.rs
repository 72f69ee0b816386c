//! The SQLite checkpointer: the embedded default (a file under the workspace's
//! `.recursive/`). WAL journal: a write is durable when its call returns, also when the
//! process is killed right after. Calls run on tokio's blocking pool.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use recursive_core::StoredRecords;
use rusqlite::{Connection, OptionalExtension, params};

use crate::checkpoint::{Checkpoint, Checkpointer, Listed, PendingWrite, StoreError, ThreadInfo, listed};
use crate::format::{decode, encode};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS graph_threads (
    thread TEXT PRIMARY KEY,
    body TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_checkpoints (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    thread TEXT NOT NULL,
    ns TEXT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS graph_checkpoints_thread ON graph_checkpoints (thread, ns, seq);
CREATE TABLE IF NOT EXISTS graph_leases (
    thread TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_writes (
    thread TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    node TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (thread, checkpoint, node)
);
CREATE TABLE IF NOT EXISTS run_journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_journal_key ON run_journal (key, seq);
";

/// Checkpoints in a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteCheckpointer {
    pub(crate) conn: Arc<Mutex<Connection>>,
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

impl SqliteCheckpointer {
    /// Opens (creating when missing) the store at `path`; its directory is created too.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| backend(format!("cannot create {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path).map_err(|e| backend(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(std::time::Duration::from_secs(10)).map_err(backend)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(backend)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(backend)?;
        // Closing would copy the log into the database and sync both (~3 ms at the end of every
        // CLI run); the log holds every commit already, the next writer's automatic checkpoint
        // copies it, and the next open reads it.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true).map_err(backend)?;
        conn.execute_batch(SCHEMA).map_err(backend)?;
        Ok(Self { conn: Arc::new(Mutex::new(conn)) })
    }

    pub(crate) async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let guard = conn.lock().map_err(|_| backend("the connection's lock is poisoned"))?;
            f(&guard)
        })
        .await
        .map_err(backend)?
    }
}

impl SqliteCheckpointer {
    /// The records under `key` as a slot a run appends to as it goes ([`StoredRecords`]: a
    /// session's transcript, a pursuit's log) — each append one committed row, made on the
    /// caller's thread (a local file's write, as a JSONL file's would be).
    pub fn records(&self, key: &str) -> SqliteRecords {
        SqliteRecords { conn: self.conn.clone(), key: key.to_string() }
    }
}

/// Records of a SQLite store under one key (see [`SqliteCheckpointer::records`]); the same rows
/// [`Checkpointer::journal`] reads.
#[derive(Debug, Clone)]
pub struct SqliteRecords {
    conn: Arc<Mutex<Connection>>,
    key: String,
}

impl SqliteRecords {
    fn locked<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> std::io::Result<T> {
        let guard = self.conn.lock().map_err(|_| std::io::Error::other("the connection's lock is poisoned"))?;
        f(&guard).map_err(std::io::Error::other)
    }
}

impl StoredRecords for SqliteRecords {
    fn append(&self, record: &str) -> std::io::Result<()> {
        self.locked(|c| c.execute("INSERT INTO run_journal (key, body) VALUES (?1, ?2)", params![self.key, record]))?;
        Ok(())
    }

    fn records(&self) -> std::io::Result<Vec<String>> {
        self.locked(|c| {
            let mut stmt = c.prepare("SELECT body FROM run_journal WHERE key = ?1 ORDER BY seq")?;
            let rows = stmt.query_map(params![self.key], |r| r.get::<_, String>(0))?;
            rows.collect()
        })
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: String) -> Result<T, StoreError> {
    decode(&body)
}

#[async_trait]
impl Checkpointer for SqliteCheckpointer {
    async fn put_thread(&self, info: &ThreadInfo) -> Result<(), StoreError> {
        let (thread, body) = (info.thread.clone(), encode(info)?);
        self.with(move |c| {
            c.execute(
                "INSERT INTO graph_threads (thread, body) VALUES (?1, ?2)
                 ON CONFLICT (thread) DO UPDATE SET body = excluded.body",
                params![thread, body],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        let thread = thread.to_string();
        self.with(move |c| {
            let body: Option<String> = c
                .query_row("SELECT body FROM graph_threads WHERE thread = ?1", params![thread], |r| r.get(0))
                .optional()
                .map_err(backend)?;
            body.map(parse).transpose()
        })
        .await
    }

    async fn threads(&self) -> Result<Vec<Listed>, StoreError> {
        self.with(|c| {
            let mut stmt = c.prepare("SELECT thread, body FROM graph_threads ORDER BY rowid").map_err(backend)?;
            let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))).map_err(backend)?;
            rows.map(|r| r.map_err(backend).map(|(thread, body)| listed(thread, &body))).collect()
        })
        .await
    }

    async fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let (thread, ns, id) = (checkpoint.thread.clone(), checkpoint.ns.clone(), checkpoint.id.clone());
        let body = encode(checkpoint)?;
        self.with(move |c| {
            c.execute(
                "INSERT INTO graph_checkpoints (thread, ns, id, body) VALUES (?1, ?2, ?3, ?4)",
                params![thread, ns, id, body],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn prune(&self, thread: &str, ns: &str, keep: &str) -> Result<(), StoreError> {
        let (thread, ns, keep) = (thread.to_string(), ns.to_string(), keep.to_string());
        self.with(move |c| {
            c.execute(
                "DELETE FROM graph_checkpoints WHERE thread = ?1 AND ns = ?2
                     AND seq < (SELECT seq FROM graph_checkpoints WHERE id = ?3)",
                params![thread, ns, keep],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn put_write(&self, thread: &str, checkpoint: &str, write: &PendingWrite) -> Result<(), StoreError> {
        let (thread, checkpoint, node) = (thread.to_string(), checkpoint.to_string(), write.node.clone());
        let body = encode(write)?;
        self.with(move |c| {
            c.execute(
                "INSERT INTO graph_writes (thread, checkpoint, node, body) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (thread, checkpoint, node) DO UPDATE SET body = excluded.body",
                params![thread, checkpoint, node, body],
            )
            .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn writes(&self, thread: &str, checkpoint: &str) -> Result<Vec<PendingWrite>, StoreError> {
        let (thread, checkpoint) = (thread.to_string(), checkpoint.to_string());
        self.with(move |c| {
            let mut stmt = c
                .prepare("SELECT body FROM graph_writes WHERE thread = ?1 AND checkpoint = ?2 ORDER BY rowid")
                .map_err(backend)?;
            let rows = stmt.query_map(params![thread, checkpoint], |r| r.get::<_, String>(0)).map_err(backend)?;
            rows.map(|r| r.map_err(backend).and_then(parse)).collect()
        })
        .await
    }

    async fn latest(&self, thread: &str, ns: &str) -> Result<Option<Checkpoint>, StoreError> {
        let (thread, ns) = (thread.to_string(), ns.to_string());
        self.with(move |c| {
            let body: Option<String> = c
                .query_row(
                    "SELECT body FROM graph_checkpoints WHERE thread = ?1 AND ns = ?2 ORDER BY seq DESC LIMIT 1",
                    params![thread, ns],
                    |r| r.get(0),
                )
                .optional()
                .map_err(backend)?;
            body.map(parse).transpose()
        })
        .await
    }

    async fn get(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError> {
        let (thread, id) = (thread.to_string(), id.to_string());
        self.with(move |c| {
            let body: Option<String> = c
                .query_row(
                    "SELECT body FROM graph_checkpoints WHERE thread = ?1 AND id = ?2",
                    params![thread, id],
                    |r| r.get(0),
                )
                .optional()
                .map_err(backend)?;
            body.map(parse).transpose()
        })
        .await
    }

    async fn list(&self, thread: &str, ns: &str) -> Result<Vec<Checkpoint>, StoreError> {
        let (thread, ns) = (thread.to_string(), ns.to_string());
        self.with(move |c| {
            let mut stmt = c
                .prepare("SELECT body FROM graph_checkpoints WHERE thread = ?1 AND ns = ?2 ORDER BY seq DESC")
                .map_err(backend)?;
            let rows = stmt.query_map(params![thread, ns], |r| r.get::<_, String>(0)).map_err(backend)?;
            rows.map(|r| r.map_err(backend).and_then(parse)).collect()
        })
        .await
    }

    async fn take_lease(
        &self,
        thread: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<String>, StoreError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        let now = chrono::Utc::now().timestamp_millis();
        let until = now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        self.with(move |c| {
            // One statement: taken when free, expired or already ours.
            let taken = c
                .execute(
                    "INSERT INTO graph_leases (thread, holder, expires_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT (thread) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms
                     WHERE graph_leases.holder = ?2 OR graph_leases.expires_ms < ?4",
                    params![thread, holder, until, now],
                )
                .map_err(backend)?;
            if taken == 1 {
                return Ok(None);
            }
            let other = c
                .query_row("SELECT holder FROM graph_leases WHERE thread = ?1", params![thread], |r| r.get(0))
                .map_err(backend)?;
            Ok(Some(other))
        })
        .await
    }

    async fn lease_holder(&self, thread: &str) -> Result<Option<String>, StoreError> {
        let thread = thread.to_string();
        self.with(move |c| {
            c.query_row("SELECT holder FROM graph_leases WHERE thread = ?1", params![thread], |r| r.get(0))
                .optional()
                .map_err(backend)
        })
        .await
    }

    async fn release_lease(&self, thread: &str, holder: &str) -> Result<(), StoreError> {
        let (thread, holder) = (thread.to_string(), holder.to_string());
        self.with(move |c| {
            c.execute("DELETE FROM graph_leases WHERE thread = ?1 AND holder = ?2", params![thread, holder])
                .map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn append_journal(&self, key: &str, body: &str) -> Result<(), StoreError> {
        let (key, body) = (key.to_string(), body.to_string());
        self.with(move |c| {
            c.execute("INSERT INTO run_journal (key, body) VALUES (?1, ?2)", params![key, body]).map_err(backend)?;
            Ok(())
        })
        .await
    }

    async fn journal(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let key = key.to_string();
        self.with(move |c| {
            let mut stmt = c.prepare("SELECT body FROM run_journal WHERE key = ?1 ORDER BY seq").map_err(backend)?;
            let rows = stmt.query_map(params![key], |r| r.get::<_, String>(0)).map_err(backend)?;
            rows.map(|r| r.map_err(backend)).collect()
        })
        .await
    }

    fn local_records(&self, key: &str) -> Option<Arc<dyn StoredRecords>> {
        Some(Arc::new(self.records(key)))
    }

    async fn delete_journal(&self, key: &str) -> Result<(), StoreError> {
        let key = key.to_string();
        self.with(move |c| {
            c.execute("DELETE FROM run_journal WHERE key = ?1", params![key]).map_err(backend)?;
            Ok(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_corrupt_thread_record_is_listed_as_unreadable_and_hides_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("graphs.db");
        let store = SqliteCheckpointer::open(&path).unwrap();
        for thread in ["a", "b", "c"] {
            let info = ThreadInfo {
                thread: thread.into(),
                graph: "g".into(),
                blueprint: None,
                origin: None,
                subgraphs: None,
                created_at: chrono::Utc::now(),
            };
            store.put_thread(&info).await.unwrap();
        }
        let raw = rusqlite::Connection::open(&path).unwrap();
        raw.execute("UPDATE graph_threads SET body = '{not json' WHERE thread = 'b'", []).unwrap();
        let listed = store.threads().await.unwrap();
        assert_eq!(listed.len(), 3);
        assert_eq!(listed[0].as_ref().unwrap().thread, "a");
        assert_eq!(listed[1].as_ref().unwrap_err().thread, "b");
        assert_eq!(listed[2].as_ref().unwrap().thread, "c");
    }
}
