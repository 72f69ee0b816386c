//! Where a graph thread stands, read from its latest checkpoint and that checkpoint's pending
//! writes: the one rule every view of a thread uses (`recursive graph threads`, the threads API
//! of `serve`, and through it the LangGraph API, which adds only whether a run is in flight).

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpoint, Checkpointer, PendingWrite, StoreError, Write};

/// Where a thread stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// No checkpoint yet: the thread never ran.
    New,
    /// Not finished and waiting for nobody: resuming it runs its next step.
    Pending,
    /// Stopped for a person: a pause before or after named nodes, or a node asking for a value.
    Interrupted,
    /// Its run finished (no node runs next); a new input starts another.
    Done,
}

impl ThreadStatus {
    /// The status of a thread whose latest checkpoint is `latest`, `writes` being that
    /// checkpoint's pending writes. A finished run is done whatever else it holds (the engine
    /// runs nothing from it); otherwise a pause or a node's question interrupts it.
    pub fn of(latest: Option<&Checkpoint>, writes: &[PendingWrite]) -> Self {
        let Some(checkpoint) = latest else { return Self::New };
        if checkpoint.is_done() {
            return Self::Done;
        }
        let asked = writes.iter().any(|w| matches!(w.write, Write::Interrupt { .. }));
        if checkpoint.pause.is_some() || asked { Self::Interrupted } else { Self::Pending }
    }

    /// Reads the status of `thread` (its top graph) from `store`, with the latest checkpoint
    /// it was read from and that checkpoint's pending writes.
    pub async fn read(
        store: &dyn Checkpointer,
        thread: &str,
    ) -> Result<(Self, Option<Checkpoint>, Vec<PendingWrite>), StoreError> {
        let latest = store.latest(thread, "").await?;
        let writes = match &latest {
            Some(checkpoint) => store.writes(thread, &checkpoint.id).await?,
            None => Vec::new(),
        };
        Ok((Self::of(latest.as_ref(), &writes), latest, writes))
    }

    /// Its name: `new`, `pending`, `interrupted` or `done`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Pending => "pending",
            Self::Interrupted => "interrupted",
            Self::Done => "done",
        }
    }
}

impl std::fmt::Display for ThreadStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;
    use crate::checkpoint::{Pause, Source, When};

    fn checkpoint(next: &[&str], pause: Option<Pause>) -> Checkpoint {
        Checkpoint {
            id: Checkpoint::new_id(),
            thread: "t".into(),
            ns: String::new(),
            parent: None,
            step: 2,
            state: serde_json::Map::new(),
            next: next.iter().map(|n| n.to_string()).collect(),
            visits: BTreeMap::new(),
            base_step: 0,
            pause,
            source: Source::Step,
            created_at: chrono::Utc::now(),
        }
    }

    fn write(write: Write) -> PendingWrite {
        PendingWrite { node: "ask".into(), write, asked_at: None }
    }

    fn asked() -> PendingWrite {
        write(Write::Interrupt { payload: json!("which one?") })
    }

    fn paused() -> Option<Pause> {
        Some(Pause { when: When::Before, nodes: vec!["review".into()] })
    }

    #[test]
    fn a_thread_without_a_checkpoint_is_new() {
        assert_eq!(ThreadStatus::of(None, &[]), ThreadStatus::New);
    }

    #[test]
    fn a_thread_with_nodes_to_run_and_nobody_asked_is_pending() {
        let finished_node = write(Write::Update { update: serde_json::Map::new() });
        assert_eq!(ThreadStatus::of(Some(&checkpoint(&["work"], None)), &[finished_node]), ThreadStatus::Pending);
    }

    #[test]
    fn a_pause_or_a_node_asking_interrupts_a_thread() {
        assert_eq!(ThreadStatus::of(Some(&checkpoint(&["review"], paused())), &[]), ThreadStatus::Interrupted);
        assert_eq!(ThreadStatus::of(Some(&checkpoint(&["ask"], None)), &[asked()]), ThreadStatus::Interrupted);
    }

    #[test]
    fn a_finished_run_is_done_whatever_else_its_checkpoint_holds() {
        assert_eq!(ThreadStatus::of(Some(&checkpoint(&[], None)), &[]), ThreadStatus::Done);
        assert_eq!(ThreadStatus::of(Some(&checkpoint(&[], paused())), &[asked()]), ThreadStatus::Done);
    }

    #[test]
    fn the_status_names_are_the_threads_apis() {
        let names = [ThreadStatus::New, ThreadStatus::Pending, ThreadStatus::Interrupted, ThreadStatus::Done]
            .map(|s| (s.as_str(), serde_json::to_value(s).unwrap()));
        for (name, serialized) in names {
            assert_eq!(serialized, json!(name));
        }
        assert_eq!(ThreadStatus::Interrupted.to_string(), "interrupted");
    }

    #[tokio::test]
    async fn reading_a_thread_sees_the_question_its_latest_step_left() {
        let store = crate::MemoryCheckpointer::default();
        assert_eq!(ThreadStatus::read(&store, "t").await.unwrap().0, ThreadStatus::New);
        let at = checkpoint(&["ask"], None);
        store.put(&at).await.unwrap();
        assert_eq!(ThreadStatus::read(&store, "t").await.unwrap().0, ThreadStatus::Pending);
        store.put_write("t", &at.id, &asked()).await.unwrap();
        let (status, latest, writes) = ThreadStatus::read(&store, "t").await.unwrap();
        assert_eq!((status, latest.map(|c| c.id), writes.len()), (ThreadStatus::Interrupted, Some(at.id), 1));
    }
}
