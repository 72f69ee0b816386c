//! The PostgreSQL checkpointer: threads shared by several processes or machines. The tables
//! are created on first use under an advisory lock (so processes starting together do not
//! race); "latest" follows a `BIGSERIAL` sequence, not anyone's clock.

use std::sync::Arc;

use async_trait::async_trait;
use tokio_postgres::{Client, NoTls};

use crate::checkpoint::{Checkpoint, Checkpointer, PendingWrite, StoreError, ThreadInfo};

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
";

/// An arbitrary, fixed key for the advisory lock that serialises schema creation.
const SCHEMA_LOCK: i64 = 0x7265_6375_7273_6976;

/// Checkpoints in a PostgreSQL database.
#[derive(Clone)]
pub struct PostgresCheckpointer {
    client: Arc<Client>,
}

impl std::fmt::Debug for PostgresCheckpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresCheckpointer").finish_non_exhaustive()
    }
}

fn backend(e: impl std::fmt::Display) -> StoreError {
    StoreError::Backend(e.to_string())
}

fn pg(e: tokio_postgres::Error) -> StoreError {
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
        let (mut client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(pg)?;
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

    async fn bodies<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<T>, StoreError> {
        let rows = self.client.query(sql, params).await.map_err(pg)?;
        rows.iter().map(|r| Ok(serde_json::from_str(&r.try_get::<_, String>(0).map_err(backend)?)?)).collect()
    }
}

#[async_trait]
impl Checkpointer for PostgresCheckpointer {
    async fn put_thread(&self, info: &ThreadInfo) -> Result<(), StoreError> {
        let body = serde_json::to_string(info)?;
        self.client
            .execute(
                "INSERT INTO graph_threads (thread, body) VALUES ($1, $2)
                 ON CONFLICT (thread) DO UPDATE SET body = excluded.body",
                &[&info.thread, &body],
            )
            .await
            .map_err(pg)?;
        Ok(())
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        Ok(self.bodies("SELECT body FROM graph_threads WHERE thread = $1", &[&thread]).await?.pop())
    }

    async fn threads(&self) -> Result<Vec<ThreadInfo>, StoreError> {
        self.bodies("SELECT body FROM graph_threads ORDER BY seq", &[]).await
    }

    async fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        let body = serde_json::to_string(checkpoint)?;
        self.client
            .execute(
                "INSERT INTO graph_checkpoints (thread, ns, id, body) VALUES ($1, $2, $3, $4)",
                &[&checkpoint.thread, &checkpoint.ns, &checkpoint.id, &body],
            )
            .await
            .map_err(pg)?;
        Ok(())
    }

    async fn put_write(&self, thread: &str, checkpoint: &str, write: &PendingWrite) -> Result<(), StoreError> {
        let body = serde_json::to_string(write)?;
        self.client
            .execute(
                "INSERT INTO graph_writes (thread, checkpoint, node, body) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (thread, checkpoint, node) DO UPDATE SET body = excluded.body",
                &[&thread, &checkpoint, &write.node, &body],
            )
            .await
            .map_err(pg)?;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_postgres_store_keeps_the_contract_across_connections() {
        let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
        let thread = format!("contract-{}", Checkpoint::new_id());
        let store = PostgresCheckpointer::connect(&url).await.unwrap();
        crate::checkpoint::contract::keeps_the_contract(&store, &thread).await;
        let other = PostgresCheckpointer::connect(&url).await.unwrap();
        assert_eq!(other.latest(&thread, "").await.unwrap(), store.latest(&thread, "").await.unwrap());
    }

    #[tokio::test]
    async fn a_wrong_password_is_a_clear_error() {
        let Some(url) = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL") else { return };
        let bad = url.replacen(":recursive@", ":wrong@", 1);
        let err = PostgresCheckpointer::connect(&bad).await.unwrap_err().to_string();
        assert!(err.contains("password"), "{err}");
    }
}
