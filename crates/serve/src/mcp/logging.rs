//! MCP logging: the level a client sets with `logging/setLevel`, and the events of a run it
//! follows sent to it as `notifications/message` at their level — faults as `error`, failed tool
//! calls and retries as `warning`, permission asks and denials as `notice`, the run's steps as
//! `info`, streamed text and usage as `debug`. Nothing is sent before the client sets a level.
// MCP marks logging deprecated (SEP-2577) for its next protocol version; the versions clients
// speak today have it.
#![allow(deprecated)]

use std::sync::Mutex;

use recursive_core::{AgentEvent, Decision, EventKind};
use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

/// The level a session logs at (`None` until the client sets one).
#[derive(Debug, Default)]
pub struct LogLevel(Mutex<Option<LoggingLevel>>);

impl LogLevel {
    /// Sets the level.
    pub fn set(&self, level: LoggingLevel) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(level);
    }

    /// Whether the client set a level (nothing is sent before).
    pub fn is_set(&self) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Whether a message at `level` is sent.
    pub fn allows(&self, level: LoggingLevel) -> bool {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).is_some_and(|set| rank(level) >= rank(set))
    }
}

/// A level's severity, `debug` lowest.
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

/// The level an event of a run tree is logged at.
pub fn level_of(event: &AgentEvent) -> LoggingLevel {
    match &event.kind {
        EventKind::Error { .. } => LoggingLevel::Error,
        EventKind::RunFinished { error: Some(_), .. } => LoggingLevel::Error,
        EventKind::RunFinished { finish_reason, .. } if !finish_reason.is_success() => LoggingLevel::Warning,
        EventKind::ToolResult { is_error: true, .. } | EventKind::Retry { .. } => LoggingLevel::Warning,
        EventKind::Ask { .. } | EventKind::Permission { decision: Decision::Deny, .. } => LoggingLevel::Notice,
        EventKind::PartialText { .. }
        | EventKind::PartialReasoning { .. }
        | EventKind::Usage { .. }
        | EventKind::Extension(_) => LoggingLevel::Debug,
        _ => LoggingLevel::Info,
    }
}

/// The log message of one recorded event of run `run` (its JSON as recorded), when the
/// session's level lets it through.
pub fn message(level: &LogLevel, run: &str, recorded: &str) -> Option<LoggingMessageNotificationParam> {
    if !level.is_set() {
        return None;
    }
    let at = match serde_json::from_str::<AgentEvent>(recorded) {
        Ok(event) => level_of(&event),
        // The server's own notes of a run (not of its tree) are routine.
        Err(_) => LoggingLevel::Info,
    };
    if !level.allows(at) {
        return None;
    }
    let mut data = crate::runs::parse_event(recorded);
    if let Value::Object(fields) = &mut data {
        fields.insert("run".into(), Value::String(run.to_string()));
    }
    Some(LoggingMessageNotificationParam::new(at, data).with_logger("recursive"))
}

/// Sends `message` to the client (a client that has gone is not an error of the run).
pub async fn send(peer: &Peer<RoleServer>, message: LoggingMessageNotificationParam) {
    let _ = peer.notify_logging_message(message).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(kind: Value) -> String {
        let mut event = serde_json::json!({
            "timestamp": "2026-01-01T00:00:00Z", "run_id": "r", "root_run_id": "r", "depth": 0,
            "run_name": "main", "step": 1
        });
        event.as_object_mut().unwrap().extend(kind.as_object().unwrap().clone());
        event.to_string()
    }

    #[test]
    fn nothing_is_logged_before_the_client_sets_a_level() {
        let level = LogLevel::default();
        let error = recorded(serde_json::json!({"type": "error", "message": "boom"}));
        assert!(message(&level, "run_1", &error).is_none());
    }

    #[test]
    fn events_are_logged_at_their_level_and_filtered_by_the_level_set() {
        let level = LogLevel::default();
        level.set(LoggingLevel::Notice);
        let delta = recorded(serde_json::json!({"type": "partial_text", "delta": "he"}));
        let call =
            recorded(serde_json::json!({"type": "tool_call", "call": {"id": "c", "name": "t", "arguments": {}}}));
        let error = recorded(serde_json::json!({"type": "error", "message": "boom"}));
        assert!(message(&level, "run_1", &delta).is_none(), "debug is below notice");
        assert!(message(&level, "run_1", &call).is_none(), "info is below notice");
        let sent = message(&level, "run_1", &error).expect("an error passes notice");
        assert_eq!(sent.level, LoggingLevel::Error);
        assert_eq!(sent.data["run"], "run_1");
        assert_eq!(sent.data["message"], "boom");

        level.set(LoggingLevel::Debug);
        assert_eq!(message(&level, "run_1", &delta).unwrap().level, LoggingLevel::Debug);
        assert_eq!(message(&level, "run_1", &call).unwrap().level, LoggingLevel::Info);
    }
}
