#![allow(clippy::unwrap_used, clippy::expect_used)]
//! One behavioural suite run against both REPL backends (Monty and CPython): persistence,
//! values, output caps, errors, host functions called plainly and awaited, `submit`, timeouts.
//! Then what only CPython can do (real packages) and hostile snippets in its confined worker.
//!
//! The CPython interpreter comes from `RLM_TEST_PYTHON` (a virtualenv with pandas, which
//! `./scripts/test` makes); without it these tests fail unless `RECURSIVE_ALLOW_SKIP=1`.

use std::sync::Arc;
use std::time::Duration;

use recursive_core::confine::SandboxMode;
use recursive_rlm::cpython::CPythonConfig;
use recursive_rlm::repl::{Backend, Repl};
use recursive_rlm::{
    ExcType, Global, HostCall, HostReply, MontyException, SandboxHost, SandboxLimits, SnippetErrorKind,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// `twice(x)` at once, `later(x)` after a short wait, `refuse()` raises ValueError, `submit(x)`
/// finishes the snippet.
struct TestHost;

impl SandboxHost for TestHost {
    fn is_host_function(&self, name: &str) -> bool {
        matches!(name, "twice" | "later" | "refuse" | "submit")
    }

    fn call(&self, call: HostCall) -> HostReply {
        let arg = call.args.first().map(recursive_rlm::convert::monty_to_json).unwrap_or_default();
        match call.name.as_str() {
            "twice" => HostReply::Value(recursive_rlm::convert::json_to_monty(&json!(arg.as_i64().unwrap_or(0) * 2))),
            "later" => HostReply::Pending(Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(json!(format!("later:{}", arg.as_str().unwrap_or_default())))
            })),
            "refuse" => HostReply::Raise(MontyException::new(ExcType::ValueError, Some("refused".into()))),
            _ => HostReply::Finish(arg),
        }
    }
}

const HOST_FUNCTIONS: [&str; 4] = ["twice", "later", "refuse", "submit"];

fn python() -> Option<String> {
    recursive_testkit::require_env("RLM_TEST_PYTHON")
}

fn cpython() -> Option<Backend> {
    Some(Backend::CPython(CPythonConfig { python: python()?.into(), sandbox: SandboxMode::Required }))
}

async fn start(backend: &Backend, limits: SandboxLimits) -> Box<dyn Repl> {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: Vec::new(),
    });
    let globals = vec![("notes".to_string(), Global::Text(Arc::new("alpha beta gamma".into())))];
    let host_functions = HOST_FUNCTIONS.map(String::from).to_vec();
    recursive_rlm::repl::start(backend, limits, globals, host_functions, "import asyncio\n").await.unwrap()
}

async fn run(repl: &dyn Repl, code: &str) -> recursive_rlm::SnippetOutcome {
    repl.execute(code, Arc::new(TestHost), &CancellationToken::new()).await
}

fn limits() -> SandboxLimits {
    SandboxLimits { timeout: Duration::from_secs(5), ..Default::default() }
}

/// The suite every backend passes.
async fn behaves_like_a_repl(backend: Backend) {
    let repl = start(&backend, limits()).await;

    // Variables persist; a final expression's value is reported.
    let out = run(repl.as_ref(), "words = notes.split()\nlen(words)").await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.value.as_deref(), Some("3"));
    let out = run(repl.as_ref(), "print(words[-1].upper())").await;
    assert_eq!(out.stdout.trim(), "GAMMA");

    // Errors come back as data of the right kind.
    let out = run(repl.as_ref(), "1/0").await;
    let error = out.error.unwrap();
    assert_eq!(error.kind, SnippetErrorKind::Exception);
    assert!(error.message.contains("ZeroDivisionError"), "{}", error.message);
    let out = run(repl.as_ref(), "def broken(:\n  pass").await;
    assert_eq!(out.error.unwrap().kind, SnippetErrorKind::Syntax);

    // Host functions: plain, awaited, gathered; a host exception is catchable.
    let out = run(repl.as_ref(), "twice(21)").await;
    assert_eq!(out.value.as_deref(), Some("42"), "{out:?}");
    let out = run(repl.as_ref(), "r = await later('a')\nprint(r)").await;
    assert_eq!(out.stdout.trim(), "later:a", "{out:?}");
    let code = "parts = await asyncio.gather(*[later(w) for w in words])\nprint(parts)";
    let out = run(repl.as_ref(), code).await;
    assert_eq!(out.stdout.trim(), "['later:alpha', 'later:beta', 'later:gamma']", "{out:?}");
    assert_eq!(out.host_calls, 3);
    let out = run(repl.as_ref(), "try:\n    refuse()\nexcept ValueError as e:\n    print('caught', e)").await;
    assert_eq!(out.stdout.trim(), "caught refused", "{out:?}");

    // submit ends the snippet with its payload; nothing after it runs.
    let out = run(repl.as_ref(), "print('before')\nsubmit({'answer': 7})\nprint('after')").await;
    assert_eq!(out.finished, Some(json!({"answer": 7})), "{out:?}");
    assert!(!out.stdout.contains("after"), "{out:?}");

    // Long output keeps its head and tail.
    let out = run(repl.as_ref(), "for i in range(100000):\n    print(i)").await;
    assert!(out.dropped_output_chars > 0, "{:?}", out.dropped_output_chars);
    assert!(out.stdout.starts_with("0\n1\n"), "{}", &out.stdout[..20]);
    assert!(out.stdout.trim_end().ends_with("99999"));

    // A snippet past its time limit stops; the session serves the next one.
    let repl = start(&backend, SandboxLimits { timeout: Duration::from_secs(1), ..Default::default() }).await;
    let out = run(repl.as_ref(), "while True:\n    pass").await;
    assert_eq!(out.error.unwrap().kind, SnippetErrorKind::Timeout);
    let out = run(repl.as_ref(), "1 + 1").await;
    assert_eq!(out.value.as_deref(), Some("2"), "{out:?}");
}

#[tokio::test]
async fn monty_behaves_like_a_repl() {
    behaves_like_a_repl(Backend::Monty).await;
}

#[tokio::test]
async fn cpython_behaves_like_a_repl() {
    let Some(backend) = cpython() else { return };
    behaves_like_a_repl(backend).await;
}

#[tokio::test]
async fn cpython_runs_what_monty_cannot() {
    let Some(backend) = cpython() else { return };
    let repl = start(&backend, limits()).await;
    let code = "import pandas as pd\n\
                class Base:\n    def f(self): return 1\n\
                class Child(Base):\n    def f(self): return super().f() + 1\n\
                def gen():\n    yield from range(3)\n\
                df = pd.DataFrame({'word': notes.split(), 'n': [1, 2, 3]})\n\
                x = 5\ndel x\n\
                print(df['n'].sum(), Child().f(), list(gen()))";
    let out = run(repl.as_ref(), code).await;
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.stdout.trim(), "6 2 [0, 1, 2]");
}

#[tokio::test]
async fn hostile_snippets_are_contained_in_the_cpython_worker() {
    let Some(backend) = cpython() else { return };
    let limits = SandboxLimits { memory_limit_bytes: Some(256 * 1024 * 1024), ..limits() };
    let repl = start(&backend, limits).await;
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "host secret").unwrap();

    let probes = [
        ("open('/etc/shadow').read()", "FileNotFoundError"),
        (&format!("open({:?}).read()", secret.display().to_string()), "FileNotFoundError"),
        (&format!("open({:?}, 'w').write('x')", outside.path().join("pwned").display().to_string()), "Error"),
        ("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)", "Error"),
        ("x = bytearray(2 * 1024**3)", "MemoryError"),
    ];
    for (code, expected) in probes {
        let out = run(repl.as_ref(), code).await;
        let message = out.error.map(|e| e.message).unwrap_or_default();
        assert!(message.contains(expected), "{code}: {message} / {}", out.stdout);
    }
    assert!(!outside.path().join("pwned").exists());

    // The parent's environment and processes are out of sight.
    let code =
        "import os\nprint(sorted(os.environ))\nprint(open('/proc/1/environ').read())\nprint(len(os.listdir('/proc')))";
    let out = run(repl.as_ref(), code).await;
    assert!(!out.stdout.contains("CARGO_PKG_NAME"), "{}", out.stdout);

    // A sleeping child does not outlive the session.
    let out = run(repl.as_ref(), "import subprocess\nsubprocess.Popen(['sleep', '4343'])\nprint('spawned')").await;
    assert!(out.stdout.contains("spawned"), "{out:?}");
    // A fork bomb stops at the process limit; the session goes on.
    let code = "import os\npids = []\ntry:\n    for _ in range(500):\n        pid = os.fork()\n        if pid == 0:\n            try:\n                os.execvp('sleep', ['sleep', '3031'])\n            finally:\n                os._exit(0)\n        pids.append(pid)\nexcept OSError as e:\n    print('stopped', len(pids))";
    let out = run(repl.as_ref(), code).await;
    assert!(out.stdout.contains("stopped"), "{out:?}");

    drop(repl);
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        !host_runs(&["sleep", "4343"]) && !host_runs(&["sleep", "3031"])
    });
    assert!(gone, "a child of the worker outlived the session");
}

/// Whether a host process runs exactly `argv`.
fn host_runs(argv: &[&str]) -> bool {
    let wanted = argv.join("\0") + "\0";
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == wanted.as_bytes()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snippet_writing_to_the_workers_channel_without_end_is_stopped_and_the_session_goes_on() {
    let Some(backend) = cpython() else { return };
    let repl = start(&backend, limits()).await;
    // Writes past the channel's line cap (64 MiB) without a newline, straight to descriptor 1.
    let code = "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(200):\n    os.write(1, chunk)";
    let t0 = std::time::Instant::now();
    let out = run(repl.as_ref(), code).await;
    let message = out.error.map(|e| e.message).unwrap_or_default();
    assert!(message.contains("more than 64 MiB"), "{message} / {}", out.stdout);
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let out = run(repl.as_ref(), "print(6 * 7)").await;
    assert!(out.stdout.contains("42"), "a new worker takes over: {out:?}");
}
