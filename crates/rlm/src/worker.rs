//! The sandbox worker: the process that really runs model-written Python. One worker holds one
//! REPL session (Monty) and talks to its host over stdin/stdout ([`crate::wire`]). Running it in
//! its own process is what makes the limits hold for any snippet: a memory ceiling enforced in
//! the worker's allocator, a time limit the host backs up by killing the process, and a crash
//! (a native stack overflow, an allocator abort) that ends only the worker.
//!
//! A binary becomes a worker by calling [`serve`] when it is started with [`WORKER_ARG`] (the
//! `recursive` CLI does this; so does the `recursive-sandbox-worker` binary of this crate). The
//! binary must install `recursive_alloc::HostOrWorker` (which [`serve`] switches to the worker's
//! limited allocator) or `monty_alloc::LimitedAllocator` as its global allocator for the memory
//! limit to hold; [`serve`] refuses to run a memory-limited session otherwise.
//!
//! A worker dies with its host: a thread ends the process as soon as its parent is no longer the
//! host that started it (the host killed with SIGKILL, its pipes never closed by a worker busy in
//! a snippet), and a worker whose host ended before that thread began ends at once.

use std::borrow::Cow;
use std::io::{self, BufReader, BufWriter, Stdin, Stdout, Write};
use std::process::ExitCode;
use std::time::Duration;

use monty::{MontyRepl, ReplProgress, ReplStartError};
use monty_types::{
    CallArgs, CompileOptions, ExcType, ExtFunctionResult, MontyException, MontyObject, NameLookupResult,
    OsFunctionCall, OsPolicy, PrintWriter, PrintWriterCallback, ResourceLimits, ResourceTracker, SleepMode,
};

use crate::output::OutputBuffer;
use crate::wire::{self, CallAnswer, Finished, FromWorker, ToWorker, WireArg, WorkerFailure, WorkerLimits};

/// The first argument that starts a binary as a sandbox worker.
pub const WORKER_ARG: &str = "__sandbox-worker";

/// Native stack of the session thread per level of the recursion limit: Monty bounds its native
/// recursion by the recursion limit, and one level can take several KiB in an unoptimised build.
const STACK_BYTES_PER_LEVEL: usize = 128 * 1024;
/// Bounds of the session thread's native stack (reserved, not committed).
const STACK_BYTES_MIN: usize = 64 * 1024 * 1024;
const STACK_BYTES_MAX: usize = 1024 * 1024 * 1024;
/// The highest recursion limit a worker accepts (higher values are lowered to it).
pub const MAX_RECURSION_LIMIT: usize = 8192;
/// Suspensions Monty allows per session; the host bounds host calls per snippet itself.
const MAX_SUSPENSIONS: usize = usize::MAX / 2;
/// The variable in which a host gives the worker its process id.
pub(crate) const HOST_PID_VAR: &str = "RECURSIVE_SANDBOX_HOST_PID";
/// How often the worker checks that its host is alive.
const HOST_CHECK_INTERVAL: Duration = Duration::from_millis(100);
/// The exit code of a worker whose host is gone (as when the pipe to the host breaks).
const HOST_GONE: u8 = 3;

/// Runs the worker loop on stdin/stdout until the host closes stdin. Returns the process's exit
/// code: success at a clean end, 2 when the session cannot be set up, 3 when the pipe to the
/// host breaks.
pub fn serve() -> ExitCode {
    recursive_alloc::become_worker();
    if !host_alive_then_watch() {
        return ExitCode::from(HOST_GONE);
    }
    let mut input = BufReader::new(io::stdin());
    let limits = match wire::read_frame::<ToWorker>(&mut input) {
        Ok(Some(ToWorker::Init(limits))) => limits,
        Ok(None) => return ExitCode::SUCCESS,
        Ok(Some(_)) | Err(_) => {
            eprintln!("sandbox worker: the host did not start with Init");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = arm_memory_limit(limits.memory_bytes) {
        eprintln!("sandbox worker: {e}");
        return ExitCode::from(2);
    }
    let stack = limits.recursion_limit.saturating_mul(STACK_BYTES_PER_LEVEL).clamp(STACK_BYTES_MIN, STACK_BYTES_MAX);
    let session = std::thread::Builder::new()
        .name("sandbox-session".into())
        .stack_size(stack)
        .spawn(move || session_loop(input, limits));
    match session {
        Ok(handle) => handle.join().unwrap_or(ExitCode::from(101)),
        Err(e) => {
            eprintln!("sandbox worker: cannot start the session thread: {e}");
            ExitCode::from(2)
        }
    }
}

/// Whether the host is still there; if so, starts the thread that ends this process when the
/// parent changes (the host is gone and the worker was adopted). The host named by
/// [`HOST_PID_VAR`] that is not the parent (a wrapper may sit between) must still exist.
fn host_alive_then_watch() -> bool {
    let parent = std::os::unix::process::parent_id();
    let named = recursive_core::env::var(HOST_PID_VAR).and_then(|v| v.trim().parse::<u32>().ok());
    if named.is_some_and(|host| host != parent && !std::path::Path::new(&format!("/proc/{host}")).exists()) {
        return false;
    }
    let watch = std::thread::Builder::new().name("host-watch".into()).spawn(move || {
        while std::os::unix::process::parent_id() == parent {
            std::thread::sleep(HOST_CHECK_INTERVAL);
        }
        std::process::exit(i32::from(HOST_GONE));
    });
    if let Err(e) = watch {
        eprintln!("sandbox worker: cannot watch the host (the worker may outlive it): {e}");
    }
    true
}

fn arm_memory_limit(limit: Option<usize>) -> Result<(), String> {
    let Some(limit) = limit else { return Ok(()) };
    let hard = monty_types::memory_limit_with_headroom(Some(limit), false);
    monty_alloc::set_hard_limit(hard).map_err(|e| format!("cannot enforce the memory limit: {e}"))
}

/// The worker's two pipe ends.
struct Pipe {
    input: BufReader<Stdin>,
    output: BufWriter<Stdout>,
}

impl Pipe {
    fn send(&mut self, msg: &FromWorker) -> io::Result<()> {
        wire::write_frame(&mut self.output, msg)
    }

    fn receive(&mut self) -> io::Result<ToWorker> {
        wire::read_frame(&mut self.input)?.ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "host closed"))
    }
}

fn session_loop(input: BufReader<Stdin>, limits: WorkerLimits) -> ExitCode {
    let mut pipe = Pipe { input, output: BufWriter::new(io::stdout()) };
    let mut resources = ResourceLimits::default()
        .max_feed_duration(limits.feed_duration)
        .max_recursion_depth(limits.recursion_limit.clamp(1, MAX_RECURSION_LIMIT))
        .max_suspensions(MAX_SUSPENSIONS);
    if let Some(m) = limits.memory_bytes {
        resources = resources.max_memory(m);
    }
    let policy = OsPolicy { sleep: SleepMode::Zero, ..OsPolicy::default() };
    let mut repl = Some(
        MontyRepl::new("rlm.py", ResourceTracker::new(resources), CompileOptions::default()).with_os_policy(policy),
    );
    if pipe.send(&FromWorker::Ready).is_err() {
        return ExitCode::from(3);
    }
    loop {
        let (code, mut globals) = match wire::read_frame::<ToWorker>(&mut pipe.input) {
            Ok(Some(ToWorker::Feed { code, globals, texts })) => match read_texts(&mut pipe.input, texts) {
                Ok(bound) => (code, globals.into_iter().chain(bound).collect::<Vec<_>>()),
                Err(_) => return ExitCode::from(3),
            },
            Ok(None) => return ExitCode::SUCCESS,
            Ok(Some(_)) | Err(_) => return ExitCode::from(3),
        };
        globals.shrink_to_fit();
        let Some(current) = repl.take() else { return ExitCode::from(3) };
        match run_feed(current, &code, globals, &mut pipe, limits.max_output_chars) {
            Ok((next, finished)) => {
                repl = Some(next);
                if pipe.send(&FromWorker::Done(finished)).is_err() {
                    return ExitCode::from(3);
                }
            }
            Err(_) => return ExitCode::from(3),
        }
    }
}

/// Sends a call: its frame, then the raw bytes of the texts in its arguments.
fn send_call(pipe: &mut Pipe, call_id: u32, name: &str, args: &CallArgs, awaited: bool) -> io::Result<()> {
    let mut raw = Vec::new();
    let positional = args.args().map(|a| WireArg::of(a, &mut raw)).collect();
    let keywords = args
        .kwargs()
        .map(|(k, v)| (k.as_str().map(str::to_string).unwrap_or_else(|| k.to_string()), WireArg::of(v, &mut raw)))
        .collect();
    let call = FromWorker::Call { call_id, name: name.to_string(), args: positional, kwargs: keywords, awaited };
    wire::write_frame(&mut pipe.output, &call)?;
    for text in raw {
        pipe.output.write_all(text.as_bytes())?;
    }
    pipe.output.flush()
}

/// The texts that follow a feed frame, as `str` globals (moved, not copied, into the session).
fn read_texts(input: &mut BufReader<Stdin>, texts: Vec<(String, u64)>) -> io::Result<Vec<(String, MontyObject)>> {
    texts.into_iter().map(|(name, len)| Ok((name, MontyObject::string(wire::read_text(input, len)?)))).collect()
}

/// Captures printed output of one snippet.
struct Printer {
    out: OutputBuffer,
}

impl PrintWriterCallback for Printer {
    fn stdout_write(&mut self, output: Cow<'_, str>) -> Result<(), MontyException> {
        self.out.push_str(&output);
        Ok(())
    }

    fn stdout_push(&mut self, end: char) -> Result<(), MontyException> {
        let mut buf = [0u8; 4];
        self.out.push_str(end.encode_utf8(&mut buf));
        Ok(())
    }
}

type Progress = Result<ReplProgress, Box<ReplStartError>>;

/// Runs one snippet to its end, asking the host for every function and name the interpreter
/// does not have. `Err` means the pipe to the host broke.
fn run_feed(
    repl: MontyRepl,
    code: &str,
    globals: Vec<(String, MontyObject)>,
    pipe: &mut Pipe,
    max_output_chars: usize,
) -> io::Result<(MontyRepl, Finished)> {
    let mut printer = Printer { out: OutputBuffer::new(max_output_chars) };
    let mut progress: Progress = repl.feed_start(code, globals, PrintWriter::Callback(&mut printer));
    let (repl, result) = loop {
        progress = match progress {
            Ok(ReplProgress::Complete { repl, value }) => break (repl, Ok(value)),
            Err(e) => {
                let e = *e;
                break (e.repl, Err(e.error));
            }
            Ok(ReplProgress::FunctionCall(call)) => {
                let name = call.function_name.clone();
                let awaited = call.allow_eager_await;
                send_call(pipe, call.call_id, &name, &call.args, awaited)?;
                let answer = match pipe.receive()? {
                    ToWorker::Answer(a) => a,
                    _ => return Err(io::Error::other("expected an answer to a call")),
                };
                let print = PrintWriter::Callback(&mut printer);
                match answer {
                    CallAnswer::Value(v) if awaited => call.resume_eager(Ok(v), print),
                    CallAnswer::Value(v) => call.resume(v, print),
                    CallAnswer::Raise(e) if awaited => call.resume_eager(Err(e), print),
                    CallAnswer::Raise(e) => call.resume(e, print),
                    CallAnswer::Pending => call.resume_pending(print),
                    CallAnswer::NotFound => call.resume(ExtFunctionResult::NotFound(name), print),
                    CallAnswer::Abort { exception, freeze_output } => {
                        printer.out.frozen = freeze_output;
                        call.abort(exception, PrintWriter::Callback(&mut printer))
                    }
                }
            }
            Ok(ReplProgress::NameLookup(lookup)) => {
                pipe.send(&FromWorker::Lookup { name: lookup.name.clone() })?;
                let answer = match pipe.receive()? {
                    ToWorker::Name(Some(v)) => NameLookupResult::Value(v),
                    ToWorker::Name(None) => NameLookupResult::Undefined,
                    _ => return Err(io::Error::other("expected an answer to a name lookup")),
                };
                lookup.resume(answer, PrintWriter::Callback(&mut printer))
            }
            Ok(ReplProgress::OsCall(os)) => {
                if let OsFunctionCall::Import(module) = &os.function_call {
                    // An unknown module: `ModuleNotFoundError`, not a permission error.
                    let module = module.clone();
                    os.resume(ExtFunctionResult::NotFound(module), PrintWriter::Callback(&mut printer))
                } else {
                    let exc = MontyException::new(
                        ExcType::PermissionError,
                        Some(
                            "the sandbox has no file or OS access; read the data through `inputs` or host tools".into(),
                        ),
                    );
                    os.resume(exc, PrintWriter::Callback(&mut printer))
                }
            }
            Ok(ReplProgress::ResolveFutures(rf)) => {
                pipe.send(&FromWorker::Wait { pending: rf.pending_call_ids().to_vec() })?;
                let results = match pipe.receive()? {
                    ToWorker::Futures(r) => r,
                    _ => return Err(io::Error::other("expected future results")),
                };
                resolve(rf, results, &mut printer)
            }
        };
    };
    let (stdout, dropped) = printer.out.finish();
    let max_output_chars = max_output_chars.max(2);
    let mut finished = Finished { stdout, dropped_output_chars: dropped, ..Default::default() };
    match result {
        Ok(value) if value.type_name() == "NoneType" => {}
        Ok(value) => finished.value = Some(bounded_repr(&value, max_output_chars)),
        Err(exc) => {
            let text = recursive_core::text::truncate_middle(&exc.to_string(), max_output_chars);
            finished.failure = Some(WorkerFailure { exc_type: format!("{:?}", exc.exc_type()), text })
        }
    }
    Ok((repl, finished))
}

/// The `repr()` of a final expression's value, cut to `max` characters (head and tail); a long
/// `str` is cut before its repr is built.
fn bounded_repr(value: &MontyObject, max: usize) -> String {
    if let Some(s) = value.as_ref().as_str()
        && s.len() > max
    {
        let clipped = recursive_core::text::truncate_middle(s, max);
        return format!("{} (a str of {} chars)", MontyObject::string(clipped).py_repr(), s.chars().count());
    }
    recursive_core::text::truncate_middle(&value.py_repr(), max)
}

fn resolve(rf: monty::ReplResolveFutures, results: Vec<(u32, CallAnswer)>, printer: &mut Printer) -> Progress {
    let mut ready = Vec::with_capacity(results.len());
    for (id, answer) in results {
        match answer {
            CallAnswer::Value(v) => ready.push((id, ExtFunctionResult::Return(v))),
            CallAnswer::Raise(e) => ready.push((id, ExtFunctionResult::Error(e))),
            CallAnswer::Abort { exception, freeze_output } => {
                printer.out.frozen = freeze_output;
                return rf.abort(exception, PrintWriter::Callback(printer));
            }
            CallAnswer::Pending | CallAnswer::NotFound => {
                let exc = MontyException::new(ExcType::RuntimeError, Some("a future resolved to nothing".into()));
                ready.push((id, ExtFunctionResult::Error(exc)));
            }
        }
    }
    rf.resume(ready, PrintWriter::Callback(printer))
}
