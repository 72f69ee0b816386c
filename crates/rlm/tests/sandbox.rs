#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The sandbox on its own: persistence, errors, limits and the two call forms of host functions.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use recursive_rlm::{
    HostCall, HostReply, MontyObject, Sandbox, SandboxHost, SandboxLimits, SnippetErrorKind, SnippetOutcome,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// `echo(x)` answers `{"result": "echo:" + x}` (once `together` calls have been in flight at
/// once, when that is set) and tracks how many calls are in flight at once; `mark()` answers
/// `None` at once. Every call is counted as it comes, so a test can act once a snippet got
/// somewhere.
#[derive(Default)]
struct EchoHost {
    in_flight: Arc<AtomicUsize>,
    max_in_flight: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    together: usize,
}

impl EchoHost {
    /// A host whose echoes wait until `n` of them are in flight at once (calls that cannot
    /// overlap fail to after 10 s, and the test with them).
    fn together(n: usize) -> Self {
        Self { together: n, ..Self::default() }
    }

    /// Waits until the host has been called `n` times.
    async fn called(&self, n: usize) {
        recursive_testkit::wait_until(Duration::from_secs(30), || self.calls.load(Ordering::SeqCst) >= n).await;
    }
}

impl SandboxHost for EchoHost {
    fn is_host_function(&self, name: &str) -> bool {
        matches!(name, "echo" | "mark" | "finish" | "panic_now" | "panic_later" | "fail" | "hang")
    }

    fn call(&self, call: HostCall) -> HostReply {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if call.name == "mark" {
            return HostReply::Value(MontyObject::none());
        }
        if call.name == "panic_now" {
            panic!("host bug now");
        }
        if call.name == "panic_later" {
            return HostReply::Pending(Box::pin(async { panic!("host bug later") }));
        }
        if call.name == "fail" {
            return HostReply::Pending(Box::pin(async {
                Err(recursive_rlm::MontyException::new(recursive_rlm::ExcType::ValueError, Some("boom".into())))
            }));
        }
        if call.name == "hang" {
            return HostReply::Pending(Box::pin(async {
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok(json!(null))
            }));
        }
        if call.name == "finish" {
            return HostReply::Finish(json!({"done": true}));
        }
        let arg = call.args.first().map(|a| a.to_string()).unwrap_or_default();
        let (in_flight, max, together) = (self.in_flight.clone(), self.max_in_flight.clone(), self.together);
        HostReply::Pending(Box::pin(async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(now, Ordering::SeqCst);
            let overlapped = || max.load(Ordering::SeqCst) >= together;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !overlapped() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok(json!({"result": format!("echo:{arg}")}))
        }))
    }
}

async fn sandbox(limits: SandboxLimits) -> Sandbox {
    use_worker_binary();
    Sandbox::start(limits, vec![("inputs".into(), MontyObject::dict([]).into())], "import asyncio").await.unwrap()
}

fn use_worker_binary() {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: vec![],
    });
}

async fn run(sb: &Sandbox, host: &Arc<EchoHost>, code: &str) -> SnippetOutcome {
    sb.execute(code, host.clone(), &CancellationToken::new()).await
}

#[tokio::test(flavor = "multi_thread")]
async fn variables_functions_and_imports_persist_across_snippets() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "import re\nx = 20\ndef f(a):\n    return a + x").await;
    assert!(o.error.is_none(), "{o:?}");
    let o = run(&sb, &host, "print(f(1), re.findall(r'\\d', 'a1b2'))\nf(22)").await;
    assert_eq!(o.stdout, "21 ['1', '2']\n");
    assert_eq!(o.value.as_deref(), Some("42"));
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_and_awaited_forms_both_work() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "a = echo('x')\nb = await echo('y')\nprint(a['result'], b['result'])").await;
    assert_eq!(o.stdout, "echo:x echo:y\n", "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn gather_runs_host_calls_concurrently() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::together(5));
    let o =
        run(&sb, &host, "rs = await asyncio.gather(*[echo(i) for i in range(5)])\nprint([r['result'] for r in rs])")
            .await;
    assert_eq!(o.stdout, "['echo:0', 'echo:1', 'echo:2', 'echo:3', 'echo:4']\n", "{o:?}");
    assert_eq!(host.max_in_flight.load(Ordering::SeqCst), 5);
    // The same calls written outside gather run one at a time.
    let seq = Arc::new(EchoHost::default());
    let o = run(&sb, &seq, "rs = [echo(i) for i in range(3)]").await;
    assert!(o.error.is_none(), "{o:?}");
    assert_eq!(seq.max_in_flight.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn awaiting_a_sync_result_is_an_error_with_readable_names() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "r = echo(1)\nrs = await r").await;
    let e = o.error.expect("error");
    assert_eq!(e.kind, SnippetErrorKind::Exception);
    assert!(!e.message.contains("__rlm_async_"), "{}", e.message);
    println!("{}", e.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn syntax_error_is_reported_and_session_survives() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    run(&sb, &host, "keep = 5").await;
    let o = run(&sb, &host, "def broken(:\n  pass").await;
    assert_eq!(o.error.as_ref().unwrap().kind, SnippetErrorKind::Syntax, "{o:?}");
    println!("{}", o.error.unwrap().message);
    assert_eq!(run(&sb, &host, "keep + 1").await.value.as_deref(), Some("6"));
}

#[tokio::test(flavor = "multi_thread")]
async fn exception_comes_back_with_traceback() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "def g():\n    return {}['missing']\ng()").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Exception);
    assert!(e.message.contains("Traceback"), "{}", e.message);
    assert!(e.message.contains("KeyError"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn infinite_loop_is_stopped_by_the_timeout() {
    // Long enough for the later snippets' round trips on a loaded machine; a loop never ends.
    let sb = sandbox(SandboxLimits { timeout: Duration::from_millis(1500), ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "n = 0\nwhile True:\n    n += 1").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Timeout, "{}", e.message);
    assert!(e.message.contains("TimeoutError"), "{}", e.message);
    // The limit is per snippet, not cumulative.
    assert_eq!(run(&sb, &host, "n > 0").await.value.as_deref(), Some("True"));
    let o = run(&sb, &host, "x = await echo('late')").await;
    assert!(o.error.is_none(), "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_host_call_counts_against_the_wall_clock() {
    let sb = sandbox(SandboxLimits { timeout: Duration::from_millis(100), ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    // A host call that never answers: the time the snippet spends waiting on it is its own.
    let o = run(&sb, &host, "first = echo(1)\nhang()").await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Timeout);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_growth_memory_bomb_is_stopped() {
    let sb = sandbox(SandboxLimits { memory_limit_bytes: Some(64 << 20), ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "x = []\nwhile True:\n    x.append('a' * 1000000)").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Memory, "{}", e.message);
    assert!(e.message.contains("MemoryError"), "{}", e.message);
    let o = run(&sb, &host, "x = None\n'ok'").await;
    assert_eq!(o.value.as_deref(), Some("'ok'"), "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn huge_single_allocation_is_refused() {
    let sb = sandbox(SandboxLimits { memory_limit_bytes: Some(64 << 20), ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "s = 'a' * (10 ** 10)").await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Memory);
}

#[tokio::test(flavor = "multi_thread")]
async fn deep_recursion_hits_the_recursion_limit() {
    let sb = sandbox(SandboxLimits { recursion_limit: 1000, ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "def f(n):\n    return f(n + 1)\nf(0)").await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Recursion);
}

#[tokio::test(flavor = "multi_thread")]
async fn printed_output_is_capped_head_and_tail() {
    let sb = sandbox(SandboxLimits { max_output_chars: 100, ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "for i in range(1000):\n    print(i)").await;
    assert!(o.stdout.starts_with("0\n1\n2\n"), "{}", o.stdout);
    assert!(o.stdout.ends_with("998\n999\n"), "{}", o.stdout);
    assert!(o.dropped_output_chars > 3000);
}

#[tokio::test(flavor = "multi_thread")]
async fn finish_ends_the_snippet_and_hides_later_output() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "print('before')\nfinish()\nprint('after')\nafter = 1").await;
    assert_eq!(o.finished, Some(json!({"done": true})));
    assert_eq!(o.stdout, "before\n");
    assert!(o.error.is_none());
    let o = run(&sb, &host, "after").await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Exception);
}

#[tokio::test(flavor = "multi_thread")]
async fn file_access_is_denied() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "open('/etc/passwd').read()").await;
    let e = o.error.unwrap();
    assert!(e.message.contains("PermissionError"), "{}", e.message);
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_stops_a_running_snippet() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let cancel = CancellationToken::new();
    let (c2, marked) = (cancel.clone(), host.clone());
    // Cancelled once the snippet is past its host call, in the loop.
    tokio::spawn(async move {
        marked.called(1).await;
        c2.cancel();
    });
    let o = sb.execute("mark()\nwhile True:\n    pass", host.clone(), &cancel).await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Cancelled);
}

/// Interrupts `code` once it has made `calls` host calls.
async fn interrupted(sb: &Sandbox, host: &Arc<EchoHost>, code: &str, calls: usize) -> SnippetOutcome {
    let interrupt = CancellationToken::new();
    let (trigger, called) = (interrupt.clone(), host.clone());
    tokio::spawn(async move {
        called.called(calls).await;
        trigger.cancel();
    });
    sb.run_cell(code, host.clone(), &CancellationToken::new(), &interrupt).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_during_a_host_call_ends_the_snippet_but_keeps_the_session() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    run(&sb, &host, "kept = 7").await;
    let o = interrupted(&sb, &host, "print('before')\nhang()\nprint('after')", 1).await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Interrupted);
    assert!(e.message.contains("KeyboardInterrupt"), "{}", e.message);
    assert_eq!(o.stdout, "before\n");
    let next = run(&sb, &host, "print(kept)").await;
    assert_eq!(next.stdout, "7\n", "the session was lost: {next:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupt_of_awaited_calls_keeps_the_session() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    run(&sb, &host, "kept = 'x'").await;
    let o = interrupted(&sb, &host, "rs = await asyncio.gather(hang(), echo('a'))", 2).await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Interrupted);
    assert_eq!(run(&sb, &host, "print(kept)").await.stdout, "x\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_computation_restarts_the_worker_and_says_so() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = interrupted(&sb, &host, "mark()\nwhile True:\n    pass", 1).await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Interrupted);
    assert!(e.message.contains("restarted"), "{}", e.message);
    let next = run(&sb, &host, "print(1 + 1)").await;
    assert!(next.stdout.starts_with("[the sandbox was restarted"), "{}", next.stdout);
    assert!(next.stdout.ends_with("2\n"), "{}", next.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn deeply_nested_code_and_values_do_not_take_the_host_down() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let parens = format!("x = {}1{}", "(".repeat(100_000), ")".repeat(100_000));
    assert_eq!(run(&sb, &host, &parens).await.error.unwrap().kind, SnippetErrorKind::Syntax);
    let o =
        run(&sb, &host, "z = [1]\nfor i in range(100000):\n    z = [z]\nr = echo(z)\nprint(r['result'][:8])\nz").await;
    assert!(o.error.is_none(), "{o:?}");
    assert_eq!(o.stdout, "echo:[[[\n");
    assert!(o.value.unwrap().starts_with("[[[["));
    let o = run(&sb, &host, "d = {}\nfor i in range(100000):\n    d = {'k': d}\nfinish(d)").await;
    assert!(o.finished.is_some(), "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn panicking_host_function_is_an_exception_and_the_session_survives() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    assert!(run(&sb, &host, "kept = 5").await.error.is_none());
    for code in ["panic_now()", "panic_later()", "await panic_later()", "await asyncio.gather(panic_later(), echo(1))"]
    {
        let o = run(&sb, &host, code).await;
        let e = o.error.unwrap_or_else(|| panic!("{code}: no error"));
        assert_eq!(e.kind, SnippetErrorKind::Exception, "{code}");
        assert!(e.message.contains("RuntimeError") && e.message.contains("host bug"), "{code}: {}", e.message);
    }
    let o = run(&sb, &host, "try:\n    panic_now()\nexcept RuntimeError:\n    print('caught', kept)").await;
    assert_eq!(o.stdout, "caught 5\n", "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn splitting_a_huge_string_in_one_native_call_is_stopped_by_the_memory_limit() {
    let sb = sandbox(SandboxLimits { memory_limit_bytes: Some(256 << 20), ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    run(&sb, &host, "kept = 41").await;
    let o = run(&sb, &host, "x = ('a ' * 60_000_000).split()\nlen(x)").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Memory, "{}", e.message);
    assert!(e.message.contains("MemoryError"), "{}", e.message);
    // The host lives on; the next snippet runs in a fresh session with the inputs bound again.
    let o = run(&sb, &host, "print(type(inputs).__name__)\ntry:\n    kept\nexcept NameError:\n    print('gone')").await;
    assert!(o.error.is_none(), "{o:?}");
    assert!(o.stdout.contains("sandbox was restarted"), "{}", o.stdout);
    assert!(o.stdout.contains("dict\ngone"), "{}", o.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn native_big_integer_maths_is_stopped_by_the_timeout() {
    let sb = sandbox(SandboxLimits { timeout: Duration::from_millis(500), ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let started = std::time::Instant::now();
    let o = run(&sb, &host, "x = 7 ** (3 ** 17)\nlen(str(x))").await;
    let e = o.error.unwrap();
    assert_eq!(e.kind, SnippetErrorKind::Timeout, "{}", e.message);
    // The maths alone runs for minutes: well under that is the timeout's doing, on any machine.
    assert!(started.elapsed() < Duration::from_secs(15), "took {:?}", started.elapsed());
    assert_eq!(run(&sb, &host, "1 + 1").await.value.as_deref(), Some("2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn cancellation_stops_native_maths_at_once() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let cancel = CancellationToken::new();
    let (c2, marked) = (cancel.clone(), host.clone());
    // Cancelled once the snippet is past its host call, in the maths.
    tokio::spawn(async move {
        marked.called(1).await;
        c2.cancel();
    });
    let started = std::time::Instant::now();
    let o = sb.execute("mark()\nx = 7 ** (3 ** 17)", host.clone(), &cancel).await;
    assert_eq!(o.error.unwrap().kind, SnippetErrorKind::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_worker_that_cannot_start_is_a_clear_error() {
    let err = Sandbox::start_with(
        recursive_rlm::WorkerCommand { program: "/nonexistent/worker".into(), args: vec![] },
        SandboxLimits::default(),
        vec![],
        "",
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/worker"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn modules_models_use_every_day_are_importable() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let code = r#"
import random, time, copy, csv, decimal, hashlib, bisect, re, json, math, collections, itertools, functools
from functools import lru_cache
s = '%d items, %s' % (3, 'ok')
random.seed(1)
d = {'a': 2, 'b': 1}
best = max(d, key=d.get)
first = next(x for x in range(10) if x > 4)
groups = [(k, len(list(g))) for k, g in itertools.groupby('aabccc')]
pat = re.compile(r"""
    (\d+)   # digits
""", re.VERBOSE)
match groups[0]:
    case (k, n):
        shape = f"{k}{n}"
@lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)
[s, best, first, groups, pat.findall('a1b22'), shape, fib(30), str(decimal.Decimal('1.1') + decimal.Decimal('2.2')),
 hashlib.sha256(b'x').hexdigest()[:8], bisect.bisect([1, 3, 5], 4), copy.deepcopy([[1]])]
"#;
    let o = run(&sb, &host, code).await;
    assert!(o.error.is_none(), "{o:?}");
    let v = o.value.unwrap();
    for want in ["'3 items, ok'", "'a'", "5", "('c', 3)", "['1', '22']", "'a2'", "832040", "'3.3'", "'2d711642'", "2"] {
        assert!(v.contains(want), "{want} missing in {v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn asyncio_forms_models_write_run_concurrently_and_once() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::together(4));
    let code = r#"
tasks = [echo(i) for i in range(4)]
rs = await asyncio.gather(*tasks)
more = []
for i in range(3):
    more.append(echo(i))
rs2 = await asyncio.gather(*more)
t = asyncio.create_task(echo('t'))
w = await asyncio.wait_for(echo('w'), timeout=5)
mixed = await asyncio.gather(echo('ok'), fail('x'), return_exceptions=True)
print(len(rs), len(rs2), (await t)['result'], w['result'], mixed[0]['result'], type(mixed[1]).__name__)
"#;
    let o = run(&sb, &host, code).await;
    assert!(o.error.is_none(), "{o:?}");
    assert_eq!(o.stdout, "4 3 echo:t echo:w echo:ok ValueError\n", "{o:?}");
    assert_eq!(o.host_calls, 4 + 3 + 2 + 2, "each call is made (and charged) once");
    assert!(host.max_in_flight.load(Ordering::SeqCst) >= 4, "the task list ran concurrently");
}

#[tokio::test(flavor = "multi_thread")]
async fn gather_without_return_exceptions_raises_the_first_error() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let o = run(
        &sb,
        &host,
        "try:\n    await asyncio.gather(echo(1), fail(2))\nexcept ValueError as e:\n    print('caught', e)",
    )
    .await;
    assert_eq!(o.stdout, "caught boom\n", "{o:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_final_value_comes_back_cut_to_the_output_cap() {
    let sb = sandbox(SandboxLimits { max_output_chars: 1000, ..Default::default() }).await;
    let host = Arc::new(EchoHost::default());
    let o = run(&sb, &host, "big = 'x' * 1_000_000\nbig").await;
    let v = o.value.unwrap();
    assert!(v.len() < 1200, "{} chars", v.len());
    assert!(v.contains("a str of 1000000 chars"), "{v}");
    let o = run(&sb, &host, "list(range(100000))").await;
    assert!(o.value.unwrap().len() < 1200);
}

#[tokio::test(flavor = "multi_thread")]
async fn attacks_end_in_clear_errors_and_the_session_recovers() {
    let limits =
        SandboxLimits { timeout: Duration::from_secs(2), memory_limit_bytes: Some(128 << 20), ..Default::default() };
    let sb = sandbox(limits).await;
    let host = Arc::new(EchoHost::default());
    let cases = [
        ("x = [[]] * 10**9", SnippetErrorKind::Memory),
        ("x = 10**10**10", SnippetErrorKind::Memory),
        ("y = sorted(range(10**9))", SnippetErrorKind::Memory),
        ("d = {}\nfor i in range(10**8):\n    d[i] = str(i)", SnippetErrorKind::Memory),
        ("while True:\n    try:\n        pass\n    except BaseException:\n        pass", SnippetErrorKind::Timeout),
        ("import os\nos.system('id')", SnippetErrorKind::Exception),
        ("__import__('os')", SnippetErrorKind::Exception),
    ];
    for (code, kind) in cases {
        let o = run(&sb, &host, code).await;
        let e = o.error.unwrap_or_else(|| panic!("{code} did not fail"));
        assert_eq!(e.kind, kind, "{code}: {}", e.message);
        let after = run(&sb, &host, "print('still here')").await;
        assert!(after.error.is_none() && after.stdout.ends_with("still here\n"), "{code}: {after:?}");
    }
    let o = run(&sb, &host, "raise ValueError('v' * 10**6)").await;
    assert!(o.error.unwrap().message.len() < 200_000, "a huge exception message is cut");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_module_the_prompt_lists_imports() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    for module in recursive_rlm::SANDBOX_MODULES {
        let o = run(&sb, &host, &format!("import {module}")).await;
        assert!(o.error.is_none(), "import {module}: {:?}", o.error);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_module_is_module_not_found() {
    let sb = sandbox(SandboxLimits::default()).await;
    let host = Arc::new(EchoHost::default());
    let e = run(&sb, &host, "import pandas").await.error.unwrap();
    assert!(e.message.contains("ModuleNotFoundError") && e.message.contains("pandas"), "{}", e.message);
}
