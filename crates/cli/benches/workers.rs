#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Workers on PostgreSQL (`./scripts/cargo bench -p recursive --bench workers`, with
//! `RECURSIVE_TEST_POSTGRES_URL` naming a server; every run in a schema of its own, dropped
//! after):
//!
//! 1. threads per second drained by 1, 2 and 4 `recursive worker` processes: threads of a
//!    two-node blueprint (two model calls, two supersteps) queued beforehand, against a scripted
//!    model server on 127.0.0.1 — answering at once (`--concurrency 4`: the harness's and the
//!    store's own cost), and after 50 ms (`--concurrency 1`: against the ideal of one thread per
//!    100 ms per worker);
//! 2. what the lease and the queue add per superstep, in one process: a two-step graph of
//!    function nodes run on fresh threads bare, under the thread's lease, and claimed from the
//!    queue (claim, lease, run, complete).

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use recursive_core::RunScope;
use recursive_graph::{Channel, END, Graph, START, Start, Thread, ValueType, func};
use recursive_store::queue::{DEFAULT_QUEUE, JobQueue, KIND_GRAPH, NewJob};
use recursive_store::{Checkpointer, Lease, PostgresCheckpointer, ThreadInfo};
use recursive_testkit::postgres::TestSchema;
use recursive_testkit::{ModelServer, Reply};
use serde_json::json;

const PAIR: &str = include_str!("../tests/fixtures/graphs/pair.toml");

/// Queues `n` threads of the blueprint at `origin` (its text pinned, as `--enqueue` does).
async fn enqueue(url: &str, origin: &str, n: usize) {
    let store = PostgresCheckpointer::connect(url).await.unwrap();
    let queue = JobQueue::open(&store).await.unwrap();
    for i in 0..n {
        let thread = format!("bench-{i:04}");
        let info = ThreadInfo {
            thread: thread.clone(),
            graph: "pair".into(),
            blueprint: Some(PAIR.into()),
            origin: Some(origin.into()),
            subgraphs: Some(Default::default()),
            created_at: chrono::Utc::now(),
        };
        store.put_thread(&info).await.unwrap();
        let job = NewJob {
            queue: DEFAULT_QUEUE.into(),
            kind: KIND_GRAPH.into(),
            target: thread.clone(),
            payload: json!({"input": {"topic": thread}, "after": null}),
            max_attempts: 3,
        };
        queue.enqueue(&job).await.unwrap();
    }
}

fn worker(url: &str, server: &ModelServer, concurrency: usize) -> Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_recursive"))
        .env("OPENAI_API_KEY", "sk-bench")
        .env("HOME", std::env::temp_dir())
        .args(["worker", "--store", url, "--poll", "0.05", "-q", "--concurrency", &concurrency.to_string()])
        .args(["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Jobs done so far.
async fn done(queue: &JobQueue) -> i64 {
    queue.counts(None).await.unwrap().into_iter().find(|(s, _)| s == "done").map_or(0, |(_, n)| n)
}

/// Seconds for `workers` processes to drain `threads` queued threads (bounded at 10 minutes).
async fn drain(admin: &str, threads: usize, workers: usize, concurrency: usize, latency: Duration) -> f64 {
    let schema = TestSchema::create(admin, "bench_workers").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let origin = dir.path().join("pair.toml");
    std::fs::write(&origin, PAIR).unwrap();
    enqueue(&schema.url, origin.to_str().unwrap(), threads).await;
    let server = ModelServer::start().await;
    server.respond_with(move |r| {
        let text = r.last_user_text().unwrap_or_default();
        Some(Reply::text(format!("ok {}", text.len())).after(latency))
    });
    let store = PostgresCheckpointer::connect(&schema.url).await.unwrap();
    let queue = JobQueue::open(&store).await.unwrap();
    let started = Instant::now();
    let mut children: Vec<Child> = (0..workers).map(|_| worker(&schema.url, &server, concurrency)).collect();
    while done(&queue).await < threads as i64 && started.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    assert_eq!(done(&queue).await, threads as i64, "every thread done in time");
    for child in &mut children {
        let _ = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let _ = child.wait();
    }
    assert_eq!(server.request_count(), threads * 2, "each node once");
    schema.drop_all().await.unwrap();
    elapsed
}

/// START → a → b → END, function nodes.
fn chain() -> Graph {
    let node = |name: &'static str| func(move |_| Ok(json!({"log": name}).as_object().cloned().unwrap()));
    Graph::builder("chain")
        .channel("topic", Channel::last(ValueType::String))
        .channel("log", Channel::append())
        .node("a", node("a"))
        .node("b", node("b"))
        .edge(START, "a")
        .edge("a", "b")
        .edge("b", END)
        .build()
        .unwrap()
}

/// Mean milliseconds per thread of `n` fresh two-step threads: bare, leased, and claimed from
/// the queue.
async fn overhead(admin: &str, n: usize) -> (f64, f64, f64) {
    let schema = TestSchema::create(admin, "bench_lease").await.unwrap();
    let pg = PostgresCheckpointer::connect(&schema.url).await.unwrap();
    let queue = JobQueue::open(&pg).await.unwrap();
    let store: Arc<dyn Checkpointer> = Arc::new(pg);
    let graph = chain();
    let scope = RunScope::detached("bench");
    let input = || Start::Input(json!({"topic": "t"}));
    let ttl = Duration::from_secs(30);

    let t = Instant::now();
    for i in 0..n {
        graph.run(input(), &Thread::new(store.clone(), format!("bare-{i}")), &scope).await.unwrap();
    }
    let bare = t.elapsed().as_secs_f64() * 1e3 / n as f64;

    let t = Instant::now();
    for i in 0..n {
        let thread = format!("leased-{i}");
        let lease = Lease::take_for(store.clone(), &thread, false, ttl).await.unwrap();
        graph.run(input(), &Thread::new(lease.store(), thread), &scope).await.unwrap();
        lease.release().await;
    }
    let leased = t.elapsed().as_secs_f64() * 1e3 / n as f64;

    for i in 0..n {
        let job = NewJob {
            queue: DEFAULT_QUEUE.into(),
            kind: KIND_GRAPH.into(),
            target: format!("queued-{i}"),
            payload: json!({}),
            max_attempts: 3,
        };
        queue.enqueue(&job).await.unwrap();
    }
    let t = Instant::now();
    while let Some(job) = queue.claim(DEFAULT_QUEUE, &[KIND_GRAPH], "bench", ttl).await.unwrap() {
        let lease = Lease::take_for(store.clone(), &job.target, false, ttl).await.unwrap();
        graph.run(input(), &Thread::new(lease.store(), job.target.clone()), &scope).await.unwrap();
        lease.release().await;
        assert!(queue.complete(job.id, "bench", "done").await.unwrap());
    }
    let queued = t.elapsed().as_secs_f64() * 1e3 / n as f64;
    schema.drop_all().await.unwrap();
    (bare, leased, queued)
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("RECURSIVE_TEST_POSTGRES_URL") else {
        eprintln!("workers bench: set RECURSIVE_TEST_POSTGRES_URL (./scripts/postgres start prints it)");
        std::process::exit(2);
    };
    println!("## lease and queue overhead (in process, 2-superstep thread of function nodes, 300 threads)");
    let (bare, leased, queued) = overhead(&admin, 300).await;
    println!("bare run            {bare:.2} ms/thread  {:.2} ms/superstep", bare / 2.0);
    println!("under its lease     {leased:.2} ms/thread  +{:.2} ms/superstep", (leased - bare) / 2.0);
    println!("claimed from queue  {queued:.2} ms/thread  +{:.2} ms/superstep", (queued - bare) / 2.0);

    for (label, threads, concurrency, latency) in [
        ("instant model, --concurrency 4", 300, 4, Duration::ZERO),
        ("50 ms model, --concurrency 1", 100, 1, Duration::from_millis(50)),
    ] {
        println!("## {label}: {threads} threads of 2 model nodes");
        for workers in [1, 2, 4] {
            let secs = drain(&admin, threads, workers, concurrency, latency).await;
            let rate = threads as f64 / secs;
            let ideal = if latency.is_zero() {
                String::new()
            } else {
                let ideal = (workers * concurrency) as f64 / (2.0 * latency.as_secs_f64());
                format!("  (ideal {ideal:.1}/s, ratio {:.2})", rate / ideal)
            };
            println!("{workers} worker(s): {secs:.2} s, {rate:.1} threads/s{ideal}");
        }
    }
}
