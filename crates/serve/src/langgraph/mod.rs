//! The LangGraph Platform API (the Agent Protocol's shapes) beside serve's own, so LangGraph's
//! SDKs and the UIs built on them can drive served graphs: assistants (each graph the server
//! offers, `assistant_id` = `graph_id` = its name; and, stateless, the server's other runnables —
//! see `agents`), threads (create with `graph_id`, get, patch, delete, search, count, state,
//! history, copy), runs on a thread or stateless (create, `stream` with the stream modes
//! `values`, `updates`, `messages`, `messages-tuple` and `events`, `wait`, `join`, join stream,
//! cancel, list, delete — see `runs`), `command.resume` answering a node that asked, interrupts
//! in LangGraph's shape, and a key-value store (`/store/...` — see `store`).
//!
//! Nothing here runs a graph: a thread is a thread of the server's [`GraphHost`], a run is a
//! run of the runs API started with [`Server::start_job`] (so it is queued, capped, cancelled,
//! archived and streamed like every run), and a stream is that run's events read as they come
//! and told in LangGraph's stream modes. Auth (`x-api-key` or `Authorization: Bearer`), Host
//! and Origin are the server's own checks. What this module keeps itself, in memory: a
//! thread's LangGraph metadata and id (when the client chose one), the runs started here (for
//! listing and joining), and the store's items.

mod agents;
mod runs;
mod store;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::server::{Server, error};
use crate::threads::{GraphHost, HostError, ThreadStatus, ThreadView};

/// What the LangGraph routes share: the server, and what this API keeps beside its threads.
pub(crate) struct Api {
    pub(crate) server: Arc<Server>,
    /// Threads created through this API, by their LangGraph id.
    threads: Mutex<HashMap<String, ThreadMeta>>,
    /// Runs started through this API, by run id.
    runs: Mutex<HashMap<String, runs::RunMeta>>,
    /// Threads deleted through this API (their checkpoints stay in the store, unserved here).
    deleted: Mutex<HashSet<String>>,
    /// The store's items.
    store: store::Items,
}

/// A thread as this API knows it besides the graph host.
#[derive(Debug, Clone)]
struct ThreadMeta {
    /// The graph host's thread (`None` until its first run names the graph).
    host: Option<String>,
    /// The client's metadata (with `graph_id` once the graph is known).
    metadata: Map<String, Value>,
    created_at: String,
    updated_at: String,
}

/// The LangGraph routes, checked by the server's auth like every API route.
pub(crate) fn router(server: &Arc<Server>) -> axum::Router<Arc<Server>> {
    let api = Arc::new(Api {
        server: server.clone(),
        threads: Mutex::default(),
        runs: Mutex::default(),
        deleted: Mutex::default(),
        store: server.config.items.clone().map(store::Items).unwrap_or_default(),
    });
    axum::Router::new()
        .route("/info", get(info))
        .route("/assistants/search", post(search_assistants))
        .route("/assistants/count", post(count_assistants))
        .route("/assistants/{id}", get(get_assistant))
        .route("/threads", post(create_thread))
        .route("/threads/search", post(search_threads))
        .route("/threads/count", post(count_threads))
        .route("/threads/{id}", get(get_thread).patch(patch_thread).delete(delete_thread))
        .route("/threads/{id}/state", get(thread_state).post(update_state))
        .route("/threads/{id}/state/checkpoint", post(state_at_posted))
        .route("/threads/{id}/state/{checkpoint}", get(state_at))
        .route("/threads/{id}/history", post(thread_history).get(thread_history_get))
        .route("/threads/{id}/copy", post(copy_thread))
        .route("/threads/{id}/runs", post(runs::create_on_thread).get(runs::list))
        .route("/threads/{id}/runs/stream", post(runs::stream_on_thread))
        .route("/threads/{id}/runs/wait", post(runs::wait_on_thread))
        .route("/threads/{id}/runs/{run}", get(runs::get).delete(runs::delete))
        .route("/threads/{id}/runs/{run}/join", get(runs::join))
        .route("/threads/{id}/runs/{run}/stream", get(runs::join_stream))
        .route("/threads/{id}/runs/{run}/cancel", post(runs::cancel))
        .route("/runs/stream", post(runs::stream_stateless))
        .route("/runs/wait", post(runs::wait_stateless))
        .route("/runs", post(runs::create_stateless))
        .route("/store/items", get(store::get_item).put(store::put_item).delete(store::delete_item))
        .route("/store/items/search", post(store::search_items))
        .route("/store/namespaces", post(store::list_namespaces))
        .with_state(api)
}

type Shared = State<Arc<Api>>;

/// A JSON body that may be absent (the SDK sends none for some calls).
#[derive(Debug, Default)]
pub(crate) struct Optional(pub Map<String, Value>);

impl<S: Send + Sync> axum::extract::FromRequest<S> for Optional {
    type Rejection = Refused;

    async fn from_request(request: axum::extract::Request, state: &S) -> Result<Self, Refused> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|e| Refused::from(error(e.status(), "invalid_request_error", &e.body_text())))?;
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Optional::default());
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(map)) => Ok(Optional(map)),
            Ok(Value::Null) => Ok(Optional::default()),
            Ok(_) => Err(bad_request("the body must be a JSON object")),
            Err(e) => Err(bad_request(&format!("the body is not JSON: {e}"))),
        }
    }
}

/// A body field of type `T` (absent or `null`: `None`; another type: 400 naming it).
pub(crate) fn field<T: serde::de::DeserializeOwned>(
    body: &Map<String, Value>,
    name: &str,
) -> Result<Option<T>, Refused> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone()).map(Some).map_err(|e| bad_request(&format!("`{name}`: {e}"))),
    }
}

/// A request refused (or failed): its error response, boxed to keep results small.
pub(crate) struct Refused(Box<Response>);

impl From<Response> for Refused {
    fn from(response: Response) -> Self {
        Refused(Box::new(response))
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        *self.0
    }
}

pub(crate) fn bad_request(message: &str) -> Refused {
    error(StatusCode::BAD_REQUEST, "invalid_request_error", message).into()
}

pub(crate) fn not_found(message: &str) -> Refused {
    error(StatusCode::NOT_FOUND, "invalid_request_error", message).into()
}

pub(crate) fn conflict(message: &str) -> Refused {
    error(StatusCode::CONFLICT, "invalid_request_error", message).into()
}

pub(crate) fn host_failed(e: HostError) -> Refused {
    match e {
        HostError::NotFound(m) => not_found(&m),
        HostError::Invalid(m) => bad_request(&m),
        HostError::Failed(m) => error(StatusCode::INTERNAL_SERVER_ERROR, "server_error", &m).into(),
    }
}

impl Api {
    /// The graph host, or the 404 saying the server offers no graphs.
    pub(crate) fn host(&self) -> Result<Arc<dyn GraphHost>, Refused> {
        self.server
            .config
            .graphs
            .clone()
            .ok_or_else(|| not_found("this server offers no graphs: start it with --graphs DIR"))
    }

    /// The graph an assistant id names (an assistant is a graph offered, by its name).
    pub(crate) fn graph_of(&self, assistant: &str) -> Result<String, Refused> {
        let host = self.host()?;
        let graphs = host.graphs();
        if graphs.iter().any(|g| g.name == assistant) {
            return Ok(assistant.to_string());
        }
        let names: Vec<String> = graphs.into_iter().map(|g| g.name).collect();
        Err(not_found(&format!("no assistant `{assistant}`; this server offers {}", names.join(", "))))
    }

    fn meta(&self, id: &str) -> Option<ThreadMeta> {
        self.threads.lock().unwrap_or_else(|e| e.into_inner()).get(id).cloned()
    }

    fn set_meta(&self, id: &str, meta: ThreadMeta) {
        self.threads.lock().unwrap_or_else(|e| e.into_inner()).insert(id.to_string(), meta);
    }

    /// The graph host's thread behind a LangGraph thread id: `Ok(None)` for a thread created
    /// here whose graph is not known yet; 404 for no such thread.
    pub(crate) async fn host_thread(&self, id: &str) -> Result<Option<ThreadView>, Refused> {
        let host = self.host()?;
        if self.deleted.lock().unwrap_or_else(|e| e.into_inner()).contains(id) {
            return Err(not_found(&format!("no thread `{id}` (deleted)")));
        }
        let host_id = match self.meta(id) {
            Some(ThreadMeta { host: None, .. }) => return Ok(None),
            Some(ThreadMeta { host: Some(h), .. }) => h,
            None => id.to_string(),
        };
        match host.thread(&host_id).await {
            Ok(Some(view)) => Ok(Some(view)),
            Ok(None) => Err(not_found(&format!("no thread `{id}`"))),
            Err(e) => Err(host_failed(e)),
        }
    }

    /// The host thread a run on `id` runs, made now (of `graph`) when the thread has none yet.
    pub(crate) async fn bind_thread(&self, id: &str, graph: &str) -> Result<ThreadView, Refused> {
        if let Some(view) = self.host_thread(id).await? {
            if view.graph != graph {
                let message = format!("thread `{id}` runs the graph `{}`, not the assistant `{graph}`", view.graph);
                return Err(conflict(&message));
            }
            return Ok(view);
        }
        let view = self.host()?.create(graph).await.map_err(host_failed)?;
        let mut meta = self.meta(id).unwrap_or_else(|| ThreadMeta::new(Map::new()));
        meta.host = Some(view.thread_id.clone());
        meta.metadata.insert("graph_id".into(), json!(graph));
        self.set_meta(id, meta);
        Ok(view)
    }

    /// A new host thread of `graph` for a stateless run, known by the host's id; listed by
    /// thread search only when the client asked to `keep` it.
    pub(crate) async fn stateless_thread(&self, graph: &str, keep: bool) -> Result<ThreadView, Refused> {
        let view = self.host()?.create(graph).await.map_err(host_failed)?;
        if keep {
            let mut metadata = Map::new();
            metadata.insert("graph_id".into(), json!(graph));
            let meta = ThreadMeta { host: Some(view.thread_id.clone()), ..ThreadMeta::new(metadata) };
            self.set_meta(&view.thread_id, meta);
        }
        Ok(view)
    }

    fn touch(&self, id: &str) {
        if let Some(meta) = self.threads.lock().unwrap_or_else(|e| e.into_inner()).get_mut(id) {
            meta.updated_at = now();
        }
    }

    /// A thread in LangGraph's shape.
    async fn thread_json(&self, id: &str) -> Result<Value, Refused> {
        let view = self.host_thread(id).await?;
        let meta = self.meta(id);
        let mut metadata = meta.as_ref().map(|m| m.metadata.clone()).unwrap_or_default();
        if let Some(view) = &view {
            metadata.entry("graph_id").or_insert_with(|| json!(view.graph));
            metadata.entry("assistant_id").or_insert_with(|| json!(view.graph));
        }
        let busy = self.running_on(id);
        let status = match (&view, busy) {
            (_, true) => "busy",
            (Some(v), _) if v.status == ThreadStatus::Interrupted => "interrupted",
            _ if runs::last_failed(self, id).await => "error",
            _ => "idle",
        };
        let created = meta.as_ref().map(|m| m.created_at.clone());
        let created = created.or_else(|| view.as_ref().map(|v| v.created_at.clone())).unwrap_or_else(now);
        let updated = meta.as_ref().map(|m| m.updated_at.clone()).unwrap_or_else(|| created.clone());
        let interrupts = match &view {
            Some(v) => interrupts_of(v).into_iter().collect::<Map<String, Value>>(),
            None => Map::new(),
        };
        Ok(json!({
            "thread_id": id,
            "created_at": created,
            "updated_at": updated,
            "metadata": metadata,
            "status": status,
            "values": view.as_ref().map_or(json!({}), |v| v.values.clone()),
            "interrupts": interrupts,
        }))
    }

    /// Whether a run started here on thread `id` is still going.
    fn running_on(&self, id: &str) -> bool {
        let runs: Vec<String> = {
            let runs = self.runs.lock().unwrap_or_else(|e| e.into_inner());
            runs.iter().filter(|(_, r)| r.thread == id).map(|(k, _)| k.clone()).collect()
        };
        runs.iter().any(|run| self.server.store.live(run).is_some_and(|r| r.result().is_none()))
    }
}

impl ThreadMeta {
    fn new(metadata: Map<String, Value>) -> Self {
        let at = now();
        ThreadMeta { host: None, metadata, created_at: at.clone(), updated_at: at }
    }
}

/// What an interrupted thread waits for, as LangGraph's interrupts by task: a node that asked
/// (its question the value), or nodes paused before or after they ran.
fn interrupts_of(view: &ThreadView) -> Option<(String, Value)> {
    let interrupt = view.interrupt.as_ref()?;
    let node = interrupt["node"].as_str().map(str::to_string).or_else(|| view.next.first().cloned())?;
    let value = match interrupt.get("payload") {
        Some(payload) => payload.clone(),
        None => interrupt.clone(),
    };
    let id = format!("{}:{node}", view.checkpoint.as_deref().unwrap_or_default());
    Some((node, json!([{"value": value, "id": id}])))
}

/// The interrupts of an interrupted thread as a list (`__interrupt__`'s value).
pub(crate) fn interrupt_list(view: &ThreadView) -> Value {
    match interrupts_of(view) {
        Some((_, list)) => list,
        None => json!([]),
    }
}

/// The current time, RFC 3339 in UTC.
pub(crate) fn now() -> String {
    let ms = crate::runs::unix_ms();
    rfc3339(ms)
}

/// Unix milliseconds as RFC 3339 in UTC (the civil date from the day count).
pub(crate) fn rfc3339(ms: i64) -> String {
    let (secs, millis) = (ms.div_euclid(1000), ms.rem_euclid(1000));
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Days since 1970-01-01 to a proleptic Gregorian date, by 400-year eras from 0000-03-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}+00:00",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// An assistant in LangGraph's shape: a graph the server offers.
fn assistant(info: &crate::threads::GraphInfo, at: &str) -> Value {
    json!({
        "assistant_id": info.name,
        "graph_id": info.name,
        "name": info.name,
        "description": info.description,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system", "mermaid": info.mermaid},
        "version": 1,
        "created_at": at,
        "updated_at": at,
    })
}

/// Whether `metadata` has every key of `filter` with the same value.
fn matches(metadata: &Value, filter: &Map<String, Value>) -> bool {
    filter.iter().all(|(k, v)| metadata.get(k) == Some(v))
}

/// `limit` (default `default`) and `offset` of a search body.
fn page(body: &Map<String, Value>, default: usize) -> Result<(usize, usize), Refused> {
    Ok((field(body, "limit")?.unwrap_or(default), field(body, "offset")?.unwrap_or(0)))
}

/// Every assistant: the graphs, then the other runnables.
fn assistants(api: &Api) -> Vec<Value> {
    let at = rfc3339(0);
    let graphs = api.server.config.graphs.as_ref().map(|h| h.graphs()).unwrap_or_default();
    let runnables = agents::names(api).into_iter().map(|name| agents::assistant(&name, &at));
    graphs.iter().map(|g| assistant(g, &at)).chain(runnables).collect()
}

async fn matching_assistants(api: &Api, body: &Map<String, Value>) -> Result<Vec<Value>, Refused> {
    let metadata: Option<Map<String, Value>> = field(body, "metadata")?;
    let graph: Option<String> = field(body, "graph_id")?;
    let name: Option<String> = field(body, "name")?;
    Ok(assistants(api)
        .into_iter()
        .filter(|a| graph.as_ref().is_none_or(|id| a["graph_id"] == json!(id)))
        .filter(|a| name.as_ref().is_none_or(|n| a["name"].as_str().is_some_and(|a| a.contains(n.as_str()))))
        .filter(|a| metadata.as_ref().is_none_or(|m| matches(&a["metadata"], m)))
        .collect())
}

async fn search_assistants(State(api): Shared, Optional(body): Optional) -> Response {
    let (limit, offset) = match page(&body, 10) {
        Ok(page) => page,
        Err(refused) => return refused.into_response(),
    };
    match matching_assistants(&api, &body).await {
        Ok(found) => Json(found.into_iter().skip(offset).take(limit).collect::<Vec<_>>()).into_response(),
        Err(refused) => refused.into_response(),
    }
}

async fn count_assistants(State(api): Shared, Optional(body): Optional) -> Response {
    match matching_assistants(&api, &body).await {
        Ok(found) => Json(found.len()).into_response(),
        Err(refused) => refused.into_response(),
    }
}

async fn get_assistant(State(api): Shared, Path(id): Path<String>) -> Response {
    match assistants(&api).into_iter().find(|a| a["assistant_id"] == json!(id)) {
        Some(assistant) => Json(assistant).into_response(),
        None => not_found(&format!("no assistant `{id}`")).into_response(),
    }
}

async fn create_thread(State(api): Shared, Optional(body): Optional) -> Response {
    match create(&api, &body).await {
        Ok(thread) => Json(thread).into_response(),
        Err(refused) => refused.into_response(),
    }
}

async fn create(api: &Api, body: &Map<String, Value>) -> Result<Value, Refused> {
    let host = api.host()?;
    let metadata: Map<String, Value> = field(body, "metadata")?.unwrap_or_default();
    let wanted: Option<String> = field(body, "thread_id")?;
    let if_exists: Option<String> = field(body, "if_exists")?;
    if body.get("supersteps").is_some_and(|s| !s.is_null()) {
        return Err(bad_request("`supersteps` is not supported: create the thread, then run it"));
    }
    let graph = match metadata.get("graph_id") {
        Some(Value::String(graph)) => Some(api.graph_of(graph)?),
        Some(_) => return Err(bad_request("`metadata.graph_id` must be a string")),
        None => None,
    };
    if let Some(id) = &wanted {
        if api.deleted.lock().unwrap_or_else(|e| e.into_inner()).contains(id) {
            return Err(conflict(&format!("thread `{id}` was deleted; its id is not used again")));
        }
        let exists = api.meta(id).is_some() || host.thread(id).await.map_err(host_failed)?.is_some();
        if exists {
            return match if_exists.as_deref() {
                Some("do_nothing") => api.thread_json(id).await,
                _ => Err(conflict(&format!("thread `{id}` exists"))),
            };
        }
    }
    let mut meta = ThreadMeta::new(metadata);
    let id = match (&graph, wanted) {
        (Some(graph), wanted) => {
            let view = host.create(graph).await.map_err(host_failed)?;
            meta.host = Some(view.thread_id.clone());
            wanted.unwrap_or(view.thread_id)
        }
        (None, Some(wanted)) => wanted,
        (None, None) => uuid::Uuid::new_v4().to_string(),
    };
    api.set_meta(&id, meta);
    api.thread_json(&id).await
}

async fn get_thread(State(api): Shared, Path(id): Path<String>) -> Response {
    match api.thread_json(&id).await {
        Ok(thread) => Json(thread).into_response(),
        Err(refused) => refused.into_response(),
    }
}

async fn patch_thread(State(api): Shared, Path(id): Path<String>, Optional(body): Optional) -> Response {
    let metadata: Map<String, Value> = match field(&body, "metadata") {
        Ok(m) => m.unwrap_or_default(),
        Err(refused) => return refused.into_response(),
    };
    let view = match api.host_thread(&id).await {
        Ok(view) => view,
        Err(refused) => return refused.into_response(),
    };
    let mut meta = api.meta(&id).unwrap_or_else(|| {
        let mut meta = ThreadMeta::new(Map::new());
        meta.host = view.as_ref().map(|v| v.thread_id.clone());
        meta
    });
    meta.metadata.extend(metadata);
    meta.updated_at = now();
    api.set_meta(&id, meta);
    get_thread(State(api), Path(id)).await
}

/// Deletes the thread from this API: it is no longer served here (its checkpoints stay in the
/// store, as the `graph` command keeps them, and `/v1/threads` still shows them).
async fn delete_thread(State(api): Shared, Path(id): Path<String>) -> Response {
    if let Err(refused) = api.host_thread(&id).await {
        return refused.into_response();
    }
    if api.running_on(&id) {
        return conflict(&format!("thread `{id}` is busy with a run: cancel it first")).into_response();
    }
    api.threads.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
    api.deleted.lock().unwrap_or_else(|e| e.into_inner()).insert(id);
    StatusCode::NO_CONTENT.into_response()
}

async fn search_threads(State(api): Shared, Optional(body): Optional) -> Response {
    match found_threads(&api, &body).await {
        Ok(found) => Json(found).into_response(),
        Err(refused) => refused.into_response(),
    }
}

async fn count_threads(State(api): Shared, Optional(mut body): Optional) -> Response {
    body.insert("limit".into(), json!(usize::MAX));
    body.insert("offset".into(), json!(0));
    match found_threads(&api, &body).await {
        Ok(found) => Json(found.len()).into_response(),
        Err(refused) => refused.into_response(),
    }
}

/// The threads created here that a search's body asks for, newest first.
async fn found_threads(api: &Api, body: &Map<String, Value>) -> Result<Vec<Value>, Refused> {
    let (limit, offset) = page(body, 10)?;
    let filter: Option<Map<String, Value>> = field(body, "metadata")?;
    let ids: Option<Vec<String>> = field(body, "ids")?;
    let status: Option<String> = field(body, "status")?;
    let mut known: Vec<(String, String)> = {
        let threads = api.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.iter().map(|(id, meta)| (meta.created_at.clone(), id.clone())).collect()
    };
    known.sort_by(|a, b| b.cmp(a));
    let mut found = Vec::new();
    for (_, id) in known {
        if ids.as_ref().is_some_and(|ids| !ids.contains(&id)) {
            continue;
        }
        let Ok(thread) = api.thread_json(&id).await else { continue };
        if filter.as_ref().is_some_and(|f| !matches(&thread["metadata"], f)) {
            continue;
        }
        if status.as_ref().is_some_and(|s| thread["status"] != *s) {
            continue;
        }
        found.push(thread);
    }
    Ok(found.into_iter().skip(offset).take(limit).collect())
}

/// A checkpoint of the store (as the graph host lists them) as LangGraph's thread state.
fn state_of(id: &str, checkpoint: &Value) -> Value {
    let reference =
        |cp: &Value| json!({"thread_id": id, "checkpoint_ns": "", "checkpoint_id": cp, "checkpoint_map": null});
    let next: Vec<Value> = checkpoint["next"].as_array().cloned().unwrap_or_default();
    let tasks: Vec<Value> = next
        .iter()
        .map(|node| {
            json!({"id": format!("{}:{}", checkpoint["id"].as_str().unwrap_or_default(), node.as_str().unwrap_or_default()),
                "name": node, "error": null, "interrupts": [], "checkpoint": null, "state": null, "result": null})
        })
        .collect();
    json!({
        "values": checkpoint.get("state").cloned().unwrap_or_else(|| json!({})),
        "next": next,
        "checkpoint": reference(&checkpoint["id"]),
        "metadata": {"step": checkpoint["step"], "source": checkpoint["source"], "thread_id": id},
        "created_at": checkpoint["created_at"],
        "parent_checkpoint": match &checkpoint["parent"] { Value::Null => Value::Null, parent => reference(parent) },
        "tasks": tasks,
        "interrupts": [],
    })
}

/// The thread's checkpoints as states, newest first (its interrupts on the latest).
async fn states(api: &Api, id: &str) -> Result<Vec<Value>, Refused> {
    let Some(view) = api.host_thread(id).await? else { return Ok(Vec::new()) };
    let host = api.host()?;
    let history = host.history(&view.thread_id).await.map_err(host_failed)?;
    let mut states: Vec<Value> = history.iter().map(|c| state_of(id, c)).collect();
    if let (Some(latest), Some((node, interrupts))) = (states.first_mut(), interrupts_of(&view)) {
        latest["interrupts"] = interrupts.clone();
        if let Some(tasks) = latest["tasks"].as_array_mut() {
            for task in tasks.iter_mut().filter(|t| t["name"] == json!(node)) {
                task["interrupts"] = interrupts.clone();
            }
        }
    }
    Ok(states)
}

async fn thread_state(State(api): Shared, Path(id): Path<String>) -> Response {
    match states(&api, &id).await {
        Ok(states) => match states.into_iter().next() {
            Some(state) => Json(state).into_response(),
            None => Json(json!({
                "values": {}, "next": [], "tasks": [], "interrupts": [], "metadata": {}, "created_at": null,
                "checkpoint": {"thread_id": id, "checkpoint_ns": "", "checkpoint_id": null, "checkpoint_map": null},
                "parent_checkpoint": null,
            }))
            .into_response(),
        },
        Err(refused) => refused.into_response(),
    }
}

/// The state at one checkpoint of the thread.
async fn state_at(State(api): Shared, Path((id, checkpoint)): Path<(String, String)>) -> Response {
    match states(&api, &id).await {
        Ok(states) => match states.into_iter().find(|s| s["checkpoint"]["checkpoint_id"] == json!(checkpoint)) {
            Some(state) => Json(state).into_response(),
            None => not_found(&format!("thread `{id}` has no checkpoint `{checkpoint}`")).into_response(),
        },
        Err(refused) => refused.into_response(),
    }
}

async fn state_at_posted(State(api): Shared, Path(id): Path<String>, Optional(body): Optional) -> Response {
    let checkpoint = body.get("checkpoint").and_then(|c| c.get("checkpoint_id")).and_then(Value::as_str);
    match checkpoint {
        Some(checkpoint) => state_at(State(api), Path((id, checkpoint.to_string()))).await,
        None => thread_state(State(api), Path(id)).await,
    }
}

/// Writing a thread's state as a node would is not served: a fork sets channels instead.
/// `POST /threads/{id}/state`: `values` become the thread's state. The graph host forks the
/// thread's latest checkpoint (or `checkpoint_id`'s) with them, and the LangGraph thread goes on
/// from the fork: its state, history and next run are the fork's. (`as_node` is taken as given:
/// the values are written as the state, not as one node's update through its reducers.)
async fn update_state(State(api): Shared, Path(id): Path<String>, Optional(body): Optional) -> Response {
    let values: Map<String, Value> = match field(&body, "values") {
        Ok(Some(values)) => values,
        Ok(None) => return bad_request("`values` must be an object of channels").into_response(),
        Err(refused) => return refused.into_response(),
    };
    let checkpoint = body
        .get("checkpoint_id")
        .or_else(|| body.get("checkpoint").and_then(|c| c.get("checkpoint_id")))
        .and_then(Value::as_str)
        .map(str::to_string);
    let view = match api.host_thread(&id).await {
        Ok(Some(view)) => view,
        Ok(None) => {
            return bad_request(&format!("thread `{id}` has not run yet: there is no state to update")).into_response();
        }
        Err(refused) => return refused.into_response(),
    };
    let host = match api.host() {
        Ok(host) => host,
        Err(refused) => return refused.into_response(),
    };
    let request = crate::threads::ForkRequest { checkpoint, set: Some(values) };
    let fork = match host.fork(&view.thread_id, request).await {
        Ok(fork) => fork,
        Err(e) => return host_failed(e).into_response(),
    };
    let mut meta = api.meta(&id).unwrap_or_else(|| ThreadMeta::new(Map::new()));
    meta.host = Some(fork.thread_id.clone());
    meta.updated_at = now();
    api.set_meta(&id, meta);
    Json(json!({"checkpoint": {"thread_id": id, "checkpoint_ns": "", "checkpoint_id": fork.checkpoint,
        "checkpoint_map": null}}))
    .into_response()
}

/// What the server is (LangGraph's clients and UIs check it is there).
async fn info() -> Json<Value> {
    Json(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "server": "recursive",
        "flags": {"assistants": true, "crons": false, "langsmith": false, "store": true},
    }))
}

#[derive(Debug, Default, Deserialize)]
struct HistoryQuery {
    limit: Option<usize>,
    before: Option<String>,
}

async fn thread_history_get(
    State(api): Shared,
    Path(id): Path<String>,
    axum::extract::Query(query): axum::extract::Query<HistoryQuery>,
) -> Response {
    let mut body = Map::new();
    if let Some(limit) = query.limit {
        body.insert("limit".into(), json!(limit));
    }
    if let Some(before) = query.before {
        body.insert("before".into(), json!({"checkpoint_id": before}));
    }
    thread_history(State(api), Path(id), Optional(body)).await
}

async fn thread_history(State(api): Shared, Path(id): Path<String>, Optional(body): Optional) -> Response {
    let limit: usize = match field(&body, "limit") {
        Ok(limit) => limit.unwrap_or(10),
        Err(refused) => return refused.into_response(),
    };
    let before: Option<String> = match &body.get("before") {
        Some(Value::String(id)) => Some(id.clone()),
        Some(Value::Object(cp)) => cp.get("checkpoint_id").and_then(Value::as_str).map(str::to_string),
        _ => None,
    };
    let filter: Option<Map<String, Value>> = match field(&body, "metadata") {
        Ok(filter) => filter,
        Err(refused) => return refused.into_response(),
    };
    let states = match states(&api, &id).await {
        Ok(states) => states,
        Err(refused) => return refused.into_response(),
    };
    let start = match &before {
        Some(before) => {
            states.iter().position(|s| s["checkpoint"]["checkpoint_id"] == json!(before)).map_or(0, |i| i + 1)
        }
        None => 0,
    };
    let page: Vec<Value> = states
        .into_iter()
        .skip(start)
        .filter(|s| filter.as_ref().is_none_or(|f| matches(&s["metadata"], f)))
        .take(limit)
        .collect();
    Json(page).into_response()
}

async fn copy_thread(State(api): Shared, Path(id): Path<String>) -> Response {
    let view = match api.host_thread(&id).await {
        Ok(Some(view)) => view,
        Ok(None) => {
            return bad_request(&format!("thread `{id}` has not run yet: there is nothing to copy")).into_response();
        }
        Err(refused) => return refused.into_response(),
    };
    let host = match api.host() {
        Ok(host) => host,
        Err(refused) => return refused.into_response(),
    };
    let fork = match host.fork(&view.thread_id, crate::threads::ForkRequest::default()).await {
        Ok(fork) => fork,
        Err(e) => return host_failed(e).into_response(),
    };
    let metadata = api.meta(&id).map(|m| m.metadata).unwrap_or_default();
    api.set_meta(&fork.thread_id, ThreadMeta { host: Some(fork.thread_id.clone()), ..ThreadMeta::new(metadata) });
    get_thread(State(api), Path(fork.thread_id)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000+00:00");
        assert_eq!(rfc3339(951_782_400_123), "2000-02-29T00:00:00.123+00:00");
        assert_eq!(rfc3339(1_798_761_599_000), "2026-12-31T23:59:59.000+00:00");
    }
}
