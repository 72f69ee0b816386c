//! Durable RLM runs kept in the graph store: a run is a thread (graph `rlm`) whose checkpoints,
//! in the namespace `rlm`, each hold one [`RlmCheckpoint`] — so RLM runs live next to graph
//! threads, on SQLite or PostgreSQL alike.

use std::sync::Arc;

use async_trait::async_trait;
use recursive_rlm::{RlmCheckpoint, RlmStore};

use recursive_graph::checkpoint::{Checkpoint, Checkpointer, Source, ThreadInfo};

/// The namespace of RLM checkpoints.
pub const RLM_NS: &str = "rlm";

/// The graph store as an [`RlmStore`].
#[derive(Clone)]
pub struct RlmCheckpoints(pub Arc<dyn Checkpointer>);

#[async_trait]
impl RlmStore for RlmCheckpoints {
    async fn save(&self, key: &str, checkpoint: &RlmCheckpoint) -> Result<(), String> {
        let store = &self.0;
        if store.thread(key).await.map_err(|e| e.to_string())?.is_none() {
            let info = ThreadInfo {
                thread: key.to_string(),
                graph: "rlm".into(),
                blueprint: None,
                origin: None,
                created_at: chrono::Utc::now(),
            };
            store.put_thread(&info).await.map_err(|e| e.to_string())?;
        }
        let parent = store.latest(key, RLM_NS).await.map_err(|e| e.to_string())?.map(|c| c.id);
        let value = serde_json::to_value(checkpoint).map_err(|e| e.to_string())?;
        let mut state = recursive_graph::state::State::new();
        state.insert("rlm".into(), value);
        let record = Checkpoint {
            id: Checkpoint::new_id(),
            thread: key.to_string(),
            ns: RLM_NS.into(),
            parent,
            step: u64::from(checkpoint.iteration),
            state,
            next: if checkpoint.submitted.is_some() { Vec::new() } else { vec!["rlm".into()] },
            visits: Default::default(),
            pause: None,
            source: Source::Step,
            created_at: chrono::Utc::now(),
        };
        store.put(&record).await.map_err(|e| e.to_string())
    }

    async fn load(&self, key: &str) -> Result<Option<RlmCheckpoint>, String> {
        let Some(latest) = self.0.latest(key, RLM_NS).await.map_err(|e| e.to_string())? else { return Ok(None) };
        let value = latest.state.get("rlm").cloned().ok_or("the stored checkpoint holds no RLM state")?;
        serde_json::from_value(value).map(Some).map_err(|e| format!("the stored checkpoint is unreadable: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_latest_checkpoint_of_a_run_is_loaded_back() {
        let store = RlmCheckpoints(Arc::new(recursive_graph::MemoryCheckpointer::new()));
        assert!(store.load("r1").await.unwrap().is_none());
        let mut cp = RlmCheckpoint {
            version: recursive_rlm::durable::CHECKPOINT_VERSION,
            meta: serde_json::json!({"question": "q"}),
            question: "q".into(),
            iteration: 1,
            messages: Vec::new(),
            trajectory: Vec::new(),
            cells: Vec::new(),
            usage: Default::default(),
            cost_usd: 0.0,
            sub_calls: 0,
            submitted: None,
        };
        store.save("r1", &cp).await.unwrap();
        cp.iteration = 2;
        store.save("r1", &cp).await.unwrap();
        assert_eq!(store.load("r1").await.unwrap().unwrap().iteration, 2);
        assert!(store.load("r2").await.unwrap().is_none());
    }
}
