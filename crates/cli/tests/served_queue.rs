#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Served runs through the PostgreSQL queue (a schema of its own per test): `serve --enqueue`
//! answers `POST /v1/runs` with a queued run and runs nothing itself; two `recursive worker`
//! processes run each run exactly once (the scripted model server counts the calls), the server
//! shows the results, and an event stream opened while a run was queued follows it to `end`.
//! A run cancelled while queued never runs; a worker killed mid-run leaves the run to another
//! worker, whose attempt is numbered after the first one's events, behind an `attempt` event (and
//! a server started meanwhile does not take it for a run a stopped server left); one cancelled
//! while a worker runs it is cancelled there; one whose last attempt's worker dies ends failed.
//! `--enqueue` without PostgreSQL is refused.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Env, Served, http, signal, terminate, wait_for};
use recursive_testkit::postgres::TestSchema;
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

fn provider(model: &ModelServer) -> Vec<String> {
    ["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"].map(String::from).to_vec()
}

/// A model server answering `answer: <question>`; while `hang` is set it never answers.
fn model(runtime: &tokio::runtime::Runtime, hang: Option<Arc<AtomicBool>>) -> ModelServer {
    let server = runtime.block_on(ModelServer::start());
    server.respond_with(move |r| {
        if hang.as_ref().is_some_and(|h| h.load(Ordering::SeqCst)) {
            return Some(Reply::hang());
        }
        Some(Reply::text(format!("answer: {}", r.last_user_text().unwrap_or_default())))
    });
    server
}

/// The questions the model server was asked, with how often.
fn asked(model: &ModelServer) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in model.requests() {
        *counts.entry(r.last_user_text().unwrap_or_default()).or_insert(0) += 1;
    }
    counts
}

fn serve(env: &Env, model: &ModelServer, url: &str) -> Served {
    serve_with(env, model, url, &[])
}

fn serve_with(env: &Env, model: &ModelServer, url: &str, more: &[&str]) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--store", url, "--enqueue"])
        .args(more)
        .args(provider(model))
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

/// A worker process with a short lease, its stderr in `<name>.log`.
fn worker(env: &Env, model: &ModelServer, url: &str, name: &str) -> Child {
    let log = std::fs::File::create(env.path(&format!("{name}.log"))).unwrap();
    env.cmd()
        .env("OPENAI_API_KEY", "sk-test")
        .args(["worker", "--store", url, "--concurrency", "2", "--lease-ttl", "1.5", "--poll", "0.1"])
        .args(["--backoff", "0.2", "--drain-timeout", "0.5"])
        .args(provider(model))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

fn post_run(server: &Served, input: &str) -> Value {
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": input})));
    assert_eq!(status, 202, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn get(server: &Served, path: &str) -> (u16, Value) {
    let (status, _, body) = http(&server.addr, "GET", path, &[], None);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn run_of(server: &Served, id: &str) -> Value {
    get(server, &format!("/v1/runs/{id}")).1
}

/// Reads a run's whole event stream on a thread (it ends with the run's `end`).
fn follow(server: &Served, id: &str) -> std::thread::JoinHandle<String> {
    let (addr, path) = (server.addr.clone(), format!("/v1/runs/{id}/events"));
    std::thread::spawn(move || http(&addr, "GET", &path, &[], None).2)
}

/// The `(event, data)` pairs of an SSE body.
fn sse(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter_map(|block| {
            let field = |name: &str| block.lines().find_map(|l| l.strip_prefix(name).map(str::trim).map(String::from));
            Some((field("event:")?, serde_json::from_str(&field("data:")?).unwrap_or(Value::Null)))
        })
        .collect()
}

fn setup(prefix: &str) -> Option<(Env, tokio::runtime::Runtime, TestSchema)> {
    let url = recursive_testkit::require_env("RECURSIVE_TEST_POSTGRES_URL")?;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(TestSchema::create(&url, prefix)).unwrap();
    Some((Env::new(), runtime, schema))
}

#[test]
fn queued_runs_are_run_once_each_by_two_workers_and_followed_to_their_end() {
    let Some((env, runtime, schema)) = setup("served_queue") else { return };
    let url = schema.url.clone();
    let main = model(&runtime, None);
    let server = serve(&env, &main, &url);

    let questions: Vec<String> = (0..6).map(|i| format!("question {i}")).collect();
    let ids: Vec<String> = questions
        .iter()
        .map(|q| {
            let view = post_run(&server, q);
            assert_eq!(view["status"], "queued", "{view}");
            view["id"].as_str().unwrap().to_string()
        })
        .collect();
    let stream = follow(&server, &ids[0]);
    let cancelled = post_run(&server, "never run")["id"].as_str().unwrap().to_string();
    let (status, _, body) = http(&server.addr, "POST", &format!("/v1/runs/{cancelled}/cancel"), &[], None);
    assert_eq!(status, 202, "{body}");
    let view = run_of(&server, &cancelled);
    assert_eq!((view["status"].as_str(), view["result"]["outcome"].as_str()), (Some("finished"), Some("cancelled")));

    // Nothing runs in the server: the runs wait for workers, listed and shown from the store.
    let (status, _, body) = http(&server.addr, "DELETE", &format!("/v1/runs/{}", ids[1]), &[], None);
    assert_eq!(status, 409, "a queued run is not deleted: {body}");
    assert_eq!(run_of(&server, &ids[0])["status"], "queued");
    let (_, list) = get(&server, "/v1/runs?status=queued");
    assert_eq!(list["data"].as_array().unwrap().len(), 6, "{list}");
    assert_eq!(main.request_count(), 0, "serve --enqueue runs nothing itself");

    let a = worker(&env, &main, &url, "a");
    let b = worker(&env, &main, &url, "b");
    let logs = || ["a", "b"].map(|n| std::fs::read_to_string(env.path(&format!("{n}.log"))).unwrap_or_default());
    wait_for("both workers to be up", Duration::from_secs(60), || logs().iter().all(|l| l.contains(" on queue ")));
    let end = std::time::Instant::now() + Duration::from_secs(120);
    while !ids.iter().all(|id| run_of(&server, id)["status"] == "finished") {
        assert!(std::time::Instant::now() < end, "the runs did not finish: {:?}", logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    for (id, question) in ids.iter().zip(&questions) {
        let view = run_of(&server, id);
        assert_eq!(view["result"]["ok"], true, "{view}");
        assert_eq!(view["result"]["text"], format!("answer: {question}"), "{view}");
    }
    let counts = asked(&main);
    for question in &questions {
        assert_eq!(counts.get(question), Some(&1), "{question} ran exactly once: {counts:?}");
    }
    assert_eq!(counts.len(), questions.len(), "the cancelled run never ran: {counts:?}");

    let events = sse(&stream.join().unwrap());
    let (last, end) = events.last().unwrap();
    assert_eq!(last, "end", "{events:?}");
    assert_eq!(end["run"]["result"]["text"], "answer: question 0", "{end}");
    assert!(events.len() > 2, "the run's events came before `end`: {events:?}");
    let (status, _, _) = http(&server.addr, "DELETE", &format!("/v1/runs/{}", ids[1]), &[], None);
    assert_eq!(status, 204, "a finished run is deleted");

    for (child, name) in [(a, "a"), (b, "b")] {
        assert_eq!(terminate(child, name), Some(0), "{name} drains and exits 0");
    }
    drop(server);
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn a_run_whose_worker_is_killed_is_run_again_by_another_after_its_first_events() {
    let Some((env, runtime, schema)) = setup("served_queue_kill") else { return };
    let url = schema.url.clone();
    let main = model(&runtime, None);
    let hanging = model(&runtime, Some(Arc::new(AtomicBool::new(true))));
    let server = serve(&env, &main, &url);
    let id = post_run(&server, "the long one")["id"].as_str().unwrap().to_string();

    let victim = worker(&env, &hanging, &url, "victim");
    wait_for("the victim to call the model", Duration::from_secs(60), || hanging.request_count() == 1);
    wait_for("the first attempt's events in the store", Duration::from_secs(20), || {
        run_of(&server, &id)["events"].as_u64().unwrap_or(0) > 0
    });
    let first_events = run_of(&server, &id)["events"].as_u64().unwrap();
    assert_eq!(run_of(&server, &id)["status"], "running");
    signal(victim.id(), "KILL");
    let mut victim = victim;
    victim.wait().unwrap();

    // A server started now over the same store (without --enqueue) leaves a worker's run alone
    // and follows it too.
    let mut plain = env.cmd();
    plain
        .args(["serve", "--listen", "127.0.0.1:0", "-q", "--store", &url])
        .args(provider(&main))
        .env("OPENAI_API_KEY", "sk-test");
    let plain = Served::spawn(plain);
    assert_eq!(run_of(&plain, &id)["status"], "running", "not taken for a run a stopped server left");
    let stream = follow(&plain, &id);
    let rescuer = worker(&env, &main, &url, "rescuer");
    let log = || std::fs::read_to_string(env.path("rescuer.log")).unwrap_or_default();
    wait_for("the rescuer to be up", Duration::from_secs(60), || log().contains(" on queue "));
    wait_for("the run to finish", Duration::from_secs(60), || run_of(&server, &id)["status"] == "finished");
    let view = run_of(&server, &id);
    assert_eq!(view["result"]["text"], "answer: the long one", "{view}");
    assert_eq!(main.request_count(), 1, "the retry ran the request once");

    let events = sse(&stream.join().unwrap());
    let marker = events.iter().position(|(kind, _)| kind == "attempt").expect("an `attempt` event");
    assert!(marker as u64 >= first_events, "the first attempt's events stay first: {events:?}");
    assert_eq!(events[marker].1["first_event"], marker, "the retry's events come after the first attempt's");
    assert_eq!(events[marker].1["attempt"], 2);
    assert_eq!(events.iter().filter(|(kind, _)| kind == "attempt").count(), 1);
    let (last, end) = events.last().unwrap();
    assert_eq!(last, "end");
    assert_eq!(end["run"]["events"].as_u64(), Some(events.len() as u64 - 1), "every event was streamed once");
    assert_eq!(terminate(rescuer, "rescuer"), Some(0));
    drop((server, plain));
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn a_run_whose_last_attempt_s_worker_dies_ends_failed_in_the_store() {
    let Some((env, runtime, schema)) = setup("served_queue_gave_up") else { return };
    let url = schema.url.clone();
    let main = model(&runtime, None);
    let hanging = model(&runtime, Some(Arc::new(AtomicBool::new(true))));
    let server = serve_with(&env, &main, &url, &["--max-attempts", "1"]);
    let id = post_run(&server, "one try")["id"].as_str().unwrap().to_string();
    let stream = follow(&server, &id);
    let victim = worker(&env, &hanging, &url, "victim");
    wait_for("the victim to call the model", Duration::from_secs(60), || hanging.request_count() == 1);
    signal(victim.id(), "KILL");
    let mut victim = victim;
    victim.wait().unwrap();

    let other = worker(&env, &main, &url, "other");
    wait_for("the run to end", Duration::from_secs(60), || run_of(&server, &id)["status"] == "finished");
    let view = run_of(&server, &id);
    assert_eq!((view["result"]["ok"].as_bool(), view["result"]["outcome"].as_str()), (Some(false), Some("error")));
    assert!(view["result"]["error"].as_str().unwrap().contains("gave up after 1 attempt"), "{view}");
    assert_eq!(sse(&stream.join().unwrap()).last().unwrap().0, "end", "the stream ends with the run");
    assert_eq!(main.request_count(), 0, "no attempt is left: not run again");
    assert_eq!(terminate(other, "other"), Some(0));
    drop(server);
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn a_run_cancelled_after_its_worker_died_ends_cancelled_once_the_lease_expires() {
    let Some((env, runtime, schema)) = setup("served_queue_cancel_dead") else { return };
    let url = schema.url.clone();
    let main = model(&runtime, None);
    let hanging = model(&runtime, Some(Arc::new(AtomicBool::new(true))));
    let server = serve(&env, &main, &url);
    let id = post_run(&server, "orphan")["id"].as_str().unwrap().to_string();
    let victim = worker(&env, &hanging, &url, "victim");
    wait_for("the victim to call the model", Duration::from_secs(60), || hanging.request_count() == 1);
    signal(victim.id(), "KILL");
    let mut victim = victim;
    victim.wait().unwrap();
    let (status, _, body) = http(&server.addr, "POST", &format!("/v1/runs/{id}/cancel"), &[], None);
    assert_eq!(status, 202, "{body}");

    let other = worker(&env, &main, &url, "other");
    wait_for("the run to end", Duration::from_secs(60), || run_of(&server, &id)["status"] == "finished");
    assert_eq!(run_of(&server, &id)["result"]["outcome"], "cancelled");
    assert_eq!(main.request_count(), 0, "a cancelled run is not run again");
    assert_eq!(terminate(other, "other"), Some(0));
    drop(server);
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn enqueue_without_a_postgres_store_is_refused() {
    let env = Env::new();
    let mut child = env
        .cmd()
        .args(["serve", "--listen", "127.0.0.1:0", "--enqueue", "--store", "memory:"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = common::wait_exit(&mut child, "serve --enqueue");
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(2), "{stderr}");
    assert!(stderr.contains("--enqueue") && stderr.contains("postgres://"), "{stderr}");
}

#[test]
fn a_run_cancelled_while_a_worker_runs_it_is_cancelled_there() {
    let Some((env, runtime, schema)) = setup("served_queue_cancel") else { return };
    let url = schema.url.clone();
    let hanging = model(&runtime, Some(Arc::new(AtomicBool::new(true))));
    let server = serve(&env, &hanging, &url);
    let id = post_run(&server, "stuck")["id"].as_str().unwrap().to_string();
    let w = worker(&env, &hanging, &url, "w");
    wait_for("the worker to call the model", Duration::from_secs(60), || hanging.request_count() == 1);
    let stream = follow(&server, &id);

    let (status, _, body) = http(&server.addr, "POST", &format!("/v1/runs/{id}/cancel"), &[], None);
    assert_eq!(status, 202, "{body}");
    wait_for("the run to end", Duration::from_secs(30), || run_of(&server, &id)["status"] == "finished");
    let view = run_of(&server, &id);
    assert_eq!(view["result"]["outcome"], "cancelled", "{view}");
    let events = sse(&stream.join().unwrap());
    assert_eq!(events.last().unwrap().1["run"]["result"]["outcome"], "cancelled", "{events:?}");
    assert_eq!(terminate(w, "w"), Some(0));
    assert_eq!(hanging.request_count(), 1, "not run again");
    drop(server);
    runtime.block_on(schema.drop_all()).unwrap();
}

#[test]
fn a_run_whose_worker_dies_mid_run_is_finished_by_another_without_resending_what_it_had() {
    let Some((env, runtime, schema)) = setup("served_queue_journal") else { return };
    let url = schema.url.clone();
    let (dying, rescuing) = (common::notes_reader(&runtime, true), common::notes_reader(&runtime, false));
    let server = serve(&env, &rescuing, &url);
    let id = post_run(&server, "read the notes")["id"].as_str().unwrap().to_string();

    let victim = worker(&env, &dying, &url, "victim");
    wait_for("the victim's second call", Duration::from_secs(60), || dying.request_count() == 2);
    signal(victim.id(), "KILL");
    let mut victim = victim;
    victim.wait().unwrap();
    let rescuer = worker(&env, &rescuing, &url, "rescuer");
    wait_for("the run to finish", Duration::from_secs(60), || run_of(&server, &id)["status"] == "finished");

    let view = run_of(&server, &id);
    assert_eq!(view["result"]["text"], "read it", "{view}");
    let asked: Vec<Value> = rescuing.requests().iter().map(|r| r.body["messages"].clone()).collect();
    assert_eq!(asked.len(), 1, "only the call in flight at the death is sent again: {asked:?}");
    assert_eq!(asked[0].as_array().unwrap().last().unwrap()["role"], "tool", "it carries the read-back result");
    assert_eq!(terminate(rescuer, "rescuer"), Some(0));
    drop(server);
    runtime.block_on(schema.drop_all()).unwrap();
}
