//! The execution log of goal pursuit: every event (started, assessed, decomposed, executed,
//! achieved, synthesized, constrained, cycle_detected...) with its goal, depth, parent and
//! data, kept in memory and appended to a JSONL file as it happens (one flushed line per
//! event), and [`trace`] to pull out a goal with all its descendants.

use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use recursive_core::event::{SpanAttr, SpanOn, SpanOp};
use recursive_core::text::one_line;
use recursive_core::{ExtensionEvent, JsonlFile, RunnableKind, StoredRecords, read_jsonl};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::outcome::GoalStatus;

/// What happened to a goal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GoalEventKind {
    /// Pursuit of the goal began.
    Started,
    /// The model decided whether it is directly executable.
    Assessed,
    /// It was split into sub-goals.
    Decomposed,
    /// Its action ran (data says whether it succeeded).
    Executed,
    /// The achieved check judged it achieved.
    Achieved,
    /// The achieved check judged it not yet achieved (data says what is missing).
    Checked,
    /// Its sub-results were merged into its result.
    Synthesized,
    /// A constraint ended it.
    Constrained,
    /// It repeats a goal on its stack.
    CycleDetected,
    /// A fault or an unusable reply ended it outside its action.
    Failed,
    /// It was not pursued because its parent was already achieved.
    Skipped,
    /// A resumed pursuit restored it as an earlier attempt finished it (no model call).
    Resumed,
    /// The same goal (or a near duplicate) was already achieved in this pursuit: its result
    /// was reused (no model call).
    Reused,
}

impl GoalEventKind {
    /// Snake-case name, as logged (the run-tree event is `goal_<name>`).
    pub fn as_str(&self) -> &'static str {
        match self {
            GoalEventKind::Started => "started",
            GoalEventKind::Assessed => "assessed",
            GoalEventKind::Decomposed => "decomposed",
            GoalEventKind::Executed => "executed",
            GoalEventKind::Achieved => "achieved",
            GoalEventKind::Checked => "checked",
            GoalEventKind::Synthesized => "synthesized",
            GoalEventKind::Constrained => "constrained",
            GoalEventKind::CycleDetected => "cycle_detected",
            GoalEventKind::Failed => "failed",
            GoalEventKind::Skipped => "skipped",
            GoalEventKind::Resumed => "resumed",
            GoalEventKind::Reused => "reused",
        }
    }
}

/// One entry of the execution log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalEvent {
    /// When it happened.
    pub timestamp: DateTime<Utc>,
    /// What happened.
    pub event: GoalEventKind,
    /// The goal's hierarchical id (`1.2.1`).
    pub goal_id: String,
    /// The goal.
    pub goal: String,
    /// Its depth.
    pub depth: u32,
    /// The parent goal's id.
    #[serde(default)]
    pub parent_goal_id: Option<String>,
    /// The parent goal.
    #[serde(default)]
    pub parent_goal: Option<String>,
    /// The goal's status when this event ends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<GoalStatus>,
    /// The run-tree node of the goal.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Event data (assessment, plan, result...).
    #[serde(default)]
    pub data: Value,
}

/// A goal event as it travels in the run tree's event stream: the log entry without the
/// fields the run tree already carries (time, run id, run depth).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum GoalRunEvent {
    /// Something happened to a goal.
    Goal {
        /// What happened.
        event: GoalEventKind,
        /// The goal's hierarchical id.
        goal_id: String,
        /// The goal.
        goal: String,
        /// Its depth in the goal tree.
        goal_depth: u32,
        /// The parent goal's id.
        #[serde(default)]
        parent_goal_id: Option<String>,
        /// The goal's status when this event ends it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<GoalStatus>,
        /// Event data.
        #[serde(default)]
        data: Value,
    },
}

impl From<&GoalEvent> for GoalRunEvent {
    fn from(e: &GoalEvent) -> Self {
        GoalRunEvent::Goal {
            event: e.event,
            goal_id: e.goal_id.clone(),
            goal: e.goal.clone(),
            goal_depth: e.depth,
            parent_goal_id: e.parent_goal_id.clone(),
            status: e.status,
            data: e.data.clone(),
        }
    }
}

impl ExtensionEvent for GoalRunEvent {
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The live goal tree line: `[status] goal`, or `[event] goal` while it runs.
    fn render(&self) -> Option<String> {
        let GoalRunEvent::Goal { event, goal, status, .. } = self;
        let label = match (status, event) {
            (Some(s), _) => s.as_str().to_string(),
            (None, GoalEventKind::Checked) => "not yet achieved".to_string(),
            (None, e) => e.as_str().to_string(),
        };
        Some(format!("[{label}] {}", one_line(goal, 100)))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    /// A run with goal events pursues goals; each goal is a span under its parent goal's (the
    /// run's for the top goal), each event a note on it, and the status ends it (failed unless
    /// achieved or completed). Objectives and event data are content.
    fn span_ops(&self) -> Vec<SpanOp> {
        let GoalRunEvent::Goal { event, goal_id, goal, parent_goal_id, status, data, .. } = self;
        let key = format!("goal:{goal_id}");
        let data = (!data.is_null()).then(|| SpanAttr::content("recursive.data", data.to_string()));
        let mut ops = vec![
            SpanOp::Claim(RunnableKind::Goal),
            SpanOp::Open {
                key: key.clone(),
                name: format!("goal {goal_id}"),
                parent: parent_goal_id.as_ref().map(|p| format!("goal:{p}")),
                attrs: vec![
                    SpanAttr::new("recursive.goal.id", goal_id.as_str()),
                    SpanAttr::content("recursive.goal", goal.as_str()),
                ],
            },
            SpanOp::Note {
                on: SpanOn::Key(key.clone()),
                name: event.as_str().into(),
                attrs: data.into_iter().collect(),
            },
        ];
        if let Some(status) = status {
            let attrs = vec![SpanAttr::new("recursive.goal.status", status.as_str())];
            ops.push(SpanOp::Set { on: SpanOn::Key(key.clone()), attrs });
            let failed = !matches!(status.as_str(), "achieved" | "completed");
            ops.push(SpanOp::End { key, error: failed.then(|| status.to_string()) });
        }
        ops
    }
}

/// Failure reading a log back.
pub type LogReadError = recursive_core::JsonlReadError;

/// The execution log: in memory, and optionally kept in a store's slot (what a resume reads)
/// and mirrored to a JSONL file (the store's export, for people and `trace`).
#[derive(Debug, Default)]
pub struct ExecutionLog {
    file: Option<JsonlFile>,
    store: Option<Arc<dyn StoredRecords>>,
    events: Mutex<Vec<GoalEvent>>,
}

impl ExecutionLog {
    /// A log kept in memory only.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// A log that also appends to `path` (created with its parent directories; an existing
    /// file is appended to).
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self { file: Some(JsonlFile::append_to(path)?), store: None, events: Mutex::new(Vec::new()) })
    }

    /// A log kept in `store` (read back with [`crate::ResumeLog::from_records`]), each event
    /// also appended to the JSONL file `export`.
    pub fn kept(store: Arc<dyn StoredRecords>, export: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self { file: Some(JsonlFile::append_to(export)?), store: Some(store), events: Mutex::new(Vec::new()) })
    }

    /// The JSONL file, if any.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(JsonlFile::path)
    }

    /// Records an event: kept in memory, committed to the store, then appended to the file as
    /// one flushed line.
    pub fn record(&self, event: &GoalEvent) -> std::io::Result<()> {
        // The memory lock is held while writing so the store, the file and memory keep the same
        // order.
        let mut events = self.events.lock().map_err(|_| std::io::Error::other("goal log lock poisoned"))?;
        events.push(event.clone());
        if let Some(store) = &self.store {
            store.append(&serde_json::to_string(event).map_err(std::io::Error::other)?)?;
        }
        match &self.file {
            Some(file) => file.write(event),
            None => Ok(()),
        }
    }

    /// Every event so far, in order.
    pub fn events(&self) -> Vec<GoalEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }

    /// The events of every goal with exactly this text and of all their descendants.
    pub fn trace(&self, goal: &str) -> Vec<GoalEvent> {
        trace(&self.events(), goal)
    }

    /// The events of the goal with this id and of all its descendants.
    pub fn trace_id(&self, goal_id: &str) -> Vec<GoalEvent> {
        trace_id(&self.events(), goal_id)
    }

    /// Reads a JSONL log back.
    pub fn read(path: impl AsRef<Path>) -> Result<Vec<GoalEvent>, LogReadError> {
        Ok(read_jsonl(path)?.into_iter().map(|(_, e)| e).collect())
    }
}

/// The events of every goal with exactly this text and of all their descendants, in order.
pub fn trace(events: &[GoalEvent], goal: &str) -> Vec<GoalEvent> {
    let mut roots: Vec<&str> = events.iter().filter(|e| e.goal == goal).map(|e| e.goal_id.as_str()).collect();
    roots.sort_unstable();
    roots.dedup();
    events.iter().filter(|e| roots.iter().any(|r| is_within(&e.goal_id, r))).cloned().collect()
}

/// The events of the goal with this id and of all its descendants, in order.
pub fn trace_id(events: &[GoalEvent], goal_id: &str) -> Vec<GoalEvent> {
    events.iter().filter(|e| is_within(&e.goal_id, goal_id)).cloned().collect()
}

fn is_within(id: &str, root: &str) -> bool {
    id == root || id.strip_prefix(root).is_some_and(|rest| rest.starts_with('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_event(id: &str, parent: Option<&str>, status: Option<GoalStatus>, data: Value) -> GoalRunEvent {
        GoalRunEvent::Goal {
            event: GoalEventKind::Executed,
            goal_id: id.into(),
            goal: "wire the money".into(),
            goal_depth: 1,
            parent_goal_id: parent.map(Into::into),
            status,
            data,
        }
    }

    #[test]
    fn a_goal_is_a_span_under_its_parent_goal_with_its_objective_as_content() {
        let ops = run_event("1.2", Some("1"), None, Value::Null).span_ops();
        assert_eq!(ops[0], SpanOp::Claim(RunnableKind::Goal));
        let attrs =
            vec![SpanAttr::new("recursive.goal.id", "1.2"), SpanAttr::content("recursive.goal", "wire the money")];
        let open =
            SpanOp::Open { key: "goal:1.2".into(), name: "goal 1.2".into(), parent: Some("goal:1".into()), attrs };
        assert_eq!(ops[1], open);
        let note = SpanOp::Note { on: SpanOn::Key("goal:1.2".into()), name: "executed".into(), attrs: vec![] };
        assert_eq!(ops[2], note, "no data, no attribute");
        assert_eq!(ops.len(), 3, "a goal without a status stays open");
    }

    #[test]
    fn a_goals_status_ends_its_span_failed_unless_achieved_or_completed() {
        let ends = |status| run_event("1", None, Some(status), serde_json::json!({"n": 1})).span_ops();
        let done = ends(GoalStatus::Completed);
        assert!(
            matches!(&done[2], SpanOp::Note { attrs, .. } if attrs == &[SpanAttr::content("recursive.data", "{\"n\":1}")])
        );
        assert_eq!(
            done[3],
            SpanOp::Set {
                on: SpanOn::Key("goal:1".into()),
                attrs: vec![SpanAttr::new("recursive.goal.status", "completed")]
            }
        );
        assert_eq!(done[4], SpanOp::End { key: "goal:1".into(), error: None });
        assert_eq!(ends(GoalStatus::Failed)[4], SpanOp::End { key: "goal:1".into(), error: Some("failed".into()) });
    }

    fn ev(id: &str, goal: &str, kind: GoalEventKind) -> GoalEvent {
        GoalEvent {
            timestamp: Utc::now(),
            event: kind,
            goal_id: id.into(),
            goal: goal.into(),
            depth: id.matches('.').count() as u32,
            parent_goal_id: None,
            parent_goal: None,
            status: None,
            run_id: None,
            data: Value::Null,
        }
    }

    #[test]
    fn trace_takes_the_goal_and_its_descendants_only() {
        let events = vec![
            ev("1", "root", GoalEventKind::Started),
            ev("1.1", "a", GoalEventKind::Started),
            ev("1.1.1", "a1", GoalEventKind::Started),
            ev("1.10", "j", GoalEventKind::Started),
            ev("1.2", "b", GoalEventKind::Started),
            ev("1.1", "a", GoalEventKind::Synthesized),
        ];
        let ids: Vec<_> = trace(&events, "a").iter().map(|e| e.goal_id.clone()).collect();
        assert_eq!(ids, vec!["1.1", "1.1.1", "1.1"]);
        assert_eq!(trace_id(&events, "1").len(), 6);
        assert!(trace(&events, "missing").is_empty());
    }

    #[test]
    fn file_log_survives_reopen_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("logs/goals.jsonl");
        ExecutionLog::create(&path).unwrap().record(&ev("1", "root", GoalEventKind::Started)).unwrap();
        ExecutionLog::create(&path).unwrap().record(&ev("1", "root", GoalEventKind::Synthesized)).unwrap();
        let back = ExecutionLog::read(&path).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[1].event, GoalEventKind::Synthesized);
        let line = std::fs::read_to_string(&path).unwrap();
        assert!(line.lines().next().unwrap().contains(r#""event":"started""#));
    }
}
