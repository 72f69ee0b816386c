//! The Monty sandbox: one persistent Python REPL session living on its own thread, fed one
//! snippet at a time. Host functions are reached only through a [`SandboxHost`]; each snippet
//! runs under a wall-clock timeout, a memory limit, a recursion limit and a cap on captured
//! output, and every failure (syntax error, exception, timeout, memory) comes back as data in
//! a [`SnippetOutcome`] with the session intact.
//!
//! How the limits are enforced in-process (monty 0.0.23):
//! - **Time**: monty's own `max_duration` (interpreter time only, cumulative per tracker) is
//!   reset before every snippet, and a real wall-clock deadline is checked at the VM's
//!   periodic checkpoint (`PrintWriterCallback::poll_flush`, every 255 instructions) and while
//!   the snippet waits for host calls. Either one ends the snippet with `TimeoutError`.
//! - **Memory**: monty counts memory only through a global allocator (`monty-alloc`), which can
//!   abort the process and which this library does not install. Without it, monty still
//!   refuses single allocations larger than `max_memory` up front (`'a' * 10**10`). On top of
//!   that, the checkpoint samples the process's resident memory (at most every millisecond)
//!   and raises `MemoryError` when it has grown by more than the limit since the snippet
//!   started. This catches steady growth (a list filled in a loop); it measures the whole
//!   process, so concurrent work counts too, and a native operation that allocates without
//!   reaching a checkpoint is bounded only by the up-front checks and the time limit.
//! - **Recursion**: monty's `max_recursion_depth` (a catchable `RecursionError`); the session
//!   thread has a large stack so the limit is reached before the native stack is.
//! - **Output**: printed text beyond the cap is dropped from the middle, keeping head and tail.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::mpsc as std_mpsc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use monty::{MontyRepl, ReplProgress, ReplStartError};
use monty_types::{
    CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult, PrintWriter,
    PrintWriterCallback, ResourceLimits, ResourceTracker,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use tokio::task::AbortHandle;
use tokio_util::sync::CancellationToken;

use crate::convert::json_to_monty;
use crate::rewrite::{ASYNC_PREFIX, restore_names, rewrite_awaited_calls};

/// Native stack of the session thread per level of the recursion limit. Monty bounds its native
/// recursion (Python calls, repr, conversions to host values) by the recursion limit, and one
/// level can take several KiB of stack in an unoptimised build.
const STACK_BYTES_PER_LEVEL: usize = 128 * 1024;
/// The highest recursion limit a sandbox accepts (higher values are lowered to it).
pub const MAX_RECURSION_LIMIT: usize = 8192;
/// Bounds of the session thread's native stack (virtual memory; only touched pages are used).
const STACK_BYTES_MIN: usize = 64 * 1024 * 1024;
const STACK_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// How often (at most) the memory guard samples the process's resident memory.
const MEMORY_SAMPLE_EVERY: Duration = Duration::from_millis(1);

/// Limits of every snippet run in a sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxLimits {
    /// Wall-clock time one snippet may take, host calls included; reset for each snippet.
    pub timeout: Duration,
    /// Memory one snippet may add (see the module docs for how it is measured); `None` for no
    /// limit.
    pub memory_limit_bytes: Option<usize>,
    /// Deepest Python call stack (at most [`MAX_RECURSION_LIMIT`]; the session thread's native
    /// stack is sized from it).
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
    /// The sandbox itself failed (a bug, or the session thread is gone).
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
    /// No tokio runtime is running on the calling thread.
    #[error("the sandbox needs a tokio runtime: {0}")]
    NoRuntime(String),
    /// The session thread could not be spawned.
    #[error("could not start the sandbox thread: {0}")]
    Thread(String),
    /// The setup code failed.
    #[error("sandbox setup failed: {0}")]
    Setup(String),
}

struct Job {
    code: String,
    globals: Vec<(String, MontyObject)>,
    host: Arc<dyn SandboxHost>,
    cancel: CancellationToken,
    external: CancellationToken,
    reply: oneshot::Sender<SnippetOutcome>,
}

/// A persistent Python session. Variables, functions and imports persist between snippets.
pub struct Sandbox {
    jobs: Option<std_mpsc::Sender<Job>>,
    shutdown: CancellationToken,
    limits: SandboxLimits,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox").field("limits", &self.limits).finish()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.shutdown.cancel();
        self.jobs.take();
    }
}

impl Sandbox {
    /// Starts a session on its own thread, binds `globals` and runs `setup` (e.g. imports).
    /// Must be called inside a tokio runtime; host work runs on it.
    pub async fn start(
        limits: SandboxLimits,
        globals: Vec<(String, MontyObject)>,
        setup: &str,
    ) -> Result<Sandbox, SandboxError> {
        let handle = Handle::try_current().map_err(|e| SandboxError::NoRuntime(e.to_string()))?;
        let mut limits = limits;
        limits.recursion_limit = limits.recursion_limit.clamp(1, MAX_RECURSION_LIMIT);
        let (tx, rx) = std_mpsc::channel::<Job>();
        let thread_limits = limits.clone();
        std::thread::Builder::new()
            .name("rlm-sandbox".into())
            .stack_size(
                limits.recursion_limit.saturating_mul(STACK_BYTES_PER_LEVEL).clamp(STACK_BYTES_MIN, STACK_BYTES_MAX),
            )
            .spawn(move || session_thread(rx, thread_limits, handle))
            .map_err(|e| SandboxError::Thread(e.to_string()))?;
        let sandbox = Sandbox { jobs: Some(tx), shutdown: CancellationToken::new(), limits };
        let outcome = sandbox.submit_job(setup.to_string(), globals, Arc::new(NoHost), CancellationToken::new()).await;
        if let Some(e) = outcome.error {
            return Err(SandboxError::Setup(e.message));
        }
        Ok(sandbox)
    }

    /// The limits of this sandbox.
    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    /// Runs one snippet. Awaited host calls are rewritten to their async alias first (see
    /// [`crate::rewrite`]). `cancel` stops the snippet at its next checkpoint.
    pub async fn execute(&self, code: &str, host: Arc<dyn SandboxHost>, cancel: &CancellationToken) -> SnippetOutcome {
        let rewritten = rewrite_awaited_calls(code, &|name| host.is_host_function(name));
        self.submit_job(rewritten, Vec::new(), host, cancel.clone()).await
    }

    async fn submit_job(
        &self,
        code: String,
        globals: Vec<(String, MontyObject)>,
        host: Arc<dyn SandboxHost>,
        external: CancellationToken,
    ) -> SnippetOutcome {
        let (reply, rx) = oneshot::channel();
        let cancel = self.shutdown.child_token();
        // If this future is dropped mid-snippet, stop the snippet too.
        let guard = cancel.clone().drop_guard();
        let job = Job { code, globals, host, cancel, external, reply };
        let sent = self.jobs.as_ref().map(|tx| tx.send(job).is_ok()).unwrap_or(false);
        let outcome = if sent { rx.await.ok() } else { None };
        guard.disarm();
        outcome.unwrap_or_else(|| SnippetOutcome {
            error: Some(SnippetError {
                kind: SnippetErrorKind::Internal,
                message: "RuntimeError: the sandbox session is gone".into(),
            }),
            ..Default::default()
        })
    }
}

struct NoHost;

impl SandboxHost for NoHost {
    fn is_host_function(&self, _name: &str) -> bool {
        false
    }

    fn call(&self, call: HostCall) -> HostReply {
        HostReply::Raise(MontyException::new(ExcType::NameError, Some(format!("name '{}' is not defined", call.name))))
    }
}

fn session_thread(rx: std_mpsc::Receiver<Job>, limits: SandboxLimits, handle: Handle) {
    let mut resource =
        ResourceLimits::default().max_duration(limits.timeout).max_recursion_depth(limits.recursion_limit);
    if let Some(m) = limits.memory_limit_bytes {
        resource = resource.max_memory(m);
    }
    let mut repl = Some(MontyRepl::new("rlm.py", ResourceTracker::new(resource), CompileOptions::default()));
    while let Ok(mut job) = rx.recv() {
        let Some(current) = repl.take() else { break };
        let globals = std::mem::take(&mut job.globals);
        let (next, outcome) = run_job(current, &job, globals, &limits, &handle);
        repl = Some(next);
        let _ = job.reply.send(outcome);
    }
}

/// Why the host stopped a snippet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trip {
    Timeout,
    Memory(usize),
    Cancelled,
}

/// Captured output, capped: the first half of the cap is kept as head, the latest text as tail.
struct OutputBuffer {
    head: String,
    tail: String,
    half: usize,
    dropped: usize,
    frozen: bool,
}

impl OutputBuffer {
    fn new(cap: usize) -> Self {
        Self { head: String::new(), tail: String::new(), half: cap.max(2) / 2, dropped: 0, frozen: false }
    }

    fn push_str(&mut self, s: &str) {
        if self.frozen {
            return;
        }
        let mut rest = s;
        if self.dropped == 0 && self.tail.is_empty() && self.head.len() < self.half {
            let room = self.half - self.head.len();
            let cut = floor_char_boundary(rest, room.min(rest.len()));
            self.head.push_str(&rest[..cut]);
            rest = &rest[cut..];
        }
        if rest.is_empty() {
            return;
        }
        self.tail.push_str(rest);
        if self.tail.len() > 2 * self.half {
            let excess = self.tail.len() - self.half;
            let cut = ceil_char_boundary(&self.tail, excess);
            self.dropped += self.tail[..cut].chars().count();
            self.tail.drain(..cut);
        }
    }

    fn finish(self) -> (String, usize) {
        let mut out = self.head;
        if self.dropped > 0 {
            out.push_str(&format!("\n[... {} printed chars dropped ...]\n", self.dropped));
        }
        out.push_str(&self.tail);
        (out, self.dropped)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while i < s.len() && !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// The print writer of a snippet: captures output and is the VM's checkpoint hook, where the
/// wall-clock deadline, cancellation and the memory guard are checked.
struct Checkpoint<'a> {
    out: OutputBuffer,
    deadline: Instant,
    cancel: &'a CancellationToken,
    external: &'a CancellationToken,
    memory: Option<MemoryGuard>,
    trip: Option<Trip>,
}

struct MemoryGuard {
    limit: usize,
    baseline: usize,
    last: Instant,
}

fn resident_bytes() -> Option<usize> {
    memory_stats::memory_stats().map(|m| m.physical_mem)
}

impl Checkpoint<'_> {
    fn check(&mut self) -> Option<Trip> {
        if self.trip.is_some() {
            return self.trip;
        }
        let now = Instant::now();
        if self.cancel.is_cancelled() || self.external.is_cancelled() {
            self.trip = Some(Trip::Cancelled);
        } else if now >= self.deadline {
            self.trip = Some(Trip::Timeout);
        } else if let Some(guard) = &mut self.memory
            && now.duration_since(guard.last) >= MEMORY_SAMPLE_EVERY
        {
            guard.last = now;
            if let Some(now) = resident_bytes() {
                let grown = now.saturating_sub(guard.baseline);
                if grown > guard.limit {
                    self.trip = Some(Trip::Memory(grown));
                }
            }
        }
        self.trip
    }
}

impl PrintWriterCallback for Checkpoint<'_> {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.out.push_str(&output);
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        let mut buf = [0u8; 4];
        self.out.push_str(end.encode_utf8(&mut buf));
        Ok(())
    }

    fn poll_flush(&mut self) -> Result<(), MontyException> {
        match self.check() {
            Some(trip) => Err(trip_exception(trip)),
            None => Ok(()),
        }
    }
}

fn trip_exception(trip: Trip) -> MontyException {
    match trip {
        Trip::Timeout => MontyException::new(ExcType::TimeoutError, Some("snippet time limit exceeded".into())),
        Trip::Memory(_) => MontyException::new(ExcType::MemoryError, Some("snippet memory limit exceeded".into())),
        Trip::Cancelled => MontyException::new(ExcType::KeyboardInterrupt, Some("the run was cancelled".into())),
    }
}

type Progress = Result<ReplProgress, Box<ReplStartError>>;

enum Waited<T> {
    Ready(T),
    Tripped(Trip),
}

/// Waits for `fut` on the runtime from the session thread, up to the deadline or cancellation.
fn wait_for<T>(handle: &Handle, cp: &mut Checkpoint<'_>, fut: impl std::future::Future<Output = T>) -> Waited<T> {
    if let Some(trip) = cp.check() {
        return Waited::Tripped(trip);
    }
    let deadline = tokio::time::Instant::from_std(cp.deadline);
    let (cancel, external) = (cp.cancel.clone(), cp.external.clone());
    let r = handle.block_on(async move {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Waited::Tripped(Trip::Cancelled),
            _ = external.cancelled() => Waited::Tripped(Trip::Cancelled),
            _ = tokio::time::sleep_until(deadline) => Waited::Tripped(Trip::Timeout),
            v = fut => Waited::Ready(v),
        }
    });
    if let Waited::Tripped(t) = r {
        cp.trip = Some(t);
    }
    r
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
fn call_host(host: &dyn SandboxHost, call: HostCall) -> HostReply {
    let name = call.name.clone();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| host.call(call)))
        .unwrap_or_else(|payload| HostReply::Raise(host_panic(&name, payload.as_ref())))
}

/// Runs host work, turning a panic into an exception (instead of losing the session thread or
/// leaving an awaited future unresolved until the time limit).
async fn guard_panics(name: &str, fut: BoxFuture<'static, HostResult>) -> HostResult {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(fut).catch_unwind().await {
        Ok(r) => r,
        Err(payload) => Err(host_panic(name, payload.as_ref())),
    }
}

fn to_ext(r: HostResult) -> ExtFunctionResult {
    match r {
        Ok(v) => ExtFunctionResult::Return(json_to_monty(&v)),
        Err(e) => ExtFunctionResult::Error(e),
    }
}

fn run_job(
    mut repl: MontyRepl,
    job: &Job,
    globals: Vec<(String, MontyObject)>,
    limits: &SandboxLimits,
    handle: &Handle,
) -> (MontyRepl, SnippetOutcome) {
    let started = Instant::now();
    repl.tracker_mut().set_max_duration(limits.timeout);
    let memory = limits
        .memory_limit_bytes
        .and_then(|limit| resident_bytes().map(|baseline| MemoryGuard { limit, baseline, last: Instant::now() }));
    let mut cp = Checkpoint {
        out: OutputBuffer::new(limits.max_output_chars),
        deadline: started + limits.timeout,
        cancel: &job.cancel,
        external: &job.external,
        memory,
        trip: None,
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<(u32, ExtFunctionResult)>();
    let mut ready: Vec<(u32, ExtFunctionResult)> = Vec::new();
    let mut tasks: Vec<AbortHandle> = Vec::new();
    let mut outstanding = 0usize;
    let mut finished: Option<Value> = None;
    let mut host_calls = 0usize;

    let mut progress: Progress = repl.feed_start(&job.code, globals, PrintWriter::Callback(&mut cp));
    let (repl, result) = loop {
        progress = match progress {
            Ok(ReplProgress::Complete { repl, value }) => break (repl, Ok(value)),
            Err(e) => {
                let e = *e;
                break (e.repl, Err(e.error));
            }
            Ok(ReplProgress::FunctionCall(call)) => {
                if let Some(trip) = cp.check() {
                    call.abort(trip_exception(trip), PrintWriter::Callback(&mut cp))
                } else {
                    let (awaited, name) = match call.function_name.strip_prefix(ASYNC_PREFIX) {
                        Some(base) => (true, base.to_string()),
                        None => (false, call.function_name.clone()),
                    };
                    if !job.host.is_host_function(&name) {
                        call.resume(ExtFunctionResult::NotFound(name), PrintWriter::Callback(&mut cp))
                    } else if host_calls >= limits.max_host_calls {
                        let exc = MontyException::new(
                            ExcType::RuntimeError,
                            Some(format!("too many host calls in one snippet (limit {})", limits.max_host_calls)),
                        );
                        call.abort(exc, PrintWriter::Callback(&mut cp))
                    } else {
                        host_calls += 1;
                        let kwargs =
                            call.kwargs.iter().map(|(k, v)| (crate::convert::prompt_text(k), v.clone())).collect();
                        let hc = HostCall { name: name.clone(), args: call.args.clone(), kwargs, awaited };
                        match call_host(job.host.as_ref(), hc) {
                            HostReply::Raise(exc) => call.resume(exc, PrintWriter::Callback(&mut cp)),
                            HostReply::Finish(payload) => {
                                finished = Some(payload);
                                cp.out.frozen = true;
                                let exc = MontyException::new(ExcType::KeyboardInterrupt, Some("submitted".into()));
                                call.abort(exc, PrintWriter::Callback(&mut cp))
                            }
                            HostReply::Value(v) if awaited => {
                                ready.push((call.call_id, ExtFunctionResult::Return(v)));
                                call.resume_pending(PrintWriter::Callback(&mut cp))
                            }
                            HostReply::Value(v) => call.resume(v, PrintWriter::Callback(&mut cp)),
                            HostReply::Pending(fut) if awaited => {
                                let tx = tx.clone();
                                let id = call.call_id;
                                let task = handle.spawn(async move {
                                    let r = guard_panics(&name, fut).await;
                                    let _ = tx.send((id, to_ext(r)));
                                });
                                tasks.push(task.abort_handle());
                                outstanding += 1;
                                call.resume_pending(PrintWriter::Callback(&mut cp))
                            }
                            HostReply::Pending(fut) => match wait_for(handle, &mut cp, guard_panics(&name, fut)) {
                                Waited::Ready(r) => call.resume(to_ext(r), PrintWriter::Callback(&mut cp)),
                                Waited::Tripped(t) => call.abort(trip_exception(t), PrintWriter::Callback(&mut cp)),
                            },
                        }
                    }
                }
            }
            Ok(ReplProgress::ResolveFutures(rf)) => {
                let pending: Vec<u32> = rf.pending_call_ids().to_vec();
                let mut deliver: Vec<(u32, ExtFunctionResult)> = Vec::new();
                let mut keep = Vec::new();
                for (id, r) in ready.drain(..) {
                    if pending.contains(&id) { deliver.push((id, r)) } else { keep.push((id, r)) }
                }
                ready = keep;
                let mut tripped = cp.check();
                if deliver.is_empty() && tripped.is_none() {
                    if outstanding == 0 {
                        let exc = MontyException::new(
                            ExcType::RuntimeError,
                            Some("awaiting a future that no host call will resolve".into()),
                        );
                        progress = rf.abort(exc, PrintWriter::Callback(&mut cp));
                        continue;
                    }
                    match wait_for(handle, &mut cp, rx.recv()) {
                        Waited::Ready(Some(first)) => {
                            outstanding -= 1;
                            let mut got = vec![first];
                            while let Ok(more) = rx.try_recv() {
                                outstanding -= 1;
                                got.push(more);
                            }
                            for (id, r) in got {
                                if pending.contains(&id) { deliver.push((id, r)) } else { ready.push((id, r)) }
                            }
                        }
                        Waited::Ready(None) => {
                            tripped = Some(Trip::Cancelled);
                        }
                        Waited::Tripped(t) => tripped = Some(t),
                    }
                }
                match tripped {
                    Some(t) => rf.abort(trip_exception(t), PrintWriter::Callback(&mut cp)),
                    None if deliver.is_empty() => {
                        // Results arrived for futures the snippet no longer waits on; wait again.
                        Ok(ReplProgress::ResolveFutures(rf))
                    }
                    None => rf.resume(deliver, PrintWriter::Callback(&mut cp)),
                }
            }
            Ok(ReplProgress::NameLookup(lookup)) => {
                let answer = if job.host.is_host_function(&lookup.name) {
                    NameLookupResult::Value(MontyObject::Function { name: lookup.name.clone(), docstring: None })
                } else {
                    NameLookupResult::Undefined
                };
                lookup.resume(answer, PrintWriter::Callback(&mut cp))
            }
            Ok(ReplProgress::OsCall(os)) => {
                let exc = MontyException::new(
                    ExcType::PermissionError,
                    Some("the sandbox has no file or OS access; read the data through `inputs` or host tools".into()),
                );
                os.resume(exc, PrintWriter::Callback(&mut cp))
            }
        };
    };
    for t in tasks {
        t.abort();
    }
    let trip = cp.trip;
    let (stdout, dropped) = cp.out.finish();
    let mut outcome = SnippetOutcome {
        stdout: restore_names(&stdout),
        dropped_output_chars: dropped,
        host_calls,
        duration_ms: started.elapsed().as_millis() as u64,
        ..Default::default()
    };
    match (result, finished) {
        (_, Some(payload)) => outcome.finished = Some(payload),
        (Ok(value), None) => {
            if !matches!(value, MontyObject::None) {
                outcome.value = Some(restore_names(&value.py_repr()));
            }
        }
        (Err(exc), None) => outcome.error = Some(classify(&exc, trip, limits)),
    }
    (repl, outcome)
}

fn classify(exc: &MontyException, trip: Option<Trip>, limits: &SandboxLimits) -> SnippetError {
    let text = restore_names(&exc.to_string());
    let secs = limits.timeout.as_secs_f64();
    let limit_mib = |b: usize| b as f64 / (1024.0 * 1024.0);
    match (trip, exc.exc_type()) {
        (Some(Trip::Cancelled), _) => SnippetError {
            kind: SnippetErrorKind::Cancelled,
            message: "KeyboardInterrupt: the run was cancelled while this snippet ran".into(),
        },
        (Some(Trip::Timeout), _) | (None, ExcType::TimeoutError)
            if trip.is_some() || exc.message().is_some_and(|m| m.starts_with("time limit exceeded")) =>
        {
            SnippetError {
                kind: SnippetErrorKind::Timeout,
                message: with_context(
                    &text,
                    format!(
                        "TimeoutError: the snippet was stopped after {secs:.1} s (the per-snippet time limit, host \
                         calls included). Work on smaller pieces or fewer sub-calls per snippet, and avoid unbounded \
                         loops."
                    ),
                ),
            }
        }
        (Some(Trip::Memory(grown)), _) => SnippetError {
            kind: SnippetErrorKind::Memory,
            message: with_context(
                &text,
                format!(
                    "MemoryError: the snippet grew memory by {:.1} MiB, over the {:.1} MiB limit. Variables assigned \
                     before the error keep their memory; rebind large ones (e.g. `x = None`) and work on smaller \
                     slices.",
                    limit_mib(grown),
                    limit_mib(limits.memory_limit_bytes.unwrap_or(0)),
                ),
            ),
        },
        (_, ExcType::MemoryError) => SnippetError {
            kind: SnippetErrorKind::Memory,
            message: format!(
                "{text}\n(The memory limit is {:.1} MiB per snippet; work on smaller slices.)",
                limit_mib(limits.memory_limit_bytes.unwrap_or(0))
            ),
        },
        (_, ExcType::SyntaxError) => SnippetError { kind: SnippetErrorKind::Syntax, message: text },
        (_, ExcType::RecursionError) => SnippetError { kind: SnippetErrorKind::Recursion, message: text },
        _ => SnippetError { kind: SnippetErrorKind::Exception, message: text },
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
    fn output_buffer_keeps_head_and_tail() {
        let mut b = OutputBuffer::new(10);
        for i in 0..100 {
            b.push_str(&format!("{}", i % 10));
        }
        let (text, dropped) = b.finish();
        assert_eq!(dropped, 90);
        assert!(text.starts_with("01234"), "{text}");
        assert!(text.ends_with("56789"), "{text}");
        assert!(text.contains("90 printed chars dropped"), "{text}");
    }

    #[test]
    fn output_buffer_under_cap_is_verbatim() {
        let mut b = OutputBuffer::new(100);
        b.push_str("héllo\n");
        b.push_str("world");
        assert_eq!(b.finish(), ("héllo\nworld".to_string(), 0));
    }

    #[test]
    fn timeout_text_keeps_traceback_head() {
        let text =
            "Traceback (most recent call last):\n  File \"x\", line 1\nTimeoutError: snippet time limit exceeded";
        assert_eq!(strip_last_line(text), "Traceback (most recent call last):\n  File \"x\", line 1");
        assert_eq!(strip_last_line("TimeoutError: x"), "");
    }
}
