//! Observability: every step of every run in a tree is an [`AgentEvent`] sent to one
//! [`EventSink`]. Sinks fan out, write JSONL, print for humans, or collect in memory.
//!
//! Core's own events are the variants of [`EventKind`]. A crate above core (the RLM, goal
//! pursuit, MCP) owns its events as a typed, serde-tagged enum implementing
//! [`ExtensionEvent`]; they travel as [`EventKind::Extension`], render their own lines, and
//! are read back by type with [`Extension::get`] — nobody matches an event by a name string.

use std::any::Any;
use std::path::Path;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::jsonl::JsonlFile;
use crate::message::{ToolCall, Usage};
use crate::run::FinishReason;
use crate::text::one_line;

/// Where a run sits in the run tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunIds {
    /// This run's id.
    pub run_id: String,
    /// The run that started this one (none for the root).
    pub parent_run_id: Option<String>,
    /// The root of the tree.
    pub root_run_id: String,
    /// 0 for the root, parent + 1 for a child.
    pub depth: u32,
    /// Readable name, e.g. `researcher-d1` (`run_name` in JSON, apart from event fields
    /// called `name`).
    #[serde(rename = "run_name")]
    pub name: String,
}

/// One observable thing that happened in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentEvent {
    /// When it happened.
    pub timestamp: DateTime<Utc>,
    /// The run it happened in.
    #[serde(flatten)]
    pub ids: RunIds,
    /// The run's step (model turn) when it happened; 0 before the first turn.
    pub step: u32,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What a `Usage` event says about the model call itself (for tracing backends).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelCallInfo {
    /// The provider (`openai`, `anthropic`...).
    pub provider: String,
    /// The model asked for (the answering model is `model`).
    pub request_model: String,
    /// How long the call took, retries included.
    pub duration_ms: u64,
    /// Why generation stopped.
    pub stop_reason: String,
}

/// A permission decision taken for one tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The call may run.
    Allow,
    /// The call is refused.
    Deny,
}

/// What happened, with its data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A run began.
    RunStarted {
        /// The goal or question.
        goal: String,
    },
    /// A piece of assistant text arrived while streaming.
    PartialText {
        /// The new text.
        delta: String,
    },
    /// A piece of the model's reasoning arrived while streaming.
    PartialReasoning {
        /// The new reasoning text.
        delta: String,
    },
    /// A complete assistant text.
    AssistantText {
        /// The text.
        text: String,
    },
    /// The model asked for a tool.
    ToolCall {
        /// The call.
        call: ToolCall,
    },
    /// A tool call's result.
    ToolResult {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// What the model sees.
        output: String,
        /// Whether it is an error.
        is_error: bool,
        /// How long the tool took.
        duration_ms: u64,
    },
    /// A tool call waits for its client's permission (a served run): answer it by `ask` before
    /// `timeout_ms`, or it is denied.
    Ask {
        /// The question's id, which the answer names.
        ask: String,
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The call's arguments.
        arguments: serde_json::Value,
        /// Which rule or default asked.
        reason: String,
        /// How long the answer is awaited.
        timeout_ms: u64,
    },
    /// A permission decision for a tool call.
    Permission {
        /// The call id.
        id: String,
        /// The tool name.
        name: String,
        /// The decision.
        decision: Decision,
        /// Why (rule, user answer, default).
        reason: String,
    },
    /// Tokens used by one model call.
    Usage {
        /// The tokens.
        usage: Usage,
        /// USD cost, where known.
        cost_usd: Option<f64>,
        /// The model that answered.
        model: String,
        /// The call as made (absent in logs of older versions).
        #[serde(default, flatten, skip_serializing_if = "Option::is_none")]
        call: Option<ModelCallInfo>,
    },
    /// A model call is being retried.
    Retry {
        /// 1-based retry number.
        attempt: u32,
        /// Wait before it.
        delay_ms: u64,
        /// What went wrong.
        reason: String,
    },
    /// A fault or a problem worth reporting.
    Error {
        /// The message.
        message: String,
    },
    /// A child run of a runnable (agent, RLM, goal, graph) began.
    SubAgentStarted {
        /// The runnable's name.
        agent: String,
        /// What kind of runnable it is.
        #[serde(default)]
        kind: crate::runnable::RunnableKind,
        /// Its input.
        input: String,
        /// The child run's id.
        child_run_id: String,
    },
    /// A child run of a runnable ended.
    SubAgentCompleted {
        /// The runnable's name.
        agent: String,
        /// What kind of runnable it is.
        #[serde(default)]
        kind: crate::runnable::RunnableKind,
        /// The child run's id.
        child_run_id: String,
        /// Its finish reason.
        finish_reason: FinishReason,
        /// The fault that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Its usage including descendants.
        usage: Usage,
        /// Its cost including descendants.
        cost_usd: f64,
    },
    /// A sub-agent session continued with an earlier transcript.
    SubAgentReused {
        /// The sub-agent's name.
        agent: String,
        /// The turn number about to start (2 for the second invocation).
        turn: u32,
        /// Messages carried over.
        messages: usize,
    },
    /// The transcript was compacted to fit the context window.
    Compacted {
        /// `micro` (old tool results elided) or `summary` (old turns summarised by the model).
        method: String,
        /// Estimated tokens before.
        before_tokens: usize,
        /// Estimated tokens after.
        after_tokens: usize,
        /// Messages before.
        before_messages: usize,
        /// Messages after.
        after_messages: usize,
    },
    /// The run ended: the last event of every run, also when a fault ended it.
    RunFinished {
        /// Why it ended.
        finish_reason: FinishReason,
        /// The fault that ended it, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        /// Usage including descendants.
        usage: Usage,
        /// Cost including descendants.
        cost_usd: f64,
    },
    /// An event of a crate above core (RLM, goal pursuit, MCP...), with its own type tag.
    #[serde(untagged)]
    Extension(Extension),
}

/// An event type owned by a crate above core. Implementations are serde-tagged enums (tag
/// `type`, names that do not collide with core's) so they can be read back with
/// [`Extension::get`].
pub trait ExtensionEvent: std::fmt::Debug + Send + Sync + 'static {
    /// The event as a JSON object carrying its own `type` tag.
    fn to_json(&self) -> Value;

    /// A line for people (indentation is added by the sink), or `None` to stay quiet.
    fn render(&self) -> Option<String>;

    /// For [`Extension::get`].
    fn as_any(&self) -> &dyn Any;

    /// What this event does to the run tree's spans (telemetry draws them; the event's crate
    /// says what they mean). None by default.
    fn span_ops(&self) -> Vec<SpanOp> {
        Vec::new()
    }
}

/// One step of an extension event's effect on the spans of its run (see
/// [`ExtensionEvent::span_ops`]). Keys name spans within the event's run.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanOp {
    /// The run invokes a runnable of this kind (when its parent did not already say what it is).
    Claim(crate::runnable::RunnableKind),
    /// Opens span `key` named `name` under span `parent` (the run's own span when `None` or not
    /// open); nothing when `key` is already open.
    Open {
        /// The span's key.
        key: String,
        /// Its name.
        name: String,
        /// Its parent's key.
        parent: Option<String>,
        /// Its attributes.
        attrs: Vec<SpanAttr>,
    },
    /// Opens the run's current step under the run's span, ending the one before: the run's model
    /// calls, tool calls and notes on [`SpanOn::Current`] go under it until it ends.
    Step {
        /// The span's key.
        key: String,
        /// Its name.
        name: String,
        /// Its attributes.
        attrs: Vec<SpanAttr>,
    },
    /// Ends the run's current step, if one is open.
    EndStep,
    /// A timestamped note on a span.
    Note {
        /// Which span.
        on: SpanOn,
        /// What it is.
        name: String,
        /// Its attributes.
        attrs: Vec<SpanAttr>,
    },
    /// Sets attributes of a span.
    Set {
        /// Which span.
        on: SpanOn,
        /// The attributes.
        attrs: Vec<SpanAttr>,
    },
    /// Ends span `key`, failed with `error` when there is one.
    End {
        /// The span's key.
        key: String,
        /// Why it failed.
        error: Option<String>,
    },
}

/// The span a [`SpanOp`] acts on.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanOn {
    /// The run's own span.
    Run,
    /// The run's current step, else the run's span.
    Current,
    /// The open span of this key.
    Key(String),
}

/// A span attribute.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanAttr {
    /// Its name (`recursive.rlm.iteration`).
    pub key: String,
    /// Its value.
    pub value: SpanValue,
    /// Whether it holds the run's content (prompts, completions, code, outputs, objectives):
    /// exported only when content is asked for.
    pub content: bool,
}

impl SpanAttr {
    /// A structural attribute (names, counts, outcomes).
    pub fn new(key: &str, value: impl Into<SpanValue>) -> Self {
        Self { key: key.to_string(), value: value.into(), content: false }
    }

    /// An attribute holding the run's content.
    pub fn content(key: &str, value: impl Into<SpanValue>) -> Self {
        Self { key: key.to_string(), value: value.into(), content: true }
    }
}

/// A span attribute's value.
#[derive(Debug, Clone, PartialEq)]
pub enum SpanValue {
    /// Text.
    Str(String),
    /// A whole number.
    Int(i64),
    /// A fraction.
    Float(f64),
    /// A flag.
    Bool(bool),
    /// A list of texts.
    Strs(Vec<String>),
}

impl From<&str> for SpanValue {
    fn from(v: &str) -> Self {
        SpanValue::Str(v.to_string())
    }
}

impl From<String> for SpanValue {
    fn from(v: String) -> Self {
        SpanValue::Str(v)
    }
}

impl From<u64> for SpanValue {
    fn from(v: u64) -> Self {
        SpanValue::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<bool> for SpanValue {
    fn from(v: bool) -> Self {
        SpanValue::Bool(v)
    }
}

impl From<Vec<String>> for SpanValue {
    fn from(v: Vec<String>) -> Self {
        SpanValue::Strs(v)
    }
}

/// An extension event: live (as emitted) or recorded (read back from a JSONL log).
#[derive(Debug, Clone)]
pub enum Extension {
    /// As emitted in this process.
    Live(Arc<dyn ExtensionEvent>),
    /// Read back from a log: its JSON fields.
    Recorded(Value),
}

impl Extension {
    /// Wraps a typed event.
    pub fn new(event: impl ExtensionEvent) -> Self {
        Extension::Live(Arc::new(event))
    }

    /// The event as type `T`, if it is one (live or recorded).
    pub fn get<T: ExtensionEvent + Clone + DeserializeOwned>(&self) -> Option<T> {
        match self {
            Extension::Live(e) => e.as_any().downcast_ref::<T>().cloned(),
            Extension::Recorded(v) => serde_json::from_value(v.clone()).ok(),
        }
    }

    /// Its JSON fields.
    pub fn to_json(&self) -> Value {
        match self {
            Extension::Live(e) => e.to_json(),
            Extension::Recorded(v) => v.clone(),
        }
    }

    /// Its line for people (recorded events have none).
    pub fn render(&self) -> Option<String> {
        match self {
            Extension::Live(e) => e.render(),
            Extension::Recorded(_) => None,
        }
    }

    /// Its effect on the spans (recorded events have none until [`Extension::revived`]).
    pub fn span_ops(&self) -> Vec<SpanOp> {
        match self {
            Extension::Live(e) => e.span_ops(),
            Extension::Recorded(_) => Vec::new(),
        }
    }

    /// The event live again as type `T`, if it is one (a recorded event read back as what it
    /// was, so it renders and draws its spans).
    pub fn revived<T: ExtensionEvent + Clone + DeserializeOwned>(&self) -> Option<Extension> {
        self.get::<T>().map(Extension::new)
    }
}

impl PartialEq for Extension {
    fn eq(&self, other: &Self) -> bool {
        self.to_json() == other.to_json()
    }
}

impl Serialize for Extension {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(s)
    }
}

impl<'de> Deserialize<'de> for Extension {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        if v.get("type").and_then(Value::as_str).is_none() {
            return Err(serde::de::Error::custom("an event needs a `type`"));
        }
        Ok(Extension::Recorded(v))
    }
}

impl EventKind {
    /// The extension event of type `T`, if this is one.
    pub fn extension<T: ExtensionEvent + Clone + DeserializeOwned>(&self) -> Option<T> {
        match self {
            EventKind::Extension(e) => e.get::<T>(),
            _ => None,
        }
    }
}

/// Receives events. Implementations must be cheap and must not block for long.
pub trait EventSink: Send + Sync {
    /// Handles one event.
    fn emit(&self, event: &AgentEvent);
}

/// A sink that drops everything.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: &AgentEvent) {}
}

/// Sends every event to several sinks.
#[derive(Default, Clone)]
pub struct FanoutSink {
    sinks: Vec<Arc<dyn EventSink>>,
}

impl FanoutSink {
    /// An empty fan-out.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a sink.
    pub fn with(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.sinks.push(sink);
        self
    }

    /// Adds a sink in place.
    pub fn push(&mut self, sink: Arc<dyn EventSink>) {
        self.sinks.push(sink);
    }
}

impl EventSink for FanoutSink {
    fn emit(&self, event: &AgentEvent) {
        for s in &self.sinks {
            s.emit(event);
        }
    }
}

/// Collects events in memory (tests, library callers that inspect a run afterwards).
#[derive(Default, Clone)]
pub struct MemorySink {
    events: Arc<Mutex<Vec<AgentEvent>>>,
}

impl MemorySink {
    /// An empty collector.
    pub fn new() -> Self {
        Self::default()
    }

    /// A copy of the events so far.
    pub fn events(&self) -> Vec<AgentEvent> {
        self.events.lock().map(|e| e.clone()).unwrap_or_default()
    }
}

impl EventSink for MemorySink {
    fn emit(&self, event: &AgentEvent) {
        if let Ok(mut e) = self.events.lock() {
            e.push(event.clone());
        }
    }
}

/// Appends each event as one JSON line, flushed at once (crash-safe).
pub struct JsonlSink {
    file: JsonlFile,
    failed: std::sync::Mutex<Option<String>>,
}

impl JsonlSink {
    /// Opens (creating, appending) the file, creating parent directories.
    pub fn create(path: impl AsRef<Path>) -> std::io::Result<Self> {
        Ok(Self { file: JsonlFile::append_to(path)?, failed: std::sync::Mutex::new(None) })
    }

    /// The first write that failed, if any (the log is then incomplete).
    pub fn error(&self) -> Option<String> {
        self.failed.lock().ok().and_then(|f| f.clone())
    }
}

impl EventSink for JsonlSink {
    fn emit(&self, event: &AgentEvent) {
        if let Err(e) = self.file.write(event) {
            tracing::warn!("event log write failed: {e}");
            if let Ok(mut failed) = self.failed.lock() {
                failed.get_or_insert_with(|| format!("writing {}: {e}", self.file.path().display()));
            }
        }
    }
}

/// Prints a human-readable line per event on stderr, indented by depth. Streaming text is
/// left to the caller (the CLI prints it on stdout).
#[derive(Debug, Default, Clone, Copy)]
pub struct StderrSink {
    /// Also print assistant text (useful when stdout is not a terminal).
    pub show_text: bool,
}

impl StderrSink {
    /// Formats one event as a line, or `None` for events this sink leaves out.
    pub fn format(&self, event: &AgentEvent) -> Option<String> {
        let indent = "  ".repeat(event.ids.depth as usize);
        let who = &event.ids.name;
        let body = match &event.kind {
            EventKind::RunStarted { goal } => format!("▶ {who}: {}", clip(goal, 120)),
            EventKind::PartialText { .. } | EventKind::PartialReasoning { .. } => return None,
            EventKind::AssistantText { text } if self.show_text => format!("{who}: {}", clip(text, 400)),
            EventKind::AssistantText { .. } => return None,
            EventKind::ToolCall { call } => format!("→ {}({})", call.name, clip(&call.arguments.to_string(), 160)),
            EventKind::ToolResult { name, output, is_error, duration_ms, .. } => {
                let mark = if *is_error { "✗" } else { "✓" };
                format!("{mark} {name} [{duration_ms} ms] {}", clip(output, 160))
            }
            EventKind::Ask { name, ask, timeout_ms, .. } => {
                format!("? permission {name}: asked the client ({ask}, {} s to answer)", timeout_ms / 1000)
            }
            EventKind::Permission { name, decision, reason, .. } => {
                format!("permission {name}: {decision:?} ({reason})")
            }
            EventKind::Usage { usage, cost_usd, model, .. } => format!(
                "usage {model}: {} in / {} out{}",
                usage.input_tokens,
                usage.output_tokens,
                cost_usd.map(|c| format!(", ${c:.4}")).unwrap_or_default()
            ),
            EventKind::Retry { attempt, delay_ms, reason } => {
                format!("retry #{attempt} in {delay_ms} ms: {}", clip(reason, 160))
            }
            EventKind::Error { message } => format!("error: {message}"),
            EventKind::SubAgentStarted { agent, kind, input, .. } => {
                format!("⇒ {} {agent}: {}", child_label(*kind), clip(input, 120))
            }
            EventKind::SubAgentCompleted { agent, kind, finish_reason, .. } => {
                format!("⇐ {} {agent}: {finish_reason}", child_label(*kind))
            }
            EventKind::SubAgentReused { agent, turn, .. } => format!("↻ sub-agent {agent} turn {turn}"),
            EventKind::Compacted { method, before_tokens, after_tokens, .. } => {
                format!("⇣ compacted ({method}): ~{before_tokens} → ~{after_tokens} tokens")
            }
            EventKind::RunFinished { finish_reason, usage, cost_usd, .. } => {
                format!("■ {who}: {finish_reason} ({} tokens, ${cost_usd:.4})", usage.total())
            }
            EventKind::Extension(e) => e.render()?,
        };
        Some(format!("{indent}{body}"))
    }
}

impl EventSink for StderrSink {
    fn emit(&self, event: &AgentEvent) {
        if let Some(line) = self.format(event) {
            eprintln!("{line}");
        }
    }
}

/// How a child run is named when rendered: `sub-agent` for agents (as before), else its kind.
fn child_label(kind: crate::runnable::RunnableKind) -> &'static str {
    match kind {
        crate::runnable::RunnableKind::Agent => "sub-agent",
        other => other.as_str(),
    }
}

/// Shortens text to at most `max` characters on one line, marking the cut.
pub fn clip(text: &str, max: usize) -> String {
    one_line(text, max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> RunIds {
        RunIds { run_id: "r".into(), parent_run_id: None, root_run_id: "r".into(), depth: 0, name: "main-d0".into() }
    }

    #[test]
    fn event_serializes_flat_with_type_tag() {
        let e = AgentEvent {
            timestamp: Utc::now(),
            ids: ids(),
            step: 2,
            kind: EventKind::AssistantText { text: "hi".into() },
        };
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "assistant_text");
        assert_eq!(v["run_id"], "r");
        assert_eq!(v["step"], 2);
        let back: AgentEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn run_name_does_not_collide_with_event_fields_named_name() {
        let e = AgentEvent {
            timestamp: Utc::now(),
            ids: ids(),
            step: 1,
            kind: EventKind::ToolResult {
                id: "c".into(),
                name: "read_file".into(),
                output: "x".into(),
                is_error: false,
                duration_ms: 1,
            },
        };
        let text = serde_json::to_string(&e).unwrap();
        let back: AgentEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back, e);
        assert_eq!(text.matches("\"name\"").count(), 1, "{text}");
    }

    #[test]
    fn jsonl_sink_appends_one_line_per_event() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("e.jsonl");
        let sink = JsonlSink::create(&path).unwrap();
        for i in 0..3 {
            sink.emit(&AgentEvent {
                timestamp: Utc::now(),
                ids: ids(),
                step: i,
                kind: EventKind::Error { message: "x".into() },
            });
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn clip_marks_how_much_was_cut() {
        assert_eq!(clip("abcdef", 3), "abc… [3 more characters]");
        assert_eq!(clip("a\nb", 10), "a⏎b");
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "type", rename_all = "snake_case")]
    enum Upper {
        UpperThing { n: u32 },
    }

    impl ExtensionEvent for Upper {
        fn to_json(&self) -> Value {
            serde_json::to_value(self).unwrap_or_default()
        }
        fn render(&self) -> Option<String> {
            Some("upper".into())
        }
        fn as_any(&self) -> &dyn Any {
            self
        }
    }

    #[test]
    fn extension_event_round_trips_through_jsonl_by_type() {
        let e = AgentEvent {
            timestamp: Utc::now(),
            ids: ids(),
            step: 3,
            kind: EventKind::Extension(Extension::new(Upper::UpperThing { n: 7 })),
        };
        assert_eq!(e.kind.extension::<Upper>(), Some(Upper::UpperThing { n: 7 }));
        let text = serde_json::to_string(&e).unwrap();
        assert!(text.contains("\"type\":\"upper_thing\""), "{text}");
        let back: AgentEvent = serde_json::from_str(&text).unwrap();
        assert_eq!(back.step, 3);
        assert_eq!(back.kind.extension::<Upper>(), Some(Upper::UpperThing { n: 7 }));
        assert_eq!(back.kind, e.kind);
    }

    #[test]
    fn core_events_still_read_back_as_core_variants() {
        let text = r#"{"timestamp":"2026-01-01T00:00:00Z","run_id":"r","parent_run_id":null,"root_run_id":"r","depth":0,"run_name":"m","step":1,"type":"run_finished","finish_reason":{"kind":"cancelled"},"usage":{"input_tokens":1,"output_tokens":2},"cost_usd":0.0}"#;
        let e: AgentEvent = serde_json::from_str(text).unwrap();
        assert!(matches!(e.kind, EventKind::RunFinished { finish_reason: FinishReason::Cancelled, .. }), "{e:?}");
    }
}
