#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Graph threads over HTTP (`serve --graphs DIR`): a graph with an `ask` node is run,
//! interrupted, answered and finished, its events streamed like any run; its state and history
//! read back; a fork taken from before the question; names only from the directory; a thread of
//! a blueprint the server does not offer refused; the `resume` the OpenAPI document types sent.

mod common;

use std::time::Duration;

use common::{Env, Served, http, wait_for};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

/// The approval blueprint the graph command's tests use too.
const APPROVAL: &str = include_str!("fixtures/graphs/approval.toml");

fn call(server: &Served, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    let (status, _, text) = http(&server.addr, method, path, &[], body.as_ref());
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Runs the thread and waits for the run's end; its result.
fn run(server: &Served, thread: &str, body: Value) -> Value {
    let (status, run) = call(server, "POST", &format!("/v1/threads/{thread}/runs"), Some(body));
    assert_eq!(status, 202, "{run}");
    let id = run["id"].as_str().unwrap().to_string();
    let mut view = Value::Null;
    wait_for("the thread's run", Duration::from_secs(30), || {
        view = call(server, "GET", &format!("/v1/runs/{id}"), None).1;
        view["status"] == "finished"
    });
    let (_, _, events) = http(&server.addr, "GET", &format!("/v1/runs/{id}/events"), &[], None);
    assert!(events.contains("event: run_started") && events.contains("event: end"), "{events}");
    view["result"].clone()
}

/// Asserts `body` is valid against the request body the served `/openapi.json` declares for
/// `POST path` (its `$ref`s resolved against the document).
fn assert_fits_the_document(server: &Served, path: &str, body: &Value) {
    let (status, doc) = call(server, "GET", "/openapi.json", None);
    assert_eq!(status, 200);
    let mut schema = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"].clone();
    assert!(schema.is_object(), "no request body declared for {path}");
    schema["components"] = doc["components"].clone();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator.iter_errors(body).map(|e| format!("{e} at {}", e.instance_path)).collect();
    assert!(errors.is_empty(), "{body} does not fit the document's request body of {path}: {errors:?}");
}

#[test]
fn a_graph_with_an_ask_node_is_run_interrupted_answered_and_finished_over_http() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.when("Write about tides", Reply::text("A draft about tides."));
    model.when("Publish:", Reply::text("PUBLISHED: tides"));
    let env = Env::new();
    std::fs::create_dir(env.path("graphs")).unwrap();
    std::fs::write(env.path("graphs/approval.toml"), APPROVAL).unwrap();
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--graphs", "graphs"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    let server = Served::spawn(cmd);

    let (status, graphs) = call(&server, "GET", "/v1/graphs", None);
    assert_eq!(status, 200, "{graphs}");
    assert_eq!(graphs["data"][0]["name"], "approval");
    assert!(graphs["data"][0]["mermaid"].as_str().unwrap().starts_with("flowchart"), "{graphs}");

    // A name, never a path.
    for bad in ["../graphs/approval", "/etc/passwd", "nope"] {
        let (status, body) = call(&server, "POST", "/v1/threads", Some(json!({"graph": bad})));
        assert_eq!(status, 404, "{bad}: {body}");
    }
    let (status, thread) = call(&server, "POST", "/v1/threads", Some(json!({"graph": "approval"})));
    assert_eq!(status, 201, "{thread}");
    assert_eq!(thread["status"], "new");
    let id = thread["thread_id"].as_str().unwrap().to_string();

    let result = run(&server, &id, json!({"input": {"topic": "tides"}}));
    assert_eq!(result["outcome"], "interrupted", "{result}");
    assert_eq!(result["output"]["interrupt"]["payload"]["question"], "Publish this draft? A draft about tides.");
    let (_, waiting) = call(&server, "GET", &format!("/v1/threads/{id}"), None);
    assert_eq!(waiting["status"], "interrupted", "{waiting}");
    assert_eq!(waiting["values"]["draft"], "A draft about tides.");
    assert_eq!(waiting["interrupt"]["node"], "approve");

    // The answer a client generated from /openapi.json sends: the document takes it.
    let answer = json!({"resume": "yes"});
    assert_fits_the_document(&server, "/v1/threads/{id}/runs", &answer);
    let result = run(&server, &id, answer);
    assert_eq!(result["outcome"], "completed", "{result}");
    assert_eq!(result["ok"], true);
    let (_, done) = call(&server, "GET", &format!("/v1/threads/{id}"), None);
    assert_eq!(done["status"], "done", "{done}");
    assert_eq!(done["values"]["draft"], "PUBLISHED: tides");
    assert_eq!(done["values"]["answer"], "yes");

    // Its history, and a fork from before the answer, answered the other way.
    let (_, history) = call(&server, "GET", &format!("/v1/threads/{id}/history"), None);
    let checkpoints = history["data"].as_array().unwrap();
    assert!(checkpoints.len() >= 3, "{history}");
    let asked = checkpoints.iter().find(|c| c["next"] == json!(["approve"])).unwrap()["id"].as_str().unwrap();
    let (status, fork) = call(&server, "POST", &format!("/v1/threads/{id}/fork"), Some(json!({"checkpoint": asked})));
    assert_eq!(status, 201, "{fork}");
    let forked = fork["thread_id"].as_str().unwrap().to_string();
    assert_ne!(forked, id);
    let result = run(&server, &forked, json!({"continue_run": true}));
    assert_eq!(result["outcome"], "interrupted", "the fork asks again: {result}");
    let result = run(&server, &forked, json!({"resume": "no"}));
    assert_eq!(result["outcome"], "completed", "{result}");
    let (_, declined) = call(&server, "GET", &format!("/v1/threads/{forked}"), None);
    assert_eq!(declined["values"]["draft"], "A draft about tides.", "not published: {declined}");
    assert_eq!(model.requests().iter().filter(|r| r.body.to_string().contains("Publish:")).count(), 1);

    // Asking a finished thread for a value it does not wait for fails, saying why.
    let result = run(&server, &id, json!({"resume": "again"}));
    assert_eq!(result["ok"], false);
    assert!(result["error"].as_str().unwrap().contains("does not wait for a value"), "{result}");
}

#[test]
fn without_graphs_the_threads_api_says_how_to_offer_them() {
    let env = Env::new();
    let script = env.script("s.json", json!(["x"]));
    let server = Served::start(&env, &["--mock-script", common::s(&script)], None);
    let (status, body) = call(&server, "GET", "/v1/graphs", None);
    assert_eq!(status, 404);
    assert!(body["error"]["message"].as_str().unwrap().contains("--graphs DIR"), "{body}");
}

#[test]
fn a_thread_of_a_blueprint_the_server_does_not_offer_is_refused() {
    let env = Env::new();
    std::fs::create_dir(env.path("graphs")).unwrap();
    std::fs::write(env.path("graphs/approval.toml"), APPROVAL).unwrap();
    // Another blueprint, run by `graph run` in the same store: a thread the server must not run.
    let rogue = APPROVAL.replacen("name = \"approval\"", "name = \"rogue\"", 1);
    std::fs::write(env.path("rogue.toml"), rogue).unwrap();
    let script = env.script("s.json", json!(["A draft about tides.", "PUBLISHED: tides"]));
    let out = env
        .cmd()
        .args(["graph", "run", "rogue.toml", "--thread", "rogue-1", "--input", r#"{"topic": "tides"}"#])
        .args(["--provider", "mock", "--mock-script", common::s(&script)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(16), "{}", String::from_utf8_lossy(&out.stderr));

    let script = env.script("serve.json", json!(["PUBLISHED: tides"]));
    let server = Served::start(&env, &["--graphs", "graphs", "--mock-script", common::s(&script)], None);
    let (status, body) = call(&server, "POST", "/v1/threads/rogue-1/runs", Some(json!({"resume": "yes"})));
    assert_eq!(status, 404, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("does not offer"), "{body}");
    for (method, path, body) in [
        ("GET", "/v1/threads/rogue-1", None),
        ("GET", "/v1/threads/rogue-1/history", None),
        ("POST", "/v1/threads/rogue-1/fork", Some(json!({}))),
    ] {
        let (status, answer) = call(&server, method, path, body);
        assert_eq!(status, 404, "{method} {path}: {answer}");
    }
    // A thread of its own graph is served.
    let (status, thread) = call(&server, "POST", "/v1/threads", Some(json!({"graph": "approval"})));
    assert_eq!(status, 201, "{thread}");
    let (status, _) = call(&server, "GET", &format!("/v1/threads/{}", thread["thread_id"].as_str().unwrap()), None);
    assert_eq!(status, 200);
}
