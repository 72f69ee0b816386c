//! Durable runs' journals in the store ([`recursive_core::journal`]): every spend record and
//! finished call of a run kept in the store (a graph thread, an RLM run, a served run a worker
//! runs) is a row under the run's key, committed before the call it holds goes out. A process on
//! another machine that takes the run over (a worker after another died) resumes from the same
//! rows: what the run spent, and every call it finished.

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::RunScope;
use recursive_core::journal::DurableRun;
use recursive_core::spend::{SpendLedger, SpendRecord};

use crate::checkpoint::{Checkpointer, StoreError};

/// The journal of the run `key` in a store, as a spend ledger.
#[derive(Clone)]
pub struct StoreLedger {
    store: Arc<dyn Checkpointer>,
    key: String,
}

impl std::fmt::Debug for StoreLedger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreLedger").field("key", &self.key).finish_non_exhaustive()
    }
}

impl StoreLedger {
    /// The journal of `key` in `store`.
    pub fn new(store: Arc<dyn Checkpointer>, key: impl Into<String>) -> Self {
        Self { store, key: key.into() }
    }

    /// Its records so far. A record this version cannot read (a newer format) is an error
    /// naming it: a resume must not run calls it cannot tell were finished.
    pub async fn records(&self) -> Result<Vec<SpendRecord>, StoreError> {
        let bodies = self.store.journal(&self.key).await?;
        bodies
            .iter()
            .enumerate()
            .map(|(i, body)| {
                serde_json::from_str(body).map_err(|e| {
                    StoreError::Backend(format!("record {} of the journal of `{}` is unreadable: {e}", i + 1, self.key))
                })
            })
            .collect()
    }
}

#[async_trait]
impl SpendLedger for StoreLedger {
    async fn record(&self, record: &SpendRecord) -> std::io::Result<()> {
        let body = serde_json::to_string(record).map_err(std::io::Error::other)?;
        self.store.append_journal(&self.key, &body).await.map_err(std::io::Error::other)
    }
}

/// The journal key of a graph thread's runs (the `graph` command, serve's threads, workers).
pub fn thread_key(thread: &str) -> String {
    format!("thread-{thread}")
}

/// The journal key of a served run (run by a worker from the queue).
pub fn run_key(run: &str) -> String {
    format!("run-{run}")
}

/// The run `key` of `store` made durable in `scope` ([`DurableRun::open`]): journaled in the
/// store, what its killed processes spent restored. Nested in a journaled scope, it keeps the
/// enclosing journal.
pub async fn durable(store: Arc<dyn Checkpointer>, key: &str, scope: &RunScope) -> Result<DurableRun, StoreError> {
    if scope.journal().is_some() {
        return Ok(DurableRun::nested(scope));
    }
    let records = StoreLedger::new(store.clone(), key).records().await?;
    Ok(DurableRun::open(scope, ledger(store, key), &records))
}

/// The journal `key` of `store` as a spend ledger to write: the store's records written on the
/// caller's thread where it keeps them locally ([`Checkpointer::local_records`]), else through
/// the store.
pub fn ledger(store: Arc<dyn Checkpointer>, key: &str) -> Arc<dyn SpendLedger> {
    match store.local_records(key) {
        Some(records) => Arc::new(recursive_core::RecordsLedger::new(records)),
        None => Arc::new(StoreLedger::new(store, key)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::MemoryCheckpointer;
    use recursive_core::Usage;

    #[tokio::test]
    async fn a_run_killed_in_the_store_resumes_with_its_spend_and_a_whole_run_ends_it() {
        let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
        let ledger = StoreLedger::new(store.clone(), "run-1");
        ledger.record(&SpendRecord::hold("a", 0.5)).await.unwrap();
        ledger.record(&SpendRecord::settle("a", 0.25, Usage::default())).await.unwrap();
        ledger.record(&SpendRecord::hold("b", 0.125)).await.unwrap();
        let resumed = durable(store.clone(), "run-1", &RunScope::detached("r")).await.unwrap();
        assert!(resumed.resumed());
        assert_eq!(resumed.scope.cost_usd(), 0.375, "settled + the hold of the call in flight");
        resumed.end().await.unwrap();
        let next = durable(store.clone(), "run-1", &RunScope::detached("r")).await.unwrap();
        assert!(!next.resumed(), "a run that ended whole leaves nothing to resume");
        let other = durable(store, "run-2", &RunScope::detached("r")).await.unwrap();
        assert!(!other.resumed(), "journals are per key");
    }

    #[tokio::test]
    async fn a_local_stores_journal_is_written_on_the_callers_thread_into_the_same_rows() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Checkpointer> = Arc::new(crate::SqliteCheckpointer::open(dir.path().join("s.db")).unwrap());
        assert!(store.local_records("k").is_some(), "SQLite keeps its records locally");
        ledger(store.clone(), "k").record(&SpendRecord::hold("a", 0.5)).await.unwrap();
        assert_eq!(StoreLedger::new(store, "k").records().await.unwrap(), [SpendRecord::hold("a", 0.5)]);
        let memory: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
        assert!(memory.local_records("k").is_none(), "others write through the store");
    }

    #[tokio::test]
    async fn an_unreadable_journal_record_is_an_error_naming_it() {
        let store: Arc<dyn Checkpointer> = Arc::new(MemoryCheckpointer::new());
        store.append_journal("k", "{\"spend\":\"from_the_future\"}").await.unwrap();
        let err = StoreLedger::new(store, "k").records().await.unwrap_err().to_string();
        assert!(err.contains("record 1 of the journal of `k`"), "{err}");
    }
}
