#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A sandbox worker dies with its host: a host killed with SIGKILL while its worker is busy in a
//! snippet (a loop that would run until the snippet's time limit) leaves no worker behind, for
//! the Monty worker and for an unconfined CPython worker. The host is this test binary run again
//! as [`host_of_a_busy_worker`] (ignored on its own).
//!
//! The CPython interpreter comes from `RLM_TEST_PYTHON` (`./scripts/test` sets it); without it
//! the CPython test fails unless `RECURSIVE_ALLOW_SKIP=1`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use recursive_core::confine::SandboxMode;
use recursive_rlm::cpython::CPythonConfig;
use recursive_rlm::repl::Backend;
use recursive_rlm::{HostCall, HostReply, MontyObject, SandboxHost, SandboxLimits};
use tokio_util::sync::CancellationToken;

/// Tells this binary, run again, to be a host (`monty`, or the CPython interpreter's path).
const HOST_VAR: &str = "WORKER_LIFETIME_HOST";

/// Answers `mark()` (with `None`) and tells, once, that the snippet got there.
struct Marker(std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>);

impl SandboxHost for Marker {
    fn is_host_function(&self, name: &str) -> bool {
        name == "mark"
    }

    fn call(&self, _call: HostCall) -> HostReply {
        if let Some(marked) = self.0.lock().unwrap().take() {
            let _ = marked.send(());
        }
        HostReply::Value(MontyObject::none())
    }
}

/// The host: starts a session, runs a snippet that marks its start and then loops until its
/// 60 s time limit, says `busy` once the worker is in it, and waits to be killed.
#[tokio::test]
#[ignore = "the host process of the tests below, which start it"]
async fn host_of_a_busy_worker() {
    let Ok(kind) = std::env::var(HOST_VAR) else { return };
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive-sandbox-worker").into(),
        args: Vec::new(),
    });
    let backend = match kind.as_str() {
        "monty" => Backend::Monty,
        python => Backend::CPython(CPythonConfig { python: python.into(), sandbox: SandboxMode::Off }),
    };
    let limits = SandboxLimits { timeout: Duration::from_secs(60), ..Default::default() };
    let repl = recursive_rlm::repl::start(&backend, limits, Vec::new(), vec!["mark".into()], "").await.unwrap();
    let (marked, busy) = tokio::sync::oneshot::channel();
    let host = Arc::new(Marker(std::sync::Mutex::new(Some(marked))));
    tokio::spawn(async move { repl.execute("mark()\nwhile True:\n    pass\n", host, &CancellationToken::new()).await });
    busy.await.unwrap();
    println!("busy");
    std::future::pending::<()>().await;
}

/// The processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok()) == Some(pid)
        })
        .collect()
}

/// Whether a process is gone (or a zombie nobody reaps).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Starts a host of `kind`, waits until its worker is busy, kills the host with SIGKILL and
/// returns the workers still alive two seconds later.
fn workers_left_after_killing_the_host(kind: &str) -> Vec<u32> {
    let mut host = Command::new(std::env::current_exe().unwrap())
        .args(["host_of_a_busy_worker", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env(HOST_VAR, kind)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(host.stdout.take().unwrap());
    let said = stdout.lines().map_while(Result::ok).find(|l| l.trim_end().ends_with("busy"));
    assert!(said.is_some(), "the host did not start its worker");
    let workers = children_of(host.id());
    assert!(!workers.is_empty(), "the host has no worker");
    host.kill().unwrap();
    host.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline && !workers.iter().all(|w| gone(*w)) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let left: Vec<u32> = workers.into_iter().filter(|w| !gone(*w)).collect();
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    left
}

#[test]
fn the_monty_worker_dies_with_its_killed_host() {
    let left = workers_left_after_killing_the_host("monty");
    assert!(left.is_empty(), "workers {left:?} outlived their host by two seconds");
}

#[test]
fn an_unconfined_cpython_worker_dies_with_its_killed_host() {
    let Some(python) = recursive_testkit::require_env("RLM_TEST_PYTHON") else { return };
    let left = workers_left_after_killing_the_host(&python);
    assert!(left.is_empty(), "workers {left:?} outlived their host by two seconds");
}
