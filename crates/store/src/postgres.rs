//! The PostgreSQL checkpointer: threads shared by several processes or machines. The tables
//! are created on first use under an advisory lock (so processes starting together do not
//! race); "latest" follows a `BIGSERIAL` sequence, not anyone's clock. A server that stops
//! answering cannot hang a run: connecting (with the schema set-up) is bounded by the URL's
//! `connect_timeout` (default [`CONNECT_TIMEOUT`]), and every statement by [`QUERY_TIMEOUT`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio_postgres::{Client, NoTls};

use crate::checkpoint::{Checkpoint, Checkpointer, Listed, PendingWrite, StoreError, ThreadInfo, listed};
use crate::format::{decode, encode};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS graph_threads (
    thread TEXT PRIMARY KEY,
    body TEXT NOT NULL,
    seq BIGSERIAL
);
CREATE TABLE IF NOT EXISTS graph_checkpoints (
    seq BIGSERIAL PRIMARY KEY,
    thread TEXT NOT NULL,
    ns TEXT NOT NULL,
    id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS graph_checkpoints_thread ON graph_checkpoints (thread, ns, seq);
CREATE TABLE IF NOT EXISTS graph_writes (
    thread TEXT NOT NULL,
    checkpoint TEXT NOT NULL,
    node TEXT NOT NULL,
    body TEXT NOT NULL,
    seq BIGSERIAL,
    PRIMARY KEY (thread, checkpoint, node)
);
CREATE TABLE IF NOT EXISTS graph_leases (
    thread TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires TIMESTAMPTZ NOT NULL
);
CREATE TABLE IF NOT EXISTS run_journal (
    seq BIGSERIAL PRIMARY KEY,
    key TEXT NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS run_journal_key ON run_journal (key, seq);
";

/// How long connecting and creating the tables may take, unless the URL says otherwise.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one statement may take.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(60);

/// An arbitrary, fixed key for the advisory lock that serialises schema creation.
pub(crate) const SCHEMA_LOCK: i64 = 0x7265_6375_7273_6976;

/// Checkpoints in a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresCheckpointer {
    pub(crate) client: Arc<Client>,
}

impl std::fmt::Debug for PostgresCheckpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCheckpointer").finish_non_exhaustive()
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

pub(crate) fn pg(e: tokio_postgres::Error) -> StoreError {
    // The server's own message says what is wrong (auth, missing database...).
    match e.as_db_error() {
        Some(db) => StoreError::Backend(format!("postgres: {}", db.message())),
        None => StoreError::Backend(format!("postgres: {e}")),
    }
}

impl PostgresCheckpointer {
    /// Connects to `url` (`postgres://user:password@host:port/db`) and creates the tables
    /// when missing.
    pub async fn connect(url: &str) -> Result<Self, StoreError> {
        let config: tokio_postgres::Config = url.parse().map_err(pg)?;
        let limit = config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT);
        match tokio::time::timeout(limit, Self::open(&config)).await {
            Ok(opened) => opened,
            Err(_) => Err(StoreError::Backend(format!(
                "postgres: the server did not answer within {} s (connect_timeout)",
                limit.as_secs_f64()
            ))),
        }
    }

    async fn open(config: &tokio_postgres::Config) -> Result<Self, StoreError> {
        let (mut client, connection) = config.connect(NoTls).await.map_err(pg)?;
        // The connection task has no caller to report to: when it fails, the next query
        // fails with the reason.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let tx = client.transaction().await.map_err(pg)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK]).await.map_err(pg)?;
        tx.batch_execute(SCHEMA).await.map_err(pg)?;
        tx.commit().await.map_err(pg)?;
        Ok(Self { client: Arc::new(client) })
    }

    /// The connection (the job queue shares it).
    pub(crate) fn client(&self) -> Arc<Client> {
        self.client.clone()
    }

    async fn bodies<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<T>, StoreError> {
        let rows = timed(self.client.query(sql, params)).await?;
        rows.iter().map(|r| decode(&r.try_get::<_, String>(0).map_err(backend)?)).collect()
    }
}

/// Runs one statement, bounded by [`QUERY_TIMEOUT`].
pub(crate) async fn timed<T>(
    statement: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, StoreError> {
    match tokio::time::timeout(QUERY_TIMEOUT, statement).await {
        Ok(done) => done.map_err(pg),
        Err(_) => Err(StoreError::Backend(format!(
            "postgres: a statement did not finish within {} s",
            QUERY_TIMEOUT.as_secs()
        ))),
    }
}

#[async_trait]
impl Checkpointer for PostgresCheckpointer {
    async fn put_thread(&self, info: &ThreadInfo) -> Result<(), StoreError> {
        let body = encode(info)?;
        timed(self.client.execute(
            "INSERT INTO graph_threads (thread, body) VALUES ($1, $2)
                 ON CONFLICT (thread) DO UPDATE SET body = excluded.body",
            &[&info.thread, &body],
        ))
        .await?;
        Ok(())
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        Ok(self.bodies("SELECT body FROM graph_threads WHERE thread = $1", &[&thread]).await?.pop())
    }

    async fn threads(&self) -> Result<Vec<Listed>, StoreError> {
        let rows = timed(self.client.query("SELECT thread, body FROM graph_threads ORDER BY seq", &[])).await?;
        rows.iter()
            .map(|r| {
                Ok(listed(r.try_get::<_, String>(0).map_err(backend)?, &r.try_get::<_, String>(1).map_err(backend)?))
            })
            .collect()
    }

    async fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let body = encode(checkpoint)?;
        timed(self.client.execute(
            "INSERT INTO graph_checkpoints (thread, ns, id, body) VALUES ($1, $2, $3, $4)",
            &[&checkpoint.thread, &checkpoint.ns, &checkpoint.id, &body],
        ))
        .await?;
        Ok(())
    }

    async fn prune(&self, thread: &str, ns: &str, keep: &str) -> Result<(), StoreError> {
        timed(self.client.execute(
            "DELETE FROM graph_checkpoints WHERE thread = $1 AND ns = $2
                 AND seq < (SELECT seq FROM graph_checkpoints WHERE id = $3)",
            &[&thread, &ns, &keep],
        ))
        .await?;
        Ok(())
    }

    async fn put_write(&self, thread: &str, checkpoint: &str, write: &PendingWrite) -> Result<(), StoreError> {
        let body = encode(write)?;
        timed(self.client.execute(
            "INSERT INTO graph_writes (thread, checkpoint, node, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (thread, checkpoint, node) DO UPDATE SET body = excluded.body",
            &[&thread, &checkpoint, &write.node, &body],
        ))
        .await?;
        Ok(())
    }

    async fn writes(&self, thread: &str, checkpoint: &str) -> Result<Vec<PendingWrite>, StoreError> {
        self.bodies(
            "SELECT body FROM graph_writes WHERE thread = $1 AND checkpoint = $2 ORDER BY seq",
            &[&thread, &checkpoint],
        )
        .await
    }

    async fn latest(&self, thread: &str, ns: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self
            .bodies(
                "SELECT body FROM graph_checkpoints WHERE thread = $1 AND ns = $2 ORDER BY seq DESC LIMIT 1",
                &[&thread, &ns],
            )
            .await?
            .pop())
    }

    async fn get(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError> {
        Ok(self
            .bodies("SELECT body FROM graph_checkpoints WHERE thread = $1 AND id = $2", &[&thread, &id])
            .await?
            .pop())
    }

    async fn list(&self, thread: &str, ns: &str) -> Result<Vec<Checkpoint>, StoreError> {
        self.bodies(
            "SELECT body FROM graph_checkpoints WHERE thread = $1 AND ns = $2 ORDER BY seq DESC",
            &[&thread, &ns],
        )
        .await
    }

    async fn take_lease(
        &self,
        thread: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<String>, StoreError> {
        // The server's clock decides expiry, so runners on machines whose clocks differ agree.
        let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX) as f64;
        let taken = timed(self.client.execute(
            "INSERT INTO graph_leases (thread, holder, expires)
                 VALUES ($1, $2, now() + make_interval(secs => $3::float8 / 1000.0))
                 ON CONFLICT (thread) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
                 WHERE graph_leases.holder = $2 OR graph_leases.expires < now()",
            &[&thread, &holder, &ttl_ms],
        ))
        .await?;
        if taken == 1 {
            return Ok(None);
        }
        let rows = timed(self.client.query("SELECT holder FROM graph_leases WHERE thread = $1", &[&thread])).await?;
        Ok(Some(rows.first().and_then(|r| r.try_get::<_, String>(0).ok()).unwrap_or_default()))
    }

    async fn lease_holder(&self, thread: &str) -> Result<Option<String>, StoreError> {
        let row = timed(self.client.query_opt("SELECT holder FROM graph_leases WHERE thread = $1", &[&thread])).await?;
        Ok(row.map(|r| r.get::<_, String>(0)))
    }

    async fn release_lease(&self, thread: &str, holder: &str) -> Result<(), StoreError> {
        timed(self.client.execute("DELETE FROM graph_leases WHERE thread = $1 AND holder = $2", &[&thread, &holder]))
            .await?;
        Ok(())
    }

    async fn append_journal(&self, key: &str, body: &str) -> Result<(), StoreError> {
        timed(self.client.execute("INSERT INTO run_journal (key, body) VALUES ($1, $2)", &[&key, &body])).await?;
        Ok(())
    }

    async fn journal(&self, key: &str) -> Result<Vec<String>, StoreError> {
        let rows =
            timed(self.client.query("SELECT body FROM run_journal WHERE key = $1 ORDER BY seq", &[&key])).await?;
        Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
    }

    async fn delete_journal(&self, key: &str) -> Result<(), StoreError> {
        timed(self.client.execute("DELETE FROM run_journal WHERE key = $1", &[&key])).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wrong_password_is_a_clear_error() {
        let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
        let bad = url.replacen(":recursive@", ":wrong@", 1);
        let err = PostgresCheckpointer::connect(&bad).await.unwrap_err().to_string();
        assert!(err.contains("password"), "{err}");
    }

    #[tokio::test]
    async fn a_server_that_accepts_and_never_answers_is_an_error_not_a_hang() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let url = format!("postgres://u:p@127.0.0.1:{port}/db?connect_timeout=1");
        let started = std::time::Instant::now();
        let err = PostgresCheckpointer::connect(&url).await.unwrap_err().to_string();
        assert!(err.contains("did not answer within 1 s"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(10), "it waited {:?}", started.elapsed());
        silent.abort();
    }
}
