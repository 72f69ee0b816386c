#![allow(clippy::unwrap_used, clippy::expect_used)]
//! RLM benchmarks (a bench binary, `cargo bench -p recursive-rlm`):
//!
//! 1. **Iteration overhead**: the cost of one RLM iteration around an instant scripted model
//!    (prompt building, code extraction, running a small snippet in the sandbox, the
//!    observation, events). Goal: under 1 ms.
//! 2. **Fan-out**: `llm_query_batched` of 500 prompts against a local OpenAI-compatible HTTP
//!    server (127.0.0.1, 50 ms per request) through `recursive-llm`'s OpenAI client, with
//!    concurrency 16. Reported as a ratio to the ideal `ceil(500 / 16) × 50 ms`. Goal ≤ 1.15.

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
async fn fan_out() {
    const PROMPTS: usize = 500;
    const CONCURRENCY: usize = 16;
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
    for _ in 0..5 {
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

fn main() {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: vec![],
    });
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing useful either.
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        iteration_overhead().await;
        fan_out().await;
    });
}
