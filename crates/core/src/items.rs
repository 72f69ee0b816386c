//! A store of JSON items by namespace and key — what LangGraph's store API serves over HTTP. A
//! host backs it with what it keeps anyway (the workspace memory of `remember` and `recall`), so
//! an item put by a client is what an agent recalls, and the reverse; a server with no backing
//! keeps them in memory.

use serde_json::{Map, Value};

/// One item.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Its namespace: a path of labels.
    pub namespace: Vec<String>,
    /// Its key in the namespace.
    pub key: String,
    /// Its value.
    pub value: Map<String, Value>,
    /// When it was first written (RFC 3339).
    pub created_at: String,
    /// When it was last written (RFC 3339).
    pub updated_at: String,
}

/// Where items are kept.
pub trait ItemStore: Send + Sync {
    /// Every item.
    fn items(&self) -> Result<Vec<Item>, String>;
    /// Puts `value` under `namespace` and `key` (replacing what was there).
    fn put(&self, namespace: &[String], key: &str, value: &Map<String, Value>) -> Result<(), String>;
    /// Deletes the item, if there is one.
    fn delete(&self, namespace: &[String], key: &str) -> Result<(), String>;
}
