//! Runs held by the server: what was asked, its status, every event of its run tree (kept in
//! order with a sequence number, so an event stream can resume after `Last-Event-ID`), its
//! result, and how to cancel it. The work itself is done by a [`Runner`] the embedding program
//! supplies (the CLI wires providers, tools and permissions from its config).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use recursive_core::{
    AgentEvent, ChatOptions, EventSink, FinishReason, Message, RunScope, RunnableKind, ToolCall, ToolSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use utoipa::ToSchema;

/// What kind of run to start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// The agent loop with the server's tools.
    Run,
    /// A recursive language model over `inputs`.
    Rlm,
    /// Recursive goal pursuit.
    Goal,
    /// A graph the server offers (named in `agent` when it offers several).
    Graph,
}

impl RunKind {
    /// Lowercase name.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunKind::Run => "run",
            RunKind::Rlm => "rlm",
            RunKind::Goal => "goal",
            RunKind::Graph => "graph",
        }
    }
}

/// A request to start a run.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunRequest {
    /// The kind of run.
    pub kind: RunKind,
    /// The goal or question.
    pub input: String,
    /// For `rlm` (and `goal`): named inputs, as text.
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
    /// A runnable the server offers by name (a named agent for `run`, any kind's for its
    /// kind) instead of the kind's default one.
    #[serde(default, alias = "runnable", skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// Earlier messages of a conversation (`run` only), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub history: Vec<Message>,
    /// Tools the client runs itself (`run` only): offered to the model beside the server's; a
    /// call to one ends the run (`client_tool_calls`) with the calls in `tool_calls`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub tools: Vec<ToolSpec>,
    /// Model settings over the server's (`run` only): `temperature`, `max_tokens`, `stop`,
    /// `reasoning_effort`, `tool_choice`, `response_format` (the answer is then checked).
    #[serde(default, skip_serializing_if = "is_default")]
    #[schema(value_type = Object)]
    pub options: ChatOptions,
}

impl RunRequest {
    /// A request of `kind` with just its input.
    pub fn new(kind: RunKind, input: impl Into<String>) -> Self {
        RunRequest {
            kind,
            input: input.into(),
            inputs: BTreeMap::new(),
            agent: None,
            history: Vec::new(),
            tools: Vec::new(),
            options: ChatOptions::default(),
        }
    }

    /// Why what it runs (`kind`, `None` when unknown) cannot honour the client's tools and model
    /// settings: only agents take them; anything else refuses them rather than drop them.
    pub fn refused_asks(&self, kind: Option<RunnableKind>) -> Option<String> {
        if (self.tools.is_empty() && is_default(&self.options)) || kind == Some(RunnableKind::Agent) {
            return None;
        }
        let what = kind.map_or_else(|| "not an agent".to_string(), |k| format!("a {k}"));
        Some(format!(
            "client tools, sampling settings and structured output are served by agent models; this one is {what}"
        ))
    }
}

fn is_default(options: &ChatOptions) -> bool {
    *options == ChatOptions::default()
}

/// How a run ended, as the runner reports it (also the structured content of an MCP tool's
/// result, whose `outputSchema` is this type's JSON Schema).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema, schemars::JsonSchema)]
pub struct RunOutput {
    /// Whether the run did what was asked.
    pub ok: bool,
    /// How it finished: the run's finish reason (`no_more_tool_calls`, `cancelled`, `budget_exceeded`…),
    /// or `error` after a fault.
    #[serde(with = "recursive_core::run::finish_name")]
    #[schema(value_type = String)]
    #[schemars(with = "String")]
    pub outcome: FinishReason,
    /// The answer as text.
    pub text: String,
    /// The structured result (the RLM's output, the goal's result); `null` when there is none
    /// (an agent run answers with `text`).
    pub output: Value,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Input tokens spent by the whole tree.
    pub input_tokens: u64,
    /// Output tokens spent by the whole tree.
    pub output_tokens: u64,
    /// Cost in USD, when the models' prices are known.
    pub cost_usd: Option<f64>,
    /// The client's tool calls the run waits on (outcome `client_tool_calls`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    #[schemars(with = "Vec<Value>")]
    pub tool_calls: Vec<ToolCall>,
    /// The conversation so far, when it waits on client tool calls (kept to continue it).
    #[serde(skip)]
    #[schema(ignore)]
    #[schemars(skip)]
    pub messages: Vec<Message>,
}

impl RunOutput {
    /// A failure before or outside the run.
    pub fn failed(error: impl Into<String>) -> Self {
        RunOutput {
            ok: false,
            outcome: FinishReason::Fault,
            text: String::new(),
            output: Value::Null,
            error: Some(error.into()),
            input_tokens: 0,
            output_tokens: 0,
            cost_usd: None,
            tool_calls: Vec::new(),
            messages: Vec::new(),
        }
    }
}

/// Does the work of a run.
#[async_trait]
pub trait Runner: Send + Sync {
    /// Runs `request` in `scope` (its events go to the run's record; its cancel token is the
    /// run's) and reports how it ended.
    async fn run(&self, request: RunRequest, scope: RunScope) -> RunOutput;

    /// Named agents this runner offers besides the default one (each is also a model of the
    /// OpenAI-compatible endpoint).
    fn agents(&self) -> Vec<String> {
        self.offered().into_iter().map(|spec| spec.name).collect()
    }

    /// The kind of runnable `request` would run (`None` when unknown): a client's tools and model
    /// settings are honoured only by agents.
    fn kind_of(&self, _request: &RunRequest) -> Option<RunnableKind> {
        None
    }

    /// Why the client's tools of `request` cannot be offered beside the runnable's own (a tool
    /// named like one of them), when known before the run.
    fn tool_clash(&self, _request: &RunRequest) -> Option<String> {
        None
    }

    /// The named runnables as tool specs (name, description, input schema), for the MCP
    /// server's tool list.
    fn offered(&self) -> Vec<recursive_core::ToolSpec> {
        Vec::new()
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    /// Waiting for a free slot.
    Queued,
    /// Running.
    Running,
    /// Ended (see the result's outcome).
    Finished,
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    /// The run's id.
    pub id: String,
    /// The kind of run.
    pub kind: RunKind,
    /// Where it is.
    pub status: RunStatus,
    /// Events recorded so far.
    pub events: u64,
    /// How it ended, once it has.
    pub result: Option<RunOutput>,
    /// When it was created (Unix seconds).
    #[serde(default)]
    pub created_at: u64,
    /// The start of its input (one line, at most [`TITLE_CHARS`] characters).
    #[serde(default)]
    pub title: String,
}

impl RunView {
    /// A run just accepted, not started.
    pub fn queued(id: String, kind: RunKind, created_ms: i64, title: String) -> Self {
        RunView {
            id,
            kind,
            status: RunStatus::Queued,
            events: 0,
            result: None,
            created_at: u64::try_from(created_ms / 1000).unwrap_or(0),
            title,
        }
    }
}

/// The longest run title.
pub const TITLE_CHARS: usize = 120;

/// A run's title: the first line of its input, cut to [`TITLE_CHARS`].
pub fn title_of(input: &str) -> String {
    let line = input.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().trim();
    match line.char_indices().nth(TITLE_CHARS) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

/// One run held by the server while it is in flight (and by whoever still reads it): its
/// events are kept once, serialized, and shared by every reader.
pub struct RunRecord {
    /// The run's id.
    pub id: String,
    /// The kind of run.
    pub kind: RunKind,
    /// When it was created (Unix milliseconds).
    pub created_ms: i64,
    /// The start of its input.
    pub title: String,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// Cancels the run.
    pub cancel: CancellationToken,
    /// Cancelled by the server stopping (not by a client).
    stopped: std::sync::atomic::AtomicBool,
}

struct State {
    status: RunStatus,
    /// The index of `events[0]`: a run taken up again by another worker keeps the earlier
    /// attempts' events in the archive and numbers its own after them.
    base: usize,
    events: Vec<Arc<str>>,
    result: Option<RunOutput>,
}

/// The most events one read returns (a reader that stalls holds at most this many).
pub const EVENT_PAGE: usize = 256;

/// A new run's id: time-ordered (UUID v7, ordered by creation within the process), so runs made
/// in one millisecond still list and are pruned newest first, the id breaking the tie.
pub(crate) fn new_run_id() -> String {
    format!("run_{}", uuid::Uuid::now_v7().simple())
}

impl RunRecord {
    fn new(kind: RunKind, title: String) -> Self {
        let (id, now) = (new_run_id(), unix_ms());
        Self::with_id(RunView::queued(id, kind, now, title), now, 0, CancellationToken::new())
    }

    fn with_id(view: RunView, created_ms: i64, base: usize, cancel: CancellationToken) -> Self {
        RunRecord {
            created_ms,
            id: view.id,
            kind: view.kind,
            title: view.title,
            state: Mutex::new(State { status: RunStatus::Queued, base, events: Vec::new(), result: None }),
            changed: watch::Sender::new(0),
            cancel,
            stopped: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Cancels the run because the server stops — unless a client cancelled it already, which
    /// stays the reason (a durable run the server stops is left for the next server; one its
    /// client cancelled is not).
    pub(crate) fn stop(&self) {
        if !self.cancel.is_cancelled() {
            self.stopped.store(true, std::sync::atomic::Ordering::SeqCst);
            self.cancel.cancel();
        }
    }

    /// Whether the server stopping cancelled it ([`RunRecord::stop`]).
    pub(crate) fn stopped(&self) -> bool {
        self.stopped.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The record of a run accepted elsewhere (a queued run a worker takes up): the same id,
    /// kind and title as `view`, created at `created_ms`, its events numbered
    /// from `base` (after the events kept of earlier attempts), cancelled by `cancel`.
    pub fn resumed(view: RunView, created_ms: i64, base: usize, cancel: CancellationToken) -> Arc<Self> {
        Arc::new(Self::with_id(view, created_ms, base, cancel))
    }

    /// Records an event of the server's own (not of the run tree), as its JSON.
    pub(crate) fn note(&self, event: &Value) {
        let json: Arc<str> = Arc::from(event.to_string());
        self.update(|s| s.events.push(json));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The run as the API shows it.
    pub fn view(&self) -> RunView {
        let state = self.lock();
        RunView {
            id: self.id.clone(),
            kind: self.kind,
            status: state.status,
            events: (state.base + state.events.len()) as u64,
            result: state.result.clone(),
            created_at: u64::try_from(self.created_ms / 1000).unwrap_or(0),
            title: self.title.clone(),
        }
    }

    /// At most [`EVENT_PAGE`] events from index `from` on (each the event's JSON), and whether
    /// the run has finished.
    /// (Events before the record's first, kept by earlier attempts, are in the archive.)
    pub fn events_from(&self, from: usize) -> (Vec<(usize, Arc<str>)>, bool) {
        let state = self.lock();
        let base = state.base;
        let skip = from.saturating_sub(base);
        let events =
            state.events.iter().enumerate().skip(skip).take(EVENT_PAGE).map(|(i, e)| (base + i, e.clone())).collect();
        // A run left for the next server (see `leave`) has its say here too.
        (events, state.status == RunStatus::Finished || state.result.is_some())
    }

    /// Whether this run asked the permission ask `ask` (an `ask` event of its tree names it).
    pub(crate) fn asked(&self, ask: &str) -> bool {
        let state = self.lock();
        state.events.iter().rev().filter(|e| e.contains(ask)).any(|e| {
            let event = parse_event(e);
            event["type"] == "ask" && event["ask"] == ask
        })
    }

    /// The index of the record's first event (0 unless earlier attempts kept events).
    pub(crate) fn base(&self) -> usize {
        self.lock().base
    }

    /// The events from index `from` on, all of them (for the archive).
    pub(crate) fn events_since(&self, from: usize) -> Vec<Arc<str>> {
        let state = self.lock();
        state.events.get(from.saturating_sub(state.base)..).map(<[Arc<str>]>::to_vec).unwrap_or_default()
    }

    /// A receiver that wakes on every change after this call (an event, a status): take it
    /// before reading, so nothing is missed in between.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The result, once finished.
    pub fn result(&self) -> Option<RunOutput> {
        self.lock().result.clone()
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.send_modify(|n| *n += 1);
    }

    pub(crate) fn set_running(&self) {
        self.update(|s| s.status = RunStatus::Running);
    }

    pub(crate) fn finish(&self, output: RunOutput) {
        self.update(|s| {
            s.status = RunStatus::Finished;
            s.result = Some(output);
        });
    }

    /// Leaves the run unfinished (for a server started later to resume: the store keeps it
    /// running) while those waiting on it or following its events here get `output` (their
    /// stream ends with it).
    pub(crate) fn leave(&self, output: RunOutput) {
        self.update(|s| s.result = Some(output));
    }
}

/// An event's JSON as a value (an unreadable one as `null`).
pub fn parse_event(event: &str) -> Value {
    serde_json::from_str(event).unwrap_or(Value::Null)
}

/// The sink that records a run's events.
pub(crate) struct RecordSink(pub Arc<RunRecord>);

impl EventSink for RecordSink {
    fn emit(&self, event: &AgentEvent) {
        let json = serde_json::to_string(event)
            .unwrap_or_else(|e| serde_json::json!({"type": "unserializable", "error": e.to_string()}).to_string());
        let json: Arc<str> = Arc::from(json);
        self.0.update(|s| s.events.push(json));
    }
}

/// The current time in Unix milliseconds.
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Which runs a listing shows: newest first, `limit` of them, those created before the run
/// `before` (the last id of the previous page).
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
pub struct RunFilter {
    /// Only runs with this status.
    pub status: Option<RunStatus>,
    /// Only runs of this kind.
    pub kind: Option<RunKind>,
    /// At most this many (default 50, at most 500).
    pub limit: Option<usize>,
    /// Only runs created before this one (paging).
    pub before: Option<String>,
}

/// The default and largest page of a listing.
pub const PAGE: (usize, usize) = (50, 500);

impl RunRecord {
    /// A new, queued run.
    pub(crate) fn create(kind: RunKind, title: String) -> Arc<Self> {
        Arc::new(RunRecord::new(kind, title))
    }
}
