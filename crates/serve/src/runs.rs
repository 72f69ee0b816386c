//! Runs held by the server: what was asked, its status, every event of its run tree (kept in
//! order with a sequence number, so an event stream can resume after `Last-Event-ID`), its
//! result, and how to cancel it. The work itself is done by a [`Runner`] the embedding program
//! supplies (the CLI wires providers, tools and permissions from its config).

use std::collections::{BTreeMap, HashMap};
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

/// One run held by the server.
pub struct RunRecord {
    /// The run's id.
    pub id: String,
    /// The kind of run.
    pub kind: RunKind,
    /// When it was created (Unix seconds).
    pub created_at: u64,
    /// The start of its input.
    pub title: String,
    state: Mutex<State>,
    changed: watch::Sender<u64>,
    /// Cancels the run.
    pub cancel: CancellationToken,
}

struct State {
    status: RunStatus,
    events: Vec<Value>,
    result: Option<RunOutput>,
}

impl RunRecord {
    fn new(kind: RunKind, title: String) -> Self {
        RunRecord {
            id: format!("run_{}", uuid::Uuid::new_v4().simple()),
            kind,
            created_at: unix_now(),
            title,
            state: Mutex::new(State { status: RunStatus::Queued, events: Vec::new(), result: None }),
            changed: watch::Sender::new(0),
            cancel: CancellationToken::new(),
        }
    }

    /// The run as the API shows it.
    pub fn view(&self) -> RunView {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        RunView {
            id: self.id.clone(),
            kind: self.kind,
            status: state.status,
            events: state.events.len() as u64,
            result: state.result.clone(),
            created_at: self.created_at,
            title: self.title.clone(),
        }
    }

    /// Events from index `from` on, and whether the run has finished.
    pub fn events_from(&self, from: usize) -> (Vec<(usize, Value)>, bool) {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let events = state.events.iter().enumerate().skip(from).map(|(i, e)| (i, e.clone())).collect();
        (events, state.status == RunStatus::Finished)
    }

    /// A receiver that wakes on every change after this call (an event, a status): take it
    /// before reading, so nothing is missed in between.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The result, once finished.
    pub fn result(&self) -> Option<RunOutput> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).result.clone()
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
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
}

/// The sink that records a run's events.
pub(crate) struct RecordSink(pub Arc<RunRecord>);

impl EventSink for RecordSink {
    fn emit(&self, event: &AgentEvent) {
        let json = serde_json::to_value(event)
            .unwrap_or_else(|e| serde_json::json!({"type": "unserializable", "error": e.to_string()}));
        self.0.update(|s| s.events.push(json));
    }
}

/// The current time in Unix seconds.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
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

/// Every run of this server, by id.
#[derive(Default)]
pub struct RunStore {
    runs: Mutex<HashMap<String, Arc<RunRecord>>>,
    order: Mutex<Vec<String>>,
}

impl RunStore {
    /// Adds a new, queued run.
    pub fn create(&self, kind: RunKind, title: String) -> Arc<RunRecord> {
        let record = Arc::new(RunRecord::new(kind, title));
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).insert(record.id.clone(), record.clone());
        self.order.lock().unwrap_or_else(|e| e.into_inner()).push(record.id.clone());
        record
    }

    /// A page of runs, newest first, and whether more follow.
    pub fn list(&self, filter: &RunFilter) -> (Vec<RunView>, bool) {
        let limit = filter.limit.unwrap_or(PAGE.0).clamp(1, PAGE.1);
        let order = self.order.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let start = match &filter.before {
            Some(id) => order.iter().position(|o| o == id).unwrap_or(0),
            None => order.len(),
        };
        let mut page = Vec::new();
        for id in order[..start].iter().rev() {
            let Some(view) = self.get(id).map(|r| r.view()) else { continue };
            if filter.status.is_some_and(|s| s != view.status) || filter.kind.is_some_and(|k| k != view.kind) {
                continue;
            }
            if page.len() == limit {
                return (page, true);
            }
            page.push(view);
        }
        (page, false)
    }

    /// Forgets a finished run; `Err` when it is still running (cancel it first).
    pub fn delete(&self, id: &str) -> Result<bool, RunStatus> {
        let mut runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        match runs.get(id).map(|r| r.view().status) {
            None => Ok(false),
            Some(status) if status != RunStatus::Finished => Err(status),
            Some(_) => {
                runs.remove(id);
                self.order.lock().unwrap_or_else(|e| e.into_inner()).retain(|o| o != id);
                Ok(true)
            }
        }
    }

    /// A run by id.
    pub fn get(&self, id: &str) -> Option<Arc<RunRecord>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }

    /// Every run not yet finished.
    pub fn unfinished(&self) -> Vec<Arc<RunRecord>> {
        let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.values().filter(|r| r.view().status != RunStatus::Finished).cloned().collect()
    }
}
