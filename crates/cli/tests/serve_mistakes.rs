#![allow(clippy::unwrap_used, clippy::expect_used)]
//! A client's mistakes and a run's honest endings, as `recursive serve` answers them over HTTP:
//! a body of the wrong shape is a 400 in OpenAI's error shape (never axum's 422), one past the
//! size limit a 413, a client tool named like a server tool a 400 naming the clash, an answer
//! that never fits `response_format` a 422 saying what the check found (not a 500), a streamed
//! completion whose client went away stops its run, and a stored run that cannot be read is
//! reported beside the listing instead of failing it. The official `openai` SDK sees the 400 and
//! the 422 as `BadRequestError` and `UnprocessableEntityError`, and does not retry the latter.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

use common::{Env, Served, http, wait_for};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

fn serve_against(env: &Env, model: &ModelServer, more: &[&str]) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .args(more)
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

fn post(server: &Served, path: &str, body: &Value) -> (u16, Value) {
    let (status, _, text) = http(&server.addr, "POST", path, &[], Some(body));
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

fn get(server: &Served, path: &str) -> (u16, Value) {
    let (status, _, text) = http(&server.addr, "GET", path, &[], None);
    (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
}

/// Asserts `body` is an error in OpenAI's shape with these `type` and `param`.
fn assert_openai_error(body: &Value, kind: &str, param: Option<&str>) {
    let error = body["error"].as_object().unwrap_or_else(|| panic!("not an OpenAI error: {body}"));
    for field in ["message", "type", "param", "code"] {
        assert!(error.contains_key(field), "`{field}` missing: {body}");
    }
    assert_eq!(error["type"], kind, "{body}");
    assert_eq!(error["param"].as_str(), param, "{body}");
    assert!(!error["message"].as_str().unwrap().is_empty());
}

/// Sends `body` with a declared length and reads whatever answer comes, even when the server
/// answers before reading it all (the write may then fail; the answer still counts).
fn send_big(addr: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    let mut writer = stream.try_clone().unwrap();
    let body = body.to_vec();
    let sending = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(&body));
    });
    let mut response = Vec::new();
    let _ = stream.read_to_end(&mut response);
    let _ = sending.join();
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no answer: {text}"));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, serde_json::from_str(rest).unwrap_or(Value::String(rest.to_string())))
}

#[test]
fn a_body_of_the_wrong_shape_is_a_400_in_openais_error_shape() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    let env = Env::new();
    let server = serve_against(&env, &model, &[]);

    let (status, body) = post(&server, "/v1/chat/completions", &json!({"model": "agent", "messages": "hi"}));
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_request_error", Some("messages"));
    assert_eq!(body["error"]["code"], "invalid_type");

    let (status, body) = post(&server, "/v1/chat/completions", &json!({"model": "agent"}));
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_request_error", None);
    assert_eq!(body["error"]["code"], "missing_required_parameter");
    assert!(body["error"]["message"].as_str().unwrap().contains("messages"), "{body}");

    let (status, body) = post(&server, "/v1/responses", &json!({"model": "agent", "input": "hi", "stream": "yes"}));
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_request_error", Some("stream"));

    // serve's own endpoints: a clear 400 naming the field too.
    let (status, body) = post(&server, "/v1/runs", &json!({"kind": "run", "input": 5}));
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_request_error", Some("input"));
    let (status, body) = post(&server, "/v1/runs/run_x/asks/ask_x", &json!({"decision": "maybe"}));
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_request_error", Some("decision"));
    assert!(model.requests().is_empty(), "nothing ran");
}

#[test]
fn a_body_past_the_size_limit_is_a_413() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    let env = Env::new();
    let server = serve_against(&env, &model, &["--max-body-mib", "1"]);
    let big = "x".repeat(1536 * 1024);
    let run = json!({"kind": "run", "input": big}).to_string();
    let chat = json!({"model": "agent", "messages": [{"role": "user", "content": big}]}).to_string();
    for (path, body) in [("/v1/runs", run), ("/v1/chat/completions", chat)] {
        let (status, answer) = send_big(&server.addr, path, body.as_bytes());
        assert_eq!(status, 413, "{path}: {answer}");
        assert_openai_error(&answer, "request_too_large", None);
    }
    assert!(model.requests().is_empty(), "nothing ran");
}

#[test]
fn a_client_tool_named_like_a_server_tool_is_a_400_naming_the_clash() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    let env = Env::new();
    let server = serve_against(&env, &model, &[]);
    let tool = json!({"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}});
    let chat = json!({"model": "agent", "messages": [{"role": "user", "content": "hi"}], "tools": [tool]});
    let (status, body) = post(&server, "/v1/chat/completions", &chat);
    assert_eq!(status, 400, "{body}");
    assert_openai_error(&body, "invalid_request_error", Some("tools"));
    assert!(body["error"]["message"].as_str().unwrap().contains("`read_file`"), "{body}");
    let responses = json!({"model": "agent", "input": "hi", "tools": [{"type": "function", "name": "read_file"}]});
    let (status, body) = post(&server, "/v1/responses", &responses);
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("`read_file`"), "{body}");
    // A tool of its own name is fine.
    model.when("hello", Reply::text("hi there"));
    let tool = json!({"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}});
    let chat = json!({"model": "agent", "messages": [{"role": "user", "content": "hello"}], "tools": [tool]});
    let (status, body) = post(&server, "/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{body}");
}

#[test]
fn an_answer_that_never_fits_the_response_format_is_a_422_saying_why() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.respond_with(|request| {
        let asked = request.body.to_string().contains("the temperature in");
        asked.then(|| Reply::text(r#"{"city": "Oslo", "temp": "warm"}"#))
    });
    let env = Env::new();
    let server = serve_against(&env, &model, &[]);
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}, "temp": {"type": "integer"}},
        "required": ["city", "temp"]});
    let format = json!({"type": "json_schema", "json_schema": {"name": "weather", "schema": schema}});
    let chat = json!({"model": "agent", "messages": [{"role": "user", "content": "the temperature in Oslo"}],
        "response_format": format});
    let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&chat));
    let body: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(status, 422, "{body}");
    assert_openai_error(&body, "invalid_request_error", Some("response_format"));
    assert_eq!(body["error"]["code"], "response_format_mismatch");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("did not match the requested `response_format`"), "{message}");
    assert!(message.contains("at /temp") && message.contains("\"warm\""), "what the check said: {message}");
    assert!(message.chars().count() <= 1001, "bounded: {}", message.len());
    assert!(model.requests().len() > 1, "the answer was asked to be redone first");

    // Streamed: the stream ends with the same error.
    let streamed = json!({"model": "agent", "stream": true,
        "messages": [{"role": "user", "content": "the temperature in Bergen"}], "response_format": format});
    let (status, _, text) = http(&server.addr, "POST", "/v1/chat/completions", &[], Some(&streamed));
    assert_eq!(status, 200);
    let error = text.lines().filter_map(|l| l.strip_prefix("data: ")).find(|d| d.contains("\"error\"")).unwrap();
    let error: Value = serde_json::from_str(error).unwrap();
    assert_eq!(error["error"]["code"], "response_format_mismatch", "{error}");
}

#[test]
fn a_streamed_completion_whose_client_went_away_starts_no_more_model_calls() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    // The model reads one file after another for ever (never the same call twice, so nothing
    // but the run's end stops it).
    let env = Env::new();
    for n in 0..200 {
        std::fs::write(env.path(&format!("page{n}.txt")), format!("page {n}")).unwrap();
    }
    let count = std::sync::atomic::AtomicUsize::new(0);
    model.respond_with(move |_| {
        let n = count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let read = Reply::tool_call("read_file", json!({"path": format!("page{n}.txt")}));
        Some(read.after(Duration::from_millis(100)))
    });
    let server = serve_against(&env, &model, &["--max-steps", "200"]);

    let chat = json!({"model": "agent", "stream": true, "messages": [{"role": "user", "content": "read on"}]});
    let body = chat.to_string();
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        server.addr,
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut lines = BufReader::new(stream.try_clone().unwrap()).lines();
    let first = lines.find_map(|l| l.unwrap().strip_prefix("data: ").map(str::to_string)).unwrap();
    let first: Value = serde_json::from_str(&first).unwrap();
    let run = first["id"].as_str().unwrap().replace("chatcmpl-", "run_");
    wait_for("the run to call the model twice", Duration::from_secs(20), || model.requests().len() >= 2);

    stream.shutdown(std::net::Shutdown::Both).unwrap();
    drop(lines);
    drop(stream);
    let at_disconnect = model.requests().len();
    let mut view = Value::Null;
    wait_for("the run to end after the client left", Duration::from_secs(20), || {
        view = get(&server, &format!("/v1/runs/{run}")).1;
        view["status"] == "finished"
    });
    assert_eq!(view["result"]["outcome"], "cancelled", "{view}");
    let calls = model.requests().len();
    assert!(
        calls <= at_disconnect + 1,
        "{calls} model calls, {at_disconnect} at the disconnect: only the one in flight may follow"
    );
}

/// Waits until the store holds the finished run `id`.
fn wait_stored_finished(env: &Env, id: &str) {
    let db = env.path(".recursive/graphs.db");
    wait_for("the finished run in the store", Duration::from_secs(20), || {
        let Ok(conn) = rusqlite::Connection::open(&db) else { return false };
        conn.query_row("SELECT status FROM served_runs WHERE id = ?1", [id], |r| r.get::<_, String>(0))
            .is_ok_and(|s| s == "finished")
    });
}

#[test]
fn an_unreadable_stored_run_is_reported_beside_the_listing_not_failing_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.when("first", Reply::text("one"));
    model.when("second", Reply::text("two"));
    let env = Env::new();
    let mut ids = Vec::new();
    {
        let server = serve_against(&env, &model, &[]);
        for input in ["first question", "second question"] {
            let (status, run) = post(&server, "/v1/runs", &json!({"kind": "run", "input": input}));
            assert_eq!(status, 202, "{run}");
            ids.push(run["id"].as_str().unwrap().to_string());
        }
        for id in &ids {
            wait_stored_finished(&env, id);
        }
    }
    let conn = rusqlite::Connection::open(env.path(".recursive/graphs.db")).unwrap();
    conn.execute("UPDATE served_runs SET body = '{\"version\": 1, \"broken\": ' WHERE id = ?1", [&ids[0]]).unwrap();
    drop(conn);

    let server = serve_against(&env, &model, &[]);
    let (status, page) = get(&server, "/v1/runs");
    assert_eq!(status, 200, "{page}");
    let listed: Vec<&str> = page["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(listed, vec![ids[1].as_str()], "{page}");
    assert_eq!(page["unreadable"], json!([ids[0]]), "{page}");
}

/// What the official `openai` SDK raises for a body of the wrong shape and for an answer that
/// never fits `response_format`: its status, `code` and `param`.
const SDK_CLIENT: &str = r#"
import json, sys, openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="none", max_retries=2)
seen = {}
def attempt(name, **kwargs):
    try:
        client.chat.completions.create(model="agent", **kwargs)
        seen[name] = "no error"
    except openai.APIStatusError as e:
        seen[name] = {"class": type(e).__name__, "status": e.status_code, "code": e.code, "param": e.param}
attempt("wrong_shape", messages="hi")
schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
attempt("mismatch", messages=[{"role": "user", "content": "count the sheep"}],
        response_format={"type": "json_schema", "json_schema": {"name": "count", "schema": schema}})
print(json.dumps(seen))
"#;

#[test]
fn the_official_sdk_raises_a_bad_request_and_an_unprocessable_entity_without_retrying() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.respond_with(|request| request.body.to_string().contains("count the sheep").then(|| Reply::text("many")));
    let env = Env::new();
    let server = serve_against(&env, &model, &[]);
    let out = std::process::Command::new(python).args(["-c", SDK_CLIENT, &server.url()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        seen["wrong_shape"],
        json!({"class": "BadRequestError", "status": 400, "code": "invalid_type", "param": "messages"})
    );
    assert_eq!(
        seen["mismatch"],
        json!({"class": "UnprocessableEntityError", "status": 422, "code": "response_format_mismatch",
            "param": "response_format"})
    );
    // One run: the first answer and its two corrections; the SDK did not run it again.
    assert_eq!(model.requests().len(), 3, "{:?}", model.requests().len());
}
