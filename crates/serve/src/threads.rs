//! Graph threads over HTTP — the operations of the `graph` command for a served graph: the
//! graphs offered (blueprints by name from the directory the server was given, never a path
//! from a request), create a thread, run or resume it (with an interrupt's value, from a
//! checkpoint, past its limits) as a run of the runs API (so it streams like any run), read its
//! state and history, fork it. The work is done by a [`GraphHost`] the embedding program
//! supplies (the CLI binds blueprints with its harness).

use std::sync::Arc;

use async_trait::async_trait;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use recursive_core::RunScope;
pub use recursive_store::ThreadStatus;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use crate::runs::{RunKind, RunOutput};
use crate::server::{Busy, ErrorBody, Server, busy, error};

/// A graph offered by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct GraphInfo {
    /// Its name (the blueprint's file stem).
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// The graph as a Mermaid flowchart.
    pub mermaid: String,
}

/// A thread as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ThreadView {
    /// Its id.
    pub thread_id: String,
    /// The graph it runs.
    pub graph: String,
    /// When it was created (RFC 3339).
    pub created_at: String,
    /// `new` (never run), `interrupted` (a pause, or a node asking for a value), `pending` (not
    /// finished: resume it), or `done` (the one rule: [`ThreadStatus::of`]).
    #[schema(value_type = String)]
    pub status: ThreadStatus,
    /// The latest checkpoint.
    pub checkpoint: Option<String>,
    /// Its superstep.
    pub step: u64,
    /// The nodes that run next.
    pub next: Vec<String>,
    /// The state's channels.
    #[schema(value_type = Object)]
    pub values: Value,
    /// What an interrupted thread waits for (a question's payload, or the paused nodes).
    #[schema(value_type = Option<Object>)]
    pub interrupt: Option<Value>,
}

/// How a thread's run starts.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct ThreadRunRequest {
    /// New input: an object of channel values (a new thread, or one whose run finished).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Map<String, Value>>,
    /// Continue an unfinished or interrupted run; the value (any JSON: a string for an `ask`
    /// node, an object, a number…) answers a node that asked.
    #[serde(default)]
    #[schema(value_type = Option<Value>)]
    pub resume: Option<Value>,
    /// Whether to continue (`resume` may be absent when nothing asks).
    #[serde(default)]
    pub continue_run: bool,
    /// Go back to this checkpoint and run from there (time travel).
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Continue a run that stopped on the blueprint's limits, with fresh counts.
    #[serde(default)]
    pub raise_limits: bool,
}

/// A fork of a thread.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct ForkRequest {
    /// The checkpoint to fork from (default: the latest).
    #[serde(default)]
    pub checkpoint: Option<String>,
    /// Channel values to change in the fork.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub set: Option<Map<String, Value>>,
}

/// A new thread.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct NewThread {
    /// The graph's name (see `GET /v1/graphs`).
    pub graph: String,
}

/// Why a thread operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// No such graph, thread or checkpoint.
    #[error("{0}")]
    NotFound(String),
    /// The request cannot be carried out as asked.
    #[error("{0}")]
    Invalid(String),
    /// The store or the host failed.
    #[error("{0}")]
    Failed(String),
}

/// Runs and reads graph threads for the server.
#[async_trait]
pub trait GraphHost: Send + Sync {
    /// The graphs offered.
    fn graphs(&self) -> Vec<GraphInfo>;
    /// Creates a thread of a graph offered by name.
    async fn create(&self, graph: &str) -> Result<ThreadView, HostError>;
    /// A thread's state (`None`: no such thread).
    async fn thread(&self, thread: &str) -> Result<Option<ThreadView>, HostError>;
    /// A thread's checkpoints, newest first.
    async fn history(&self, thread: &str) -> Result<Vec<Value>, HostError>;
    /// Forks a thread into a new one.
    async fn fork(&self, thread: &str, fork: ForkRequest) -> Result<ThreadView, HostError>;
    /// Runs a thread in `scope` (called inside a run of the runs API).
    async fn run(&self, thread: &str, request: ThreadRunRequest, scope: RunScope) -> RunOutput;
}

fn host_error(e: HostError) -> Response {
    let status = match &e {
        HostError::NotFound(_) => StatusCode::NOT_FOUND,
        HostError::Invalid(_) => StatusCode::BAD_REQUEST,
        HostError::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    error(status, if status.is_client_error() { "invalid_request_error" } else { "server_error" }, &e.to_string())
}

fn no_graphs() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "this server offers no graph threads: start it with --graphs DIR",
    )
}

/// The host, or the 404 saying the server has none.
fn host(server: &Server) -> Result<&Arc<dyn GraphHost>, Box<Response>> {
    server.config.graphs.as_ref().ok_or_else(|| Box::new(no_graphs()))
}

#[utoipa::path(get, path = "/v1/graphs",
    responses((status = 200, description = "The graphs offered: `{object: list, data: [GraphInfo]}`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn list_graphs(State(server): State<Arc<Server>>) -> Response {
    match host(&server) {
        Ok(host) => Json(json!({"object": "list", "data": host.graphs()})).into_response(),
        Err(response) => *response,
    }
}

#[utoipa::path(post, path = "/v1/threads", request_body = NewThread,
    responses((status = 201, body = ThreadView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody, description = "No such graph")))]
pub(crate) async fn create_thread(
    State(server): State<Arc<Server>>,
    crate::body::Body(request): crate::body::Body<NewThread>,
) -> Response {
    let host = match host(&server) {
        Ok(host) => host,
        Err(response) => return *response,
    };
    match host.create(&request.graph).await {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(e) => host_error(e),
    }
}

#[utoipa::path(get, path = "/v1/threads/{id}", params(("id" = String, Path)),
    responses((status = 200, body = ThreadView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
pub(crate) async fn get_thread(State(server): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    let host = match host(&server) {
        Ok(host) => host,
        Err(response) => return *response,
    };
    match host.thread(&id).await {
        Ok(Some(view)) => Json(view).into_response(),
        Ok(None) => host_error(HostError::NotFound(format!("no thread `{id}`"))),
        Err(e) => host_error(e),
    }
}

#[utoipa::path(get, path = "/v1/threads/{id}/history", params(("id" = String, Path)),
    responses((status = 200, description = "The thread's checkpoints, newest first: `{object: list, data}`"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn thread_history(State(server): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    let host = match host(&server) {
        Ok(host) => host,
        Err(response) => return *response,
    };
    match host.history(&id).await {
        Ok(data) => Json(json!({"object": "list", "data": data})).into_response(),
        Err(e) => host_error(e),
    }
}

#[utoipa::path(post, path = "/v1/threads/{id}/fork", params(("id" = String, Path)), request_body = ForkRequest,
    responses((status = 201, body = ThreadView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn fork_thread(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    crate::body::Body(request): crate::body::Body<ForkRequest>,
) -> Response {
    let host = match host(&server) {
        Ok(host) => host,
        Err(response) => return *response,
    };
    match host.fork(&id, request).await {
        Ok(view) => (StatusCode::CREATED, Json(view)).into_response(),
        Err(e) => host_error(e),
    }
}

#[utoipa::path(post, path = "/v1/threads/{id}/runs", params(("id" = String, Path)), request_body = ThreadRunRequest,
    responses((status = 202, body = crate::runs::RunView, description = "The run (follow it at /v1/runs/{id}/events)"),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody), (status = 429, body = ErrorBody)))]
pub(crate) async fn run_thread(
    State(server): State<Arc<Server>>,
    Path(id): Path<String>,
    crate::body::Body(request): crate::body::Body<ThreadRunRequest>,
) -> Response {
    let host = match host(&server) {
        Ok(host) => host.clone(),
        Err(response) => return *response,
    };
    let thread = match host.thread(&id).await {
        Ok(Some(view)) => view,
        Ok(None) => return host_error(HostError::NotFound(format!("no thread `{id}`"))),
        Err(e) => return host_error(e),
    };
    let title = format!("graph {} on thread {id}", thread.graph);
    let job = move |scope: RunScope| async move { host.run(&id, request, scope).await };
    match server.start_job(RunKind::Graph, title, job) {
        Ok(run) => (StatusCode::ACCEPTED, Json(run.view())).into_response(),
        Err(Busy) => busy(),
    }
}
