//! Serve benchmarks (`harness = false`):
//! 1. added latency: a non-streamed chat completion through the whole server (auth layer, run
//!    store, runner task, event record, response) against a bare axum handler answering the same
//!    JSON on the same machine — the ratio is the server's overhead over the HTTP floor;
//! 2. concurrent streams: N streamed chat completions at once, each a run that streams a delta
//!    every 100 ms for 5 s; reports whether all N finished whole, the wall time against the 5 s
//!    ideal, and the process's resident memory per stream;
//! 3. stored runs: 2,000 finished chat completions kept in a SQLite run archive — the bytes each
//!    run takes in the store, and the process's resident growth per run once they are written away.
//!
//! `./scripts/cargo bench -p recursive-serve --bench serve`

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::StreamExt;
use recursive_core::{EventKind, RunScope};
use recursive_serve::{RunOutput, RunRequest, Runner, ServeConfig, Server};

/// Answers at once, or streams `deltas` pieces 100 ms apart when the input says `stream`.
struct Bench;

#[async_trait]
impl Runner for Bench {
    async fn run(&self, request: RunRequest, scope: RunScope) -> RunOutput {
        let mut text = String::new();
        if request.input == "stream" {
            for i in 0..50 {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let delta = format!("{i} ");
                scope.emit(1, EventKind::PartialText { delta: delta.clone() });
                text.push_str(&delta);
            }
        } else {
            text.push_str("ok");
        }
        RunOutput { ok: true, outcome: recursive_core::FinishReason::NoMoreToolCalls, text, ..RunOutput::failed("") }
    }
}

async fn start(max: usize) -> String {
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!()),
        max_concurrent_runs: max,
        max_queued_runs: 0,
        ..Default::default()
    };
    let server = Server::new(Arc::new(Bench), config);
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(server.serve(std::future::pending(), move |addr| {
        let _ = tx.send(addr);
    }));
    format!("http://{}", rx.await.unwrap_or_else(|_| unreachable!()))
}

async fn bare() -> String {
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            axum::Json(serde_json::json!({"id": "x", "object": "chat.completion", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}))
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|_| unreachable!());
    let addr = listener.local_addr().unwrap_or_else(|_| unreachable!());
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

async fn mean_latency_us(client: &reqwest::Client, url: &str, n: usize) -> f64 {
    let body = serde_json::json!({"model": "agent", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..100 {
        let _ = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await;
    }
    let t = Instant::now();
    for _ in 0..n {
        let r = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await;
        let ok = match r {
            Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
            Err(_) => false,
        };
        assert!(ok, "a request failed");
    }
    t.elapsed().as_secs_f64() * 1e6 / n as f64
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn streams(n: usize) {
    let url = start(n).await;
    let client = recursive_http::client_builder().pool_max_idle_per_host(n).build().unwrap_or_else(|_| unreachable!());
    let body =
        serde_json::json!({"model": "agent", "stream": true, "messages": [{"role": "user", "content": "stream"}]});
    let before = rss_kib();
    let peak = Arc::new(std::sync::atomic::AtomicU64::new(before));
    let watcher = {
        let peak = peak.clone();
        tokio::spawn(async move {
            loop {
                peak.fetch_max(rss_kib(), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let t = Instant::now();
    let runs = (0..n).map(|_| {
        let (client, url, body) = (client.clone(), url.clone(), body.clone());
        async move {
            let Ok(response) = client.post(format!("{url}/v1/chat/completions")).json(&body).send().await else {
                return false;
            };
            let mut text = String::new();
            let mut stream = response.bytes_stream();
            while let Some(Ok(chunk)) = stream.next().await {
                text.push_str(&String::from_utf8_lossy(&chunk));
            }
            text.contains("\"49 \"") && text.contains("[DONE]")
        }
    });
    let done = futures::future::join_all(runs).await;
    let wall = t.elapsed().as_secs_f64();
    watcher.abort();
    let whole = done.iter().filter(|d| **d).count();
    let per_stream = (peak.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(before)) as f64 / n as f64;
    println!(
        "  {n:5} streams: {whole}/{n} whole, wall {wall:.2} s (ideal 5.00 s, ratio {:.2}), ~{per_stream:.0} KiB per stream",
        wall / 5.0
    );
}

/// The bytes of a SQLite database with its WAL.
fn db_bytes(path: &std::path::Path) -> u64 {
    ["", "-wal"]
        .iter()
        .filter_map(|suffix| std::fs::metadata(format!("{}{suffix}", path.display())).ok())
        .map(|m| m.len())
        .sum()
}

async fn stored_runs(client: &reqwest::Client, n: usize) {
    let dir = std::env::temp_dir().join(format!("serve-bench-{}", std::process::id()));
    let path = dir.join("runs.db");
    let archive = recursive_store::open_archive(&path.display().to_string()).await.unwrap_or_else(|_| unreachable!());
    let config = ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap_or_else(|_| unreachable!()),
        archive: Some(archive),
        ..Default::default()
    };
    let server = Server::new(Arc::new(Bench), config);
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(server.clone().serve(std::future::pending(), move |addr| {
        let _ = tx.send(addr);
    }));
    let url = format!("http://{}", rx.await.unwrap_or_else(|_| unreachable!()));
    mean_latency_us(client, &url, 200).await;
    server.store_flush().await;
    let (rss, bytes) = (rss_kib(), db_bytes(&path));
    mean_latency_us(client, &url, n).await;
    server.store_flush().await;
    let per_run_kib = rss_kib().saturating_sub(rss) as f64 / n as f64;
    let per_run_bytes = db_bytes(&path).saturating_sub(bytes) as f64 / n as f64;
    println!("  {n} runs: {per_run_bytes:.0} bytes per run in the store, {per_run_kib:.2} KiB resident per run");
    let _ = std::fs::remove_dir_all(dir);
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap_or_else(|_| unreachable!());
    runtime.block_on(async {
        let client = recursive_http::client();
        let n = 2000;
        let floor = mean_latency_us(&client, &bare().await, n).await;
        let served = mean_latency_us(&client, &start(8).await, n).await;
        println!("bench 1: chat completion latency (mean of {n}, sequential, keep-alive)");
        println!(
            "  bare axum handler {floor:7.1} µs   recursive serve {served:7.1} µs   added {:6.1} µs   ratio {:.2}",
            served - floor,
            served / floor
        );
        println!("bench 2: concurrent streamed chat completions (50 deltas, 100 ms apart)");
        for n in [100, 500, 1000] {
            streams(n).await;
        }
        println!("bench 3: finished runs kept in a SQLite run archive (+200 of the same before, as warm-up)");
        stored_runs(&client, 2000).await;
    });
}
