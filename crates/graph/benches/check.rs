#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `graph check`'s compile at size: a chain of N ask nodes (each a node table and an edge) is
//! parsed and checked — fields, templates, edges, reachability, cycles — at 1,000, 10,000 and
//! 20,000 nodes. Linear means the time per 1,000 nodes stays the same.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use recursive_graph::blueprint;

/// A blueprint of `n` nodes in one chain from START to END, each reading the channel.
fn chain(n: usize) -> String {
    let mut bp = String::from("name = \"big\"\n[state]\nx = \"string\"\n");
    for i in 0..n {
        bp.push_str(&format!(
            "[[nodes]]\nname = \"n{i}\"\nmodel = \"default\"\nprompt = \"step {i}: {{x}}\"\noutput = \"x\"\n"
        ));
    }
    bp.push_str("[[edges]]\nfrom = \"START\"\nto = \"n0\"\n");
    for i in 0..n - 1 {
        bp.push_str(&format!("[[edges]]\nfrom = \"n{i}\"\nto = \"n{}\"\n", i + 1));
    }
    bp.push_str(&format!("[[edges]]\nfrom = \"n{}\"\nto = \"END\"\n", n - 1));
    bp
}

fn check(c: &mut Criterion) {
    let mut group = c.benchmark_group("graph_check");
    group.sample_size(10);
    for n in [1_000, 10_000, 20_000] {
        let text = chain(n);
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &text, |b, text| {
            b.iter(|| blueprint::compile(text, "big.toml").unwrap())
        });
    }
    group.finish();
}

criterion_group!(benches, check);
criterion_main!(benches);
