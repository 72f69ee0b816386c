//! Persistent memory: `remember` stores a value under a key and `recall` finds it again, by
//! exact key or by a substring of keys and values. Entries live in an embedded SQLite database
//! (by default `<workspace>/.recursive/memory.db`), so they survive restarts and are shared by
//! every run in the workspace.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{ToolContext, ToolError, TypedTool};
use rusqlite::{Connection, OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;

use crate::fs::blocking;
use crate::truncate::clip_chars;

/// A memory database fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// SQLite failed.
    #[error("memory database `{path}`: {source}")]
    Sqlite {
        /// The database file.
        path: String,
        /// The SQLite error.
        #[source]
        source: rusqlite::Error,
    },
    /// The database's directory could not be created.
    #[error("memory database `{path}`: {source}")]
    Io {
        /// The database file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The lock around the connection was poisoned by a panic.
    #[error("memory database lock poisoned")]
    Poisoned,
    /// The default database's place leads outside the workspace.
    #[error("memory database: {0}")]
    Outside(#[from] crate::sandbox::SandboxError),
}

/// One remembered entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEntry {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
    /// When it was last written (UTC, RFC 3339).
    pub updated_at: String,
}

/// The key-value store behind `remember` and `recall`. The database is opened on first use;
/// reads of a database that does not exist yet find nothing and create nothing.
#[derive(Debug)]
pub struct MemoryStore {
    path: PathBuf,
    conn: Mutex<Option<Connection>>,
    /// The workspace whose `.recursive/` holds the file, checked again when it is opened.
    state_of: Option<crate::sandbox::Workspace>,
}

/// The default database's file name under `.recursive/`.
const MEMORY_FILE: &str = "memory.db";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS memories (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL,
    updated_at TEXT NOT NULL
);";

impl MemoryStore {
    /// A store backed by the database file at `path` (created on the first write).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into(), conn: Mutex::new(None), state_of: None }
    }

    /// The default store of a workspace, `<root>/.recursive/memory.db`, whose place is checked
    /// to stay inside the workspace when it is opened ([`crate::sandbox::Workspace::state_path`]).
    pub fn in_workspace(workspace: &crate::sandbox::Workspace) -> Self {
        let path = workspace.state_dir().join(MEMORY_FILE);
        Self { path, conn: Mutex::new(None), state_of: Some(workspace.clone()) }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sqlite(&self, source: rusqlite::Error) -> MemoryError {
        MemoryError::Sqlite { path: self.path.display().to_string(), source }
    }

    /// Runs `f` with an open connection; `None` when the database does not exist and
    /// `create` is false.
    fn with_conn<T>(
        &self,
        create: bool,
        f: impl FnOnce(&Connection) -> Result<T, rusqlite::Error>,
    ) -> Result<Option<T>, MemoryError> {
        let mut guard = self.conn.lock().map_err(|_| MemoryError::Poisoned)?;
        if guard.is_none() {
            if !create && !self.path.exists() {
                return Ok(None);
            }
            if let Some(ws) = &self.state_of {
                ws.state_path(MEMORY_FILE)?;
            }
            if let Some(parent) = self.path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .map_err(|source| MemoryError::Io { path: self.path.display().to_string(), source })?;
            }
            let conn = Connection::open(&self.path).map_err(|e| self.sqlite(e))?;
            conn.busy_timeout(Duration::from_secs(5)).map_err(|e| self.sqlite(e))?;
            conn.execute_batch(SCHEMA).map_err(|e| self.sqlite(e))?;
            *guard = Some(conn);
        }
        match guard.as_ref() {
            Some(conn) => f(conn).map(Some).map_err(|e| self.sqlite(e)),
            None => Ok(None),
        }
    }

    /// Stores `value` under `key`, replacing an earlier value; returns whether one was replaced.
    pub fn remember(&self, key: &str, value: &str) -> Result<bool, MemoryError> {
        let replaced = self.with_conn(true, |c| {
            let existed: bool =
                c.query_row("SELECT EXISTS(SELECT 1 FROM memories WHERE key = ?1)", [key], |r| r.get(0))?;
            c.execute(
                "INSERT INTO memories (key, value, updated_at)
                 VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
                 ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                params![key, value],
            )?;
            Ok(existed)
        })?;
        Ok(replaced.unwrap_or(false))
    }

    /// The entry stored under exactly `key`.
    pub fn get(&self, key: &str) -> Result<Option<MemoryEntry>, MemoryError> {
        Ok(self
            .with_conn(false, |c| {
                c.query_row("SELECT key, value, updated_at FROM memories WHERE key = ?1", [key], entry).optional()
            })?
            .flatten())
    }

    /// Entries whose key or value contains `query` (ASCII case-insensitive), newest first.
    pub fn search(&self, query: &str, limit: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        Ok(self
            .with_conn(false, |c| {
                let mut stmt = c.prepare(
                    "SELECT key, value, updated_at FROM memories
                     WHERE instr(lower(key), lower(?1)) > 0 OR instr(lower(value), lower(?1)) > 0
                     ORDER BY updated_at DESC, key LIMIT ?2",
                )?;
                let rows = stmt.query_map(params![query, limit as i64], entry)?;
                rows.collect::<Result<Vec<_>, _>>()
            })?
            .unwrap_or_default())
    }

    /// The most recently written entries.
    pub fn recent(&self, limit: usize) -> Result<Vec<MemoryEntry>, MemoryError> {
        self.search("", limit)
    }

    /// Deletes the entry under `key`; whether there was one.
    pub fn forget(&self, key: &str) -> Result<bool, MemoryError> {
        let removed = self.with_conn(false, |c| c.execute("DELETE FROM memories WHERE key = ?1", [key]))?;
        Ok(removed.unwrap_or(0) > 0)
    }

    /// Number of entries.
    pub fn len(&self) -> Result<usize, MemoryError> {
        Ok(self
            .with_conn(false, |c| c.query_row("SELECT COUNT(*) FROM memories", [], |r| r.get::<_, i64>(0)))?
            .map(|n| n.max(0) as usize)
            .unwrap_or(0))
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> Result<bool, MemoryError> {
        Ok(self.len()? == 0)
    }
}

/// The namespace remembered entries without one are served under (LangGraph's store API).
pub const MEMORIES_NAMESPACE: &str = "memories";

/// The memory is the store of LangGraph's store API: an item is the entry `NS.NS/KEY` (its
/// namespace's labels joined by periods), its value the object as JSON; an entry remembered
/// without a namespace is the item `KEY` of [`MEMORIES_NAMESPACE`] whose value is
/// `{"value": TEXT}`. So what a client puts, an agent recalls, and the reverse.
impl recursive_core::items::ItemStore for MemoryStore {
    fn items(&self) -> Result<Vec<recursive_core::items::Item>, String> {
        let entries = self.recent(usize::MAX >> 1).map_err(|e| e.to_string())?;
        Ok(entries.into_iter().map(item_of).collect())
    }

    fn put(
        &self,
        namespace: &[String],
        key: &str,
        value: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), String> {
        let text = serde_json::Value::Object(value.clone()).to_string();
        self.remember(&entry_key(namespace, key)?, &text).map(|_| ()).map_err(|e| e.to_string())
    }

    fn delete(&self, namespace: &[String], key: &str) -> Result<(), String> {
        self.forget(&entry_key(namespace, key)?).map(|_| ()).map_err(|e| e.to_string())
    }
}

/// The memory key of an item; a label with `/` has none.
fn entry_key(namespace: &[String], key: &str) -> Result<String, String> {
    if namespace.iter().any(|l| l.contains('/')) {
        return Err("a namespace label kept in the workspace memory cannot contain `/`".into());
    }
    if namespace == [MEMORIES_NAMESPACE] && !key.contains('/') {
        return Ok(key.to_string());
    }
    Ok(format!("{}/{key}", namespace.join(".")))
}

/// The item an entry is.
fn item_of(entry: MemoryEntry) -> recursive_core::items::Item {
    let object = |text: &str| match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::from_iter([("value".to_string(), serde_json::Value::String(text.to_string()))]),
    };
    let (namespace, key, value) = match entry.key.split_once('/') {
        Some((ns, key)) => (ns.split('.').map(str::to_string).collect(), key.to_string(), object(&entry.value)),
        None => {
            let value = serde_json::Map::from_iter([("value".to_string(), serde_json::Value::String(entry.value))]);
            (vec![MEMORIES_NAMESPACE.to_string()], entry.key, value)
        }
    };
    recursive_core::items::Item {
        namespace,
        key,
        value,
        created_at: entry.updated_at.clone(),
        updated_at: entry.updated_at,
    }
}

fn entry(row: &rusqlite::Row<'_>) -> Result<MemoryEntry, rusqlite::Error> {
    Ok(MemoryEntry { key: row.get(0)?, value: row.get(1)?, updated_at: row.get(2)? })
}

fn failed(e: MemoryError) -> ToolError {
    ToolError::failed(e.to_string())
}

/// Arguments of `remember`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RememberArgs {
    /// A short, stable key, e.g. `build-command` or `user-preference/tests`.
    pub key: String,
    /// What to remember. Replaces any earlier value under the same key.
    pub value: String,
}

/// Stores a memory.
#[derive(Debug, Clone)]
pub struct Remember {
    store: Arc<MemoryStore>,
}

impl Remember {
    /// The tool writing to this store.
    pub fn new(store: Arc<MemoryStore>) -> Self {
        Self { store }
    }
}

#[async_trait]
impl TypedTool for Remember {
    type Args = RememberArgs;

    fn name(&self) -> &str {
        "remember"
    }

    fn description(&self) -> String {
        "Save a fact for later runs in this workspace under a key (persistent memory). Saving under an existing \
         key replaces its value. Use recall to read memories back."
            .into()
    }

    async fn run(&self, args: RememberArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let key = args.key.trim().to_string();
        if key.is_empty() {
            return Err(ToolError::InvalidArguments { tool: "remember".into(), message: "`key` is empty".into() });
        }
        let store = self.store.clone();
        let k = key.clone();
        let replaced = blocking(move || store.remember(&k, &args.value).map_err(failed)).await?;
        Ok(if replaced {
            format!("updated `{key}` (the previous value was replaced)")
        } else {
            format!("remembered `{key}`")
        })
    }
}

/// Arguments of `recall`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallArgs {
    /// Exact key to look up.
    #[serde(default)]
    pub key: Option<String>,
    /// Text to search for in keys and values (case-insensitive). Ignored when `key` is given.
    #[serde(default)]
    pub query: Option<String>,
    /// Most entries to return for a search or listing. Default: 20.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Reads memories.
#[derive(Debug, Clone)]
pub struct Recall {
    store: Arc<MemoryStore>,
}

impl Recall {
    /// The tool reading from this store.
    pub fn new(store: Arc<MemoryStore>) -> Self {
        Self { store }
    }
}

/// Characters of each value shown in a search or listing.
const LISTED_VALUE_CHARS: usize = 500;

fn render(entries: &[MemoryEntry]) -> String {
    entries
        .iter()
        .map(|e| format!("{} ({}): {}", e.key, e.updated_at, clip_chars(&e.value, LISTED_VALUE_CHARS)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[async_trait]
impl TypedTool for Recall {
    type Args = RecallArgs;

    fn name(&self) -> &str {
        "recall"
    }

    fn description(&self) -> String {
        "Read persistent memories saved with remember. Give `key` for one exact entry, `query` to search keys \
         and values for a piece of text, or neither to list the most recent entries."
            .into()
    }

    fn read_only(&self) -> bool {
        true
    }

    async fn run(&self, args: RecallArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let store = self.store.clone();
        let limit = args.limit.unwrap_or(20).clamp(1, 1000);
        blocking(move || {
            if let Some(key) = args.key.as_deref().map(str::trim).filter(|k| !k.is_empty()) {
                return Ok(match store.get(key).map_err(failed)? {
                    Some(e) => format!("{} ({}): {}", e.key, e.updated_at, e.value),
                    None => format!("nothing is remembered under `{key}`"),
                });
            }
            match args.query.as_deref().filter(|q| !q.is_empty()) {
                Some(q) => {
                    let found = store.search(q, limit).map_err(failed)?;
                    Ok(if found.is_empty() { format!("no memories match `{q}`") } else { render(&found) })
                }
                None => {
                    let found = store.recent(limit).map_err(failed)?;
                    Ok(if found.is_empty() { "no memories are stored yet".to_string() } else { render(&found) })
                }
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_memory_is_the_item_store_entries_and_items_both_ways() {
        use recursive_core::items::ItemStore;
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::new(dir.path().join("m.db"));
        store.remember("deploy-day", "friday").unwrap();
        let prefs = serde_json::Map::from_iter([("theme".to_string(), serde_json::json!("dark"))]);
        store.put(&["users".into(), "ada".into()], "prefs", &prefs).unwrap();
        assert_eq!(store.get("users.ada/prefs").unwrap().unwrap().value, r#"{"theme":"dark"}"#, "an agent recalls it");
        let items = store.items().unwrap();
        let remembered = items.iter().find(|i| i.key == "deploy-day").unwrap();
        assert_eq!(remembered.namespace, [MEMORIES_NAMESPACE]);
        assert_eq!(remembered.value["value"], "friday", "a client reads what an agent remembered");
        let ada = items.iter().find(|i| i.key == "prefs").unwrap();
        assert_eq!((ada.namespace.clone(), ada.value.clone()), (vec!["users".to_string(), "ada".to_string()], prefs));
        store.delete(&["users".into(), "ada".into()], "prefs").unwrap();
        assert!(store.get("users.ada/prefs").unwrap().is_none());
        assert!(store.put(&["a/b".into()], "k", &serde_json::Map::new()).is_err(), "a label with / has no key");
    }

    use super::*;
    use recursive_core::typed;
    use serde_json::json;

    fn tools(path: &Path) -> (Arc<dyn recursive_core::Tool>, Arc<dyn recursive_core::Tool>) {
        let store = Arc::new(MemoryStore::new(path));
        (typed(Remember::new(store.clone())), typed(Recall::new(store)))
    }

    #[tokio::test]
    async fn remembers_and_recalls_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let (remember, recall) = tools(&dir.path().join("m.db"));
        let ctx = ToolContext::detached();
        let out = remember.call(json!({"key": "build", "value": "cargo build --locked"}), &ctx).await.unwrap();
        assert_eq!(out, "remembered `build`");
        let out = recall.call(json!({"key": "build"}), &ctx).await.unwrap();
        assert!(out.starts_with("build ("), "{out}");
        assert!(out.ends_with("): cargo build --locked"), "{out}");
    }

    #[tokio::test]
    async fn remembering_again_replaces_the_value() {
        let dir = tempfile::tempdir().unwrap();
        let (remember, recall) = tools(&dir.path().join("m.db"));
        let ctx = ToolContext::detached();
        remember.call(json!({"key": "k", "value": "old"}), &ctx).await.unwrap();
        let out = remember.call(json!({"key": "k", "value": "new"}), &ctx).await.unwrap();
        assert!(out.contains("replaced"), "{out}");
        let out = recall.call(json!({"key": "k"}), &ctx).await.unwrap();
        assert!(out.ends_with(": new"), "{out}");
    }

    #[tokio::test]
    async fn recall_searches_keys_and_values() {
        let dir = tempfile::tempdir().unwrap();
        let (remember, recall) = tools(&dir.path().join("m.db"));
        let ctx = ToolContext::detached();
        remember.call(json!({"key": "db-url", "value": "postgres://localhost"}), &ctx).await.unwrap();
        remember.call(json!({"key": "editor", "value": "prefers Helix"}), &ctx).await.unwrap();
        remember.call(json!({"key": "tests", "value": "run with nextest"}), &ctx).await.unwrap();
        let out = recall.call(json!({"query": "HELIX"}), &ctx).await.unwrap();
        assert!(out.starts_with("editor ("), "{out}");
        assert_eq!(out.lines().count(), 1, "{out}");
        let out = recall.call(json!({"query": "db-"}), &ctx).await.unwrap();
        assert!(out.starts_with("db-url ("), "{out}");
        let out = recall.call(json!({}), &ctx).await.unwrap();
        assert_eq!(out.lines().count(), 3, "{out}");
        let out = recall.call(json!({"query": "nothing like this"}), &ctx).await.unwrap();
        assert_eq!(out, "no memories match `nothing like this`");
    }

    #[tokio::test]
    async fn memories_survive_reopening_the_database() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".recursive/memory.db");
        {
            let (remember, _) = tools(&path);
            remember.call(json!({"key": "k", "value": "kept"}), &ToolContext::detached()).await.unwrap();
        }
        let store = MemoryStore::new(&path);
        assert_eq!(store.get("k").unwrap().map(|e| e.value), Some("kept".to_string()));
        assert_eq!(store.len().unwrap(), 1);
    }

    #[tokio::test]
    async fn recall_without_a_database_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".recursive/memory.db");
        let (_, recall) = tools(&path);
        let out = recall.call(json!({"key": "k"}), &ToolContext::detached()).await.unwrap();
        assert_eq!(out, "nothing is remembered under `k`");
        let out = recall.call(json!({}), &ToolContext::detached()).await.unwrap();
        assert_eq!(out, "no memories are stored yet");
        assert!(!dir.path().join(".recursive").exists());
    }

    #[tokio::test]
    async fn empty_key_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let (remember, _) = tools(&dir.path().join("m.db"));
        let err = remember.call(json!({"key": "  ", "value": "x"}), &ToolContext::detached()).await.unwrap_err();
        assert!(err.to_string().contains("`key` is empty"), "{err}");
    }
}
