#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Permission asks answered by the client of a served run (`serve --client-asks SECS`): the run's
//! event stream carries an `ask` event, the client answers it at `/v1/runs/{id}/asks/{ask}` —
//! allowed, the call runs; denied with a reason, the model reads the reason; unanswered, it is
//! denied when the time runs out and a late answer finds nothing; an answer through another
//! run's URL is refused.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::time::Duration;

use common::{Env, Served, http, wait_for};
use recursive_testkit::{ModelServer, Reply};
use serde_json::{Value, json};

fn serve(env: &Env, model: &ModelServer, secs: &str) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q", "--client-asks", secs])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

fn start_run(server: &Served, input: &str) -> String {
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &[], Some(&json!({"kind": "run", "input": input})));
    assert_eq!(status, 202, "{body}");
    serde_json::from_str::<Value>(&body).unwrap()["id"].as_str().unwrap().to_string()
}

/// Reads the run's event stream until its `ask` event and returns that event.
fn next_ask(server: &Served, run: &str) -> Value {
    let mut stream = std::net::TcpStream::connect(&server.addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let request = format!("GET /v1/runs/{run}/events HTTP/1.1\r\nhost: {}\r\nconnection: close\r\n\r\n", server.addr);
    stream.write_all(request.as_bytes()).unwrap();
    let mut lines = BufReader::new(stream).lines();
    let mut asking = false;
    while let Some(Ok(line)) = lines.next() {
        if line == "event: ask" {
            asking = true;
        } else if asking && let Some(data) = line.strip_prefix("data: ") {
            return serde_json::from_str(data).unwrap();
        }
    }
    panic!("the stream of {run} ended without an ask");
}

fn answer(server: &Served, run: &str, ask: &str, body: Value) -> (u16, String) {
    let (status, _, text) = http(&server.addr, "POST", &format!("/v1/runs/{run}/asks/{ask}"), &[], Some(&body));
    (status, text)
}

fn finished(server: &Served, run: &str) -> Value {
    let mut view = Value::Null;
    wait_for("the run to finish", Duration::from_secs(30), || {
        let (_, _, body) = http(&server.addr, "GET", &format!("/v1/runs/{run}"), &[], None);
        view = serde_json::from_str(&body).unwrap();
        view["status"] == "finished"
    });
    view
}

/// The tool result the model got back in the request after the call.
fn tool_result(model: &ModelServer, marker: &str) -> String {
    let request = model
        .requests()
        .into_iter()
        .find(|r| {
            r.body.to_string().contains(marker)
                && r.body["messages"].as_array().unwrap().last().unwrap()["role"] == "tool"
        })
        .unwrap();
    request.body["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap().to_string()
}

#[test]
fn a_client_answers_the_permission_asks_of_its_run() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = rt.block_on(ModelServer::start());
    model.respond_with(|request| {
        let answered = request.body["messages"].as_array()?.last()?["role"] == "tool";
        let text = request.body.to_string();
        let file = ["first", "second", "third"].into_iter().find(|m| text.contains(&format!("write the {m}")))?;
        Some(match answered {
            false => Reply::tool_call("write_file", json!({"path": format!("{file}.txt"), "content": file})),
            true => Reply::text(format!("{file}: done")),
        })
    });
    let env = Env::new();
    let server = serve(&env, &model, "3");

    // Allowed: the call runs. An answer through another run's URL is refused and changes nothing.
    let run = start_run(&server, "write the first file");
    let ask = next_ask(&server, &run);
    assert_eq!(ask["name"], "write_file", "{ask}");
    assert_eq!(ask["arguments"]["path"], "first.txt");
    assert_eq!(ask["timeout_ms"], 3000);
    let second = start_run(&server, "write the second file");
    let second_ask = next_ask(&server, &second);
    let (status, text) = answer(&server, &second, ask["ask"].as_str().unwrap(), json!({"decision": "allow"}));
    assert_eq!(status, 404, "answered through the other run's URL: {text}");
    assert!(text.contains("the run that asked"), "{text}");
    assert_eq!(answer(&server, &run, ask["ask"].as_str().unwrap(), json!({"decision": "allow"})).0, 202);
    let view = finished(&server, &run);
    assert_eq!(view["result"]["text"], "first: done", "{view}");
    assert_eq!(std::fs::read_to_string(env.path("first.txt")).unwrap(), "first");

    // Denied with a reason: nothing is written, the model reads why.
    let (run, ask) = (second, second_ask);
    let said = json!({"decision": "deny", "reason": "not in this folder"});
    assert_eq!(answer(&server, &run, ask["ask"].as_str().unwrap(), said).0, 202);
    finished(&server, &run);
    assert!(!env.path("second.txt").exists());
    assert!(tool_result(&model, "write the second").contains("not in this folder"));

    // Unanswered: denied when the time runs out; a late answer finds nothing.
    let run = start_run(&server, "write the third file");
    let ask = next_ask(&server, &run);
    finished(&server, &run);
    assert!(!env.path("third.txt").exists());
    assert!(tool_result(&model, "write the third").contains("no answer within 3 s"));
    let (status, text) = answer(&server, &run, ask["ask"].as_str().unwrap(), json!({"decision": "allow"}));
    assert_eq!(status, 404, "{text}");
    assert_eq!(answer(&server, &run, "ask_unknown", json!({"decision": "maybe"})).0, 400, "a body that does not fit");
}
