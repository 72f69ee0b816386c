#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The OpenAI semantics of `recursive serve`, driven by the official OpenAI Python SDK against a
//! server whose model is a scripted OpenAI-compatible server on 127.0.0.1: client tools round
//! trip (the served agent's own tools and the client's side by side), tool_choice and sampling
//! fields forwarded, structured output parsed (an answer that misses the schema redone), the
//! Responses API (function calls, previous_response_id, streaming), and 400 for what is not
//! served. What the upstream model received is checked too.
//!
//! The Python with the `openai` SDK comes from `SERVE_TEST_PYTHON` (`./scripts/test` makes a
//! virtualenv); without it the test fails unless `RECURSIVE_ALLOW_SKIP=1`.

mod common;

use common::{Env, Served};
use recursive_testkit::{ModelServer, RecordedRequest, Reply};
use serde_json::{Value, json};

/// The first user message of a request (what each scenario is told apart by).
fn first_user(request: &RecordedRequest) -> String {
    let messages = request.body["messages"].as_array().cloned().unwrap_or_default();
    let user = messages.iter().find(|m| m["role"] == "user").cloned().unwrap_or_default();
    user["content"].as_str().unwrap_or_default().to_string()
}

fn ends_with_tool_result(request: &RecordedRequest) -> bool {
    request.body["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "tool")
}

/// The upstream model: each scenario answered by what its conversation says.
fn upstream(rt: &tokio::runtime::Runtime) -> ModelServer {
    let model = rt.block_on(ModelServer::start());
    model.check_pairing(true).respond_with(|request| {
        let first = first_user(request);
        let answered = ends_with_tool_result(request);
        let last_user = request.last_user_text().unwrap_or_default();
        Some(match () {
            _ if first.contains("weather in Oslo") && !answered => Reply::tool_calls([
                ("read_file", json!({"path": "notes.txt"})),
                ("get_weather", json!({"city": "Oslo"})),
            ]),
            _ if first.contains("weather in Oslo") => Reply::text("Oslo is sunny; the notes say bring a hat."),
            _ if first.contains("weather in Rome") => Reply::tool_call("get_weather", json!({"city": "Rome"})),
            _ if first.contains("Structured") && last_user.contains("required format") => {
                Reply::text(r#"{"city": "Oslo", "temp": 21}"#)
            }
            _ if first.contains("Structured") => Reply::text("It is 21 degrees in Oslo."),
            _ if first.contains("weather in Paris") && !answered => {
                Reply::tool_call("get_weather", json!({"city": "Paris"}))
            }
            _ if first.contains("weather in Paris") => Reply::text("Paris is cloudy."),
            _ if first.contains("tell a story") => Reply::text("Once there was a small recursive agent."),
            _ => return None,
        })
    });
    model
}

fn serve(env: &Env, model: &ModelServer) -> Served {
    let mut cmd = env.cmd();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "-q"])
        .args(["--provider", "openai", "--base-url", &model.openai_url(), "--model", "gpt-4o-mini"])
        .env("OPENAI_API_KEY", "sk-test");
    Served::spawn(cmd)
}

/// Requests the upstream model got for one scenario.
fn upstream_requests(model: &ModelServer, scenario: &str) -> Vec<RecordedRequest> {
    model.requests().into_iter().filter(|r| first_user(r).contains(scenario)).collect()
}

#[test]
fn client_tools_structured_output_and_the_responses_api_work_with_the_official_sdk() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let model = upstream(&rt);
    let env = Env::new();
    std::fs::write(env.path("notes.txt"), "bring a hat").unwrap();
    let server = serve(&env, &model);
    let client = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients/openai_tools_client.py");
    let out = std::process::Command::new(python).args([client, &server.url()]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let seen: Value = serde_json::from_slice(&out.stdout).unwrap();

    // The client's tool call comes back; the server's own call of the same turn ran here.
    assert_eq!(seen["chat_first"]["finish_reason"], "tool_calls", "{seen}");
    assert_eq!(seen["chat_first"]["calls"], json!([{"name": "get_weather", "arguments": {"city": "Oslo"}}]));
    assert_eq!(seen["chat_first"]["id_prefix"], "call_");
    assert_eq!(
        seen["chat_second"],
        json!({"finish_reason": "stop", "content": "Oslo is sunny; the notes say bring a hat."})
    );
    let oslo = upstream_requests(&model, "weather in Oslo");
    assert_eq!(oslo.len(), 2, "one model call per client request");
    let offered: Vec<&str> =
        oslo[0].body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(offered.contains(&"get_weather") && offered.contains(&"read_file"), "{offered:?}");
    assert_eq!(oslo[0].body["tool_choice"], "required");
    assert_eq!(oslo[0].body["temperature"], 0.3);
    assert_eq!(oslo[0].body["max_tokens"], 200);
    let results: Vec<&str> = oslo[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), 2, "the server's result and the client's, side by side: {results:?}");
    assert!(results[0].contains("bring a hat") && results[1] == "sunny, 21 C", "{results:?}");
    assert!(model.pairing_violations().is_empty(), "{:?}", model.pairing_violations());

    assert_eq!(seen["chat_stream"], json!({"names": ["get_weather"], "finish_reason": "tool_calls"}));

    // Structured output: the first answer missed the schema and was redone; the schema went upstream.
    assert_eq!(seen["structured"], json!({"city": "Oslo", "temp": 21}));
    let structured = upstream_requests(&model, "Structured");
    assert_eq!(structured.len(), 2);
    assert_eq!(structured[0].body["response_format"]["type"], "json_schema");

    // The Responses API.
    assert_eq!(seen["responses_first"]["status"], "completed");
    assert_eq!(seen["responses_first"]["calls"], json!([["get_weather", {"city": "Paris"}]]));
    assert_eq!(seen["responses_second"]["text"], "Paris is cloudy.");
    assert!(seen["responses_second"]["tokens"].as_u64().unwrap() > 0);
    let paris = upstream_requests(&model, "weather in Paris");
    let last = paris[1].body["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["role"].as_str(), last["content"].as_str()), (Some("tool"), Some("cloudy")));
    let story = &seen["responses_stream"];
    assert_eq!(story["text"], "Once there was a small recursive agent.");
    assert_eq!(story["final"], story["text"]);
    assert_eq!(
        (story["first"].as_str(), story["last"].as_str()),
        (Some("response.created"), Some("response.completed"))
    );
    let system = &upstream_requests(&model, "tell a story")[0].body["messages"][0];
    assert!(system["role"] == "system" && system["content"].as_str().unwrap().contains("Be brief."), "{system}");

    // Refused, naming the field.
    assert_eq!(seen["refused_top_p"]["status"], 400);
    assert_eq!(seen["refused_top_p"]["param"], "top_p");
    assert_eq!(seen["refused_n"]["param"], "n");
    assert!(seen["refused_rlm_tools"]["message"].as_str().unwrap().contains("agent models"), "{seen}");
}
