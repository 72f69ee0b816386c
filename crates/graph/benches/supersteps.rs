#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Superstep overhead per node, against the ideal of calling the node functions directly:
//! chains of 100 and 1,000 function nodes run by the executor with the in-memory and the
//! SQLite checkpointer (a superstep's cost must not grow with the thread's length: the
//! per-node time of the long chain against the short one's is the figure); and a 1,000-node
//! fan-out (one superstep of 1,000 concurrent nodes, then a join) with its wall time. Peak
//! memory of the fan-out is printed by
//! `cargo bench -p recursive-graph --bench supersteps -- fanout-memory`, and the per-node ratio
//! of the two chains, measured in alternation so that both meet the same load of the machine, by
//! `cargo bench -p recursive-graph --bench supersteps -- chain-ratio`.

use std::sync::Arc;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use recursive_core::RunScope;
use recursive_graph::{Channel, END, Graph, RecursionPolicy, START, Start, State, Thread, Update, ValueType, func};
use recursive_store::{Checkpointer, MemoryCheckpointer, SqliteCheckpointer};
use serde_json::{Value, json};

/// The chain lengths compared.
const CHAINS: [usize; 2] = [100, 1000];

fn bump(s: &State) -> Update {
    let n = s.get("n").and_then(Value::as_i64).unwrap_or(0);
    json!({ "n": n + 1 }).as_object().cloned().unwrap_or_default()
}

fn chain(length: usize) -> Graph {
    let mut b = Graph::builder("chain").channel("n", Channel::last(ValueType::Integer));
    // A policy that lets the whole chain run.
    let limit = u32::try_from(length + 10).unwrap();
    b = b.policy(RecursionPolicy { max_supersteps: limit, ..RecursionPolicy::default() });
    for i in 0..length {
        b = b.node(format!("n{i}"), func(|s| Ok(bump(s))));
    }
    b = b.edge(START, "n0");
    for i in 1..length {
        b = b.edge(format!("n{}", i - 1), format!("n{i}"));
    }
    b.edge(format!("n{}", length - 1), END).build().unwrap()
}

fn fanout(width: usize) -> Graph {
    let mut b = Graph::builder("fanout").channel("hits", Channel::append());
    for i in 0..width {
        b = b.node(format!("w{i}"), func(move |_| Ok(json!({ "hits": i }).as_object().cloned().unwrap_or_default())));
        b = b.edge(START, format!("w{i}")).edge(format!("w{i}"), "join");
    }
    b.node("join", func(|_| Ok(Update::new()))).edge("join", END).build().unwrap()
}

fn run(rt: &tokio::runtime::Runtime, graph: &Graph, store: Arc<dyn Checkpointer>, thread: &str) {
    let out = rt
        .block_on(graph.run(Start::Input(json!({})), &Thread::new(store, thread), &RunScope::detached("bench")))
        .unwrap();
    assert_eq!(out.finish, recursive_graph::Finish::Done);
}

fn supersteps(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Checkpointer> = Arc::new(SqliteCheckpointer::open(dir.path().join("bench.db")).unwrap());
    let mut i = 0u64;
    for length in CHAINS {
        let graph = chain(length);
        let mut g = c.benchmark_group(format!("chain-{length}"));
        g.sample_size(10).throughput(Throughput::Elements(length as u64));
        g.bench_function("direct-calls", |b| {
            b.iter(|| {
                let mut s = State::new();
                for _ in 0..length {
                    let u = bump(&s);
                    s.extend(u);
                }
                s
            })
        });
        g.bench_function("memory-store", |b| {
            b.iter_batched(
                || Arc::new(MemoryCheckpointer::new()) as Arc<dyn Checkpointer>,
                |store| run(&rt, &graph, store, "t"),
                BatchSize::SmallInput,
            )
        });
        g.bench_function("sqlite-store", |b| {
            b.iter(|| {
                i += 1;
                run(&rt, &graph, sqlite.clone(), &format!("t{i}"))
            })
        });
        g.finish();
    }

    let wide = fanout(1000);
    let mut g = c.benchmark_group("fanout-1000");
    g.sample_size(10);
    g.bench_function("memory-store", |b| {
        b.iter_batched(
            || Arc::new(MemoryCheckpointer::new()) as Arc<dyn Checkpointer>,
            |store| run(&rt, &wide, store, "t"),
            BatchSize::SmallInput,
        )
    });
    let mut j = 0u64;
    g.bench_function("sqlite-store", |b| {
        b.iter(|| {
            j += 1;
            run(&rt, &wide, sqlite.clone(), &format!("f{j}"))
        })
    });
    g.finish();
}

/// Peak resident memory of one 1,000-node fan-out run on SQLite, from /proc (VmHWM), printed
/// next to the process's resident memory before the run.
fn fanout_memory(_c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Checkpointer> = Arc::new(SqliteCheckpointer::open(dir.path().join("mem.db")).unwrap());
    let wide = fanout(1000);
    let before = status_kib("VmRSS");
    let started = std::time::Instant::now();
    run(&rt, &wide, store, "m");
    println!(
        "fanout-memory: 1000 nodes on SQLite in {:.1} ms; resident before {} KiB, peak {} KiB",
        started.elapsed().as_secs_f64() * 1000.0,
        before,
        status_kib("VmHWM")
    );
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")).map(|v| v.trim().trim_end_matches(" kB").trim().to_string()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The per-node time of the 1,000-node chain against the 100-node chain's, on each store: the
/// two are run in alternation (ten short runs, then one long one, 15 rounds) and the medians of
/// their per-node times compared, so a load that comes and goes weighs on both alike.
fn chain_ratio(_c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Checkpointer> = Arc::new(SqliteCheckpointer::open(dir.path().join("ratio.db")).unwrap());
    let (short, long) = (chain(CHAINS[0]), chain(CHAINS[1]));
    let mut thread = 0u64;
    for name in ["memory", "sqlite"] {
        let mut per_node = [Vec::new(), Vec::new()];
        for _ in 0..15 {
            for (k, graph, times) in [(0, &short, 10), (1, &long, 1)] {
                for _ in 0..times {
                    thread += 1;
                    let store = match name {
                        "memory" => Arc::new(MemoryCheckpointer::new()) as Arc<dyn Checkpointer>,
                        _ => sqlite.clone(),
                    };
                    let started = std::time::Instant::now();
                    run(&rt, graph, store, &format!("r{thread}"));
                    per_node[k].push(started.elapsed().as_secs_f64() * 1e6 / CHAINS[k] as f64);
                }
            }
        }
        let [a, b] = per_node.map(median);
        println!(
            "chain-ratio {name}: {} nodes {a:.1} µs/node, {} nodes {b:.1} µs/node, ratio {:.2}",
            CHAINS[0],
            CHAINS[1],
            b / a
        );
    }
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

criterion_group!(benches, supersteps, fanout_memory, chain_ratio);
criterion_main!(benches);
