//! Checkpoint slots in the store for runs that can resume (RLMs): a slot is a thread and a
//! namespace whose latest checkpoint holds the run's state under the channel `run`. A
//! stand-alone run gets a thread of its own (recorded as graph `rlm`); a graph node's run gets
//! a namespace in the graph's thread (the graph engine names it), so a node killed mid-run
//! resumes.

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::CheckpointSlot;
use serde_json::Value;

use crate::checkpoint::{Checkpoint, Checkpointer, Source, ThreadInfo};

/// A slot in a store.
pub struct StoreSlot {
    store: Arc<dyn Checkpointer>,
    thread: String,
    ns: String,
    /// The graph name a stand-alone run's thread is recorded under (none inside a graph).
    standalone: Option<String>,
    /// The id and step of the checkpoint this slot saved last: the next save's parent, without
    /// asking the store (one run writes its slot at a time).
    last: std::sync::Mutex<Option<(String, u64)>>,
}

impl StoreSlot {
    /// The slot of a stand-alone run `key` (a thread of its own, recorded as graph `kind`).
    pub fn standalone(store: Arc<dyn Checkpointer>, key: &str, kind: &str) -> Self {
        Self { store, thread: key.into(), ns: kind.into(), standalone: Some(kind.into()), last: Default::default() }
    }

    /// The slot at namespace `ns` of an existing `thread` (a run made by a graph's node).
    pub fn in_thread(store: Arc<dyn Checkpointer>, thread: &str, ns: &str) -> Self {
        Self { store, thread: thread.into(), ns: ns.into(), standalone: None, last: Default::default() }
    }
}

impl StoreSlot {
    /// Before this slot's first save: records a stand-alone run's thread if it is new, and
    /// finds the latest checkpoint already there (a resumed run's).
    async fn first_parent(&self) -> Result<Option<(String, u64)>, String> {
        let store = &self.store;
        if let Some(kind) = &self.standalone
            && store.thread(&self.thread).await.map_err(|e| e.to_string())?.is_none()
        {
            let info = ThreadInfo {
                thread: self.thread.clone(),
                graph: kind.clone(),
                blueprint: None,
                origin: None,
                subgraphs: None,
                created_at: chrono::Utc::now(),
            };
            store.put_thread(&info).await.map_err(|e| e.to_string())?;
        }
        let latest = store.latest(&self.thread, &self.ns).await.map_err(|e| e.to_string())?;
        Ok(latest.map(|p| (p.id, p.step)))
    }
}

#[async_trait]
impl CheckpointSlot for StoreSlot {
    fn name(&self) -> String {
        match &self.standalone {
            Some(_) => self.thread.clone(),
            None => format!("{} {}", self.thread, self.ns),
        }
    }

    async fn save(&self, value: &Value) -> Result<(), String> {
        let known = self.last.lock().map_err(|e| e.to_string())?.clone();
        let parent = match known {
            Some(last) => Some(last),
            None => self.first_parent().await?,
        };
        let mut state = crate::checkpoint::State::new();
        state.insert("run".into(), value.clone());
        let record = Checkpoint {
            id: Checkpoint::new_id(),
            thread: self.thread.clone(),
            ns: self.ns.clone(),
            step: parent.as_ref().map_or(0, |p| p.1 + 1),
            parent: parent.map(|p| p.0),
            state,
            next: Vec::new(),
            visits: Default::default(),
            base_step: 0,
            pause: None,
            source: Source::Step,
            created_at: chrono::Utc::now(),
        };
        self.store.put(&record).await.map_err(|e| e.to_string())?;
        // A resume reads only the latest checkpoint; earlier ones (each holding the whole run so
        // far) would only grow the store.
        self.store.prune(&self.thread, &self.ns, &record.id).await.map_err(|e| e.to_string())?;
        *self.last.lock().map_err(|e| e.to_string())? = Some((record.id, record.step));
        Ok(())
    }

    async fn load(&self) -> Result<Option<Value>, String> {
        let latest = self.store.latest(&self.thread, &self.ns).await.map_err(|e| e.to_string())?;
        Ok(latest.and_then(|c| c.state.get("run").cloned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn the_latest_saved_value_is_loaded_back_and_slots_are_apart() {
        let store: Arc<dyn Checkpointer> = Arc::new(crate::MemoryCheckpointer::new());
        let a = StoreSlot::standalone(store.clone(), "r1", "rlm");
        assert_eq!(a.load().await.unwrap(), None);
        a.save(&json!({"iteration": 1})).await.unwrap();
        a.save(&json!({"iteration": 2})).await.unwrap();
        assert_eq!(a.load().await.unwrap(), Some(json!({"iteration": 2})));
        let latest = store.latest("r1", "rlm").await.unwrap().unwrap();
        assert_eq!(latest.step, 1, "the second save's parent is the first");
        assert!(latest.parent.is_some());
        let resumed = StoreSlot::standalone(store.clone(), "r1", "rlm");
        resumed.save(&json!({"iteration": 3})).await.unwrap();
        assert_eq!(store.latest("r1", "rlm").await.unwrap().unwrap().step, 2, "a new slot continues the chain");
        assert_eq!(store.list("r1", "rlm").await.unwrap().len(), 1, "only the latest checkpoint is kept");
        assert_eq!(store.thread("r1").await.unwrap().unwrap().graph, "rlm");
        assert_eq!(StoreSlot::in_thread(store.clone(), "r1", "n:1#run").load().await.unwrap(), None);
    }
}
