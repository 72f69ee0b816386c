#![allow(clippy::unwrap_used, clippy::expect_used)]
//! RLM benchmarks (a bench binary, `cargo bench -p recursive-rlm`):
//!
//! 1. **Iteration overhead**: the cost of one RLM iteration around an instant scripted model
//!    (prompt building, code extraction, running a small snippet in the sandbox, the
//!    observation, events). Goal: under 1 ms.
//! 2. **Fan-out**: `llm_query_batched` of 500 prompts against a local OpenAI-compatible HTTP
//!    server (127.0.0.1, 50 ms per request) through `recursive-llm`'s OpenAI client, with
//!    concurrency 16. Reported as a ratio to the ideal `ceil(500 / 16) × 50 ms`. Goal ≤ 1.15.
//! 3. **Needle in 1 MB**: a whole run over HTTP (127.0.0.1, 50 ms per request for the primary
//!    and the sub-model alike): 3 root turns and one batch of 50 sub-calls at concurrency 64.
//!    Ideal 3 × 50 + 50 = 200 ms. Goal ≤ 1.10×.
//! 4. **Peak memory**: resident-set high-water marks of the host process and of its sandbox
//!    worker for a run over a 1 MB and a 100 MB input (each in a fresh process: this binary
//!    started with `--rss-child MB`). Goals: ≤ 30 MiB (host + worker) for 1 MB; ≤ 2.5× the
//!    input for 100 MB.
//! 5. **100 MB fan-out**: a 100 MB input cut into 500 chunks, all sent in one
//!    `llm_query_batched` to an instant in-process sub-model. Goal: the snippet under 1 s.
//! 7. **Checkpoint cost** (`--checkpoint`): a durable run's checkpoint per iteration — the time
//!    a run of 10 iterations (a slice and a sub-call each) takes more with checkpoints in a
//!    SQLite graph store than without, and the checkpoint's size — for a 1 MB and a 100 MB input.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Json;
use axum::routing::post;
use recursive_core::{ChatRequest, ChatResponse, Message, MockProvider, Role, RunScope, StopReason, Usage};
use recursive_llm::{OpenAiConfig, OpenAiProvider};
use recursive_rlm::{Inputs, MontyObject, Rlm, RlmConfig, Sandbox, SandboxHost, SandboxLimits};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn response(text: String) -> ChatResponse {
    ChatResponse {
        message: Message::assistant(text),
        stop_reason: StopReason::EndTurn,
        usage: Usage { input_tokens: 1, output_tokens: 1, ..Default::default() },
        cost_usd: None,
        model: "bench".into(),
    }
}

fn last_user(req: &ChatRequest) -> &str {
    req.messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.content.as_str()).unwrap_or("")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    xs[xs.len() / 2]
}

struct NoHost;

impl SandboxHost for NoHost {
    fn is_host_function(&self, _name: &str) -> bool {
        false
    }
    fn call(&self, _call: recursive_rlm::HostCall) -> recursive_rlm::HostReply {
        recursive_rlm::HostReply::Value(MontyObject::none())
    }
}

/// Bench 1: per-iteration overhead with an instant model.
async fn iteration_overhead() {
    const ITERATIONS: u32 = 20;
    const RUNS: usize = 30;
    let primary = MockProvider::with_handler(|req| {
        let text = if last_user(req).contains("used all") {
            "{\"answer\": \"done\"}".to_string()
        } else if req.messages.len() <= 2 {
            "Start.\n```python\nx = 0\nitems = list(range(100))\n```".to_string()
        } else {
            "Next.\n```python\nx += 1\ntotal = sum(items[:x])\nprint(x, total)\n```".to_string()
        };
        Ok(response(text))
    });
    let config = RlmConfig { max_iterations: ITERATIONS, ..Default::default() };
    let rlm = Rlm::with_provider(Arc::new(primary), config).unwrap();
    let doc = "lorem ipsum dolor sit amet\n".repeat(4000);
    // Warm up.
    for _ in 0..3 {
        rlm.run("q", Inputs::single("doc", doc.clone()), &RunScope::detached("bench")).await.unwrap();
    }
    let mut per_iteration_us = Vec::new();
    for _ in 0..RUNS {
        let t = Instant::now();
        let r = rlm.run("q", Inputs::single("doc", doc.clone()), &RunScope::detached("bench")).await.unwrap();
        assert_eq!(r.iterations, ITERATIONS);
        assert!(r.extracted);
        // ITERATIONS loop iterations plus the extraction call.
        per_iteration_us.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(ITERATIONS + 1));
    }
    let iter_med = median(per_iteration_us.clone());
    let iter_min = per_iteration_us.iter().copied().fold(f64::MAX, f64::min);

    // The sandbox alone: one small snippet on a warm session.
    let sandbox = Sandbox::start(SandboxLimits::default(), vec![], "x = 0\nitems = list(range(100))").await.unwrap();
    let host: Arc<dyn SandboxHost> = Arc::new(NoHost);
    let cancel = CancellationToken::new();
    for _ in 0..100 {
        sandbox.execute("x += 1\ntotal = sum(items[:x % 100])\nprint(x, total)", host.clone(), &cancel).await;
    }
    let n = 2000;
    let t = Instant::now();
    for _ in 0..n {
        let o = sandbox.execute("x += 1\ntotal = sum(items[:x % 100])\nprint(x, total)", host.clone(), &cancel).await;
        assert!(o.error.is_none());
    }
    let snippet_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);

    // Session start (thread, inputs binding, setup imports) with a 100 KB input.
    let mut start_us = Vec::new();
    for _ in 0..30 {
        let t = Instant::now();
        let dict = MontyObject::dict([(MontyObject::string("doc"), MontyObject::string(doc.as_str()))]);
        let s = Sandbox::start(
            SandboxLimits::default(),
            vec![("inputs".into(), dict.into())],
            "import asyncio\nimport json\nimport re",
        )
        .await
        .unwrap();
        start_us.push(t.elapsed().as_secs_f64() * 1e6);
        drop(s);
    }
    println!(
        "bench 1: iteration overhead (instant scripted model, {ITERATIONS} iterations + extraction per run, {RUNS} runs)"
    );
    println!("  per iteration, whole loop:      median {iter_med:8.1} µs   min {iter_min:8.1} µs   (goal < 1000 µs)");
    println!("  per snippet, sandbox only:      mean   {snippet_us:8.1} µs   ({n} snippets on a warm session)");
    println!("  sandbox start (100 KB input):   median {:8.1} µs", median(start_us));
}

/// Bench 2: fan-out of 500 prompts over HTTP with 50 ms latency, concurrency 16.
async fn fan_out(concurrency: usize, runs: usize) {
    const PROMPTS: usize = 500;
    #[allow(non_snake_case)]
    let CONCURRENCY: usize = concurrency;
    const LATENCY: Duration = Duration::from_millis(50);
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(|Json(body): Json<Value>| async move {
            tokio::time::sleep(LATENCY).await;
            let prompt = body["messages"][0]["content"].as_str().unwrap_or("").to_string();
            Json(json!({
                "id": "cmpl-bench",
                "object": "chat.completion",
                "created": 0,
                "model": "bench-sub",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": format!("ok {prompt}")}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let sub = OpenAiProvider::new(OpenAiConfig {
        name: "bench-http".into(),
        model: "bench-sub".into(),
        stream: false,
        ..OpenAiConfig::new(format!("http://{addr}/v1"))
    })
    .unwrap();
    let code = format!(
        "rs = llm_query_batched([f'prompt {{i}}' for i in range({PROMPTS})])\nok = [r for r in rs['result'] if r.startswith('ok ')]\nprint(len(ok))"
    );
    let primary = MockProvider::with_handler(move |req| {
        Ok(response(if req.messages.len() <= 2 {
            format!("```python\n{code}\n```")
        } else {
            "```python\nsubmit(str(len(ok)))\n```".to_string()
        }))
    });
    let config = RlmConfig {
        batch_concurrency: CONCURRENCY,
        max_llm_calls: PROMPTS as u32,
        snippet_timeout: Duration::from_secs(120),
        ..Default::default()
    };
    let rlm = Rlm::new(Arc::new(primary), Arc::new(sub), config).unwrap();
    let ideal_ms = PROMPTS.div_ceil(CONCURRENCY) as f64 * LATENCY.as_secs_f64() * 1000.0;
    // Warm up the connection pool.
    rlm.run("q", Inputs::new(), &RunScope::detached("bench")).await.unwrap();
    let mut ratios = Vec::new();
    let mut walls = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let r = rlm.run("q", Inputs::new(), &RunScope::detached("bench")).await.unwrap();
        let total_ms = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(r.output, json!({"answer": PROMPTS.to_string()}), "{:#?}", r.trajectory);
        assert_eq!(r.sub_calls, PROMPTS as u64);
        let snippet_ms = r.trajectory[0].snippets[0].duration_ms as f64;
        walls.push((snippet_ms, total_ms));
        ratios.push(snippet_ms / ideal_ms);
    }
    println!(
        "bench 2: fan-out, llm_query_batched of {PROMPTS} prompts, concurrency {CONCURRENCY}, HTTP mock at 127.0.0.1 with {} ms latency",
        LATENCY.as_millis()
    );
    println!("  ideal ceil({PROMPTS}/{CONCURRENCY}) x {} ms = {ideal_ms:.0} ms", LATENCY.as_millis());
    for (i, ((snippet, total), ratio)) in walls.iter().zip(&ratios).enumerate() {
        println!("  run {}: snippet {snippet:7.0} ms (whole run {total:7.0} ms)  ratio {ratio:.3}", i + 1);
    }
    println!("  median ratio {:.3}   (goal <= 1.15)", median(ratios));
}

/// The OpenAI-compatible mock for bench 3: `bench-primary` plays three scripted turns,
/// `bench-sub` answers whether its chunk holds the needle; every request takes 50 ms.
async fn needle_server(latency: Duration) -> SocketAddr {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        post(move |Json(body): Json<Value>| async move {
            tokio::time::sleep(latency).await;
            let text = recursive_testkit::texts::needle_turn(&body);
            Json(json!({
                "id": "cmpl-bench", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
            }))
        }),
    );
    let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

fn http_provider(addr: SocketAddr, model: &str) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        name: format!("bench-{model}"),
        model: model.into(),
        stream: false,
        ..OpenAiConfig::new(format!("http://{addr}/v1"))
    })
    .unwrap()
}

/// Bench 3: the 1 MB needle task over HTTP.
async fn needle() {
    const LATENCY: Duration = Duration::from_millis(50);
    let addr = needle_server(LATENCY).await;
    let config = RlmConfig { batch_concurrency: 64, ..Default::default() };
    let rlm =
        Rlm::new(Arc::new(http_provider(addr, "bench-primary")), Arc::new(http_provider(addr, "bench-sub")), config)
            .unwrap();
    let input = recursive_testkit::texts::haystack(1 << 20);
    let ideal_ms = 3.0 * 50.0 + 50.0;
    let mut ratios = Vec::new();
    let mut walls = Vec::new();
    for run in 0..6 {
        let t = Instant::now();
        let r = rlm
            .run("Which code word is in the log?", Inputs::single("log", input.as_str()), &RunScope::detached("b"))
            .await
            .unwrap();
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(r.output, json!({"answer": "CODEWORD-7Q4"}), "{:#?}", r.trajectory);
        assert_eq!(r.sub_calls, 50);
        let snippets: u64 = r.trajectory.iter().flat_map(|i| &i.snippets).map(|s| s.duration_ms).sum();
        if run > 0 {
            println!("  run {run}: {ms:6.1} ms (snippets {snippets} ms, of which the batch is 50 ms ideally)");
            walls.push(ms);
            ratios.push(ms / ideal_ms);
        }
    }
    println!("bench 3: 1 MB needle, 3 root turns + 50 sub-calls over HTTP (50 ms each), concurrency 64");
    println!("  ideal 3 x 50 ms + 50 ms = {ideal_ms:.0} ms");
    println!("  median ratio {:.3}   (goal <= 1.10)", median(ratios));
}

/// The high-water mark of a process's resident set, in KiB.
fn peak_rss_kib(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// This process's children (the sandbox worker, while a run is going).
fn children() -> Vec<String> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").into_iter().flatten().flatten() {
        let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(list.split_whitespace().map(str::to_string));
    }
    out
}

/// Bench 4 (child side): one run over an input of `mb` MiB; prints `host_kib worker_kib`.
async fn rss_child(mb: usize) {
    let worker_peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let seen = worker_peak.clone();
    let primary = MockProvider::with_handler(move |req| {
        // By the second turn the worker has bound the input and run the first snippet.
        for pid in children() {
            seen.fetch_max(peak_rss_kib(&pid), std::sync::atomic::Ordering::SeqCst);
        }
        Ok(response(if req.messages.len() <= 2 {
            "```python\nn = len(context)\nhead = context[:100]\nparts = [context[i:i + 100000] for i in range(0, 1000000, 100000)]\nprint(n, len(parts))\n```".into()
        } else {
            "```python\nsubmit(str(n))\n```".into()
        }))
    });
    let rlm = Rlm::with_provider(Arc::new(primary), RlmConfig::default()).unwrap();
    let input = recursive_testkit::texts::haystack(mb << 20);
    let r = rlm.run("How long is it?", Inputs::single("log", input), &RunScope::detached("b")).await.unwrap();
    assert!(r.output["answer"].as_str().is_some_and(|a| a.parse::<usize>().is_ok()), "{:?}", r.output);
    println!("{} {}", peak_rss_kib("self"), worker_peak.load(std::sync::atomic::Ordering::SeqCst));
}

/// Bench 4: peak memory per input size, each in a fresh process.
fn peak_memory() {
    println!("bench 4: peak resident memory of one run (host process + its sandbox worker)");
    for mb in [1usize, 100] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--rss-child", &mb.to_string()])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let mut nums = text.split_whitespace().map(|v| v.parse::<f64>().unwrap_or(0.0) / 1024.0);
        let (host, worker) = (nums.next().unwrap_or(0.0), nums.next().unwrap_or(0.0));
        let total = host + worker;
        println!(
            "  {mb:3} MiB input: host {host:6.1} MiB + worker {worker:6.1} MiB = {total:6.1} MiB ({:.2}x the input){}",
            total / mb as f64,
            if out.status.success() { "" } else { "  [child failed]" }
        );
    }
    println!("  goals: <= 30 MiB for 1 MiB; <= 2.5x the input for 100 MiB");
}

/// An instant sub-model that answers with the length of its prompt and, unlike the scripted
/// `MockProvider`, keeps no copy of the requests.
struct CountingSub;

#[async_trait::async_trait]
impl recursive_core::ChatProvider for CountingSub {
    fn name(&self) -> &str {
        "counting"
    }

    async fn stream(&self, request: ChatRequest) -> Result<recursive_core::ChatStream, recursive_core::ProviderError> {
        let done = recursive_core::StreamEvent::Completed(response(format!("{} chars", last_user(&request).len())));
        Ok(Box::pin(futures::stream::iter([Ok(done)])))
    }
}

/// Bench 5: 100 MB cut into 500 chunks, one batch, instant sub-model.
async fn big_fan_out() {
    let primary = MockProvider::with_handler(|req| {
        Ok(response(if req.messages.len() <= 2 {
            "```python\nsize = len(context) // 500 + 1\nchunks = [context[i:i + size] for i in range(0, len(context), size)]\nrs = llm_query_batched(chunks)['result']\nprint(len(chunks), sum(len(r) for r in rs))\n```".into()
        } else {
            "```python\nsubmit(str(len(rs)))\n```".into()
        }))
    });
    let config = RlmConfig { batch_concurrency: 64, max_llm_calls: 1000, ..Default::default() };
    let rlm = Rlm::new(Arc::new(primary), Arc::new(CountingSub), config).unwrap();
    let input = recursive_testkit::texts::haystack(100 << 20);
    let mut snippet_ms = Vec::new();
    for _ in 0..7 {
        let t = Instant::now();
        let r = rlm.run("q", Inputs::single("log", input.as_str()), &RunScope::detached("b")).await.unwrap();
        let total = t.elapsed().as_secs_f64() * 1000.0;
        assert_eq!(r.output, json!({"answer": "500"}), "{:#?}", r.trajectory);
        let ms = r.trajectory[0].snippets[0].duration_ms as f64;
        println!("  run: snippet {ms:6.0} ms, whole run {total:6.0} ms");
        snippet_ms.push(ms);
    }
    println!("bench 5: 100 MB input, 500 chunks in one llm_query_batched, instant sub-model");
    let best = snippet_ms.iter().copied().fold(f64::MAX, f64::min);
    println!("  median snippet {:.0} ms, fastest {best:.0} ms   (goal < 1000 ms)", median(snippet_ms));
}

/// Bench 6: the two REPL backends side by side — session start (100 KB input, setup imports)
/// and one small snippet on a warm session, with and without a host call. CPython runs
/// `RLM_BENCH_PYTHON` (default `python3`), confined by the OS sandbox and not.
async fn backends() {
    use recursive_core::confine::SandboxMode;
    use recursive_rlm::cpython::CPythonConfig;
    use recursive_rlm::repl::{Backend, Repl};
    let python = recursive_core::env::var("RLM_BENCH_PYTHON").unwrap_or_else(|| "python3".into());
    let cpython = |sandbox| Backend::CPython(CPythonConfig { python: python.clone().into(), sandbox });
    let doc = "lorem ipsum dolor sit amet\n".repeat(4000);
    let host: Arc<dyn SandboxHost> = Arc::new(NoHost);
    let cancel = CancellationToken::new();
    println!("bench 6: REPL backends (start: median of 10; snippet: mean of 500 on a warm session)");
    for (name, backend) in [
        ("monty", Backend::Monty),
        ("cpython, confined", cpython(SandboxMode::Required)),
        ("cpython, unconfined", cpython(SandboxMode::Off)),
    ] {
        let start = || {
            let globals = vec![("doc".to_string(), recursive_rlm::Global::Text(Arc::new(doc.clone())))];
            recursive_rlm::repl::start(&backend, SandboxLimits::default(), globals, vec![], "import json\nimport re")
        };
        let mut start_ms = Vec::new();
        for _ in 0..10 {
            let t = Instant::now();
            let repl: Box<dyn Repl> = start().await.unwrap();
            start_ms.push(t.elapsed().as_secs_f64() * 1e3);
            drop(repl);
        }
        let repl = start().await.unwrap();
        let code = "x = len(doc) % 97\ntotal = sum(range(x))\nprint(x, total)";
        let n = 500;
        for _ in 0..50 {
            repl.execute(code, host.clone(), &cancel).await;
        }
        let t = Instant::now();
        for _ in 0..n {
            let o = repl.execute(code, host.clone(), &cancel).await;
            assert!(o.error.is_none(), "{o:?}");
        }
        let snippet_us = t.elapsed().as_secs_f64() * 1e6 / f64::from(n);
        println!("  {name:22} start {:7.1} ms   snippet {snippet_us:7.1} µs", median(start_ms));
    }
}

/// A slot that times the saves of the slot it wraps.
struct TimedSlot {
    inner: Arc<dyn recursive_core::CheckpointSlot>,
    saves: std::sync::Mutex<Vec<f64>>,
}

#[async_trait::async_trait]
impl recursive_core::CheckpointSlot for TimedSlot {
    fn name(&self) -> String {
        self.inner.name()
    }
    async fn save(&self, value: &Value) -> Result<(), String> {
        let t = Instant::now();
        let r = self.inner.save(value).await;
        self.saves.lock().unwrap().push(t.elapsed().as_secs_f64() * 1000.0);
        r
    }
    async fn load(&self) -> Result<Option<Value>, String> {
        self.inner.load().await
    }
}

/// Bench 7: what a durable run's checkpoint costs per iteration (time and bytes).
async fn checkpoint_cost() {
    const ITERATIONS: u32 = 10;
    println!("bench 7: checkpoint per iteration ({ITERATIONS} iterations, each a slice and a sub-call; SQLite store)");
    for mb in [1usize, 100] {
        let doc: String = "lorem ipsum dolor sit amet, consectetur adipiscing elit\n".repeat(mb * 1024 * 1024 / 56);
        let primary = MockProvider::with_handler(|req| {
            let text = if req.messages.len() >= 2 + 2 * ITERATIONS as usize {
                "```python\nsubmit(str(len(notes)))\n```".to_string()
            } else if req.messages.len() <= 2 {
                "```python\nnotes = []\n```".to_string()
            } else {
                "```python\nk = len(notes)\npiece = doc[k * 1000:(k + 1) * 1000]\nnotes.append(llm_query('summarise: ' + piece[:200])['result'])\nprint(len(notes))\n```".to_string()
            };
            Ok(response(text))
        });
        let sub = MockProvider::with_handler(|_| Ok(response("a short summary of the piece".into())));
        let config = RlmConfig {
            max_iterations: ITERATIONS + 2,
            snippet_timeout: Duration::from_secs(300),
            ..Default::default()
        };
        let rlm = Rlm::new(Arc::new(primary), Arc::new(sub), config).unwrap();
        let runs = if mb == 1 { 7 } else { 3 };
        let (mut plain_ms, mut durable_ms, mut bytes, mut db_bytes) = (Vec::new(), Vec::new(), 0usize, 0u64);
        let mut save_ms = Vec::new();
        for run in 0..runs {
            let t = Instant::now();
            rlm.run("q", Inputs::single("doc", doc.clone()), &RunScope::detached("bench")).await.unwrap();
            plain_ms.push(t.elapsed().as_secs_f64() * 1000.0);

            let dir = tempfile::tempdir().unwrap();
            let db = dir.path().join("graphs.db");
            let store = recursive_store::checkpoint::open(db.to_str().unwrap()).await.unwrap();
            let inner = Arc::new(recursive_store::StoreSlot::standalone(store, &format!("bench-{run}"), "rlm"));
            let timed = Arc::new(TimedSlot { inner, saves: Default::default() });
            let slot: Arc<dyn recursive_core::CheckpointSlot> = timed.clone();
            let durable = rlm.clone().with_durable(recursive_rlm::Durable {
                slot: slot.clone(),
                meta: Value::Null,
                strict: true,
                spend_restored: false,
            });
            let t = Instant::now();
            let r = durable.run("q", Inputs::single("doc", doc.clone()), &RunScope::detached("bench")).await.unwrap();
            durable_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            assert!(r.submitted, "{:?}", r.outcome);
            bytes = slot.load().await.unwrap().map(|v| v.to_string().len()).unwrap_or(0);
            db_bytes = ["graphs.db", "graphs.db-wal"]
                .iter()
                .map(|f| std::fs::metadata(dir.path().join(f)).map(|m| m.len()).unwrap_or(0))
                .sum();
            save_ms.extend(timed.saves.lock().unwrap().iter().copied());
        }
        let (plain, durable) = (median(plain_ms), median(durable_ms));
        let saves = save_ms.len();
        println!(
            "  {mb:3} MiB input: save per iteration median {:.2} ms (max {:.2} ms, {saves} saves); whole run {plain:.1} ms plain, {durable:.1} ms durable ({runs} runs, medians); last checkpoint {bytes} bytes; store (db + WAL) {db_bytes} bytes",
            median(save_ms.clone()),
            save_ms.iter().copied().fold(0.0, f64::max),
        );
    }
}

fn main() {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: vec![],
    });
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful either.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--rss-child") {
        let mb = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(1);
        runtime.block_on(rss_child(mb));
        return;
    }
    if args.iter().any(|a| a == "--needle") {
        runtime.block_on(needle());
        return;
    }
    if args.iter().any(|a| a == "--concurrency-sweep") {
        runtime.block_on(async {
            for c in [8, 16, 32, 64, 128] {
                fan_out(c, 3).await;
            }
        });
        return;
    }
    if args.iter().any(|a| a == "--backends") {
        runtime.block_on(backends());
        return;
    }
    if args.iter().any(|a| a == "--checkpoint") {
        runtime.block_on(checkpoint_cost());
        return;
    }
    if args.iter().any(|a| a == "--big-fan-out") {
        runtime.block_on(big_fan_out());
        return;
    }
    runtime.block_on(async {
        iteration_overhead().await;
        fan_out(16, 5).await;
        needle().await;
        big_fan_out().await;
    });
    peak_memory();
}
