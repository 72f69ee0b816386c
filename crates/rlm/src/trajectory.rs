//! The trajectory file: every RLM event of a run tree (replies, code, observations, sub-calls
//! with the heads of their prompts and answers, submits, the end), one JSON line each, written
//! and flushed as it happens, so a run that is killed leaves everything up to that moment.

use std::path::Path;
use std::sync::Mutex;

use recursive_core::jsonl::JsonlFile;
use recursive_core::{AgentEvent, EventSink};
use serde_json::json;

use crate::events::RlmEvent;

/// Writes the RLM events it receives to a JSONL file; other events are ignored. A write that
/// fails is remembered ([`TrajectorySink::error`]) so the caller can report it.
pub struct TrajectorySink {
    file: JsonlFile,
    error: Mutex<Option<String>>,
}

impl TrajectorySink {
    /// Opens (creating, appending) the file.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self { file: JsonlFile::append_to(path)?, error: Mutex::new(None) })
    }

    /// The first write that failed, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }
}

impl EventSink for TrajectorySink {
    fn emit(&self, event: &AgentEvent) {
        let Some(rlm) = event.kind.extension::<RlmEvent>() else { return };
        let line = json!({
            "timestamp": event.timestamp,
            "run_id": event.ids.run_id,
            "parent_run_id": event.ids.parent_run_id,
            "depth": event.ids.depth,
            "step": event.step,
            "event": rlm,
        });
        if let Err(e) = self.file.write(&line)
            && let Ok(mut first) = self.error.lock()
        {
            first.get_or_insert_with(|| format!("writing {}: {e}", self.file.path().display()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use recursive_core::RunScope;

    #[test]
    fn a_failed_write_is_remembered() {
        let sink = TrajectorySink::create("/dev/full").unwrap();
        let scope = RunScope::detached("t");
        let event = AgentEvent {
            timestamp: chrono::Utc::now(),
            ids: scope.ids().clone(),
            step: 1,
            kind: RlmEvent::RlmExtraction { step: 1 }.into_kind(),
        };
        sink.emit(&event);
        assert!(sink.error().is_some_and(|e| e.contains("/dev/full")));
    }
}
