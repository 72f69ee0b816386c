//! The HTTP server: the runs API (start, status, Server-Sent Events resumable with
//! `Last-Event-ID`, cancel), `/health`, `/openapi.json`, and the OpenAI-compatible endpoints
//! ([`crate::openai`]); bearer-token auth, a request size limit, a cap on concurrent runs with a
//! bounded queue (429 with `Retry-After` beyond it), and a graceful shutdown that cancels the
//! runs and lets their final events out.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Json;
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::{Stream, StreamExt};
use recursive_core::{Budget, RunScope};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use utoipa::OpenApi;

use crate::runs::{RecordSink, RunFilter, RunKind, RunOutput, RunRecord, RunRequest, RunView, Runner};
use crate::store::RunStore;
use serde::Serialize;
use utoipa::ToSchema;

/// How the server runs.
#[derive(Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The bearer token every request but `/health` must carry (required off loopback).
    pub token: Option<String>,
    /// Runs at once.
    pub max_concurrent_runs: usize,
    /// Runs waiting for a slot; beyond it a request gets 429.
    pub max_queued_runs: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long a shutdown waits for cancelled runs to write their final events; a second
    /// later the server stops, closing streams whose readers stalled.
    pub shutdown_grace: Duration,
    /// Host names answered to besides the loopback names and the listening address (see
    /// [`crate::guard`]).
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call the server (CORS); none by default.
    pub cors_origins: Vec<String>,
    /// Where runs are kept past their flight (`None`: in memory only).
    pub archive: Option<Arc<dyn recursive_store::RunArchive>>,
    /// How many finished runs to keep, and for how long.
    pub retention: crate::store::Retention,
    /// Where permission asks of runs wait for their clients' answers (`None`: the server
    /// denies asks itself).
    pub answers: Option<Arc<recursive_core::AnswerBoard>>,
    /// Graph threads over HTTP (`None`: the threads API answers 404).
    pub graphs: Option<Arc<dyn crate::threads::GraphHost>>,
    /// Where the LangGraph store API keeps its items (`None`: in the server's memory).
    pub items: Option<Arc<dyn recursive_core::items::ItemStore>>,
    /// The job queue of a PostgreSQL store: where `POST /v1/runs` queues its runs for workers
    /// when it says so (`None`: no queue; this process runs every run).
    pub queue: Option<crate::queued::RunQueue>,
    /// Where the runs of `POST /v1/runs` this process runs are held and journaled, so a server
    /// killed mid-run resumes them when it starts again (`None`: a killed server's runs end
    /// interrupted). See the `durable` module.
    pub journals: Option<Arc<dyn recursive_store::Checkpointer>>,
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("listen", &self.listen)
            .field("max_concurrent_runs", &self.max_concurrent_runs)
            .field("max_queued_runs", &self.max_queued_runs)
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8787)),
            token: None,
            max_concurrent_runs: 8,
            max_queued_runs: 32,
            max_body_bytes: 32 * 1024 * 1024,
            shutdown_grace: Duration::from_secs(10),
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            archive: None,
            retention: Default::default(),
            answers: None,
            items: None,
            graphs: None,
            queue: None,
            journals: None,
        }
    }
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Listening off loopback without a token.
    #[error(
        "refusing to listen on {0} without a bearer token: set one (e.g. RECURSIVE_SERVE_TOKEN) or listen on 127.0.0.1"
    )]
    NoToken(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

/// What the handlers share.
pub struct Server {
    pub(crate) runner: Arc<dyn Runner>,
    pub(crate) store: Arc<RunStore>,
    /// Conversations waiting on a client's tool results.
    pub(crate) continuations: crate::conversation::Continuations,
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    /// Set when the server stops: durable runs cancelled then are left to the next server.
    stopping: AtomicBool,
    pub(crate) config: ServeConfig,
    /// Sees every event of every run besides the run's own record (e.g. span export).
    observer: Option<Arc<dyn recursive_core::EventSink>>,
}

/// Too many runs.
pub(crate) struct Busy;

/// What [`Server::recover`] did with the runs a stopped server left unfinished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    /// Durable runs resumed (or to be, once another process holding one lets go).
    pub resumed: usize,
    /// Runs marked interrupted.
    pub interrupted: usize,
}

impl Server {
    /// A server over `runner`.
    pub fn new(runner: Arc<dyn Runner>, config: ServeConfig) -> Arc<Self> {
        Self::observed(runner, config, None)
    }

    /// A server over `runner` whose runs' events also go to `observer`.
    pub fn observed(
        runner: Arc<dyn Runner>,
        config: ServeConfig,
        observer: Option<Arc<dyn recursive_core::EventSink>>,
    ) -> Arc<Self> {
        Arc::new(Server {
            runner,
            store: Arc::new(match &config.archive {
                Some(archive) => {
                    RunStore::new(archive.clone(), config.retention).with_journals(config.journals.clone())
                }
                None => RunStore::new(Arc::new(recursive_store::MemoryArchive::default()), config.retention),
            }),
            continuations: Default::default(),
            slots: Arc::new(Semaphore::new(config.max_concurrent_runs.max(1))),
            waiting: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            config,
            observer,
        })
    }

    /// Starts a run in the background (queued while every slot is taken) for a caller that
    /// waits for it (the OpenAI-compatible endpoints, MCP, LangGraph's assistants): not durable,
    /// as a caller that got an error when the server stopped would pay for it twice.
    pub(crate) fn start(self: &Arc<Self>, request: RunRequest) -> Result<Arc<RunRecord>, Busy> {
        let (kind, title) = (request.kind, crate::runs::title_of(&request.input));
        let runner = self.runner.clone();
        self.start_job(kind, title, move |scope| async move { runner.run(request, scope).await })
    }

    /// Starts a run of the runs API in the background (queued while every slot is taken);
    /// durable when the server keeps journals (the `durable` module).
    pub(crate) fn start_run(self: &Arc<Self>, request: RunRequest) -> Result<Arc<RunRecord>, Busy> {
        let Some(journals) = self.config.journals.clone().filter(|_| crate::durable::resumable(&request)) else {
            return self.start(request);
        };
        self.admit()?;
        let record = self.store.create(request.kind, crate::runs::title_of(&request.input));
        let (id, runner, run) = (record.id.clone(), self.runner.clone(), record.clone());
        // Kept at once, so a run still waiting for a slot when the server stops resumes too.
        let kept = tokio::spawn(crate::durable::keep_request(journals.clone(), id.clone(), request.clone()));
        self.spawn_durable(record.clone(), move |scope| async move {
            if let Ok(Err(e)) = kept.await {
                tracing::warn!("keeping the request of run {id}: {e}; it will not resume after a crash");
            }
            crate::durable::run(crate::durable::Hold::Fresh(journals), runner, &run, request, scope).await
        });
        Ok(record)
    }

    /// Resumes the durable runs a killed server left unfinished (see the `durable` module): each
    /// goes on under its id, its events numbered after those kept. Returns the ids it resumed
    /// and those another process holds: each of those is taken up as soon as its holder lets go
    /// (a server restarted elsewhere waits out its predecessor's lease), unless it finished.
    async fn resume_left(self: &Arc<Self>) -> Result<Vec<String>, String> {
        let Some(journals) = self.config.journals.clone() else { return Ok(Vec::new()) };
        let mut taken_up = Vec::new();
        for (view, created_ms) in self.store.left_unfinished(self.config.queue.as_ref().map(|q| &q.queue)).await? {
            let id = view.id.clone();
            // One run that cannot be taken up is marked interrupted; the others go on.
            let taken = match crate::durable::take_left(&journals, &id, false).await {
                Ok(crate::durable::Left::Taken(request, taken)) => self.resume(view, created_ms, *request, taken).await,
                Ok(crate::durable::Left::Elsewhere) => {
                    self.resume_once_free(journals.clone(), id.clone());
                    Ok(())
                }
                Ok(crate::durable::Left::NotDurable) => continue,
                Err(e) => Err(e),
            };
            match taken {
                Ok(()) => taken_up.push(id),
                Err(e) => tracing::warn!("run {id} a stopped server left cannot resume: {e}"),
            }
        }
        Ok(taken_up)
    }

    /// Waits in the background for run `id`'s holder to let go, then resumes it if it is still
    /// unfinished.
    fn resume_once_free(self: &Arc<Self>, journals: Arc<dyn recursive_store::Checkpointer>, id: String) {
        let server = self.clone();
        tokio::spawn(async move {
            let taken_up = async {
                let (request, taken) = match crate::durable::take_left(&journals, &id, true).await? {
                    crate::durable::Left::Taken(request, taken) => (request, taken),
                    _ => return server.store.interrupt_left(&id).await,
                };
                if server.stopping.load(Ordering::SeqCst) {
                    taken.release().await;
                    return Ok(());
                }
                match server.store.archived(&id).await? {
                    Some((view, created_ms)) if view.status != crate::runs::RunStatus::Finished => {
                        server.resume(view, created_ms, *request, taken).await
                    }
                    _ => {
                        taken.release().await;
                        Ok(())
                    }
                }
            };
            if let Err(e) = taken_up.await {
                tracing::warn!("taking up run {id} a stopped server left: {e}");
            }
        });
    }

    /// Runs `request` again as the run of `view` this process has `taken`.
    async fn resume(
        self: &Arc<Self>,
        view: RunView,
        created_ms: i64,
        request: RunRequest,
        taken: recursive_store::Runner,
    ) -> Result<(), String> {
        let base = self.store.next_event(&view.id).await?;
        let record = RunRecord::resumed(view, created_ms, base, tokio_util::sync::CancellationToken::new());
        let why = "the server stopped before the run finished";
        record.note(&json!({"type": "resumed", "first_event": base, "why": why}));
        self.store.register(record.clone());
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let (runner, run) = (self.runner.clone(), record.clone());
        self.spawn_durable(record, move |scope| async move {
            crate::durable::run(crate::durable::Hold::Left(taken), runner, &run, request, scope).await
        });
        Ok(())
    }

    /// Starts `job` as a run of `kind` in the background (queued while every slot is taken):
    /// its events go to the run's record (and the observer), its cancel token is the run's.
    pub(crate) fn start_job<F, Fut>(
        self: &Arc<Self>,
        kind: RunKind,
        title: String,
        job: F,
    ) -> Result<Arc<RunRecord>, Busy>
    where
        F: FnOnce(RunScope) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = RunOutput> + Send + 'static,
    {
        self.admit()?;
        let record = self.store.create(kind, title);
        self.spawn_on(record.clone(), job);
        Ok(record)
    }

    /// Takes a place in the queue of runs waiting for a slot, or says the server is busy.
    fn admit(&self) -> Result<(), Busy> {
        if self.slots.available_permits() == 0 && self.waiting.load(Ordering::SeqCst) >= self.config.max_queued_runs {
            return Err(Busy);
        }
        self.waiting.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Runs `job` as the run of `record` once a slot is free (its place in the queue taken).
    fn spawn_on<F, Fut>(self: &Arc<Self>, record: Arc<RunRecord>, job: F)
    where
        F: FnOnce(RunScope) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = RunOutput> + Send + 'static,
    {
        self.spawn_job(record, false, move |scope| async move { crate::durable::JobEnd::Finished(job(scope).await) });
    }

    /// [`Server::spawn_on`] for a durable run: one the server stops (queued or running) is left
    /// unfinished in the store for the next server.
    fn spawn_durable<F, Fut>(self: &Arc<Self>, record: Arc<RunRecord>, job: F)
    where
        F: FnOnce(RunScope) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = crate::durable::JobEnd> + Send + 'static,
    {
        self.spawn_job(record, true, job);
    }

    fn spawn_job<F, Fut>(self: &Arc<Self>, record: Arc<RunRecord>, durable: bool, job: F)
    where
        F: FnOnce(RunScope) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = crate::durable::JobEnd> + Send + 'static,
    {
        let (server, run) = (self.clone(), record);
        tokio::spawn(async move {
            let permit = server.slots.clone().acquire_owned().await;
            server.waiting.fetch_sub(1, Ordering::SeqCst);
            if durable && run.stopped() {
                return run.leave(crate::durable::left_output());
            }
            if run.cancel.is_cancelled() || permit.is_err() {
                run.finish(RunOutput {
                    outcome: recursive_core::FinishReason::Cancelled,
                    ..RunOutput::failed("cancelled before it started")
                });
                return;
            }
            run.set_running();
            match job(run_scope(&run, server.observer.clone())).await {
                crate::durable::JobEnd::Finished(output) => {
                    run.finish(output);
                    // The slot is free once the run is in the store (see `RunStore::kept`).
                    server.store.kept(&run.id).await;
                }
                // Stopped with the server: kept unfinished, for the next server to resume — its
                // last events written before its lease is let go.
                crate::durable::JobEnd::Left(output, held) => {
                    run.leave(output);
                    server.store_flush().await;
                    if let Err(e) = held.close(false).await {
                        tracing::warn!("letting go of run {}: {e}", run.id);
                    }
                }
            }
            drop(permit);
        });
    }

    /// The router with every endpoint.
    pub fn router(self: &Arc<Self>) -> axum::Router {
        let api = axum::Router::new()
            .route("/v1/runs", post(create_run).get(list_runs))
            .route("/v1/runs/{id}", get(get_run).delete(delete_run))
            .route("/v1/runs/{id}/events", get(run_events))
            .route("/v1/runs/{id}/cancel", post(cancel_run))
            .route("/v1/runs/{id}/asks/{ask}", post(answer_ask))
            .route("/v1/graphs", get(crate::threads::list_graphs))
            .route("/v1/threads", post(crate::threads::create_thread))
            .route("/v1/threads/{id}", get(crate::threads::get_thread))
            .route("/v1/threads/{id}/history", get(crate::threads::thread_history))
            .route("/v1/threads/{id}/runs", post(crate::threads::run_thread))
            .route("/v1/threads/{id}/fork", post(crate::threads::fork_thread))
            .route("/v1/models", get(crate::openai::models))
            .route("/v1/chat/completions", post(crate::openai::chat_completions))
            .route("/v1/responses", post(crate::responses::create_response))
            .route("/openapi.json", get(openapi))
            .nest_service("/mcp", self.mcp_service())
            .merge(crate::langgraph::router(self))
            .layer(axum::middleware::from_fn_with_state(self.clone(), require_token));
        let guard = Arc::new(crate::guard::Guard::new(
            self.config.listen,
            self.config.token.as_deref().is_some_and(|t| !t.is_empty()),
            &self.config.allowed_hosts,
            &self.config.cors_origins,
        ));
        let mut router = axum::Router::new()
            .route("/health", get(health))
            .merge(crate::web::router())
            .merge(api)
            .layer(DefaultBodyLimit::max(self.config.max_body_bytes))
            .with_state(self.clone());
        router = router.layer(axum::middleware::from_fn(error_shape));
        if let Some(cors) = guard.cors_layer() {
            router = router.layer(cors);
        }
        router.layer(axum::middleware::from_fn_with_state(guard, crate::guard::check))
    }

    /// The MCP server over streamable HTTP (mounted at `/mcp`).
    fn mcp_service(
        self: &Arc<Self>,
    ) -> StreamableHttpService<
        crate::mcp::McpServer,
        rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
    > {
        let server = self.clone();
        // Host and Origin are checked for every route by the guard (crate::guard).
        let mut config = StreamableHttpServerConfig::default().disable_allowed_hosts();
        config.max_request_body_bytes = self.config.max_body_bytes;
        StreamableHttpService::new(
            move || Ok(crate::mcp::McpServer::new(server.clone())),
            Arc::new(Default::default()),
            config,
        )
    }

    /// Serves until `shutdown` resolves, then cancels every run and waits (up to the grace)
    /// for them to finish. Prints nothing; returns the bound address through `bound`.
    pub async fn serve(
        self: Arc<Self>,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
        bound: impl FnOnce(SocketAddr),
    ) -> Result<(), ServeError> {
        let addr = self.config.listen;
        if !addr.ip().is_loopback() && self.config.token.as_deref().is_none_or(str::is_empty) {
            return Err(ServeError::NoToken(addr));
        }
        let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| ServeError::Bind(addr, e))?;
        bound(listener.local_addr().map_err(|e| ServeError::Bind(addr, e))?);
        let server = self.clone();
        let (asked, stopping) = tokio::sync::oneshot::channel::<()>();
        let stop = async move {
            shutdown.await;
            let _ = asked.send(());
            server.shutdown().await;
        };
        let serving = axum::serve(listener, self.router()).with_graceful_shutdown(stop);
        // A reader that stopped reading keeps its stream open for ever: the deadline ends them.
        let deadline = self.config.shutdown_grace + Duration::from_secs(1);
        tokio::select! {
            served = serving => served.map_err(|e| ServeError::Bind(addr, e)),
            () = async {
                if stopping.await.is_err() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(deadline).await;
            } => Ok(()),
        }
    }

    /// Cancels every unfinished run and waits for them to finish, up to the grace period. A
    /// durable run stops without finishing: the next server on the store resumes it.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        let runs = self.store.unfinished();
        for run in &runs {
            run.stop();
        }
        let all = futures::future::join_all(runs.iter().map(|r| wait_finished(r)));
        let _ = tokio::time::timeout(self.config.shutdown_grace, all).await;
        if let Err(e) = self.store.flush().await {
            tracing::warn!("keeping the last runs in the store failed: {e}");
        }
    }

    /// Writes every run's new events and status to the store now (tests and benchmarks).
    pub async fn store_flush(&self) {
        if let Err(e) = self.store.flush().await {
            tracing::warn!("keeping runs in the store failed: {e}");
        }
    }

    /// Takes up the runs a stopped server left unfinished in the store: durable ones resume
    /// (the `durable` module), the others are marked interrupted; then applies retention. Call
    /// before serving.
    pub async fn recover(self: &Arc<Self>) -> Result<Recovered, String> {
        let taken_up = self.resume_left().await?;
        let interrupted = self.store.recover(self.config.queue.as_ref().map(|q| &q.queue), &taken_up).await?;
        Ok(Recovered { resumed: taken_up.len(), interrupted })
    }
}

/// The root scope of a served run: its events go to the run's record (and `observer`), its
/// cancel token is the run's.
pub fn run_scope(run: &Arc<RunRecord>, observer: Option<Arc<dyn recursive_core::EventSink>>) -> RunScope {
    let name = match run.kind {
        RunKind::Run => "main",
        other => other.as_str(),
    };
    let mut sink = recursive_core::FanoutSink::new().with(Arc::new(RecordSink(run.clone())));
    if let Some(observer) = observer {
        sink.push(observer);
    }
    RunScope::root(name, Arc::new(sink), Arc::new(Budget::unlimited())).with_cancel(run.cancel.clone())
}

/// Waits until `run` has finished.
pub(crate) async fn wait_finished(run: &RunRecord) -> RunOutput {
    let mut changes = run.watch();
    loop {
        if let Some(result) = run.result() {
            return result;
        }
        if changes.changed().await.is_err() {
            return run.result().unwrap_or_else(|| RunOutput::failed("the run was lost"));
        }
    }
}

async fn require_token(State(server): State<Arc<Server>>, request: Request, next: Next) -> Response {
    let Some(token) = server.config.token.as_deref().filter(|t| !t.is_empty()) else {
        return next.run(request).await;
    };
    // LangGraph's SDKs send the token as `x-api-key` (see crate::langgraph).
    let api_key = request.headers().get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim);
    if bearer(request.headers()) == Some(token) || api_key == Some(token) {
        return next.run(request).await;
    }
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "authentication_error",
        "a valid `Authorization: Bearer <token>` header is required",
    );
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"recursive\""));
    response
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case, RFC 9110).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Every error response's body, in OpenAI's shape.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// An error's detail.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// What went wrong and, where it helps, how to fix it.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `permission_error`, `not_found_error`,
    /// `request_too_large`, `rate_limit_error` or `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    /// A machine-readable code (`unsupported_parameter`), when there is one.
    pub code: Option<String>,
}

/// An error in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
pub(crate) fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = ErrorBody { error: ErrorDetail { message: message.into(), kind: kind.into(), param: None, code: None } };
    (status, Json(body)).into_response()
}

/// Largest error body (axum's own rejection texts are short) read to be reshaped.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Gives every error response but MCP's OpenAI's shape: axum's own rejections (a body that is
/// not JSON, the wrong content type, one too large), unknown routes and wrong methods otherwise
/// answer plain text or nothing. Headers (`Allow`, `Retry-After`, `WWW-Authenticate`) stay.
async fn error_shape(request: Request, next: Next) -> Response {
    let mcp = request.uri().path().starts_with("/mcp");
    let response = next.run(request).await;
    let status = response.status();
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("application/json"));
    if mcp || json || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_BODY)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_string())
        .unwrap_or_default();
    let message = match text.is_empty() {
        true => status.canonical_reason().unwrap_or("error").to_lowercase(),
        false => text,
    };
    let mut shaped = error(status, error_type(status), &message);
    for (name, value) in &parts.headers {
        if name != header::CONTENT_TYPE && name != header::CONTENT_LENGTH {
            shaped.headers_mut().insert(name.clone(), value.clone());
        }
    }
    shaped
}

/// OpenAI's error `type` for a status.
pub(crate) fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

/// 400 for a request field this server does not honour, as OpenAI answers one:
/// `param` names it, `code` is `unsupported_parameter`.
pub(crate) fn unsupported_parameter(param: &str, message: &str) -> Response {
    let error = ErrorDetail {
        message: message.into(),
        kind: "invalid_request_error".into(),
        param: Some(param.into()),
        code: Some("unsupported_parameter".into()),
    };
    (StatusCode::BAD_REQUEST, Json(ErrorBody { error })).into_response()
}

/// 429 with `Retry-After`.
pub(crate) fn busy() -> Response {
    let mut response = error(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_error",
        "every run slot and queue place is taken; retry later",
    );
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[utoipa::path(get, path = "/health", responses((status = 200, description = "The server is up"),
    (status = 403, body = ErrorBody, description = "A foreign `Host` or `Origin`")))]
async fn health(State(server): State<Arc<Server>>) -> Json<Value> {
    Json(json!({"status": "ok", "running": server.store.unfinished().len()}))
}

#[utoipa::path(post, path = "/v1/runs",
    request_body(description = "JSON, or a form with `kind`, `input` and files (each file an input)", content(
        (RunRequest = "application/json"),
        (Object = "multipart/form-data")
    )),
    responses((status = 202, body = RunView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 413, body = ErrorBody), (status = 415, body = ErrorBody),
        (status = 429, body = ErrorBody, description = "Too many runs")))]
async fn create_run(State(server): State<Arc<Server>>, request: Request) -> Response {
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let request = if multipart {
        match Multipart::from_request(request, &()).await {
            Ok(form) => from_form(form).await,
            Err(e) => Err((e.status(), e.body_text())),
        }
    } else {
        match crate::body::Body::<RunRequest>::from_request(request, &()).await {
            Ok(crate::body::Body(r)) => Ok(r),
            Err(response) => return response,
        }
    };
    let request = match request {
        Ok(r) => r,
        Err((status, message)) => return error(status, error_type(status), &message),
    };
    if let Some(why) = request.refused_asks(server.runner.kind_of(&request)) {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", &why);
    }
    if let Some(why) = server.runner.tool_clash(&request) {
        return crate::openai::tool_clash(&why);
    }
    if let Err(why) = crate::answer::check_for(request.options.response_format.as_ref()) {
        return error(StatusCode::BAD_REQUEST, "invalid_request_error", &why);
    }
    if let Some(queue) = server.config.queue.as_ref().filter(|q| q.enqueue) {
        return match queue.enqueue(&server.store, request).await {
            Ok(view) => (StatusCode::ACCEPTED, Json(view)).into_response(),
            Err(e) => store_failed(&e),
        };
    }
    match server.start_run(request) {
        Ok(run) => (StatusCode::ACCEPTED, Json(run.view())).into_response(),
        Err(Busy) => busy(),
    }
}

/// A run request from a form: `kind` and `input` fields, and each uploaded file an input named
/// by its field (or, for a field named `file` or `files`, by its file name's stem — `data.csv`
/// and `data.json` become `data` and `data_json`).
async fn from_form(mut form: Multipart) -> Result<RunRequest, (StatusCode, String)> {
    let mut kind = None;
    let mut input = String::new();
    let mut inputs = std::collections::BTreeMap::new();
    while let Some(field) = form.next_field().await.map_err(|e| (e.status(), e.body_text()))? {
        let name = field.name().unwrap_or_default().to_string();
        let file = field.file_name().map(str::to_string);
        let bytes = field.bytes().await.map_err(|e| (e.status(), e.body_text()))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match (name.as_str(), file) {
            ("kind", None) => {
                kind = Some(serde_json::from_value(Value::String(text)).map_err(|e| invalid(e.to_string()))?)
            }
            ("input", None) => input = text,
            ("file" | "files", Some(file)) => {
                let name =
                    crate::conversation::input_name(Some(&file), inputs.len(), &|n: &str| inputs.contains_key(n));
                inputs.insert(name, text);
            }
            (_, Some(_)) => {
                inputs.insert(name, text);
            }
            (other, None) => return Err(invalid(format!("unknown form field `{other}`"))),
        }
    }
    let kind = kind.ok_or_else(|| invalid("the form needs a `kind` field (run, rlm or goal)".into()))?;
    Ok(RunRequest { inputs, ..RunRequest::new(kind, input) })
}

/// A client's mistake in a form: 400 and why.
fn invalid(message: String) -> (StatusCode, String) {
    (StatusCode::BAD_REQUEST, message)
}

#[utoipa::path(get, path = "/v1/runs/{id}", params(("id" = String, Path)),
    responses((status = 200, body = RunView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "No such run")))]
async fn get_run(State(server): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    match server.store.view(&id).await {
        Ok(Some(view)) => Json(view).into_response(),
        Ok(None) => not_found(&id),
        Err(e) => store_failed(&e),
    }
}

/// 503 when the run store cannot be read.
fn store_failed(message: &str) -> Response {
    error(StatusCode::SERVICE_UNAVAILABLE, "server_error", &format!("the run store failed: {message}"))
}

/// A page of runs.
#[derive(Serialize, ToSchema)]
pub struct RunList {
    /// Always `list`.
    pub object: &'static str,
    /// The runs, newest first.
    pub data: Vec<RunView>,
    /// Whether older runs follow (ask with `before` = the last id).
    pub has_more: bool,
    /// Stored runs that could not be read (damaged, or written by a newer format), left out of
    /// `data` rather than failing the listing: their ids. Absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

#[utoipa::path(get, path = "/v1/runs", params(RunFilter),
    responses((status = 200, body = RunList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody)))]
async fn list_runs(State(server): State<Arc<Server>>, Query(filter): Query<RunFilter>) -> Response {
    match server.store.list(&filter).await {
        Ok(page) => {
            let list = RunList { object: "list", data: page.runs, has_more: page.more, unreadable: page.unreadable };
            Json(list).into_response()
        }
        Err(e) if e.starts_with("no run") => error(StatusCode::BAD_REQUEST, "invalid_request_error", &e),
        Err(e) => store_failed(&e),
    }
}

#[utoipa::path(delete, path = "/v1/runs/{id}", params(("id" = String, Path)),
    responses((status = 204, description = "Deleted with its events"), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody, description = "No such run"),
        (status = 409, body = ErrorBody, description = "Still running: cancel it first")))]
async fn delete_run(State(server): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    match server.store.delete(&id).await {
        Ok(Ok(true)) => StatusCode::NO_CONTENT.into_response(),
        Ok(Ok(false)) => not_found(&id),
        Ok(Err(status)) => {
            let message = format!("the run `{id}` is {status:?}; cancel it first").to_lowercase();
            error(StatusCode::CONFLICT, "invalid_request_error", &message)
        }
        Err(e) => store_failed(&e),
    }
}

#[utoipa::path(post, path = "/v1/runs/{id}/cancel", params(("id" = String, Path)),
    responses((status = 202, body = RunView), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "No such run")))]
async fn cancel_run(State(server): State<Arc<Server>>, Path(id): Path<String>) -> Response {
    if let Some(run) = server.store.live(&id) {
        run.cancel.cancel();
        return (StatusCode::ACCEPTED, Json(run.view())).into_response();
    }
    if let Some(queue) = &server.config.queue {
        return match queue.cancel(&server.store, &id).await {
            Ok(Some(view)) => (StatusCode::ACCEPTED, Json(view)).into_response(),
            Ok(None) => not_found(&id),
            Err(e) => store_failed(&e),
        };
    }
    // A run no longer in flight has ended: cancelling it changes nothing.
    match server.store.view(&id).await {
        Ok(Some(view)) => (StatusCode::ACCEPTED, Json(view)).into_response(),
        Ok(None) => not_found(&id),
        Err(e) => store_failed(&e),
    }
}

/// A client's answer to a permission ask.
#[derive(Debug, serde::Deserialize, ToSchema)]
pub struct AskAnswer {
    /// `allow` or `deny`.
    #[schema(value_type = String, example = "allow")]
    pub decision: recursive_core::Decision,
    /// Why (shown to the model on a denial).
    #[serde(default)]
    pub reason: Option<String>,
}

#[utoipa::path(post, path = "/v1/runs/{id}/asks/{ask}", params(("id" = String, Path), ("ask" = String, Path)),
    request_body = AskAnswer,
    responses((status = 202, description = "Answered: the call runs or is denied"), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody, description = "No such run, or no such open ask (answered, expired)")))]
async fn answer_ask(
    State(server): State<Arc<Server>>,
    Path((id, ask)): Path<(String, String)>,
    crate::body::Body(answer): crate::body::Body<AskAnswer>,
) -> Response {
    let Some(board) = &server.config.answers else {
        let message = "this server does not ask its clients: start it with --client-asks SECS";
        return error(StatusCode::NOT_FOUND, "invalid_request_error", message);
    };
    let Some(run) = server.store.live(&id) else {
        return not_found(&id);
    };
    if !run.asked(&ask) {
        let message = format!("the run `{id}` has no ask `{ask}`: answer an ask through the URL of the run that asked");
        return error(StatusCode::NOT_FOUND, "invalid_request_error", &message);
    }
    let allow = answer.decision == recursive_core::Decision::Allow;
    if !board.answer(&ask, recursive_core::ClientAnswer { allow, reason: answer.reason }) {
        let message = format!("no open ask `{ask}` (answered already, or its time ran out)");
        return error(StatusCode::NOT_FOUND, "invalid_request_error", &message);
    }
    (StatusCode::ACCEPTED, Json(json!({"ask": ask, "decision": answer.decision}))).into_response()
}

fn not_found(id: &str) -> Response {
    error(StatusCode::NOT_FOUND, "invalid_request_error", &format!("no run `{id}`"))
}

#[utoipa::path(get, path = "/v1/runs/{id}/events", params(("id" = String, Path)),
    responses((status = 200, description = "Server-Sent Events: every event of the run tree, `id` = its index; \
        then `event: end` with the result. Resumes after `Last-Event-ID`.", content_type = "text/event-stream"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn run_events(State(server): State<Arc<Server>>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    let from = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map_or(0, |last| last + 1);
    if let Some(run) = server.store.live(&id) {
        return Sse::new(event_stream(server.store.clone(), run, from))
            .keep_alive(KeepAlive::default())
            .into_response();
    }
    match server.store.view(&id).await {
        Ok(Some(_)) => {
            let stream = archived_stream(server.store.clone(), id, from);
            Sse::new(stream).keep_alive(KeepAlive::default()).into_response()
        }
        Ok(None) => not_found(&id),
        Err(e) => store_failed(&e),
    }
}

/// One event as SSE: `id` its index, `event` its type.
fn sse_event(index: usize, event: &str) -> Event {
    let kind = crate::runs::parse_event(event)["type"].as_str().unwrap_or("event").to_string();
    Event::default().id(index.to_string()).event(kind).data(event)
}

/// Every event of `run` from index `next`, then `end`: read a page at a time, so a reader
/// that stalls holds one page, never a copy of the run. The events of a resumed run's earlier
/// attempts (before the record's first) are read from `store` first.
fn event_stream(
    store: Arc<RunStore>,
    run: Arc<RunRecord>,
    mut next: usize,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let mut changes = run.watch();
        if next < run.base() {
            match send_archived(&store, &run.id, &mut next, &tx).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => return drop(tx.send(stream_failed(e)).await),
            }
        }
        loop {
            let (events, finished) = run.events_from(next);
            let read_all = events.len() < crate::runs::EVENT_PAGE;
            for (i, event) in events {
                if tx.send(sse_event(i, &event)).await.is_err() {
                    return;
                }
                next = i + 1;
            }
            if !read_all {
                continue;
            }
            if finished {
                let end = json!({"run": run.view()});
                let _ = tx.send(Event::default().event("end").data(end.to_string())).await;
                return;
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// The `error` event that ends a stream the store failed.
fn stream_failed(message: String) -> Event {
    let body = json!({"error": {"message": message, "type": "server_error"}});
    Event::default().event("error").data(body.to_string())
}

/// The events of a run not in flight in this process, read from the store a page at a time and
/// followed until the run has ended (a worker's run, written as it goes): the store is asked for
/// new events and the run's status every [`crate::store::FLUSH_EVERY`], then `end` is sent.
fn archived_stream(store: Arc<RunStore>, id: String, next: usize) -> impl Stream<Item = Result<Event, Infallible>> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(async move {
        let failed = stream_failed;
        let mut next = next;
        loop {
            // The status first: once it says finished, every event was written before it.
            let view = match store.view(&id).await {
                Ok(Some(view)) => view,
                Ok(None) => return drop(tx.send(failed(format!("the run `{id}` was deleted"))).await),
                Err(e) => return drop(tx.send(failed(e)).await),
            };
            match send_archived(&store, &id, &mut next, &tx).await {
                Ok(true) => {}
                Ok(false) => return,
                Err(e) => return drop(tx.send(failed(e)).await),
            }
            if view.status == crate::runs::RunStatus::Finished {
                let end = json!({"run": view});
                let _ = tx.send(Event::default().event("end").data(end.to_string())).await;
                return;
            }
            tokio::select! {
                () = tx.closed() => return,
                () = tokio::time::sleep(crate::store::FLUSH_EVERY) => {}
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).map(Ok)
}

/// Sends the archived events of `id` from `next` on, a page at a time; `false` when the reader
/// has gone.
async fn send_archived(
    store: &RunStore,
    id: &str,
    next: &mut usize,
    tx: &tokio::sync::mpsc::Sender<Event>,
) -> Result<bool, String> {
    loop {
        let page = store.archived_events(id, *next).await?;
        let last = page.len() < crate::runs::EVENT_PAGE;
        for event in page {
            if tx.send(sse_event(*next, &event)).await.is_err() {
                return Ok(false);
            }
            *next += 1;
        }
        if last {
            return Ok(true);
        }
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "Recursive", description = "Runs, their live events, and agents as OpenAI-compatible models."),
    paths(
        health,
        create_run,
        list_runs,
        get_run,
        delete_run,
        cancel_run,
        answer_ask,
        run_events,
        crate::threads::list_graphs,
        crate::threads::create_thread,
        crate::threads::get_thread,
        crate::threads::thread_history,
        crate::threads::run_thread,
        crate::threads::fork_thread,
        crate::openai::models,
        crate::openai::chat_completions,
        crate::responses::create_response
    ),
    components(schemas(
        RunRequest,
        RunView,
        RunList,
        AskAnswer,
        crate::threads::GraphInfo,
        crate::threads::ThreadView,
        crate::threads::ThreadRunRequest,
        crate::threads::ForkRequest,
        crate::threads::NewThread,
        RunOutput,
        RunKind,
        crate::runs::RunStatus,
        ErrorBody,
        ErrorDetail,
        crate::openai::ChatRequest,
        crate::openai::ChatCompletion,
        crate::responses::ResponsesRequest
    ))
)]
struct ApiDoc;

async fn openapi() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_resumed_runs_stream_begins_with_the_events_its_earlier_attempt_kept() {
        let archive = Arc::new(recursive_store::MemoryArchive::default());
        // The first server: two events, written to the store, then gone.
        let first = Arc::new(RunStore::new(archive.clone(), crate::Retention::default()));
        let record = first.create(RunKind::Run, "t".into());
        record.note(&json!({"type": "first"}));
        record.note(&json!({"type": "second"}));
        first.flush().await.unwrap();
        // The next server resumes it after them.
        let next = Arc::new(RunStore::new(archive, crate::Retention::default()));
        let base = next.next_event(&record.id).await.unwrap();
        assert_eq!(base, 2);
        let resumed = RunRecord::resumed(record.view(), record.created_ms, base, Default::default());
        resumed.note(&json!({"type": "resumed"}));
        next.register(resumed.clone());
        resumed.finish(RunOutput::failed("done"));
        let events: Vec<String> = event_stream(next, resumed, 0).map(|e| format!("{:?}", e.unwrap())).collect().await;
        assert_eq!(events.len(), 4, "three events and the end: {events:?}");
        for (i, kind) in ["first", "second", "resumed"].into_iter().enumerate() {
            assert!(events[i].contains(&format!("id: {i}")) && events[i].contains(kind), "{events:?}");
        }
        assert!(events.last().unwrap().contains("end"), "{events:?}");
    }

    #[test]
    fn a_thread_runs_resume_is_typed_as_any_json_value() {
        let doc = serde_json::to_value(ApiDoc::openapi()).unwrap();
        let resume = &doc["components"]["schemas"]["ThreadRunRequest"]["properties"]["resume"];
        let validator = jsonschema::validator_for(resume).unwrap();
        for value in [json!("yes"), json!({"approved": true}), json!(3), json!(null)] {
            assert!(validator.is_valid(&value), "{value} is refused by {resume}");
        }
    }
}
