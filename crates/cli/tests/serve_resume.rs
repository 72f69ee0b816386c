#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Runs `serve` runs itself are durable in its store: a server killed (SIGKILL) mid-run and
//! started again on the same store resumes the run under its id — its events go on after those
//! the store kept, behind a `resumed` event, and no model call it had finished is sent again (the tool
//! result it had read back comes from the journal). A run whose client runs tools of its own
//! cannot resume without that client: it ends interrupted.

mod common;

use std::time::Duration;

use common::{Env, Served, http, signal, wait_for};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

fn serve(env: &Env, model: &ModelServer) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--store", common::s(&env.path("runs.db"))])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

fn post_run(server: &Served, body: &Value) -> String {
    let (status, _, text) = http(&server.addr, "POST", "/v1/runs", &[], Some(body));
    assert_eq!(status, 202, "{text}");
    serde_json::from_str::<Value>(&text).unwrap()["id"].as_str().unwrap().to_string()
}

fn run_of(server: &Served, id: &str) -> Value {
    serde_json::from_str(&http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[], None).2).unwrap()
}

fn kill(server: Served) {
    let mut server = server;
    signal(server.child.id(), "KILL");
    server.child.wait().unwrap();
}

#[test]
fn a_run_of_a_killed_server_resumes_when_it_starts_again_without_resending_what_it_had() {
    let env = Env::new();
    std::fs::write(env.path("notes.txt"), "the launch is at dawn").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (dying, rescuing) = (common::notes_reader(&runtime, true), common::notes_reader(&runtime, false));
    let first = serve(&env, &dying);
    let id = post_run(&first, &json!({"kind": "run", "input": "read the notes"}));
    wait_for("the run's second call", Duration::from_secs(60), || dying.request_count() == 2);
    kill(first);

    let second = serve(&env, &rescuing);
    wait_for("the run to finish", Duration::from_secs(60), || run_of(&second, &id)["status"] == "finished");
    let view = run_of(&second, &id);
    assert_eq!(view["result"]["text"], "read it", "{view}");
    assert_eq!(view["result"]["ok"], true, "{view}");
    let asked = rescuing.requests();
    assert_eq!(asked.len(), 1, "only the call in flight at the kill is sent again");
    let messages = asked[0].body["messages"].as_array().unwrap().clone();
    let last = messages.last().unwrap();
    assert_eq!(last["role"], "tool", "it carries the tool result read back: {messages:?}");
    assert!(last["content"].as_str().unwrap_or_default().contains("at dawn"), "{last}");

    let events = http(&second.addr, "GET", &format!("/v1/runs/{id}/events"), &[], None).2;
    assert!(events.contains("\"resumed\""), "the resume is an event of the run: {events}");

    // Deleted, the run leaves nothing of itself in the store: its request and answers go too.
    let store = env.path("runs.db");
    assert!(!common::store_journal(&store, &format!("request-{id}")).is_empty());
    let (status, _, body) = http(&second.addr, "DELETE", &format!("/v1/runs/{id}"), &[], None);
    assert_eq!(status, 204, "{body}");
    for key in [format!("request-{id}"), format!("run-{id}")] {
        assert!(common::store_journal(&store, &key).is_empty(), "{key} is gone");
    }
}

#[test]
fn a_run_of_a_server_stopped_with_sigterm_is_left_for_the_next_server_to_finish() {
    let env = Env::new();
    std::fs::write(env.path("notes.txt"), "the launch is at dawn").unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (stopping, next) = (common::notes_reader(&runtime, true), common::notes_reader(&runtime, false));
    let first = serve(&env, &stopping);
    let id = post_run(&first, &json!({"kind": "run", "input": "read the notes"}));
    wait_for("the run's second call", Duration::from_secs(60), || stopping.request_count() == 2);
    let mut first = first;
    signal(first.child.id(), "TERM");
    let stopped = common::wait_exit(&mut first.child, "serve after SIGTERM");
    assert_eq!(stopped.and_then(|s| s.code()), Some(0), "a graceful stop");

    let second = serve(&env, &next);
    wait_for("the run to finish", Duration::from_secs(60), || run_of(&second, &id)["status"] == "finished");
    let view = run_of(&second, &id);
    assert_eq!(view["result"]["text"], "read it", "{view}");
    assert_eq!(next.request_count(), 1, "the finished tool call and first answer are read back");
}

#[test]
fn a_run_still_queued_when_the_server_stops_is_resumed_by_the_next_and_a_cancelled_one_is_not() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let hanging = runtime.block_on(ModelServer::start());
    hanging.respond_with(|_| Some(Reply::hang()));
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--store", common::s(&env.path("runs.db"))])
        .args(["--max-concurrent-runs", "1", "--provider", "openai", "--base-url", &hanging.openai_url()])
        .args(["--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    let mut first = Served::spawn(cmd);
    let running = post_run(&first, &json!({"kind": "run", "input": "first"}));
    wait_for("the first run's call", Duration::from_secs(60), || hanging.request_count() == 1);
    let queued = post_run(&first, &json!({"kind": "run", "input": "second"}));
    let cancelled = post_run(&first, &json!({"kind": "run", "input": "third"}));
    let (status, _, body) = http(&first.addr, "POST", &format!("/v1/runs/{cancelled}/cancel"), &[], None);
    assert_eq!(status, 202, "{body}");
    signal(first.child.id(), "TERM");
    let stopped = common::wait_exit(&mut first.child, "serve after SIGTERM");
    assert_eq!(stopped.and_then(|s| s.code()), Some(0));

    let answering = runtime.block_on(ModelServer::start());
    answering.respond_with(|r| Some(Reply::text(format!("answer: {}", r.last_user_text().unwrap_or_default()))));
    let second = serve(&env, &answering);
    for (id, input) in [(&running, "first"), (&queued, "second")] {
        wait_for("the left run to finish", Duration::from_secs(60), || run_of(&second, id)["status"] == "finished");
        assert_eq!(run_of(&second, id)["result"]["text"], format!("answer: {input}"), "{id} resumed");
    }
    let view = run_of(&second, &cancelled);
    assert_eq!(view["result"]["outcome"], "cancelled", "the client's cancel stands: {view}");
    assert_eq!(answering.request_count(), 2, "the cancelled run is not run");
}

#[test]
fn a_run_with_client_tools_of_a_killed_server_ends_interrupted() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let hanging = runtime.block_on(ModelServer::start());
    hanging.respond_with(|_| Some(Reply::hang()));
    let first = serve(&env, &hanging);
    let tool = json!({"name": "lookup", "description": "Looks a word up.", "parameters": {"type": "object"}});
    let id = post_run(&first, &json!({"kind": "run", "input": "look it up", "tools": [tool]}));
    wait_for("the run's call", Duration::from_secs(60), || hanging.request_count() == 1);
    kill(first);

    let second = serve(&env, &hanging);
    let view = run_of(&second, &id);
    assert_eq!(view["status"], "finished", "{view}");
    assert_eq!(view["result"]["outcome"], "interrupted", "{view}");
    assert_eq!(hanging.request_count(), 1, "not run again");
}

#[test]
fn a_run_retention_lets_go_of_leaves_nothing_of_itself_in_the_store() {
    let env = Env::new();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let model = runtime.block_on(ModelServer::start());
    model.respond_with(|_| Some(Reply::text("done")));
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--store", common::s(&env.path("runs.db")), "--keep", "1"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    let server = Served::spawn(cmd);
    let first = post_run(&server, &json!({"kind": "run", "input": "first"}));
    wait_for("the first run", Duration::from_secs(60), || run_of(&server, &first)["status"] == "finished");
    let second = post_run(&server, &json!({"kind": "run", "input": "second"}));
    wait_for("the first run to be let go", Duration::from_secs(60), || {
        http(&server.addr, "GET", &format!("/v1/runs/{first}"), &[], None).0 == 404
    });
    let store = env.path("runs.db");
    wait_for("its request and journal to go with it", Duration::from_secs(20), || {
        [format!("request-{first}"), format!("run-{first}")].iter().all(|k| common::store_journal(&store, k).is_empty())
    });
    wait_for("the second run", Duration::from_secs(60), || run_of(&server, &second)["status"] == "finished");
    assert!(!common::store_journal(&store, &format!("request-{second}")).is_empty(), "the kept run keeps its own");
}
