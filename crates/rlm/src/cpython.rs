//! The CPython backend of the RLM's REPL: a persistent CPython worker
//! (`cpython_worker.py`, run by the chosen interpreter) confined by the OS sandbox
//! ([`recursive_core::confine`]), fed one snippet at a time over JSON lines. Whatever packages
//! that interpreter has (pandas, numpy) are importable; the worker sees a scratch directory,
//! no network and no host files beyond the system and the interpreter's own environment
//! ([`recursive_core::confine::interpreter_dirs`]: its virtualenv and base installation, never
//! the home directory an interpreter such as `~/bin/python3` sits in). The worker dies with the
//! host: confined through `bwrap --die-with-parent`, unconfined by asking the kernel for it
//! (`PR_SET_PDEATHSIG`, set by a few lines run before the worker's program).
//!
//! Host functions are bridged: the worker's stubs send a call, the host answers through the
//! same [`SandboxHost`] as the Monty backend (awaited calls and `asyncio.gather` run
//! concurrently). Limits: the worker raises `TimeoutError` at the snippet's deadline, and a
//! worker still busy [`KILL_GRACE`] later (stuck in native code) is killed and restarted with a
//! notice; memory is bounded by the worker's address space (`MemoryError`, or a killed
//! worker); printed output is capped head and tail; host calls per snippet are capped.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use monty_types::MontyException;
use recursive_core::confine::{Confinement, Plan, ProcessCgroup, ProcessLimits, SandboxMode, interpreter_dirs};
use recursive_core::env::ChildEnv;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::convert::{json_to_monty, monty_to_json};
use crate::rewrite::ASYNC_PREFIX;
use crate::sandbox::{
    Global, HostCall, HostReply, HostResult, KILL_GRACE, SandboxError, SandboxHost, SandboxLimits, SnippetError,
    SnippetErrorKind, SnippetOutcome, call_host, guard_panics,
};

/// The worker's program, run as `python -I -c <it>`.
const WORKER: &str = include_str!("cpython_worker.py");

/// Run before [`WORKER`] when unconfined, with the host's process id: the kernel kills the
/// worker when the host ends (`PR_SET_PDEATHSIG`; without `ctypes`, a thread checks every 0.2 s),
/// and a worker whose host ended before that was set ends at once.
const DIE_WITH_HOST: &str = r#"
def _die_with_host(host):
    import os
    try:
        import ctypes
        if ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
            raise OSError(ctypes.get_errno(), "prctl")
    except Exception:
        import threading, time
        def watch(parent=os.getppid()):
            while os.getppid() == parent:
                time.sleep(0.2)
            os._exit(3)
        threading.Thread(target=watch, daemon=True).start()
    if os.getppid() != host:
        try:
            os.kill(host, 0)
        except ProcessLookupError:
            os._exit(3)
        except OSError:
            pass
"#;

/// Address space the interpreter itself needs on top of the memory limit (its own heap, shared
/// libraries, numpy's and BLAS's reservations).
const INTERPRETER_HEADROOM: u64 = 1024 * 1024 * 1024;

/// Longest a worker may take to start and bind the inputs.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of a dead worker's stderr kept for the error message.
const STDERR_TAIL: usize = 4096;

/// How the CPython backend runs.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CPythonConfig {
    /// The interpreter (`python3` on `PATH` by default).
    pub python: PathBuf,
    /// Whether the worker runs in the OS sandbox.
    pub sandbox: SandboxMode,
}

impl Default for CPythonConfig {
    fn default() -> Self {
        Self { python: PathBuf::from("python3"), sandbox: SandboxMode::Auto }
    }
}

/// A running worker.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Arc<std::sync::Mutex<String>>,
    _cgroup: Option<ProcessCgroup>,
}

/// A persistent CPython session.
pub struct CPythonSandbox {
    config: CPythonConfig,
    limits: SandboxLimits,
    /// The `init` message as one JSON line, serialised once (it carries the inputs) and sent
    /// again to every restarted worker.
    init: Vec<u8>,
    scratch: tempfile::TempDir,
    worker: tokio::sync::Mutex<Option<Worker>>,
}

impl std::fmt::Debug for CPythonSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CPythonSandbox").field("config", &self.config).field("limits", &self.limits).finish()
    }
}

impl CPythonSandbox {
    /// Starts a worker, binds `globals`, defines `host_functions` (and their async aliases)
    /// and runs `setup`.
    pub async fn start(
        config: CPythonConfig,
        limits: SandboxLimits,
        globals: Vec<(String, Global)>,
        host_functions: Vec<String>,
        setup: &str,
    ) -> Result<Self, SandboxError> {
        let mut values = Map::new();
        let mut texts = Map::new();
        for (name, global) in globals {
            match global {
                Global::Value(v) => values.insert(name, monty_to_json(&v)),
                Global::Text(t) => texts.insert(name, Value::String(t.as_str().to_string())),
            };
        }
        let init = serde_json::to_vec(&json!({
            "op": "init",
            "limits": {
                "timeout_secs": limits.timeout.as_secs_f64(),
                "recursion_limit": limits.recursion_limit,
                "max_output_chars": limits.max_output_chars,
            },
            "host_functions": host_functions,
            "async_prefix": ASYNC_PREFIX,
            "globals": values,
            "texts": texts,
            "setup": setup,
        }))
        .map_err(|e| SandboxError::Worker(format!("cannot encode the inputs: {e}")))?;
        let scratch = tempfile::Builder::new()
            .prefix("recursive-rlm-")
            .tempdir()
            .map_err(|e| SandboxError::Worker(format!("cannot make a scratch directory: {e}")))?;
        let sandbox = CPythonSandbox { config, limits, init, scratch, worker: Default::default() };
        let worker = sandbox.open().await?;
        *sandbox.worker.lock().await = Some(worker);
        Ok(sandbox)
    }

    /// The limits of this sandbox.
    pub fn limits(&self) -> &SandboxLimits {
        &self.limits
    }

    fn confinement(&self) -> Confinement {
        let memory = self.limits.memory_limit_bytes.map(|m| m as u64 + INTERPRETER_HEADROOM);
        Confinement {
            writable: vec![self.scratch.path().to_path_buf()],
            read_only: interpreter_dirs(&self.config.python),
            network: false,
            limits: ProcessLimits {
                cpu_secs: None,
                address_space_bytes: memory,
                processes: Some(64),
                file_size_bytes: Some(256 * 1024 * 1024),
            },
        }
    }

    async fn open(&self) -> Result<Worker, SandboxError> {
        let plan = Plan::for_mode(self.config.sandbox).map_err(|e| SandboxError::Worker(e.to_string()))?;
        let python: OsString = self.config.python.clone().into();
        let program = |code: String| [python.clone(), "-I".into(), "-u".into(), "-c".into(), code.into()];
        let (argv, cgroup) = match plan {
            Plan::Confined(sandbox) => {
                sandbox.command(&self.confinement(), self.scratch.path(), &program(WORKER.to_string()))
            }
            Plan::Unconfined(_) => {
                let guard = format!("{DIE_WITH_HOST}_die_with_host({})\ndel _die_with_host\n", std::process::id());
                (program(guard + WORKER).to_vec(), None)
            }
        };
        let mut command = tokio::process::Command::new(&argv[0]);
        command.args(&argv[1..]);
        let threads = [("OPENBLAS_NUM_THREADS", "1"), ("OMP_NUM_THREADS", "1")];
        let set = threads.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let env = ChildEnv::new(&[], &set).map_err(|e| SandboxError::Worker(e.to_string()))?;
        env.apply_tokio(&mut command);
        command
            .current_dir(self.scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|e| SandboxError::Worker(format!("cannot start {}: {e}", self.config.python.display())))?;
        let missing = || SandboxError::Worker("the worker's pipes are missing".into());
        let stdin = child.stdin.take().ok_or_else(missing)?;
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stderr = child.stderr.take().ok_or_else(missing)?;
        let (tx, lines) = mpsc::channel(64);
        let tail = Arc::new(std::sync::Mutex::new(String::new()));
        tokio::spawn(read_lines(stdout, tx, tail.clone()));
        tokio::spawn(keep_tail(stderr, tail.clone()));
        let mut worker = Worker { child, stdin, lines, stderr: tail, _cgroup: cgroup };
        let started = tokio::time::timeout(START_TIMEOUT, async {
            send_line(&mut worker.stdin, &self.init).await.map_err(|_| ())?;
            worker.lines.recv().await.ok_or(())
        })
        .await;
        let line = match started {
            Ok(Ok(line)) => line,
            _ => {
                let _ = worker.child.start_kill();
                let _ = worker.child.wait().await;
                return Err(SandboxError::Worker(with_tail("the CPython worker did not start", &worker.stderr)));
            }
        };
        let reply: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        match reply["op"].as_str() {
            Some("ready") => Ok(worker),
            Some("failed") => Err(SandboxError::Setup(reply["error"].as_str().unwrap_or_default().to_string())),
            _ => Err(SandboxError::Worker(with_tail(&format!("unexpected first message {line}"), &worker.stderr))),
        }
    }

    /// Runs one snippet that `interrupt` stops with a `KeyboardInterrupt` (the worker and its
    /// variables survive; one that does not stop within [`KILL_GRACE`] is killed); `cancel`
    /// kills the worker at once.
    pub async fn run_cell(
        &self,
        code: &str,
        host: Arc<dyn SandboxHost>,
        cancel: &CancellationToken,
        interrupt: &CancellationToken,
    ) -> SnippetOutcome {
        let started = Instant::now();
        let mut slot = self.worker.lock().await;
        let mut notice = None;
        if slot.is_none() {
            match self.open().await {
                Ok(w) => {
                    *slot = Some(w);
                    notice = Some(RESTART_NOTICE);
                }
                Err(e) => return failed(SnippetErrorKind::Internal, format!("RuntimeError: {e}")),
            }
        }
        let Some(worker) = slot.as_mut() else { return failed(SnippetErrorKind::Internal, "no worker".into()) };
        let mut run = Run { limits: &self.limits, host, pending: FuturesUnordered::new(), finished: None, calls: 0 };
        let mut outcome = match run.drive(worker, code, cancel, interrupt).await {
            Ok(outcome) => outcome,
            Err(lost) => {
                if let Some(mut w) = slot.take() {
                    let _ = w.child.start_kill();
                    let _ = w.child.wait().await;
                    lost.outcome(&self.limits, &w.stderr)
                } else {
                    lost.outcome(&self.limits, &Default::default())
                }
            }
        };
        outcome.finished = run.finished.take();
        outcome.host_calls = run.calls;
        outcome.duration_ms = started.elapsed().as_millis() as u64;
        if let Some(n) = notice {
            outcome.stdout = format!("{n}\n{}", outcome.stdout);
        }
        outcome
    }
}

const RESTART_NOTICE: &str = "[the CPython worker was restarted after the previous snippet ended it: variables, \
functions and imports of earlier snippets are gone; `inputs` is bound again]";

/// Why a snippet lost its worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lost {
    Timeout,
    Cancelled,
    Interrupted,
    Crashed,
}

impl Lost {
    fn outcome(self, limits: &SandboxLimits, stderr: &std::sync::Mutex<String>) -> SnippetOutcome {
        let secs = limits.timeout.as_secs_f64();
        match self {
            Lost::Timeout => failed(
                SnippetErrorKind::Timeout,
                format!(
                    "TimeoutError: the snippet ran past its time limit of {secs}s and did not stop (native code); \
                     the worker was killed and will be restarted: variables of earlier snippets are gone"
                ),
            ),
            Lost::Cancelled => failed(SnippetErrorKind::Cancelled, "the run was cancelled".into()),
            Lost::Interrupted => failed(
                SnippetErrorKind::Interrupted,
                format!(
                    "KeyboardInterrupt: the snippet did not stop within {:.1} s of the interrupt (native code); the \
                     worker was killed and will be restarted: variables of earlier snippets are gone",
                    KILL_GRACE.as_secs_f64()
                ),
            ),
            Lost::Crashed => {
                let text = stderr.lock().map(|s| s.trim().to_string()).unwrap_or_default();
                let memory = text.contains("MemoryError") || text.contains("Cannot allocate memory");
                let kind = if memory { SnippetErrorKind::Memory } else { SnippetErrorKind::Internal };
                let detail = if text.is_empty() { String::new() } else { format!(" Worker said: {text}") };
                failed(
                    kind,
                    format!(
                        "RuntimeError: the CPython worker died and will be restarted; variables of earlier snippets \
                         are gone.{detail}"
                    ),
                )
            }
        }
    }
}

/// One snippet in flight.
struct Run<'a> {
    limits: &'a SandboxLimits,
    host: Arc<dyn SandboxHost>,
    pending: FuturesUnordered<futures::future::BoxFuture<'static, (u64, HostResult)>>,
    finished: Option<Value>,
    calls: usize,
}

impl Run<'_> {
    async fn drive(
        &mut self,
        worker: &mut Worker,
        code: &str,
        cancel: &CancellationToken,
        interrupt: &CancellationToken,
    ) -> Result<SnippetOutcome, Lost> {
        send(&mut worker.stdin, &json!({"op": "exec", "code": code})).await.map_err(|_| Lost::Crashed)?;
        let mut kill_at = tokio::time::Instant::now() + self.limits.timeout + KILL_GRACE;
        let mut interrupted = false;
        loop {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(Lost::Cancelled),
                _ = interrupt.cancelled(), if !interrupted => {
                    interrupted = true;
                    kill_at = kill_at.min(tokio::time::Instant::now() + KILL_GRACE);
                    send(&mut worker.stdin, &json!({"op": "interrupt"})).await.map_err(|_| Lost::Crashed)?;
                }
                _ = tokio::time::sleep_until(kill_at) => {
                    return Err(if interrupted { Lost::Interrupted } else { Lost::Timeout });
                }
                Some((id, result)) = self.pending.next(), if !self.pending.is_empty() => {
                    let answer = match result {
                        Ok(value) => json!({"op": "answer", "id": id, "value": value}),
                        Err(e) => exception_answer(id, &e),
                    };
                    send(&mut worker.stdin, &answer).await.map_err(|_| Lost::Crashed)?;
                }
                line = worker.lines.recv() => {
                    let Some(line) = line else { return Err(Lost::Crashed) };
                    let message: Value = serde_json::from_str(&line).map_err(|_| Lost::Crashed)?;
                    match message["op"].as_str() {
                        Some("call") => {
                            if let Some(answer) = self.call(message) {
                                send(&mut worker.stdin, &answer).await.map_err(|_| Lost::Crashed)?;
                            }
                        }
                        Some("done") => return Ok(interrupted_kind(done(&message), interrupted)),
                        _ => return Err(Lost::Crashed),
                    }
                }
            }
        }
    }

    /// Answers a call at once, or queues its pending work (`None`).
    fn call(&mut self, message: Value) -> Option<Value> {
        let id = message["id"].as_u64().unwrap_or_default();
        let name = message["name"].as_str().unwrap_or_default().to_string();
        self.calls += 1;
        if self.calls > self.limits.max_host_calls {
            let text = format!("more than {} host calls in one snippet", self.limits.max_host_calls);
            return Some(json!({"op": "answer", "id": id, "error": ["RuntimeError", text]}));
        }
        if self.finished.is_some() {
            return Some(json!({"op": "answer", "id": id, "finish": true}));
        }
        let args = message["args"].as_array().map(|a| a.iter().map(json_to_monty).collect()).unwrap_or_default();
        let kwargs = message["kwargs"]
            .as_object()
            .map(|m| m.iter().map(|(k, v)| (k.clone(), json_to_monty(v))).collect())
            .unwrap_or_default();
        let awaited = message["awaited"].as_bool().unwrap_or(false);
        let call = HostCall { name: name.clone(), args, kwargs, awaited };
        match call_host(self.host.as_ref(), call) {
            HostReply::Value(v) => Some(json!({"op": "answer", "id": id, "value": monty_to_json(&v)})),
            HostReply::Raise(e) => Some(exception_answer(id, &e)),
            HostReply::Finish(v) => {
                self.finished = Some(v);
                Some(json!({"op": "answer", "id": id, "finish": true}))
            }
            HostReply::Pending(fut) => {
                self.pending.push(Box::pin(async move { (id, guard_panics(&name, fut).await) }));
                None
            }
        }
    }
}

fn exception_answer(id: u64, e: &MontyException) -> Value {
    let kind = format!("{:?}", e.exc_type());
    json!({"op": "answer", "id": id, "error": [kind, e.message().unwrap_or_default()]})
}

/// The outcome the worker reported.
fn done(message: &Value) -> SnippetOutcome {
    let error = message["error"].as_array().map(|e| {
        let kind = match e.first().and_then(Value::as_str) {
            Some("syntax") => SnippetErrorKind::Syntax,
            Some("timeout") => SnippetErrorKind::Timeout,
            Some("memory") => SnippetErrorKind::Memory,
            Some("recursion") => SnippetErrorKind::Recursion,
            _ => SnippetErrorKind::Exception,
        };
        SnippetError { kind, message: e.get(1).and_then(Value::as_str).unwrap_or_default().to_string() }
    });
    SnippetOutcome {
        stdout: message["stdout"].as_str().unwrap_or_default().to_string(),
        dropped_output_chars: message["dropped"].as_u64().unwrap_or(0) as usize,
        value: message["value"].as_str().map(str::to_string),
        error,
        ..Default::default()
    }
}

/// An interrupted snippet's exception is the interruption.
fn interrupted_kind(mut outcome: SnippetOutcome, interrupted: bool) -> SnippetOutcome {
    if let Some(e) = outcome.error.as_mut().filter(|e| interrupted && e.message.contains("KeyboardInterrupt")) {
        e.kind = SnippetErrorKind::Interrupted;
    }
    outcome
}

fn failed(kind: SnippetErrorKind, message: String) -> SnippetOutcome {
    SnippetOutcome { error: Some(SnippetError { kind, message }), ..Default::default() }
}

async fn send(stdin: &mut ChildStdin, message: &Value) -> std::io::Result<()> {
    send_line(stdin, &serde_json::to_vec(message).map_err(std::io::Error::other)?).await
}

/// Writes one JSON line (without its newline in `json`).
async fn send_line(stdin: &mut ChildStdin, json: &[u8]) -> std::io::Result<()> {
    stdin.write_all(json).await?;
    stdin.write_all(b"\n").await?;
    stdin.flush().await
}

/// Most bytes of one line from the worker (a message, with a snippet's captured output in it).
const MAX_LINE_BYTES: u64 = 64 * 1024 * 1024;

/// Forwards the worker's lines, each at most [`MAX_LINE_BYTES`]: a longer one (a snippet writing
/// to the worker's own stdout without end) stops the reading, so the worker counts as lost and
/// is killed, and says why in the stderr tail — the host's memory never holds more.
async fn read_lines(
    stdout: tokio::process::ChildStdout,
    tx: mpsc::Sender<String>,
    tail: Arc<std::sync::Mutex<String>>,
) {
    let mut reader = BufReader::new(stdout);
    loop {
        let mut line = Vec::new();
        match (&mut reader).take(MAX_LINE_BYTES + 1).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) if line.last() != Some(&b'\n') && line.len() as u64 > MAX_LINE_BYTES => {
                if let Ok(mut t) = tail.lock() {
                    t.push_str(&format!(
                        "\nthe worker wrote a line of more than {} MiB to its message channel (a snippet writing to \
                         file descriptor 1 without end?); it was stopped",
                        MAX_LINE_BYTES >> 20
                    ));
                }
                break;
            }
            Ok(_) => {}
        }
        while line.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
            line.pop();
        }
        if tx.send(String::from_utf8_lossy(&line).into_owned()).await.is_err() {
            break;
        }
    }
}

async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<std::sync::Mutex<String>>) {
    let mut buf = vec![0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            break;
        }
        if let Ok(mut t) = tail.lock() {
            t.push_str(&String::from_utf8_lossy(&buf[..n]));
            if t.len() > STDERR_TAIL {
                let cut = t.len() - STDERR_TAIL;
                let cut = (cut..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
                t.drain(..cut);
            }
        }
    }
}

fn with_tail(what: &str, tail: &std::sync::Mutex<String>) -> String {
    let text = tail.lock().map(|t| t.trim().to_string()).unwrap_or_default();
    if text.is_empty() { what.to_string() } else { format!("{what}: {text}") }
}
