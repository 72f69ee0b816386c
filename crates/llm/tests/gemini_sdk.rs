#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The official `google-genai` Python SDK as the oracle of the Gemini request: the SDK makes a
//! two-turn tool loop with thinking (`tests/clients/gemini_sdk.py`, the documented pattern: the
//! first response's content appended as it came — thought parts and thought signatures
//! included — then the function responses) against a local server, and the Recursive client
//! makes the same calls against another; both servers serve the same scripted answers, and the
//! requests must agree: the path, the API key header, and the whole body (contents with their
//! parts and signatures, system instruction, tools, tool config, generation config).
//!
//! Likewise for explicit context caching: the SDK's `caches.create` of a system instruction,
//! tools and tool config, and its call naming the cache, against ours for the same call.
//!
//! The Python with `google-genai` comes from `SERVE_TEST_PYTHON` (`./scripts/test` makes a
//! virtualenv); without it the test fails unless `RECURSIVE_ALLOW_SKIP=1`.

mod common;

use common::collect;
use recursive_core::{ChatOptions, ChatProvider, ChatRequest, Message, ToolChoice};
use recursive_llm::gemini::{CacheMode, CacheSettings};
use recursive_llm::{GeminiConfig, GeminiProvider};
use recursive_testkit::{ModelServer, RecordedRequest, Reply, Script};
use serde_json::{Value, json};

fn answer(body: Value) -> Reply {
    Reply::raw(
        Script::sse(body.to_string().as_bytes(), 4096)
            .with_head("HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=UTF-8\r\nconnection: close"),
    )
}

fn response(parts: Value) -> Value {
    json!({"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 8, "thoughtsTokenCount": 20,
            "totalTokenCount": 68},
        "modelVersion": "gemini-2.5-flash", "responseId": "resp-1"})
}

/// Turn 1: a thought, then a call of `echo` carrying the thought signature.
fn turn1() -> Reply {
    answer(response(json!([
        {"text": "The user wants an echo.", "thought": true},
        {"functionCall": {"name": "echo", "args": {"text": "one"}}, "thoughtSignature": "c2lnbmF0dXJlLTE="}
    ])))
}

/// Turn 2: the answer.
fn turn2() -> Reply {
    answer(response(json!([{"text": "one"}])))
}

/// The same two turns through the Recursive client.
async fn ours(server: &ModelServer) {
    let provider = GeminiProvider::new(GeminiConfig {
        base_url: server.url().to_string(),
        api_key: Some("AIza-test".into()),
        model: "gemini-2.5-flash".into(),
        stream: false,
        ..Default::default()
    })
    .unwrap();
    let options = ChatOptions {
        reasoning_effort: Some("medium".into()),
        max_tokens: Some(2000),
        tool_choice: Some(ToolChoice::Auto),
        ..Default::default()
    };
    common::echo_loop(&provider, common::echo_tool(true), options).await;
}

/// The body with its field names in lowerCamelCase. The API parses requests as protobuf JSON,
/// which takes a field by its JSON name or by its proto name, and the SDK sends a few by the
/// latter (`thinkingConfig` as `{"thinking_budget", "include_thoughts"}`); this script's data
/// has no key with an underscore, so only field names change.
fn camel_case_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let mut words = k.split('_');
                    let first = words.next().unwrap_or_default().to_string();
                    let rest: String = words
                        .map(|w| {
                            w.chars().take(1).flat_map(char::to_uppercase).chain(w.chars().skip(1)).collect::<String>()
                        })
                        .collect();
                    (first + &rest, camel_case_keys(v))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(camel_case_keys).collect()),
        other => other.clone(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_sends_the_same_tool_loop_request_with_thought_signatures() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let sdk_server = ModelServer::start_with([turn1(), turn2()]).await;
    let seen = common::sdk_client(python, "gemini_sdk.py", vec![sdk_server.url().to_string()]).await;
    assert_eq!(seen, json!({"answer": "one", "calls": ["echo"]}));

    let our_server = ModelServer::start_with([turn1(), turn2()]).await;
    ours(&our_server).await;
    assert_eq!(sdk_server.request_count(), 2);
    assert_eq!(our_server.request_count(), 2);
    for turn in 0..2 {
        let (sdk, ours) = (sdk_server.request(turn), our_server.request(turn));
        assert_eq!(ours.path, sdk.path, "request #{turn}");
        assert_eq!(ours.header("x-goog-api-key"), sdk.header("x-goog-api-key"));
        let mut sdk_body = camel_case_keys(&sdk.body);
        // The SDK marks the system instruction with the `user` role; the API needs none.
        if let Some(system) = sdk_body["systemInstruction"].as_object_mut() {
            system.remove("role");
        }
        assert_eq!(ours.body, sdk_body, "request #{turn}: ours vs the SDK's");
    }
    // The second request carries the thought and the signature back on the call's part.
    let model_turn = &our_server.request(1).body["contents"][1];
    assert_eq!(model_turn["parts"][1]["thoughtSignature"], "c2lnbmF0dXJlLTE=");
}

/// Serves `POST cachedContents` with a cache named `cachedContents/sdk-1`.
fn serve_cache(server: &ModelServer) {
    server.respond_with(|r: &RecordedRequest| {
        r.path.ends_with("/cachedContents").then(|| {
            answer(json!({"name": "cachedContents/sdk-1", "model": r.body["model"], "displayName": "",
                "createTime": "2026-01-01T00:00:00Z", "updateTime": "2026-01-01T00:00:00Z",
                "expireTime": "2026-01-01T00:10:00Z", "usageMetadata": {"totalTokenCount": 2500}}))
        })
    });
}

/// The SDK's body with lowerCamelCase keys and no role on the system instruction.
fn sdk_shape(body: &Value) -> Value {
    let mut body = camel_case_keys(body);
    if let Some(system) = body.get_mut("systemInstruction").and_then(Value::as_object_mut) {
        system.remove("role");
    }
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_makes_the_same_explicit_cache_and_names_it_the_same_way() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let sdk_server = ModelServer::start_with([turn2()]).await;
    serve_cache(&sdk_server);
    let seen = common::sdk_client(python, "gemini_sdk.py", vec![sdk_server.url().to_string(), "cache".into()]).await;
    assert_eq!(seen, json!({"cache": "cachedContents/sdk-1", "answer": "one"}));

    let our_server = ModelServer::start_with([turn2()]).await;
    serve_cache(&our_server);
    let provider = GeminiProvider::new(GeminiConfig {
        base_url: our_server.url().to_string(),
        api_key: Some("AIza-test".into()),
        model: "gemini-2.5-flash".into(),
        stream: false,
        cache: CacheSettings { mode: CacheMode::Always, ..Default::default() },
        ..Default::default()
    })
    .unwrap();
    let options = ChatOptions {
        reasoning_effort: Some("medium".into()),
        max_tokens: Some(2000),
        tool_choice: Some(ToolChoice::Auto),
        ..Default::default()
    };
    let request = ChatRequest {
        messages: vec![Message::system("You are an RLM. ".repeat(500)), Message::user("Echo one.")],
        tools: vec![common::echo_tool(true)],
        options,
    };
    let response = collect(provider.stream(request).await.unwrap()).await.response.unwrap();
    assert_eq!(response.message.content, "one");

    assert_eq!(sdk_server.request_count(), 2);
    assert_eq!(our_server.request_count(), 2);
    for i in 0..2 {
        let (sdk, ours) = (sdk_server.request(i), our_server.request(i));
        assert_eq!(ours.path, sdk.path, "request #{i}");
        assert_eq!(ours.header("x-goog-api-key"), sdk.header("x-goog-api-key"));
        assert_eq!(ours.body, sdk_shape(&sdk.body), "request #{i}: ours vs the SDK's");
    }
    let create = sdk_server.request(0);
    assert_eq!((create.path.as_str(), &create.body["ttl"]), ("/v1beta/cachedContents", &json!("600s")));
    assert_eq!(create.body["model"], "models/gemini-2.5-flash");
    assert_eq!(our_server.request(1).body["cachedContent"], "cachedContents/sdk-1");
}
