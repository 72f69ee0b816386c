//! LangGraph runs: a request (`assistant_id`, `input`, `command.resume`, `checkpoint_id`,
//! `stream_mode`) becomes a [`ThreadRunRequest`] run by the graph host as a run of the runs
//! API; its events are told in LangGraph's stream modes as they come (`metadata` first, then
//! `values`, `updates`, `messages/*` or `messages`, `events`; an interrupt as `__interrupt__`;
//! a failure as `error`; then `end`), and `wait`/`join` answer the thread's values when it ends.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Api, Optional, Refused, Shared, bad_request, conflict, field, interrupt_list, not_found, now};
use crate::runs::{RunKind, RunRecord, RunStatus, parse_event};
use crate::threads::{ThreadRunRequest, ThreadStatus};

/// A run started through this API.
#[derive(Debug, Clone)]
pub(crate) struct RunMeta {
    /// The LangGraph thread it runs on.
    pub(crate) thread: String,
    /// The graph host's thread.
    host_thread: String,
    assistant: String,
    metadata: Map<String, Value>,
    modes: Vec<Mode>,
    /// Whether a stream's reader going away cancels the run (`on_disconnect`).
    cancel_on_disconnect: bool,
    /// A run of a runnable that is not a graph: its input's messages (see [`super::agents`]).
    messages: Option<Vec<Value>>,
    created_at: String,
}

/// A stream mode this API tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Values,
    Updates,
    /// `messages`: `messages/metadata`, `messages/partial`, `messages/complete`.
    Messages,
    /// `messages-tuple`: `messages` events of `[chunk, metadata]`.
    MessagesTuple,
    Events,
    /// Nothing writes custom data in a served graph: accepted, never sent.
    Custom,
}

fn mode(name: &str) -> Result<Mode, Refused> {
    Ok(match name {
        "values" => Mode::Values,
        "updates" => Mode::Updates,
        "messages" => Mode::Messages,
        "messages-tuple" => Mode::MessagesTuple,
        "events" => Mode::Events,
        "custom" => Mode::Custom,
        other => {
            return Err(bad_request(&format!(
                "stream_mode `{other}` is not served; these are: values, updates, messages, messages-tuple, events, custom"
            )));
        }
    })
}

/// The stream modes a request asks for (`values` by default).
fn modes(body: &Map<String, Value>) -> Result<Vec<Mode>, Refused> {
    Ok(match body.get("stream_mode") {
        None | Some(Value::Null) => vec![Mode::Values],
        Some(Value::String(name)) => vec![mode(name)?],
        Some(Value::Array(names)) => names
            .iter()
            .map(|n| n.as_str().ok_or_else(|| bad_request("`stream_mode` must be names")).and_then(mode))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(bad_request("`stream_mode` must be a name or a list of names")),
    })
}

/// Refuses what a run request asks that no run here would honour (rather than ignore it).
fn refuse_unserved(body: &Map<String, Value>) -> Result<(), Refused> {
    let set = |name: &str| body.get(name).is_some_and(|v| !v.is_null() && *v != json!(false));
    for (name, why) in [
        ("webhook", "the server calls no webhooks: follow the run's stream or join it"),
        ("after_seconds", "runs start at once"),
    ] {
        if set(name) {
            return Err(bad_request(&format!("`{name}` is not supported: {why}")));
        }
    }
    Ok(())
}

/// A run request read: the graph, what the host is asked, the stream modes.
struct Asked {
    graph: String,
    request: ThreadRunRequest,
    modes: Vec<Mode>,
    metadata: Map<String, Value>,
}

fn read(api: &Api, body: &Map<String, Value>) -> Result<Asked, Refused> {
    let assistant: String = field(body, "assistant_id")?.ok_or_else(|| bad_request("`assistant_id` is required"))?;
    let graph = api.graph_of(&assistant)?;
    for unsupported in ["interrupt_before", "interrupt_after"] {
        if body.get(unsupported).is_some_and(|v| !v.is_null() && *v != json!([])) {
            return Err(bad_request(&format!(
                "`{unsupported}` is not supported: a served graph pauses where its blueprint says"
            )));
        }
    }
    refuse_unserved(body)?;
    let modes = modes(body)?;
    let command: Map<String, Value> = field(body, "command")?.unwrap_or_default();
    for unsupported in ["goto", "update"] {
        if command.get(unsupported).is_some_and(|v| !v.is_null()) {
            return Err(bad_request(&format!("`command.{unsupported}` is not supported; `command.resume` is")));
        }
    }
    let checkpoint = match body.get("checkpoint") {
        Some(Value::Object(cp)) => cp.get("checkpoint_id").and_then(Value::as_str).map(str::to_string),
        _ => None,
    };
    let checkpoint = checkpoint.or(field(body, "checkpoint_id")?);
    let input: Option<Value> = field(body, "input")?;
    let request = match (command.get("resume"), input) {
        (Some(resume), _) => ThreadRunRequest { resume: Some(resume.clone()), checkpoint, ..Default::default() },
        (None, Some(Value::Object(_))) if checkpoint.is_some() => {
            return Err(bad_request(
                "new input starts from the thread's latest checkpoint; to go back to `checkpoint_id`, send no input \
                 (or `command.resume`)",
            ));
        }
        (None, Some(Value::Object(input))) => ThreadRunRequest { input: Some(input), ..Default::default() },
        (None, Some(_)) => return Err(bad_request("`input` must be an object of the graph's channels")),
        (None, None) => ThreadRunRequest { continue_run: true, checkpoint, ..Default::default() },
    };
    let metadata = field(body, "metadata")?.unwrap_or_default();
    Ok(Asked { graph, request, modes, metadata })
}

/// Starts a run on thread `thread` (`None`: a stateless run on a new thread).
async fn start(
    api: &Arc<Api>,
    thread: Option<&str>,
    body: &Map<String, Value>,
) -> Result<(Arc<RunRecord>, RunMeta), Refused> {
    let assistant: Option<String> = field(body, "assistant_id")?;
    if let Some(name) = assistant.filter(|a| super::agents::names(api).contains(a)) {
        return start_runnable(api, thread, &name, body);
    }
    let asked = read(api, body)?;
    // A stateless run's stream is its only reader; a thread's run leaves its work in the thread.
    let cancel_on_disconnect = match body.get("on_disconnect").and_then(Value::as_str) {
        Some("cancel") => true,
        Some("continue") => false,
        Some(other) => return Err(bad_request(&format!("`on_disconnect` is `cancel` or `continue`, not `{other}`"))),
        None => thread.is_none(),
    };
    let view = match thread {
        Some(id) => api.bind_thread(id, &asked.graph).await?,
        None => api.stateless_thread(&asked.graph, body.get("on_completion") == Some(&json!("keep"))).await?,
    };
    let lg_thread = thread.map_or_else(|| view.thread_id.clone(), str::to_string);
    if api.running_on(&lg_thread) {
        return Err(conflict(&format!("thread `{lg_thread}` is busy with a run: wait for it, or cancel it")));
    }
    let host = api.host()?;
    let host_thread = view.thread_id.clone();
    let title = format!("graph {} on thread {lg_thread}", asked.graph);
    let (job_thread, request) = (host_thread.clone(), asked.request);
    let job = move |scope| async move { host.run(&job_thread, request, scope).await };
    let record = api.server.start_job(RunKind::Graph, title, job).map_err(|_| Refused::from(crate::server::busy()))?;
    let meta = RunMeta {
        cancel_on_disconnect,
        messages: None,
        thread: lg_thread.clone(),
        host_thread,
        assistant: asked.graph,
        metadata: asked.metadata,
        modes: asked.modes,
        created_at: now(),
    };
    remember(api, &record.id, &meta);
    api.touch(&lg_thread);
    Ok((record, meta))
}

/// The most runs this API remembers; past it, the oldest that have ended are forgotten (the
/// runs API keeps them, by its own retention).
const MAX_RUNS: usize = 1024;

fn remember(api: &Api, id: &str, meta: &RunMeta) {
    let mut runs = api.runs.lock().unwrap_or_else(|e| e.into_inner());
    runs.insert(id.to_string(), meta.clone());
    if runs.len() <= MAX_RUNS {
        return;
    }
    let mut ended: Vec<(String, String)> = runs
        .iter()
        .filter(|(id, _)| api.server.store.live(id).is_none_or(|r| r.result().is_some()))
        .map(|(id, m)| (m.created_at.clone(), id.clone()))
        .collect();
    ended.sort();
    for (_, id) in ended.into_iter().take(MAX_RUNS / 4) {
        runs.remove(&id);
    }
}

/// Starts a runnable that is not a graph (stateless only).
fn start_runnable(
    api: &Api,
    thread: Option<&str>,
    name: &str,
    body: &Map<String, Value>,
) -> Result<(Arc<RunRecord>, RunMeta), Refused> {
    if thread.is_some() {
        return Err(bad_request(&format!(
            "the assistant `{name}` keeps no thread: run it stateless (`/runs/stream`, `/runs/wait`: thread_id None)"
        )));
    }
    if body.get("command").is_some_and(|c| !c.is_null()) {
        return Err(bad_request(&format!("the assistant `{name}` does not interrupt: there is nothing to resume")));
    }
    refuse_unserved(body)?;
    let modes = modes(body)?;
    let metadata = field(body, "metadata")?.unwrap_or_default();
    let (record, messages) = super::agents::start(api, name, body.get("input").cloned())?;
    let meta = RunMeta {
        thread: String::new(),
        host_thread: String::new(),
        assistant: name.to_string(),
        metadata,
        modes,
        cancel_on_disconnect: body.get("on_disconnect").and_then(Value::as_str) != Some("continue"),
        messages: Some(messages),
        created_at: now(),
    };
    remember(api, &record.id, &meta);
    Ok((record, meta))
}

/// Where a client finds the run (the SDK reads the ids from it).
fn located(mut response: Response, run: &str, thread: &str) -> Response {
    let location = if thread.is_empty() { format!("/runs/{run}") } else { format!("/threads/{thread}/runs/{run}") };
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(header::CONTENT_LOCATION, value);
    }
    response
}

/// A run in LangGraph's shape.
async fn run_json(api: &Api, id: &str, meta: &RunMeta) -> Value {
    let view = match api.server.store.live(id) {
        Some(record) => Some(record.view()),
        None => api.server.store.view(id).await.ok().flatten(),
    };
    let status = match view.as_ref().map(|v| (v.status, v.result.as_ref())) {
        None | Some((RunStatus::Queued, _)) => "pending",
        Some((RunStatus::Running, _)) => "running",
        Some((RunStatus::Finished, Some(result))) if result.ok => "success",
        Some((RunStatus::Finished, Some(result))) => match result.outcome {
            recursive_core::FinishReason::Interrupted => "interrupted",
            recursive_core::FinishReason::Cancelled => "interrupted",
            _ => "error",
        },
        Some((RunStatus::Finished, None)) => "error",
    };
    json!({
        "run_id": id,
        "thread_id": meta.thread,
        "assistant_id": meta.assistant,
        "created_at": meta.created_at,
        "updated_at": now(),
        "status": status,
        "metadata": meta.metadata,
        "multitask_strategy": "reject",
        "kwargs": {},
    })
}

/// What `wait` and `join` answer: the thread's values once the run has ended (with
/// `__interrupt__` when it waits for a value), or `__error__` when it failed.
async fn final_values(api: &Api, record: &RunRecord, meta: &RunMeta) -> Value {
    let output = crate::server::wait_finished(record).await;
    if let Some(messages) = &meta.messages {
        if !output.ok {
            let message = output.error.clone().unwrap_or_else(|| output.text.clone());
            return json!({"__error__": {"error": output.outcome.as_str(), "message": message}});
        }
        return Value::Object(super::agents::values(messages, &output.text, &record.id));
    }
    let view = match api.host().map(|h| async move { h.thread(&meta.host_thread).await }) {
        Ok(read) => read.await.ok().flatten(),
        Err(_) => None,
    };
    let interrupted = view.as_ref().is_some_and(|v| v.status == ThreadStatus::Interrupted);
    if !output.ok && !interrupted {
        let message = output.error.clone().unwrap_or_else(|| output.text.clone());
        return json!({"__error__": {"error": output.outcome.as_str(), "message": message}});
    }
    let mut values = view.as_ref().map_or(json!({}), |v| v.values.clone());
    if let (Some(view), true, Some(map)) = (&view, interrupted, values.as_object_mut()) {
        map.insert("__interrupt__".into(), interrupt_list(view));
    }
    values
}

pub(crate) async fn create_on_thread(
    State(api): Shared,
    Path(thread): Path<String>,
    Optional(body): Optional,
) -> Response {
    match start(&api, Some(&thread), &body).await {
        Ok((record, meta)) => {
            located(Json(run_json(&api, &record.id, &meta).await).into_response(), &record.id, &thread)
        }
        Err(refused) => refused.into_response(),
    }
}

pub(crate) async fn create_stateless(State(api): Shared, Optional(body): Optional) -> Response {
    match start(&api, None, &body).await {
        Ok((record, meta)) => {
            located(Json(run_json(&api, &record.id, &meta).await).into_response(), &record.id, &meta.thread)
        }
        Err(refused) => refused.into_response(),
    }
}

pub(crate) async fn wait_on_thread(
    State(api): Shared,
    Path(thread): Path<String>,
    Optional(body): Optional,
) -> Response {
    wait(api, Some(thread), body).await
}

pub(crate) async fn wait_stateless(State(api): Shared, Optional(body): Optional) -> Response {
    wait(api, None, body).await
}

async fn wait(api: Arc<Api>, thread: Option<String>, body: Map<String, Value>) -> Response {
    match start(&api, thread.as_deref(), &body).await {
        Ok((record, meta)) => {
            let values = final_values(&api, &record, &meta).await;
            located(Json(values).into_response(), &record.id, &meta.thread)
        }
        Err(refused) => refused.into_response(),
    }
}

pub(crate) async fn stream_on_thread(
    State(api): Shared,
    Path(thread): Path<String>,
    Optional(body): Optional,
) -> Response {
    stream(api, Some(thread), body).await
}

pub(crate) async fn stream_stateless(State(api): Shared, Optional(body): Optional) -> Response {
    stream(api, None, body).await
}

async fn stream(api: Arc<Api>, thread: Option<String>, body: Map<String, Value>) -> Response {
    match start(&api, thread.as_deref(), &body).await {
        Ok((record, meta)) => {
            let (id, lg_thread) = (record.id.clone(), meta.thread.clone());
            located(told(api, record, meta), &id, &lg_thread)
        }
        Err(refused) => refused.into_response(),
    }
}

/// The run's events told in its stream modes, as Server-Sent Events.
/// A run that has ended, joined: `metadata`, the thread's values (in `values` mode), how it
/// ended, `end` (its steps are in the runs API's events).
fn told_ended(api: Arc<Api>, run: String, meta: RunMeta, output: crate::runs::RunOutput) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(8);
    tokio::spawn(async move {
        let mut events = vec![event("metadata", &json!({"run_id": run, "thread_id": meta.thread, "attempt": 1}))];
        let graph_values = meta.messages.is_none() && meta.modes.contains(&Mode::Values);
        if graph_values
            && let Ok(host) = api.host()
            && let Ok(Some(view)) = host.thread(&meta.host_thread).await
        {
            events.push(event("values", &view.values));
        }
        let teller = Teller::new(api, meta, run);
        events.extend(teller.at_end_of(&output).await);
        events.push(Event::default().event("end").data("null"));
        for e in events {
            if tx.send(e).await.is_err() {
                return;
            }
        }
    });
    let events = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

fn told(api: Arc<Api>, record: Arc<RunRecord>, meta: RunMeta) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let cancel = meta.cancel_on_disconnect;
        let mut teller = Teller::new(api, meta, record.id.clone());
        if teller.tell(&record, &tx).await.is_err() && cancel {
            record.cancel.cancel();
        }
    });
    let events = tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    Sse::new(events).keep_alive(KeepAlive::default()).into_response()
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// Tells one run's events in LangGraph's stream modes.
struct Teller {
    api: Arc<Api>,
    meta: RunMeta,
    run: String,
    /// The top graph's nodes by the id of their own run: (node, kind).
    nodes: HashMap<String, (String, String)>,
    /// Nodes finished since the last checkpoint, with the channels they wrote.
    finished: Vec<(String, String, Vec<String>)>,
    /// Node runs whose text streamed (their message is told already), with the text so far.
    streamed: HashMap<String, String>,
    /// Messages told complete.
    complete: HashSet<String>,
    /// The superstep running (0-based; LangGraph counts from 1).
    step: u64,
}

/// A sender whose reader has gone.
struct Gone;

impl Teller {
    fn new(api: Arc<Api>, meta: RunMeta, run: String) -> Self {
        Teller {
            api,
            meta,
            run,
            nodes: HashMap::new(),
            finished: Vec::new(),
            streamed: HashMap::new(),
            complete: HashSet::new(),
            step: 0,
        }
    }

    fn wants(&self, mode: Mode) -> bool {
        self.meta.modes.contains(&mode)
    }

    async fn tell(&mut self, record: &RunRecord, tx: &tokio::sync::mpsc::Sender<Event>) -> Result<(), Gone> {
        let send = |e: Event| async move { tx.send(e).await.map_err(|_| Gone) };
        send(event("metadata", &json!({"run_id": self.run, "thread_id": self.meta.thread, "attempt": 1}))).await?;
        let mut changes = record.watch();
        let mut next = 0;
        loop {
            let (events, finished) = record.events_from(next);
            let read_all = events.len() < crate::runs::EVENT_PAGE;
            for (i, raw) in events {
                next = i + 1;
                for e in self.on_event(&parse_event(&raw)).await {
                    send(e).await?;
                }
            }
            if !read_all {
                continue;
            }
            if finished {
                break;
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { break },
                () = tx.closed() => return Err(Gone),
            }
        }
        for e in self.at_end(record).await {
            send(e).await?;
        }
        send(Event::default().event("end").data("null")).await
    }

    /// The LangGraph events one of the run's events makes.
    async fn on_event(&mut self, e: &Value) -> Vec<Event> {
        let mut out = Vec::new();
        let kind = e["type"].as_str().unwrap_or_default();
        let depth = e["depth"].as_u64().unwrap_or(0);
        let run = e["run_id"].as_str().unwrap_or_default().to_string();
        if self.wants(Mode::Events) {
            let node = self.nodes.get(&run).map(|(n, _)| n.clone());
            out.push(event(
                "events",
                &json!({
                    "event": format!("on_{kind}"), "name": e["run_name"], "run_id": run,
                    "parent_ids": e["parent_run_id"].as_str().map_or_else(Vec::new, |p| vec![p.to_string()]),
                    "tags": [], "metadata": {"langgraph_node": node, "thread_id": self.meta.thread}, "data": e,
                }),
            ));
        }
        match kind {
            "run_started" if depth == 0 && self.meta.messages.is_some() => {
                self.nodes.insert(run, (self.meta.assistant.clone(), "model".into()));
            }
            "assistant_text" if self.meta.messages.is_some() && self.nodes.contains_key(&run) => {
                let text = e["text"].as_str().unwrap_or_default().to_string();
                if !self.streamed.contains_key(&run) {
                    out.extend(self.message(&run, &text, &text, true, true));
                } else if self.wants(Mode::Messages) {
                    out.extend(self.message(&run, "", &text, false, true));
                }
                self.streamed.remove(&run);
            }
            "graph_started" if depth == 0 => {
                if self.wants(Mode::Values)
                    && let Some(values) = self.values_at(e["checkpoint"].as_str().unwrap_or_default()).await
                {
                    out.push(event("values", &Value::Object(values)));
                }
            }
            "graph_superstep" if depth == 0 => self.step = e["step"].as_u64().unwrap_or(self.step),
            "graph_node_started" if depth == 1 => {
                let node = e["node"].as_str().unwrap_or_default().to_string();
                self.nodes.insert(run, (node, e["kind"].as_str().unwrap_or_default().to_string()));
            }
            "partial_text" if self.nodes.contains_key(&run) => {
                let delta = e["delta"].as_str().unwrap_or_default().to_string();
                let text = self.streamed.entry(run.clone()).or_default();
                let first = text.is_empty();
                text.push_str(&delta);
                let text = text.clone();
                out.extend(self.message(&run, &delta, &text, first, false));
            }
            "graph_node_finished" if depth == 1 => {
                let node = e["node"].as_str().unwrap_or_default().to_string();
                if e["outcome"] == "ok" {
                    let channels =
                        e["detail"].as_array().into_iter().flatten().filter_map(Value::as_str).map(str::to_string);
                    self.finished.push((run, node, channels.collect()));
                }
            }
            "graph_checkpoint" if depth == 0 => {
                let values = self.values_at(e["checkpoint"].as_str().unwrap_or_default()).await.unwrap_or_default();
                for (run, node, channels) in std::mem::take(&mut self.finished) {
                    let update: Map<String, Value> =
                        channels.iter().map(|c| (c.clone(), values.get(c).cloned().unwrap_or(Value::Null))).collect();
                    if self.wants(Mode::Updates) {
                        out.push(event("updates", &json!({ node: update })));
                    }
                    let is_model = self.nodes.get(&run).is_some_and(|(_, kind)| kind == "model");
                    if is_model && !self.complete.contains(&run) {
                        let text: Vec<String> =
                            update.values().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string)).collect();
                        let text = text.join("\n");
                        let streamed = self.streamed.contains_key(&run);
                        let delta = if streamed { String::new() } else { text.clone() };
                        out.extend(self.message(&run, &delta, &text, !streamed, true));
                        self.complete.insert(run);
                    }
                }
                if self.wants(Mode::Values) {
                    out.push(event("values", &Value::Object(values)));
                }
            }
            _ => {}
        }
        out
    }

    /// A model node's text as LangGraph's messages: `delta` new, `text` so far.
    fn message(&self, run: &str, delta: &str, text: &str, first: bool, complete: bool) -> Vec<Event> {
        let node = self.nodes.get(run).map(|(n, _)| n.clone()).unwrap_or_default();
        let id = format!("run-{run}");
        let metadata = json!({
            "langgraph_node": node, "langgraph_step": self.step + 1, "thread_id": self.meta.thread,
            "run_id": self.run, "graph_id": self.meta.assistant, "assistant_id": self.meta.assistant,
        });
        let chunk = |content: &str, kind: &str| {
            json!({"type": kind, "content": content, "id": id, "additional_kwargs": {}, "response_metadata": {},
                "tool_calls": [], "invalid_tool_calls": [], "tool_call_chunks": [], "name": null})
        };
        let mut out = Vec::new();
        if self.wants(Mode::MessagesTuple) && !delta.is_empty() {
            out.push(event("messages", &json!([chunk(delta, "AIMessageChunk"), metadata])));
        }
        if self.wants(Mode::Messages) {
            if first {
                out.push(event("messages/metadata", &json!({ id.clone(): {"metadata": metadata} })));
            }
            if !delta.is_empty() {
                out.push(event("messages/partial", &json!([chunk(text, "ai")])));
            }
            if complete {
                out.push(event("messages/complete", &json!([chunk(text, "ai")])));
            }
        }
        out
    }

    /// The state at a checkpoint of the run's thread.
    async fn values_at(&self, checkpoint: &str) -> Option<Map<String, Value>> {
        let host = self.api.host().ok()?;
        let view = host.thread(&self.meta.host_thread).await.ok().flatten()?;
        if view.checkpoint.as_deref() == Some(checkpoint) {
            return view.values.as_object().cloned();
        }
        let history = host.history(&self.meta.host_thread).await.ok()?;
        let found = history.into_iter().find(|c| c["id"] == checkpoint)?;
        found["state"].as_object().cloned()
    }

    /// What follows the run's last event: its interrupt, or its failure.
    async fn at_end(&self, record: &RunRecord) -> Vec<Event> {
        let output = crate::server::wait_finished(record).await;
        self.at_end_of(&output).await
    }

    /// What follows the last event of a run that ended with `output`.
    async fn at_end_of(&self, output: &crate::runs::RunOutput) -> Vec<Event> {
        if let Some(messages) = &self.meta.messages {
            if !output.ok {
                let message = output.error.clone().unwrap_or_else(|| output.text.clone());
                return vec![event("error", &json!({"error": output.outcome.as_str(), "message": message}))];
            }
            let values = super::agents::values(messages, &output.text, &self.run);
            let mut out = Vec::new();
            if self.wants(Mode::Updates) {
                let answer = values["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
                out.push(event("updates", &json!({ self.meta.assistant.clone(): {"messages": [answer]} })));
            }
            if self.wants(Mode::Values) {
                out.push(event("values", &Value::Object(values)));
            }
            return out;
        }
        let host = self.api.host().ok();
        let view = match host {
            Some(host) => host.thread(&self.meta.host_thread).await.ok().flatten(),
            None => None,
        };
        let mut out = Vec::new();
        match view {
            Some(view) if view.status == ThreadStatus::Interrupted => {
                let interrupts = json!({"__interrupt__": interrupt_list(&view)});
                if self.wants(Mode::Updates) {
                    out.push(event("updates", &interrupts));
                }
                if self.wants(Mode::Values) {
                    out.push(event("values", &interrupts));
                }
            }
            _ if !output.ok => {
                let message = output.error.clone().unwrap_or_else(|| output.text.clone());
                let error = output.outcome.as_str();
                out.push(event("error", &json!({"error": error, "message": message})));
            }
            _ => {}
        }
        out
    }
}

/// The run `run` of thread `thread`, as started here.
fn meta_of(api: &Api, thread: &str, run: &str) -> Result<RunMeta, Refused> {
    let runs = api.runs.lock().unwrap_or_else(|e| e.into_inner());
    match runs.get(run) {
        Some(meta) if meta.thread == thread => Ok(meta.clone()),
        _ => Err(not_found(&format!("no run `{run}` on thread `{thread}`"))),
    }
}

/// Whether the latest run started here on thread `thread` failed (LangGraph's thread status
/// `error`).
pub(crate) async fn last_failed(api: &Api, thread: &str) -> bool {
    let latest = {
        let runs = api.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.iter()
            .filter(|(_, m)| m.thread == thread)
            .max_by(|a, b| a.1.created_at.cmp(&b.1.created_at))
            .map(|(id, _)| id.clone())
    };
    let Some(id) = latest else { return false };
    let result = match api.server.store.live(&id) {
        Some(record) => record.result(),
        None => api.server.store.view(&id).await.ok().flatten().and_then(|v| v.result),
    };
    result.is_some_and(|r| {
        !r.ok
            && r.outcome != recursive_core::FinishReason::Interrupted
            && r.outcome != recursive_core::FinishReason::Cancelled
    })
}

/// Deletes a run that has ended (with its events, from the runs API too).
pub(crate) async fn delete(State(api): Shared, Path((thread, run)): Path<(String, String)>) -> Response {
    if let Err(refused) = meta_of(&api, &thread, &run) {
        return refused.into_response();
    }
    match api.server.store.delete(&run).await {
        Ok(Ok(_)) => {
            api.runs.lock().unwrap_or_else(|e| e.into_inner()).remove(&run);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(Err(_)) => conflict(&format!("run `{run}` is still running: cancel it first")).into_response(),
        Err(e) => crate::server::error(StatusCode::SERVICE_UNAVAILABLE, "server_error", &e).into_response(),
    }
}

pub(crate) async fn get(State(api): Shared, Path((thread, run)): Path<(String, String)>) -> Response {
    match meta_of(&api, &thread, &run) {
        Ok(meta) => Json(run_json(&api, &run, &meta).await).into_response(),
        Err(refused) => refused.into_response(),
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    limit: Option<usize>,
    offset: Option<usize>,
}

pub(crate) async fn list(State(api): Shared, Path(thread): Path<String>, Query(query): Query<ListQuery>) -> Response {
    if let Err(refused) = api.host_thread(&thread).await {
        return refused.into_response();
    }
    let mut runs: Vec<(String, RunMeta)> = {
        let runs = api.runs.lock().unwrap_or_else(|e| e.into_inner());
        runs.iter().filter(|(_, m)| m.thread == thread).map(|(id, m)| (id.clone(), m.clone())).collect()
    };
    runs.sort_by(|a, b| b.1.created_at.cmp(&a.1.created_at));
    let mut out = Vec::new();
    for (id, meta) in runs.into_iter().skip(query.offset.unwrap_or(0)).take(query.limit.unwrap_or(10)) {
        out.push(run_json(&api, &id, &meta).await);
    }
    Json(out).into_response()
}

pub(crate) async fn join(State(api): Shared, Path((thread, run)): Path<(String, String)>) -> Response {
    let meta = match meta_of(&api, &thread, &run) {
        Ok(meta) => meta,
        Err(refused) => return refused.into_response(),
    };
    match api.server.store.live(&run) {
        Some(record) => Json(final_values(&api, &record, &meta).await).into_response(),
        None => match api.host_thread(&thread).await {
            Ok(Some(view)) => Json(view.values).into_response(),
            Ok(None) => Json(json!({})).into_response(),
            Err(refused) => refused.into_response(),
        },
    }
}

/// Follows a run in flight: in the stream modes asked (`stream_mode`, repeated for several),
/// else those it was created with; `cancel_on_disconnect=true` cancels it when the reader goes.
pub(crate) async fn join_stream(
    State(api): Shared,
    Path((thread, run)): Path<(String, String)>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let mut meta = match meta_of(&api, &thread, &run) {
        Ok(meta) => meta,
        Err(refused) => return refused.into_response(),
    };
    let pairs = query.as_deref().unwrap_or_default().split('&').filter_map(|pair| pair.split_once('='));
    let mut modes = Vec::new();
    meta.cancel_on_disconnect = false;
    for (key, value) in pairs {
        match key {
            "stream_mode" if value.is_empty() => {}
            "stream_mode" => match mode(value) {
                Ok(mode) => modes.push(mode),
                Err(refused) => return refused.into_response(),
            },
            "cancel_on_disconnect" => meta.cancel_on_disconnect = value == "true",
            _ => {}
        }
    }
    if !modes.is_empty() {
        meta.modes = modes;
    }
    match api.server.store.live(&run) {
        Some(record) => told(api.clone(), record, meta),
        None => match api.server.store.view(&run).await {
            Ok(Some(view)) => match view.result {
                Some(output) => told_ended(api.clone(), run, meta, output),
                None => {
                    conflict(&format!("run `{run}` is not in this process: read the thread's state")).into_response()
                }
            },
            Ok(None) => not_found(&format!("no run `{run}`")).into_response(),
            Err(e) => crate::server::error(StatusCode::SERVICE_UNAVAILABLE, "server_error", &e).into_response(),
        },
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct CancelQuery {
    wait: Option<u8>,
}

pub(crate) async fn cancel(
    State(api): Shared,
    Path((thread, run)): Path<(String, String)>,
    Query(query): Query<CancelQuery>,
) -> Response {
    if let Err(refused) = meta_of(&api, &thread, &run) {
        return refused.into_response();
    }
    if let Some(record) = api.server.store.live(&run) {
        record.cancel.cancel();
        if query.wait == Some(1) {
            crate::server::wait_finished(&record).await;
        }
    }
    StatusCode::ACCEPTED.into_response()
}
