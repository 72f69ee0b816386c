//! Checkpoints: the state of a thread at every superstep boundary, and the pending writes of
//! nodes that finished within a step that has not completed yet (so a crash re-runs only the
//! nodes that had not finished). [`Checkpointer`] is the one storage contract; this module
//! holds the in-memory store, and `sqlite` and `postgres` the durable ones.
//!
//! Checkpoint ids are UUIDv7 — unique across processes and restarts, and ordered by time;
//! "latest" is decided by the store's insertion sequence, not by the clock.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A graph's state as stored: channel name → value (the graph engine folds it; the store only
/// keeps it).
pub type State = Map<String, Value>;

/// A node's update as stored: channel name → value.
pub type Update = Map<String, Value>;

/// A blueprint's text and where it came from (pinned in a thread's record so a resume binds
/// this text, never the file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlueprintSource {
    /// A path or a name, for diagnostics.
    pub origin: String,
    /// The text.
    pub text: String,
}

/// Where a checkpoint came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The run's input was applied (step 0, or a new input on a finished thread).
    Input,
    /// A superstep completed.
    Step,
    /// Copied from an earlier checkpoint to run again from there (time travel).
    Replay,
    /// Copied from an earlier checkpoint with an edited state.
    Fork,
    /// Copied from the latest checkpoint to continue past the limits: visits and supersteps
    /// count afresh from it (`graph resume --raise-limits`).
    Raise,
}

/// When a run stops for a person, at a checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pause {
    /// Before or after the nodes.
    pub when: When,
    /// The nodes it stops at.
    pub nodes: Vec<String>,
}

/// When a run stops to wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Before the named nodes run.
    Before,
    /// After the named nodes ran.
    After,
    /// A node asks for a value.
    Ask,
}

impl When {
    /// Snake-case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            When::Before => "before",
            When::After => "after",
            When::Ask => "ask",
        }
    }
}

impl std::fmt::Display for When {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The state of a thread at a superstep boundary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Unique id (UUIDv7).
    pub id: String,
    /// The thread.
    pub thread: String,
    /// The namespace: empty for the top graph, `node:step@checkpoint/…` for a sub-graph run
    /// (keyed by the parent checkpoint it ran under, so time travel never finds a stale run).
    pub ns: String,
    /// The checkpoint this one follows.
    pub parent: Option<String>,
    /// Supersteps completed on this branch.
    pub step: u64,
    /// The state.
    pub state: State,
    /// The nodes the next superstep runs (empty: the run is done).
    pub next: Vec<String>,
    /// How often each node has run on this branch: the nodes that may still run (the graph
    /// engine drops a node no later step can reach, so this does not grow with the thread).
    pub visits: BTreeMap<String, u32>,
    /// The step the run's `max_supersteps` counts from (the step of its input, fork or raise).
    #[serde(default)]
    pub base_step: u64,
    /// A stop before or after named nodes, waiting for `resume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<Pause>,
    /// Where it came from.
    pub source: Source,
    /// When it was written.
    pub created_at: DateTime<Utc>,
}

impl Checkpoint {
    /// A fresh id: UUIDv7, unique across restarts and machines.
    pub fn new_id() -> String {
        uuid::Uuid::now_v7().to_string()
    }

    /// Whether the run of this branch has finished.
    pub fn is_done(&self) -> bool {
        self.next.is_empty()
    }
}

/// What a node left within a step that had not completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Write {
    /// The node finished with this update.
    Update {
        /// The update.
        update: Update,
    },
    /// The node asked for a value (human input) and waits.
    Interrupt {
        /// What it asks (shown to the person).
        payload: Value,
    },
}

/// A node's pending write, as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingWrite {
    /// The node.
    pub node: String,
    /// What it wrote.
    pub write: Write,
    /// For a node that runs a graph (a sub-graph) and asked within this step: the checkpoint
    /// of that run where it first asked. Kept when the node goes on to finish, so time travel
    /// back to this step answers the question there again instead of re-running the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_at: Option<String>,
}

/// A thread's record: which graph it runs (its blueprint, when it came from one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    /// The thread id.
    pub thread: String,
    /// The graph's name.
    pub graph: String,
    /// The blueprint's text, so a thread can be resumed without its file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blueprint: Option<String>,
    /// Where the blueprint was read from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The text of every sub-graph blueprint it reaches (by the name nodes use), pinned when
    /// the thread starts so a resume binds these, never the files. `None` in threads stored
    /// before sub-graphs were pinned: their sub-graphs are looked up next to `origin`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subgraphs: Option<BTreeMap<String, BlueprintSource>>,
    /// When the thread was created.
    pub created_at: DateTime<Utc>,
}

/// A checkpoint store failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The database failed.
    #[error("checkpoint store: {0}")]
    Backend(String),
    /// A stored record does not parse.
    #[error("checkpoint store: a stored record is unreadable: {0}")]
    Corrupt(String),
    /// A stored record was written in a format newer than this build reads.
    #[error(
        "checkpoint store: a stored record has format version {found}, newer than this build reads (up to \
         {supported}): it was written by a newer recursive"
    )]
    NewerFormat {
        /// The record's version.
        found: u32,
        /// The newest version this build reads.
        supported: u32,
    },
    /// The store's address is not understood.
    #[error("checkpoint store: {0}")]
    Address(String),
    /// A runner's lease on a thread ran out (it stalled) and another runner took the thread
    /// over: this runner may no longer write to it.
    #[error(
        "thread `{thread}` was taken over by another runner ({holder}) after this one's lease ran out; this runner \
         stopped without writing"
    )]
    LeaseLost {
        /// The thread.
        thread: String,
        /// Who holds it now.
        holder: String,
    },
}

impl From<serde_json::Error> for StoreError {
    fn from(e: serde_json::Error) -> Self {
        StoreError::Corrupt(e.to_string())
    }
}

/// A thread record as listed: the thread, or why its stored record cannot be read.
pub type Listed = Result<ThreadInfo, Unreadable>;

/// A stored thread record that does not parse.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// The thread's id (its key column).
    pub thread: String,
    /// Why its record does not parse.
    pub error: String,
}

/// Parses a listed thread's stored record.
pub(crate) fn listed(thread: String, body: &str) -> Listed {
    crate::format::decode(body).map_err(|e| Unreadable { thread, error: e.to_string() })
}

/// Where checkpoints, pending writes and threads are kept.
#[async_trait]
pub trait Checkpointer: Send + Sync {
    /// Records (or updates) a thread.
    async fn put_thread(&self, info: &ThreadInfo) -> Result<(), StoreError>;
    /// A thread's record.
    async fn thread(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError>;
    /// Every thread, oldest first.
    /// Every thread, oldest first; a record that does not parse is listed as unreadable, so one
    /// corrupt row does not hide the others.
    async fn threads(&self) -> Result<Vec<Listed>, StoreError>;
    /// Stores a checkpoint (ids are unique; it becomes its namespace's latest).
    async fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError>;
    /// Stores a node's pending write for the step that starts at `checkpoint` (replacing an
    /// earlier write of the same node there). Checkpoint ids are unique, so they place the
    /// write in its namespace too.
    async fn put_write(&self, thread: &str, checkpoint: &str, write: &PendingWrite) -> Result<(), StoreError>;
    /// The pending writes of the step that starts at `checkpoint`.
    async fn writes(&self, thread: &str, checkpoint: &str) -> Result<Vec<PendingWrite>, StoreError>;
    /// The latest checkpoint of a namespace of a thread.
    async fn latest(&self, thread: &str, ns: &str) -> Result<Option<Checkpoint>, StoreError>;
    /// A checkpoint by id.
    async fn get(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError>;
    /// A namespace's checkpoints, newest first.
    async fn list(&self, thread: &str, ns: &str) -> Result<Vec<Checkpoint>, StoreError>;
    /// Deletes a namespace's checkpoints stored before `keep` (a run's slot needs only its
    /// latest; a graph's own namespaces keep their history for time travel).
    async fn prune(&self, thread: &str, ns: &str, keep: &str) -> Result<(), StoreError>;
    /// Takes (or renews) the lease on running `thread` for `holder` for `ttl`: `None` when
    /// `holder` has it now, or the other holder whose lease has not expired. One atomic step
    /// in the store, so two runners never both get it.
    async fn take_lease(
        &self,
        thread: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<String>, StoreError>;
    /// Gives the lease up (when `holder` has it).
    async fn release_lease(&self, thread: &str, holder: &str) -> Result<(), StoreError>;
    /// Who holds the lease on `thread`, or held it last (its lease may have expired).
    async fn lease_holder(&self, thread: &str) -> Result<Option<String>, StoreError>;
    /// Appends a record to the journal of the durable run `key` ([`crate::journal`]); durable
    /// when it returns.
    async fn append_journal(&self, key: &str, body: &str) -> Result<(), StoreError>;
    /// The journal of the durable run `key`, in the order appended.
    async fn journal(&self, key: &str) -> Result<Vec<String>, StoreError>;
    /// Deletes the journal `key` (a run deleted, a pursuit started afresh under a reused key).
    async fn delete_journal(&self, key: &str) -> Result<(), StoreError>;
    /// The journal `key` as records appended on the caller's thread, when this store keeps them
    /// locally (SQLite): a run's journal is then written as a file is, without giving way to the
    /// run's other tasks, so calls a run makes at once stay in the order they were made.
    fn local_records(&self, _key: &str) -> Option<std::sync::Arc<dyn recursive_core::StoredRecords>> {
        None
    }
}

/// Checkpoints in memory (tests, library use without durability).
#[derive(Debug, Default)]
pub struct MemoryCheckpointer {
    inner: Mutex<Memory>,
}

#[derive(Debug, Default)]
struct Memory {
    threads: Vec<ThreadInfo>,
    checkpoints: Vec<Checkpoint>,
    writes: BTreeMap<(String, String), Vec<PendingWrite>>,
    leases: BTreeMap<String, (String, std::time::Instant)>,
    journals: BTreeMap<String, Vec<String>>,
}

impl MemoryCheckpointer {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut Memory) -> T) -> Result<T, StoreError> {
        let mut guard = self.inner.lock().map_err(|_| StoreError::Backend("the store's lock is poisoned".into()))?;
        Ok(f(&mut guard))
    }
}

#[async_trait]
impl Checkpointer for MemoryCheckpointer {
    async fn put_thread(&self, info: &ThreadInfo) -> Result<(), StoreError> {
        self.with(|m| match m.threads.iter_mut().find(|t| t.thread == info.thread) {
            Some(t) => *t = info.clone(),
            None => m.threads.push(info.clone()),
        })
    }

    async fn thread(&self, thread: &str) -> Result<Option<ThreadInfo>, StoreError> {
        self.with(|m| m.threads.iter().find(|t| t.thread == thread).cloned())
    }

    async fn threads(&self) -> Result<Vec<Listed>, StoreError> {
        self.with(|m| m.threads.iter().cloned().map(Ok).collect())
    }

    async fn put(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.with(|m| m.checkpoints.push(checkpoint.clone()))
    }

    async fn prune(&self, thread: &str, ns: &str, keep: &str) -> Result<(), StoreError> {
        self.with(|m| {
            let Some(at) = m.checkpoints.iter().position(|c| c.id == keep) else { return };
            let mut index = 0;
            m.checkpoints.retain(|c| {
                index += 1;
                index > at || c.thread != thread || c.ns != ns
            });
        })
    }

    async fn put_write(&self, thread: &str, checkpoint: &str, write: &PendingWrite) -> Result<(), StoreError> {
        self.with(|m| {
            let list = m.writes.entry((thread.to_string(), checkpoint.to_string())).or_default();
            list.retain(|w| w.node != write.node);
            list.push(write.clone());
        })
    }

    async fn writes(&self, thread: &str, checkpoint: &str) -> Result<Vec<PendingWrite>, StoreError> {
        self.with(|m| m.writes.get(&(thread.to_string(), checkpoint.to_string())).cloned().unwrap_or_default())
    }

    async fn latest(&self, thread: &str, ns: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.with(|m| m.checkpoints.iter().rev().find(|c| c.thread == thread && c.ns == ns).cloned())
    }

    async fn get(&self, thread: &str, id: &str) -> Result<Option<Checkpoint>, StoreError> {
        self.with(|m| m.checkpoints.iter().find(|c| c.thread == thread && c.id == id).cloned())
    }

    async fn list(&self, thread: &str, ns: &str) -> Result<Vec<Checkpoint>, StoreError> {
        self.with(|m| m.checkpoints.iter().rev().filter(|c| c.thread == thread && c.ns == ns).cloned().collect())
    }

    async fn take_lease(
        &self,
        thread: &str,
        holder: &str,
        ttl: std::time::Duration,
    ) -> Result<Option<String>, StoreError> {
        let now = std::time::Instant::now();
        self.with(|m| match m.leases.get(thread) {
            Some((other, until)) if other != holder && *until > now => Some(other.clone()),
            _ => {
                m.leases.insert(thread.to_string(), (holder.to_string(), now + ttl));
                None
            }
        })
    }

    async fn lease_holder(&self, thread: &str) -> Result<Option<String>, StoreError> {
        self.with(|m| m.leases.get(thread).map(|(holder, _)| holder.clone()))
    }

    async fn release_lease(&self, thread: &str, holder: &str) -> Result<(), StoreError> {
        self.with(|m| {
            if m.leases.get(thread).is_some_and(|(h, _)| h == holder) {
                m.leases.remove(thread);
            }
        })
    }

    async fn append_journal(&self, key: &str, body: &str) -> Result<(), StoreError> {
        self.with(|m| m.journals.entry(key.to_string()).or_default().push(body.to_string()))
    }

    async fn journal(&self, key: &str) -> Result<Vec<String>, StoreError> {
        self.with(|m| m.journals.get(key).cloned().unwrap_or_default())
    }

    async fn delete_journal(&self, key: &str) -> Result<(), StoreError> {
        self.with(|m| {
            m.journals.remove(key);
        })
    }
}

/// Opens a store by address: `postgres://…` or `postgresql://…` for PostgreSQL, `memory:` for
/// an in-memory store, and `sqlite:PATH` or a plain path for SQLite.
pub async fn open(address: &str) -> Result<std::sync::Arc<dyn Checkpointer>, StoreError> {
    if address.starts_with("postgres://") || address.starts_with("postgresql://") {
        return Ok(std::sync::Arc::new(crate::postgres::PostgresCheckpointer::connect(address).await?));
    }
    if address == "memory:" {
        return Ok(std::sync::Arc::new(MemoryCheckpointer::new()));
    }
    let path = address.strip_prefix("sqlite:").unwrap_or(address);
    if path.is_empty() {
        return Err(StoreError::Address("an empty SQLite path".into()));
    }
    // Opening (and creating the schema) blocks: off the runtime's threads, so a caller can do
    // other work meanwhile.
    let path = path.to_string();
    let store = tokio::task::spawn_blocking(move || crate::sqlite::SqliteCheckpointer::open(&path))
        .await
        .map_err(|e| StoreError::Backend(format!("opening the SQLite store: {e}")))??;
    Ok(std::sync::Arc::new(store))
}
