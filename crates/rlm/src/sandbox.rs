//! The sandbox host: one persistent Python REPL session per [`Sandbox`], living in a worker
//! process ([`crate::worker`]) and fed one snippet at a time over a pipe ([`crate::wire`]). Host
//! functions are reached only through a [`SandboxHost`]; every failure (syntax error, exception,
//! timeout, memory, a crashed worker) comes back as data in a [`SnippetOutcome`].
//!
//! How the limits hold for any snippet:
//! - **Time**: the worker's interpreter stops a snippet whose own running time passes the limit
//!   (`TimeoutError`, the session survives); the host ends a snippet whose wall-clock time, host
//!   calls included, passes it (the next host call is aborted); and a worker that sends nothing
//!   for [`KILL_GRACE`] past the deadline (native maths such as `7**(3**17)`) is killed.
//! - **Memory**: the worker's allocator counts every byte of the session; past the limit the
//!   interpreter raises `MemoryError` at its next check, and a hard ceiling a little above it
//!   (reached inside one native call such as `('a ' * 10**8).split()`) ends the worker.
//! - **Recursion**: Monty's recursion limit (a catchable `RecursionError`), on a native stack
//!   sized for it.
//! - **Cancellation** (the run ends) kills the worker at once.
//! - **Interruption** (Ctrl-C in `recursive repl`) stops the snippet, not the session: a host
//!   call in flight is abandoned and the snippet gets a `KeyboardInterrupt` at its call site; a
//!   worker busy in pure computation (which Monty cannot be asked to stop) gets [`KILL_GRACE`]
//!   to reach a host call, and is then killed and restarted.
//!
//! A worker that dies takes the session's variables with it: the next snippet starts a fresh
//! worker with the globals bound again and says so at the top of its output.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use monty_types::{ExcType, MontyException, MontyObject};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::convert::json_to_monty;
use crate::rewrite::{ASYNC_PREFIX, restore_names, rewrite_awaited_calls};
use crate::wire::{self, CallAnswer, Finished, FromWorker, Incoming, ToWorker, WorkerLimits};
pub use crate::worker::{MAX_RECURSION_LIMIT, WORKER_ARG};

/// How long a worker may stay silent past a snippet's deadline before it is killed.
pub const KILL_GRACE: Duration = Duration::from_secs(1);
/// Bytes of a dead worker's stderr kept for the error message.
const STDERR_TAIL: usize = 4096;

/// Limits of every snippet run in a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxLimits {
    /// Wall-clock time one snippet may take, host calls included; reset for each snippet.
    pub timeout: Duration,
    /// Memory the session's Python values may take beyond the bound globals (the inputs), counted
    /// by the worker's allocator; `None` for no limit.
    pub memory_limit_bytes: Option<usize>,
    /// Deepest Python call stack (at most [`MAX_RECURSION_LIMIT`]; the worker's native stack is
    /// sized from it).
    pub recursion_limit: usize,
    /// Printed characters kept per snippet (head and tail; the middle is dropped).
    pub max_output_chars: usize,
    /// Host calls one snippet may make.
    pub max_host_calls: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(60),
            memory_limit_bytes: Some(512 * 1024 * 1024),
            recursion_limit: 1000,
            max_output_chars: 100_000,
            max_host_calls: 10_000,
        }
    }
}

/// A call from a snippet to a host function.
#[derive(Debug)]
pub struct HostCall {
    /// The function's name (without the async alias prefix).
    pub name: String,
    /// Positional arguments.
    pub args: Vec<MontyObject>,
    /// Keyword arguments, in call order.
    pub kwargs: Vec<(String, MontyObject)>,
    /// Whether the snippet awaits the call (or passes it to `gather`).
    pub awaited: bool,
}

/// The result of host work that completes later.
pub type HostResult = Result<Value, MontyException>;

/// How the host answers a call.
#[non_exhaustive]
pub enum HostReply {
    /// Answer at once with this value.
    Value(MontyObject),
    /// Raise this exception at the call site (catchable).
    Raise(MontyException),
    /// Work to run on the async runtime; its JSON result (or exception) is the answer.
    Pending(BoxFuture<'static, HostResult>),
    /// The call ends the snippet (`submit`): nothing after it runs and output printed after it
    /// is not kept. The value is reported in [`SnippetOutcome::finished`].
    Finish(Value),
}

/// The functions a snippet can reach.
pub trait SandboxHost: Send + Sync {
    /// Whether `name` is a host function.
    fn is_host_function(&self, name: &str) -> bool;

    /// Answers one call. Runs on the session thread; long work belongs in
    /// [`HostReply::Pending`].
    fn call(&self, call: HostCall) -> HostReply;
}

/// Why a snippet failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum SnippetErrorKind {
    /// The code did not parse.
    Syntax,
    /// An exception escaped the snippet.
    Exception,
    /// The snippet ran past its time limit.
    Timeout,
    /// The snippet went over its memory limit.
    Memory,
    /// The Python call stack went past its limit.
    Recursion,
    /// The run was cancelled while the snippet ran.
    Cancelled,
    /// The snippet was interrupted (Ctrl-C in the REPL); the session goes on.
    Interrupted,
    /// The sandbox itself failed (its worker crashed, or a bug).
    Internal,
}

/// A failed snippet: what kind of failure and the text the model sees (traceback included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SnippetError {
    /// The kind of failure.
    pub kind: SnippetErrorKind,
    /// Python-style error text, with internal names restored.
    pub message: String,
}

/// What running one snippet produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SnippetOutcome {
    /// Printed output (capped; see [`SandboxLimits::max_output_chars`]).
    pub stdout: String,
    /// Printed characters dropped by the cap.
    pub dropped_output_chars: usize,
    /// `repr()` of the value of a final expression statement, unless it is `None`.
    pub value: Option<String>,
    /// The failure, if the snippet failed.
    pub error: Option<SnippetError>,
    /// The payload of a call that finished the snippet ([`HostReply::Finish`]).
    pub finished: Option<Value>,
    /// Host calls made.
    pub host_calls: usize,
    /// Wall-clock time taken.
    pub duration_ms: u64,
}

/// The sandbox could not be started.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum SandboxError {
    /// The worker process could not be started or configured.
    #[error("could not start the sandbox worker: {0}")]
    Worker(String),
    /// The setup code failed.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
}

/// The program started as a sandbox worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerCommand {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (for a multi-purpose binary, [`WORKER_ARG`]).
    pub args: Vec<String>,
}

impl WorkerCommand {
    /// A binary whose `main` calls [`crate::worker::serve`] when its first argument is
    /// [`WORKER_ARG`].
    pub fn dispatching(program: impl Into<PathBuf>) -> Self {
        Self { program: program.into(), args: vec![WORKER_ARG.to_string()] }
    }

    /// The process's default worker: the one set by [`set_default_worker`], else the program
    /// named by `RECURSIVE_SANDBOX_WORKER`, else this executable started with [`WORKER_ARG`].
    pub fn default_for_process() -> Result<Self, SandboxError> {
        if let Some(w) = DEFAULT_WORKER.get() {
            return Ok(w.clone());
        }
        if let Some(p) = recursive_core::env::var_os("RECURSIVE_SANDBOX_WORKER") {
            return Ok(Self { program: p.into(), args: Vec::new() });
        }
        std::env::current_exe()
            .map(Self::dispatching)
            .map_err(|e| SandboxError::Worker(format!("cannot locate this executable: {e}")))
    }
}

static DEFAULT_WORKER: OnceLock<WorkerCommand> = OnceLock::new();

/// Sets the worker every [`Sandbox::start`] of this process uses (first call wins). Programs
/// that cannot serve as a worker themselves (tests, benchmarks) point this at a worker binary.
pub fn set_default_worker(worker: WorkerCommand) {
    let _ = DEFAULT_WORKER.set(worker);
}

/// A value bound in the session before its setup code runs.
#[derive(Debug, Clone)]
pub enum Global {
    /// Any Python value.
    Value(MontyObject),
    /// A `str`, sent to the worker as raw bytes: the way to bind large inputs (shared, not
    /// copied, on the host's side).
    Text(Arc<String>),
}

impl From<MontyObject> for Global {
    fn from(v: MontyObject) -> Self {
        Global::Value(v)
    }
}

/// A running worker: its stdin, the frames it sends (read by a task of their own) and the tail
/// of its stderr.
struct Session {
    child: Child,
    stdin: ChildStdin,
    frames: mpsc::Receiver<std::io::Result<Option<Incoming>>>,
    stderr: Arc<Mutex<String>>,
}

/// Why a snippet lost its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    Timeout,
    Cancelled,
    Interrupted,
    Crashed,
}

/// Why the host stopped a snippet that kept its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trip {
    Timeout,
    Interrupt,
}

impl Trip {
    /// What a host call of a tripped snippet raises.
    fn abort(self) -> CallAnswer {
        match self {
            Trip::Timeout => abort(ExcType::TimeoutError, "snippet time limit exceeded"),
            Trip::Interrupt => abort(ExcType::KeyboardInterrupt, "interrupted"),
        }
    }
}

/// A persistent Python session. Variables, functions and imports persist between snippets.
pub struct Sandbox {
    limits: SandboxLimits,
    worker: WorkerCommand,
    globals: Vec<(String, MontyObject)>,
    texts: Vec<(String, Arc<String>)>,
    globals_bytes: usize,
    setup: String,
    session: tokio::sync::Mutex<Option<Session>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("limits", &self.limits).field("worker", &self.worker).finish()
    }
}

impl Sandbox {
    /// Starts a session in the process's default worker ([`WorkerCommand::default_for_process`]),
    /// binds `globals` and runs `setup` (e.g. imports).
    pub async fn start(
        limits: SandboxLimits,
        globals: Vec<(String, Global)>,
        setup: &str,
    ) -> Result<Sandbox, SandboxError> {
        Self::start_with(WorkerCommand::default_for_process()?, limits, globals, setup).await
    }

    /// Starts a session in the given worker.
    pub async fn start_with(
        worker: WorkerCommand,
        limits: SandboxLimits,
        globals: Vec<(String, Global)>,
        setup: &str,
    ) -> Result<Sandbox, SandboxError> {
        let mut limits = limits;
        limits.recursion_limit = limits.recursion_limit.clamp(1, MAX_RECURSION_LIMIT);
        let mut values = Vec::new();
        let mut texts = Vec::new();
        let mut globals_bytes = 0;
        for (name, g) in globals {
            match g {
                Global::Value(v) => {
                    globals_bytes += name.len() + approx_bytes(&v);
                    values.push((name, v));
                }
                Global::Text(t) => {
                    globals_bytes += name.len() + t.len() + 64;
                    texts.push((name, t));
                }
            }
        }
        let sandbox = Sandbox {
            limits,
            worker,
            globals: values,
            texts,
            globals_bytes,
            setup: setup.to_string(),
            session: Default::default(),
        };
        let session = sandbox.open_session().await?;
        *sandbox.session.lock().await = Some(session);
        Ok(sandbox)
    }

    /// The limits of this sandbox.
    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    /// Runs one snippet. Awaited host calls are rewritten to their async alias first (see
    /// [`crate::rewrite`]). `cancel` kills the worker and ends the snippet at once.
    pub async fn execute(&self, code: &str, host: Arc<dyn SandboxHost>, cancel: &CancellationToken) -> SnippetOutcome {
        self.run_cell(code, host, cancel, &CancellationToken::new()).await
    }

    /// Runs one snippet that `interrupt` stops without ending the session (see the module docs);
    /// `cancel` kills the worker at once.
    pub async fn run_cell(
        &self,
        code: &str,
        host: Arc<dyn SandboxHost>,
        cancel: &CancellationToken,
        interrupt: &CancellationToken,
    ) -> SnippetOutcome {
        let rewritten = rewrite_awaited_calls(code, &|name| host.is_host_function(name));
        let mut slot = self.session.lock().await;
        let mut notice = None;
        if slot.is_none() {
            match self.open_session().await {
                Ok(s) => {
                    *slot = Some(s);
                    notice = Some(RESTART_NOTICE);
                }
                Err(e) => return internal(format!("RuntimeError: the sandbox could not be restarted: {e}")),
            }
        }
        let Some(session) = slot.as_mut() else { return internal("RuntimeError: the sandbox session is gone".into()) };
        let mut run = SnippetRun::new(&self.limits, host, cancel);
        run.interrupt = interrupt.clone();
        let result = run.drive(session, rewritten).await;
        let mut outcome = match result {
            Ok(finished) => {
                let outcome = run.outcome(finished);
                // After a `MemoryError` the session's heap is both full and, per Monty, without
                // correctness guarantees: it is replaced before the next snippet.
                if outcome.error.as_ref().is_some_and(|e| e.kind == SnippetErrorKind::Memory)
                    && let Some(s) = slot.take()
                {
                    end_session(s).await;
                }
                outcome
            }
            Err(lost) => {
                let taken = slot.take();
                let status = match taken {
                    Some(s) => end_session(s).await,
                    None => (None, String::new()),
                };
                run.lost_outcome(lost, status)
            }
        };
        if let Some(n) = notice {
            outcome.stdout = format!("{n}\n{}", outcome.stdout);
        }
        outcome
    }

    async fn open_session(&self) -> Result<Session, SandboxError> {
        let mut session = spawn(&self.worker)?;
        let limits = WorkerLimits {
            feed_duration: self.limits.timeout,
            memory_bytes: self.limits.memory_limit_bytes.map(|m| m.saturating_add(self.globals_bytes)),
            recursion_limit: self.limits.recursion_limit,
            max_output_chars: self.limits.max_output_chars,
        };
        let worker_failed = |session: &Session, what: String| {
            let tail = session.stderr.lock().map(|s| s.clone()).unwrap_or_default();
            SandboxError::Worker(if tail.trim().is_empty() { what } else { format!("{what}: {}", tail.trim()) })
        };
        if wire::send(&mut session.stdin, &ToWorker::Init(limits)).await.is_err() {
            let _ = session.child.wait().await;
            return Err(worker_failed(&session, "the worker did not accept its configuration".into()));
        }
        match session.frames.recv().await {
            Some(Ok(Some(Incoming::Frame(FromWorker::Ready)))) => {}
            _ => {
                let _ = session.child.wait().await;
                return Err(worker_failed(
                    &session,
                    format!("the worker {} did not start", self.worker.program.display()),
                ));
            }
        }
        let never = CancellationToken::new();
        let mut run = SnippetRun::new(&self.limits, Arc::new(NoHost), &never);
        run.deadline = Instant::now() + self.limits.timeout.max(Duration::from_secs(30));
        let code = format!("{}{}", crate::rewrite::SHIMS, self.setup);
        let sent = wire::send_feed(&mut session.stdin, code, self.globals.clone(), &self.texts).await;
        let bound = match sent {
            Ok(()) => run.serve(&mut session).await,
            Err(_) => Err(Lost::Crashed),
        };
        match bound {
            Ok(Finished { failure: None, .. }) => Ok(session),
            Ok(Finished { failure: Some(f), .. }) => Err(SandboxError::Setup(restore_names(&f.text))),
            Err(_) => Err(worker_failed(&session, "the worker died while binding the inputs".into())),
        }
    }
}

const RESTART_NOTICE: &str = "[the sandbox was restarted after the previous snippet ended its worker: variables, \
functions and imports of earlier snippets are gone; `inputs` is bound again]";

fn internal(message: String) -> SnippetOutcome {
    SnippetOutcome { error: Some(SnippetError { kind: SnippetErrorKind::Internal, message }), ..Default::default() }
}

/// Approximate bytes a bound value takes in the worker (its strings dominate).
fn approx_bytes(v: &MontyObject) -> usize {
    if let Some(s) = v.as_ref().as_str() {
        return s.len() + 64;
    }
    if let Some(items) = crate::convert::sequence_items(v) {
        return items.iter().map(approx_bytes).sum::<usize>() + 64;
    }
    if let Some(pairs) = crate::convert::dict_pairs(v) {
        return pairs.iter().map(|(k, v)| approx_bytes(k) + approx_bytes(v)).sum::<usize>() + 64;
    }
    64
}

fn spawn(worker: &WorkerCommand) -> Result<Session, SandboxError> {
    let mut child = Command::new(&worker.program)
        .args(&worker.args)
        .env_clear()
        // The worker ends when this process does, even when killed (see `crate::worker`).
        .env(crate::worker::HOST_PID_VAR, std::process::id().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group: a terminal's Ctrl-C reaches the host, which interrupts the snippet.
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| SandboxError::Worker(format!("cannot start {}: {e}", worker.program.display())))?;
    let (Some(stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SandboxError::Worker("the worker's pipes are missing".into()));
    };
    let (tx, frames) = mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let frame = wire::receive_incoming(&mut stdout).await;
            let end = !matches!(frame, Ok(Some(_)));
            if tx.send(frame).await.is_err() || end {
                break;
            }
        }
    });
    let tail = Arc::new(Mutex::new(String::new()));
    let sink = tail.clone();
    tokio::spawn(async move {
        let mut buf = [0u8; 1024];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut t) = sink.lock() {
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
                if t.len() > STDERR_TAIL {
                    let cut = t.len() - STDERR_TAIL;
                    let cut = (cut..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
                    t.drain(..cut);
                }
            }
        }
    });
    Ok(Session { child, stdin, frames, stderr: tail })
}

/// Kills a worker and reports its exit code and the tail of its stderr.
async fn end_session(mut s: Session) -> (Option<i32>, String) {
    let status = match tokio::time::timeout(Duration::from_millis(200), s.child.wait()).await {
        Ok(Ok(status)) => status.code(),
        _ => {
            let _ = s.child.kill().await;
            None
        }
    };
    let tail = s.stderr.lock().map(|t| t.clone()).unwrap_or_default();
    (status, tail)
}

/// The state of one snippet on the host's side: host calls made, futures in flight, the
/// deadline, and what ended it.
struct SnippetRun<'a> {
    limits: &'a SandboxLimits,
    host: Arc<dyn SandboxHost>,
    cancel: &'a CancellationToken,
    /// Stops the snippet but not the session.
    interrupt: CancellationToken,
    started: Instant,
    deadline: Instant,
    host_calls: usize,
    finished: Option<Value>,
    trip: Option<Trip>,
    ready: HashMap<u32, CallAnswer>,
    /// Results of futures as host tasks finish them.
    done_tx: mpsc::UnboundedSender<(u32, CallAnswer)>,
    done_rx: mpsc::UnboundedReceiver<(u32, CallAnswer)>,
    outstanding: usize,
    tasks: Vec<AbortHandle>,
}

impl Drop for SnippetRun<'_> {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl<'a> SnippetRun<'a> {
    fn new(limits: &'a SandboxLimits, host: Arc<dyn SandboxHost>, cancel: &'a CancellationToken) -> Self {
        let started = Instant::now();
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        Self {
            limits,
            host,
            cancel,
            interrupt: CancellationToken::new(),
            started,
            deadline: started + limits.timeout,
            host_calls: 0,
            finished: None,
            trip: None,
            ready: HashMap::new(),
            done_tx,
            done_rx,
            outstanding: 0,
            tasks: Vec::new(),
        }
    }

    /// Sends one snippet and serves the worker's suspensions until it reports the end.
    async fn drive(&mut self, session: &mut Session, code: String) -> Result<Finished, Lost> {
        self.send(session, &ToWorker::Feed { code, globals: Vec::new(), texts: Vec::new() }).await?;
        self.serve(session).await
    }

    /// Serves the worker's suspensions until it reports the end of the snippet.
    async fn serve(&mut self, session: &mut Session) -> Result<Finished, Lost> {
        loop {
            let msg = self.next_frame(session).await?;
            let reply = match msg {
                Incoming::Frame(FromWorker::Done(finished)) => return Ok(finished),
                Incoming::Frame(FromWorker::Ready) => return Err(Lost::Crashed),
                Incoming::Frame(FromWorker::Lookup { name }) => {
                    let known = !name.starts_with(ASYNC_PREFIX) && self.host.is_host_function(&name);
                    ToWorker::Name(known.then(|| MontyObject::function(name, None)))
                }
                Incoming::Call { call_id, name, args, kwargs, awaited } => {
                    ToWorker::Answer(self.answer_call(call_id, name, args, kwargs, awaited).await?)
                }
                Incoming::Frame(FromWorker::Call { .. }) => return Err(Lost::Crashed),
                Incoming::Frame(FromWorker::Wait { pending }) => ToWorker::Futures(self.resolve(&pending).await?),
            };
            self.send(session, &reply).await?;
        }
    }

    async fn send(&self, session: &mut Session, msg: &ToWorker) -> Result<(), Lost> {
        wire::send(&mut session.stdin, msg).await.map_err(|_| Lost::Crashed)
    }

    /// The worker's next frame, unless the run is cancelled or the worker overruns its deadline
    /// (an interruption moves the deadline to now).
    async fn next_frame(&mut self, session: &mut Session) -> Result<Incoming, Lost> {
        loop {
            let kill_at = tokio::time::Instant::from_std(self.deadline + KILL_GRACE);
            let interrupted = self.trip == Some(Trip::Interrupt);
            let interrupt = self.interrupt.clone();
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Lost::Cancelled),
                _ = interrupt.cancelled(), if !interrupted => self.interrupted(),
                frame = session.frames.recv() => return match frame {
                    Some(Ok(Some(msg))) => Ok(msg),
                    _ => Err(Lost::Crashed),
                },
                _ = tokio::time::sleep_until(kill_at) => {
                    return Err(if interrupted { Lost::Interrupted } else { Lost::Timeout });
                }
            }
        }
    }

    /// Ends the snippet at its next host call, and its worker if none comes within [`KILL_GRACE`].
    fn interrupted(&mut self) {
        self.trip = Some(Trip::Interrupt);
        self.deadline = Instant::now();
    }

    fn past_deadline(&mut self) -> bool {
        if self.trip.is_none() && Instant::now() >= self.deadline {
            self.trip = Some(Trip::Timeout);
        }
        self.trip.is_some()
    }

    /// What a host call of this snippet raises once it is past its deadline or interrupted.
    fn trip_abort(&self) -> CallAnswer {
        self.trip.unwrap_or(Trip::Timeout).abort()
    }

    async fn answer_call(
        &mut self,
        call_id: u32,
        name: String,
        args: Vec<MontyObject>,
        kwargs: Vec<(String, MontyObject)>,
        eager: bool,
    ) -> Result<CallAnswer, Lost> {
        if self.past_deadline() {
            return Ok(self.trip_abort());
        }
        let (aliased, name) = match name.strip_prefix(ASYNC_PREFIX) {
            Some(base) => (true, base.to_string()),
            None => (false, name),
        };
        if !self.host.is_host_function(&name) {
            return Ok(CallAnswer::NotFound);
        }
        if self.host_calls >= self.limits.max_host_calls {
            let msg = format!("too many host calls in one snippet (limit {})", self.limits.max_host_calls);
            return Ok(abort(ExcType::RuntimeError, &msg));
        }
        self.host_calls += 1;
        let call = HostCall { name: name.clone(), args, kwargs, awaited: aliased || eager };
        Ok(match call_host(self.host.as_ref(), call) {
            HostReply::Raise(exc) => CallAnswer::Raise(exc),
            HostReply::Finish(payload) => {
                self.finished = Some(payload);
                CallAnswer::Abort {
                    exception: MontyException::new(ExcType::KeyboardInterrupt, Some("submitted".into())),
                    freeze_output: true,
                }
            }
            HostReply::Value(v) if aliased => {
                self.ready.insert(call_id, CallAnswer::Value(v));
                CallAnswer::Pending
            }
            HostReply::Value(v) => CallAnswer::Value(v),
            HostReply::Pending(fut) if aliased => {
                let tx = self.done_tx.clone();
                let task = tokio::spawn(async move {
                    let r = guard_panics(&name, fut).await;
                    let _ = tx.send((call_id, to_answer(r)));
                });
                self.tasks.push(task.abort_handle());
                self.outstanding += 1;
                CallAnswer::Pending
            }
            HostReply::Pending(fut) => match self.wait_for(guard_panics(&name, fut)).await? {
                Some(r) => to_answer(r),
                None => self.trip_abort(),
            },
        })
    }

    /// Waits for host work up to the snippet's deadline or an interruption (`None` then).
    async fn wait_for<T>(&mut self, fut: impl std::future::Future<Output = T>) -> Result<Option<T>, Lost> {
        let deadline = tokio::time::Instant::from_std(self.deadline);
        let interrupt = self.interrupt.clone();
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Err(Lost::Cancelled),
            _ = interrupt.cancelled() => {
                self.interrupted();
                Ok(None)
            }
            _ = tokio::time::sleep_until(deadline) => {
                self.trip = Some(Trip::Timeout);
                Ok(None)
            }
            v = fut => Ok(Some(v)),
        }
    }

    /// Results for some of the futures every task waits on (at least one, or an abort).
    async fn resolve(&mut self, pending: &[u32]) -> Result<Vec<(u32, CallAnswer)>, Lost> {
        loop {
            let deliver: Vec<(u32, CallAnswer)> =
                pending.iter().filter_map(|id| self.ready.remove(id).map(|a| (*id, a))).collect();
            if !deliver.is_empty() {
                return Ok(deliver);
            }
            let first = pending.first().copied().unwrap_or_default();
            if self.past_deadline() {
                return Ok(vec![(first, self.trip_abort())]);
            }
            if self.outstanding == 0 {
                return Ok(vec![(
                    first,
                    abort(ExcType::RuntimeError, "awaiting a future that no host call will resolve"),
                )]);
            }
            let deadline = tokio::time::Instant::from_std(self.deadline);
            let interrupt = self.interrupt.clone();
            let got = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Lost::Cancelled),
                _ = interrupt.cancelled() => {
                    self.interrupted();
                    continue;
                }
                _ = tokio::time::sleep_until(deadline) => None,
                r = self.done_rx.recv() => r,
            };
            match got {
                Some((id, answer)) => {
                    self.outstanding -= 1;
                    self.ready.insert(id, answer);
                    while let Ok((id, answer)) = self.done_rx.try_recv() {
                        self.outstanding -= 1;
                        self.ready.insert(id, answer);
                    }
                }
                None => self.trip = Some(Trip::Timeout),
            }
        }
    }

    fn base_outcome(&self) -> SnippetOutcome {
        SnippetOutcome {
            host_calls: self.host_calls,
            duration_ms: self.started.elapsed().as_millis() as u64,
            ..Default::default()
        }
    }

    fn outcome(&mut self, f: Finished) -> SnippetOutcome {
        let mut outcome = self.base_outcome();
        outcome.stdout = restore_names(&f.stdout);
        outcome.dropped_output_chars = f.dropped_output_chars;
        match (self.finished.take(), f.failure) {
            (Some(payload), _) => outcome.finished = Some(payload),
            (None, None) => outcome.value = f.value.map(|v| restore_names(&v)),
            (None, Some(failure)) => {
                outcome.error = Some(classify(&failure.exc_type, &restore_names(&failure.text), self.trip, self.limits))
            }
        }
        outcome
    }

    fn lost_outcome(&mut self, lost: Lost, (status, stderr): (Option<i32>, String)) -> SnippetOutcome {
        let mut outcome = self.base_outcome();
        if let Some(payload) = self.finished.take() {
            outcome.finished = Some(payload);
            return outcome;
        }
        let secs = self.limits.timeout.as_secs_f64();
        let mib = self.limits.memory_limit_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0);
        let (kind, message) = match lost {
            Lost::Cancelled => {
                (SnippetErrorKind::Cancelled, "KeyboardInterrupt: the run was cancelled while this snippet ran".into())
            }
            Lost::Interrupted => (
                SnippetErrorKind::Interrupted,
                format!(
                    "KeyboardInterrupt: the snippet did not stop within {:.1} s of the interrupt (a computation \
                     without host calls), so the sandbox was restarted; variables of earlier snippets are gone",
                    KILL_GRACE.as_secs_f64()
                ),
            ),
            Lost::Timeout => (
                SnippetErrorKind::Timeout,
                format!(
                    "TimeoutError: the snippet was stopped after {secs:.1} s (the per-snippet time limit) and the \
                     sandbox was restarted; variables of earlier snippets are gone. Work on smaller pieces; avoid \
                     huge computations such as enormous powers."
                ),
            ),
            Lost::Crashed if status == Some(monty_types::OOM_EXIT_CODE) => (
                SnippetErrorKind::Memory,
                format!(
                    "MemoryError: the snippet went over the {mib:.1} MiB memory limit and the sandbox was \
                     restarted; variables of earlier snippets are gone. Work on smaller slices and avoid building \
                     huge lists or strings at once."
                ),
            ),
            Lost::Crashed => {
                let why = match status {
                    Some(code) => format!("exit code {code}"),
                    None => "killed by a signal".to_string(),
                };
                let detail = recursive_core::text::truncate_middle(stderr.trim(), 500);
                (
                    SnippetErrorKind::Internal,
                    format!(
                        "RuntimeError: the sandbox worker crashed ({why}) and was restarted; variables of earlier \
                         snippets are gone.{}",
                        if detail.is_empty() { String::new() } else { format!(" Worker said: {detail}") }
                    ),
                )
            }
        };
        outcome.error = Some(SnippetError { kind, message });
        outcome
    }
}

fn abort(exc_type: ExcType, message: &str) -> CallAnswer {
    CallAnswer::Abort { exception: MontyException::new(exc_type, Some(message.into())), freeze_output: false }
}

fn to_answer(r: HostResult) -> CallAnswer {
    match r {
        Ok(v) => CallAnswer::Value(json_to_monty(&v)),
        Err(e) => CallAnswer::Raise(e),
    }
}

/// A host with no functions: snippets run plain Python, and any call of an unknown name is a
/// `NameError`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHost;

impl SandboxHost for NoHost {
    fn is_host_function(&self, _name: &str) -> bool {
        false
    }

    fn call(&self, call: HostCall) -> HostReply {
        HostReply::Raise(MontyException::new(ExcType::NameError, Some(format!("name '{}' is not defined", call.name))))
    }
}

/// The text of a panic payload.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string())
}

/// The exception a snippet sees when a host function panicked.
fn host_panic(name: &str, payload: &(dyn std::any::Any + Send)) -> MontyException {
    MontyException::new(
        ExcType::RuntimeError,
        Some(format!("host function `{name}` failed internally: {}", panic_text(payload))),
    )
}

/// Answers a call, turning a panic of the host into an exception at the call site, so a faulty
/// host function cannot take the session down.
pub(crate) fn call_host(host: &dyn SandboxHost, call: HostCall) -> HostReply {
    let name = call.name.clone();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| host.call(call)))
        .unwrap_or_else(|payload| HostReply::Raise(host_panic(&name, payload.as_ref())))
}

/// Runs host work, turning a panic into an exception (instead of leaving an awaited future
/// unresolved until the time limit).
pub(crate) async fn guard_panics(name: &str, fut: BoxFuture<'static, HostResult>) -> HostResult {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(payload) => Err(host_panic(name, payload.as_ref())),
    }
}

fn classify(exc_type: &str, text: &str, trip: Option<Trip>, limits: &SandboxLimits) -> SnippetError {
    let secs = limits.timeout.as_secs_f64();
    let mib = limits.memory_limit_bytes.unwrap_or(0) as f64 / (1024.0 * 1024.0);
    match (trip, exc_type) {
        (Some(Trip::Interrupt), _) => SnippetError {
            kind: SnippetErrorKind::Interrupted,
            message: with_context(text, "KeyboardInterrupt: interrupted".into()),
        },
        (Some(Trip::Timeout), _) | (None, "TimeoutError") => SnippetError {
            kind: SnippetErrorKind::Timeout,
            message: with_context(
                text,
                format!(
                    "TimeoutError: the snippet was stopped after {secs:.1} s (the per-snippet time limit, host calls \
                     included). Work on smaller pieces or fewer sub-calls per snippet, and avoid unbounded loops."
                ),
            ),
        },
        (_, "MemoryError") => SnippetError {
            kind: SnippetErrorKind::Memory,
            message: with_context(
                text,
                format!(
                    "MemoryError: the snippet went over the {mib:.1} MiB memory limit and the sandbox was restarted; \
                     variables of earlier snippets are gone. Work on smaller slices and avoid building huge lists, \
                     dicts or strings at once."
                ),
            ),
        },
        (_, "SyntaxError") => SnippetError { kind: SnippetErrorKind::Syntax, message: text.to_string() },
        (_, "RecursionError") => SnippetError { kind: SnippetErrorKind::Recursion, message: text.to_string() },
        _ => SnippetError { kind: SnippetErrorKind::Exception, message: text.to_string() },
    }
}

/// The traceback (if any) followed by a clearer final line.
fn with_context(text: &str, last: String) -> String {
    let head = strip_last_line(text);
    if head.is_empty() { last } else { format!("{head}\n{last}") }
}

/// The traceback without its final `Type: message` line (replaced by a clearer one).
fn strip_last_line(text: &str) -> &str {
    let t = text.trim_end();
    match t.rfind('\n') {
        Some(i) if t.starts_with("Traceback") => &t[..i],
        _ => "",
    }
    .trim_end()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_text_keeps_traceback_head() {
        let text =
            "Traceback (most recent call last):\n  File \"x\", line 1\nTimeoutError: snippet time limit exceeded";
        assert_eq!(strip_last_line(text), "Traceback (most recent call last):\n  File \"x\", line 1");
        assert_eq!(strip_last_line("TimeoutError: x"), "");
    }

    #[test]
    fn host_trip_classifies_any_exception_as_timeout() {
        let e = classify("KeyboardInterrupt", "KeyboardInterrupt: x", Some(Trip::Timeout), &SandboxLimits::default());
        assert_eq!(e.kind, SnippetErrorKind::Timeout);
    }
}
