#![allow(clippy::unwrap_used, clippy::expect_used)]
//! `/openapi.json` against the server's real responses: every response below — runs of each
//! kind while queued and finished, and the errors (400, 401, 403, 404, 415) — is validated
//! against the schema the document declares for its path, method and status.

mod common;

use std::time::Duration;

use common::{Env, Served, http, http_to_host, s};
use serde_json::{Value, json};

/// The schema the document declares for a response, as a validator over the whole document
/// (so its `$ref`s resolve).
fn response_schema(doc: &Value, path: &str, method: &str, status: u16) -> jsonschema::Validator {
    let response = &doc["paths"][path][method]["responses"][status.to_string()];
    assert!(response.is_object(), "{method} {path} does not declare {status}: {}", doc["paths"][path][method]);
    let schema = response["content"]["application/json"]["schema"].clone();
    assert!(schema.is_object(), "{method} {path} {status} declares no JSON body: {response}");
    let mut root = schema;
    root["components"] = doc["components"].clone();
    jsonschema::validator_for(&root).unwrap_or_else(|e| panic!("{method} {path} {status}: {e}"))
}

fn check(doc: &Value, path: &str, method: &str, (status, body): (u16, &str)) -> Value {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {body}"));
    let validator = response_schema(doc, path, method, status);
    let errors: Vec<String> = validator.iter_errors(&value).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    assert!(errors.is_empty(), "{method} {path} {status} does not match its schema: {errors:?}\n{value}");
    value
}

fn finished(server: &Served, id: &str) -> (u16, String) {
    for _ in 0..200 {
        let (status, _, body) =
            http(&server.addr, "GET", &format!("/v1/runs/{id}"), &[("authorization", "Bearer t")], None);
        if serde_json::from_str::<Value>(&body).unwrap()["status"] == "finished" {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("run {id} did not finish");
}

#[test]
fn the_openapi_document_matches_the_servers_real_responses() {
    let env = Env::new();
    let script = env.script(
        "serve.json",
        json!([
            {"when": "say hello", "text": "hello there"},
            {"when": "Count the words", "text": "```python\nsubmit({'answer': str(len(context.split()))})\n```"}
        ]),
    );
    let server = Served::start(&env, &["--mock-script", s(&script)], Some("t"));
    let auth = [("authorization", "Bearer t")];
    let (status, _, body) = http(&server.addr, "GET", "/openapi.json", &auth, None);
    assert_eq!(status, 200);
    let doc: Value = serde_json::from_str(&body).unwrap();

    for (kind, input) in [("run", "say hello"), ("rlm", "Count the words of alpha beta gamma")] {
        let start = json!({"kind": kind, "input": input});
        let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &auth, Some(&start));
        let created = check(&doc, "/v1/runs", "post", (status, &body));
        let id = created["id"].as_str().unwrap();
        let (status, body) = finished(&server, id);
        let view = check(&doc, "/v1/runs/{id}", "get", (status, &body));
        assert_eq!(view["result"]["ok"], true, "{view}");
    }

    let (status, _, body) = http(&server.addr, "GET", "/v1/models", &[], None);
    assert_eq!(status, 401);
    check(&doc, "/v1/models", "get", (status, &body));
    let (status, _, body) = http(&server.addr, "GET", "/v1/runs/run_nothing", &auth, None);
    assert_eq!(status, 404);
    check(&doc, "/v1/runs/{id}", "get", (status, &body));
    let port = server.addr.rsplit(':').next().unwrap();
    let (status, _, body) = http_to_host(&server.addr, &format!("evil.example:{port}"), "GET", "/health", &[], None);
    assert_eq!(status, 403);
    check(&doc, "/health", "get", (status, &body));
    let (status, _, body) = http(&server.addr, "POST", "/v1/chat/completions", &auth, Some(&json!({"model": "agent"})));
    assert_eq!(status, 400);
    check(&doc, "/v1/chat/completions", "post", (status, &body));
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs", &auth, Some(&json!({"kind": "nope"})));
    assert!(status == 400 || status == 422, "{status}: {body}");
    check(&doc, "/v1/runs", "post", (status, &body));

    let chat = json!({"model": "agent", "messages": [{"role": "user", "content": "say hello"}]});
    let (status, _, body) = http(&server.addr, "POST", "/v1/chat/completions", &auth, Some(&chat));
    let completion = check(&doc, "/v1/chat/completions", "post", (status, &body));
    assert_eq!(completion["choices"][0]["message"]["content"], "hello there", "{completion}");
    let (status, _, body) = http(&server.addr, "GET", "/v1/runs?limit=1", &auth, None);
    let page = check(&doc, "/v1/runs", "get", (status, &body));
    assert_eq!(page["has_more"], true, "{page}");
    let (status, _, body) = http(&server.addr, "DELETE", "/v1/runs/run_nothing", &auth, None);
    check(&doc, "/v1/runs/{id}", "delete", (status, &body));
    let (status, _, body) = http(&server.addr, "GET", "/v1/graphs", &auth, None);
    assert_eq!(status, 404, "no --graphs: {body}");
    check(&doc, "/v1/graphs", "get", (status, &body));
    let answer = json!({"decision": "allow"});
    let (status, _, body) = http(&server.addr, "POST", "/v1/runs/run_nothing/asks/ask_x", &auth, Some(&answer));
    check(&doc, "/v1/runs/{id}/asks/{ask}", "post", (status, &body));

    // The chat request body is documented.
    let body = &doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"];
    assert!(body.to_string().contains("ChatRequest"), "{body}");
}
