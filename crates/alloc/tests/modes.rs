#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The allocator as a binary installs it: a host that fails as Rust programs fail, a worker that
//! holds its ceiling, and one live-byte count across the switch.

use std::process::Command;
use std::sync::atomic::Ordering;

use monty_types::{LIVE_MEMORY, OOM_EXIT_CODE};
use recursive_alloc::HostOrWorker;

#[global_allocator]
static ALLOC: HostOrWorker = HostOrWorker;

/// Set in the child that becomes a worker (the switch cannot be undone in this process).
const CHILD: &str = "RECURSIVE_ALLOC_TEST_CHILD";

#[test]
fn a_host_gets_a_refused_reservation_as_an_error_and_counts_every_block() {
    if std::env::var_os(CHILD).is_some() {
        return;
    }
    let mut v: Vec<u8> = Vec::new();
    assert!(v.try_reserve(1 << 46).is_err(), "64 TiB were granted");
    let block = vec![1u8; 8 << 20];
    assert!(LIVE_MEMORY.load(Ordering::Relaxed) >= 8 << 20);
    drop(block);
}

#[test]
fn a_worker_ends_past_its_ceiling_with_the_workers_message() {
    if std::env::var_os(CHILD).is_some() {
        worker_goes_over_its_ceiling();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "a_worker_ends_past_its_ceiling_with_the_workers_message", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(OOM_EXIT_CODE), "{stderr}");
    assert!(stderr.contains("monty worker: allocation of") && stderr.contains("exceeds the memory limit"), "{stderr}");
    assert!(!stderr.contains("the ceiling did not hold"), "{stderr}");
}

/// In the child: a block from before the switch is released after it (refunded what it was
/// charged, so the count does not wrap), then the worker allocates past a 16 MiB ceiling.
fn worker_goes_over_its_ceiling() {
    let from_the_host = vec![1u8; 4 << 20];
    recursive_alloc::become_worker();
    drop(from_the_host);
    monty_alloc::set_hard_limit(Some(16 << 20)).unwrap();
    let small = vec![1u8; 1 << 20];
    drop(small);
    let big = vec![1u8; 64 << 20];
    eprintln!("the ceiling did not hold: {}", big.len());
    std::process::exit(0);
}
