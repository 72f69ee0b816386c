#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `recursive worker` on a real PostgreSQL (a schema of its own per test): 300 threads queued
//! with `graph run --enqueue` are drained by 3 worker processes while one of them, holding
//! threads in the middle of a node, is SIGKILLed and started again — every thread ends done
//! once, none is lost, and the scripted model servers' request logs show that no finished node
//! ran again (only the nodes the killed worker had in flight ran a second time). SIGTERM
//! drains a worker: it puts its unfinished job back at its checkpoint and exits 0, and another
//! worker finishes the thread.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Env, signal, stdout_json, terminate, wait_for};
use recursive_testkit::postgres::TestSchema;
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::Value;

const PAIR: &str = include_str!("fixtures/graphs/pair.toml");

/// The node a request comes from and its thread's topic.
fn node_and_topic(r: &RecordedRequest) -> (String, String) {
    let text = r.last_user_text().unwrap_or_default();
    if let Some(topic) = text.strip_prefix("First: ") {
        return ("first".into(), topic.to_string());
    }
    let inner = text.strip_prefix("Second: F[").and_then(|t| t.strip_suffix(']')).unwrap_or(&text);
    ("second".into(), inner.to_string())
}

fn answer(r: &RecordedRequest) -> Reply {
    match node_and_topic(r) {
        (node, topic) if node == "first" => Reply::text(format!("F[{topic}]")),
        (_, topic) => Reply::text(format!("S[{topic}]")),
    }
}

/// A model server that answers every node; while `hang` is set, `second` never gets an answer.
fn server(runtime: &tokio::runtime::Runtime, hang: Option<Arc<AtomicBool>>) -> ModelServer {
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(move |r| {
        let hanging = hang.as_ref().is_some_and(|h| h.load(Ordering::SeqCst));
        if hanging && node_and_topic(r).0 == "second" {
            return Some(Reply::hang());
        }
        Some(answer(r))
    });
    server
}

/// (node, topic) → how many requests the server got for it.
fn counts(server: &ModelServer) -> BTreeMap<(String, String), usize> {
    let mut counts = BTreeMap::new();
    for r in server.requests() {
        *counts.entry(node_and_topic(&r)).or_insert(0) += 1;
    }
    counts
}

fn provider(server: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &server.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

/// A worker process with a short lease, its stderr in `<name>.log`.
fn worker(env: &Env, server: &ModelServer, url: &str, name: &str, concurrency: &str) -> Child {
    let log = std::fs::File::create(env.path(&format!("{name}.log"))).unwrap();
    env.cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["worker", "--store", url, "--concurrency", concurrency, "--lease-ttl", "2", "--poll", "0.1"])
        .args(["--backoff", "0.2", "--drain-timeout", "0.5"])
        .args(provider(server))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// Queues a thread per topic, a few processes at a time.
fn enqueue(env: &Env, url: &str, topics: &[String]) {
    for batch in topics.chunks(6) {
        let children: Vec<Child> = batch
            .iter()
            .map(|topic| {
                env.cmd()
                    .args(["graph", "run", "pair.toml", "--enqueue", "--thread", topic, "--store", url])
                    .arg("--input")
                    .arg(format!(r#"{{"topic": "{topic}"}}"#))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (child, topic) in children.into_iter().zip(batch) {
            let out = child.wait_with_output().unwrap();
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), topic, "it prints the thread's id");
        }
    }
}

/// The queue as `graph jobs --json` shows it.
fn jobs(env: &Env, url: &str) -> Value {
    let out = env.run(&["graph", "jobs", "--store", url, "--json", "--limit", "1000"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    stdout_json(&out)
}

fn done_count(env: &Env, url: &str) -> i64 {
    jobs(env, url)["counts"]["done"].as_i64().unwrap_or(0)
}

fn setup(prefix: &str) -> Option<(Env, tokio::runtime::Runtime, TestSchema)> {
    let url = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL")?;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create(&url, prefix)).unwrap();
    let env = Env::new();
    std::fs::write(env.path("pair.toml"), PAIR).unwrap();
    Some((env, runtime, schema))
}

#[test]
fn three_workers_drain_300_threads_once_each_while_one_is_killed_and_restarted() {
    let Some((env, runtime, schema)) = setup("workers_drain") else { return };
    let url = schema.url.clone();
    let topics: Vec<String> = (0..300).map(|i| format!("topic-{i:03}")).collect();
    enqueue(&env, &url, &topics);
    assert_eq!(jobs(&env, &url)["counts"]["queued"], 300);

    // The victim's server never answers `second`: it is killed with two threads mid-node.
    let main = server(&runtime, None);
    let hang = Arc::new(AtomicBool::new(true));
    let victim_server = server(&runtime, Some(hang.clone()));
    let victim = worker(&env, &victim_server, &url, "victim", "2");
    wait_for("the victim to hang in `second` of two threads", Duration::from_secs(60), || {
        victim_server.requests().iter().filter(|r| node_and_topic(r).0 == "second").count() == 2
    });
    let a = worker(&env, &main, &url, "a", "4");
    let b = worker(&env, &main, &url, "b", "4");
    wait_for("the others to finish 50 threads", Duration::from_secs(120), || done_count(&env, &url) >= 50);
    signal(victim.id(), "KILL");
    let mut victim = victim;
    victim.wait().unwrap();
    let in_flight: BTreeSet<String> = victim_server
        .requests()
        .iter()
        .map(node_and_topic)
        .filter(|(node, _)| node == "second")
        .map(|(_, topic)| topic)
        .collect();
    assert_eq!(in_flight.len(), 2);
    let restarted = worker(&env, &main, &url, "restarted", "4");

    wait_for("every thread to be done", Duration::from_secs(300), || done_count(&env, &url) == 300);
    for (child, name) in [(a, "a"), (b, "b"), (restarted, "restarted")] {
        assert_eq!(terminate(child, name), Some(0), "{name} drains and exits 0");
    }

    let queue = jobs(&env, &url);
    assert_eq!(queue["counts"].as_object().unwrap().len(), 1, "all done, none queued, running or failed: {queue}");
    let listed = queue["jobs"].as_array().unwrap();
    assert_eq!(listed.len(), 300);
    for job in listed {
        let topic = job["target"].as_str().unwrap();
        assert_eq!(job["outcome"], "done", "{job}");
        let attempts = if in_flight.contains(topic) { 2 } else { 1 };
        assert_eq!(job["attempts"], attempts, "the killed worker's threads were taken over once: {job}");
    }
    let (served, hung) = (counts(&main), counts(&victim_server));
    for topic in &topics {
        let n = |c: &BTreeMap<(String, String), usize>, node: &str| {
            c.get(&(node.to_string(), topic.clone())).copied().unwrap_or(0)
        };
        assert_eq!(n(&served, "first") + n(&hung, "first"), 1, "{topic}: `first` ran once, never again");
        assert_eq!(n(&served, "second"), 1, "{topic}: `second` finished once");
        let expected = usize::from(in_flight.contains(topic));
        assert_eq!(n(&hung, "second"), expected, "{topic}: only the killed node ran twice");
    }
    for topic in &in_flight {
        let out = env.run(&["graph", "state", "--thread", topic, "--store", &url]);
        let state = stdout_json(&out);
        assert_eq!(state["state"]["second"], format!("S[{topic}]"), "{state}");
        assert_eq!(state["next"], serde_json::json!([]));
    }
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn sigterm_drains_a_worker_and_its_unfinished_thread_is_finished_by_another() {
    let Some((env, runtime, schema)) = setup("workers_sigterm") else { return };
    let url = schema.url.clone();
    enqueue(&env, &url, &["topic-x".to_string()]);
    let hang = Arc::new(AtomicBool::new(true));
    let hanging = server(&runtime, Some(hang));
    let first = worker(&env, &hanging, &url, "first", "1");
    wait_for("`second` to hang", Duration::from_secs(60), || hanging.request_count() == 2);
    assert_eq!(terminate(first, "first"), Some(0), "a drained worker exits 0");
    let job = &jobs(&env, &url)["jobs"][0];
    assert_eq!((job["status"].as_str(), job["attempts"].as_i64()), (Some("queued"), Some(0)), "put back unrun: {job}");

    let main = server(&runtime, None);
    let second = worker(&env, &main, &url, "second", "1");
    wait_for("the thread to be done", Duration::from_secs(60), || done_count(&env, &url) == 1);
    assert_eq!(terminate(second, "second"), Some(0));
    let asked: Vec<(String, String)> = main.requests().iter().map(node_and_topic).collect();
    assert_eq!(
        asked,
        [("second".to_string(), "topic-x".to_string())],
        "`first` finished before the drain: not run again"
    );
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn a_failing_thread_is_retried_then_fails_for_good_and_a_queued_resume_finishes_it() {
    let Some((env, runtime, schema)) = setup("workers_retry") else { return };
    let url = schema.url.clone();
    let broken = Arc::new(AtomicBool::new(true));
    let server = runtime.block_on(ModelServer::start());
    let failing = broken.clone();
    server.respond_with(move |r| {
        if failing.load(Ordering::SeqCst) && node_and_topic(r).0 == "second" {
            return Some(Reply::error(400, "bad request"));
        }
        Some(answer(r))
    });
    let out = env
        .cmd()
        .args(["graph", "run", "pair.toml", "--enqueue", "--thread", "topic-r", "--max-attempts", "2"])
        .args(["--store", &url, "--input", r#"{"topic": "topic-r"}"#])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let w = worker(&env, &server, &url, "w", "1");
    wait_for("the job to fail for good", Duration::from_secs(60), || {
        jobs(&env, &url)["counts"]["failed"].as_i64() == Some(1)
    });
    let job = jobs(&env, &url)["jobs"][0].clone();
    assert_eq!(job["attempts"], 2, "{job}");
    assert!(job["error"].as_str().unwrap().contains("node `second` failed"), "{job}");

    broken.store(false, Ordering::SeqCst);
    let again = env.run(&["graph", "resume", "--thread", "topic-r", "--enqueue", "--store", &url]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), "topic-r");
    wait_for("the resumed thread to be done", Duration::from_secs(60), || done_count(&env, &url) == 1);
    assert_eq!(terminate(w, "w"), Some(0));
    let asked: Vec<String> = server.requests().iter().map(|r| node_and_topic(r).0).collect();
    assert_eq!(asked, ["first", "second", "second", "second"], "`first` finished once and never ran again");
    let state = stdout_json(&env.run(&["graph", "state", "--thread", "topic-r", "--store", &url]));
    assert_eq!(state["state"]["second"], "S[topic-r]");
    runtime.block_on(schema.drop_all()).unwrap();
}
