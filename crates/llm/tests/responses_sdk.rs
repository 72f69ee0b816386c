#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The official `openai` Python SDK as the oracle of the Responses request: the SDK makes a
//! two-turn stateless tool loop (`tests/clients/responses_sdk.py`, the documented pattern: the
//! first response's output items passed back with the function_call_output) against a local
//! server, and the Recursive client makes the same calls against another; both servers serve
//! the same scripted streams, and the requests must agree in the fields that matter — the
//! top-level options (tools, reasoning, store, include, cache key, caps, stream) and every
//! input item (reasoning items with their id, summary and encrypted content, function calls
//! and outputs paired by call_id).
//!
//! The Python with the `openai` SDK comes from `SERVE_TEST_PYTHON` (`./scripts/test` makes a
//! virtualenv); without it the test fails unless `RECURSIVE_ALLOW_SKIP=1`.

mod common;

use recursive_core::ChatOptions;
use recursive_llm::{ResponsesConfig, ResponsesProvider};
use recursive_testkit::{ModelServer, Reply, Script};
use serde_json::{Value, json};

fn frames(events: Vec<Value>) -> Reply {
    let body: String = events
        .into_iter()
        .enumerate()
        .map(|(i, mut e)| {
            e["sequence_number"] = json!(i);
            format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())
        })
        .collect();
    Reply::raw(Script::sse(body.as_bytes(), 64))
}

fn response(status: &str, output: Value) -> Value {
    json!({"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5-2025-08-07", "status": status,
        "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 20,
            "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 70}})
}

/// Turn 1: a reasoning item with encrypted content, then a call of `echo`.
fn turn1() -> Reply {
    let reasoning = json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Echo it."}],
        "encrypted_content": "gAAAA-enc-1"});
    let call = json!({"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "echo",
        "arguments": "{\"text\":\"one\"}", "status": "completed"});
    frames(vec![
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
        json!({"type": "response.output_item.added", "output_index": 0,
            "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "item_id": "rs_1",
            "summary_index": 0, "delta": "Echo it."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call",
            "id": "fc_1", "call_id": "call_a", "name": "echo", "arguments": "", "status": "in_progress"}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 1, "item_id": "fc_1",
            "delta": "{\"text\":\"one\"}"}),
        json!({"type": "response.function_call_arguments.done", "output_index": 1, "item_id": "fc_1",
            "arguments": "{\"text\":\"one\"}"}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": call}),
        json!({"type": "response.completed", "response": response("completed", json!([reasoning, call]))}),
    ])
}

/// Turn 2: the answer.
fn turn2() -> Reply {
    let message = json!({"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": "one", "annotations": []}]});
    frames(vec![
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "id": "msg_1",
            "role": "assistant", "status": "in_progress", "content": []}}),
        json!({"type": "response.output_text.delta", "output_index": 0, "item_id": "msg_1", "content_index": 0,
            "delta": "one", "logprobs": []}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": message}),
        json!({"type": "response.completed", "response": response("completed", json!([message]))}),
    ])
}

/// The same two turns through the Recursive client.
async fn ours(server: &ModelServer) {
    let provider = ResponsesProvider::new(ResponsesConfig {
        base_url: server.openai_url(),
        api_key: Some("sk-test".into()),
        model: "gpt-5".into(),
        ..Default::default()
    })
    .unwrap();
    let options = ChatOptions {
        reasoning_effort: Some("medium".into()),
        max_tokens: Some(2000),
        prompt_cache_key: Some("tree-1".into()),
        ..Default::default()
    };
    common::echo_loop(&provider, common::echo_tool(true), options).await;
}

/// Fields of the request that must agree.
const TOP_LEVEL: &[&str] = &[
    "model",
    "instructions",
    "tools",
    "parallel_tool_calls",
    "reasoning",
    "store",
    "include",
    "max_output_tokens",
    "prompt_cache_key",
    "stream",
];

/// Every field of our item has the SDK's value (an item without `type` is a message); the
/// SDK may send beside them only the item's own id (`fc_…`, `msg_…`) and its status, which
/// the API does not need back.
fn assert_same_item(turn: usize, ours: &Value, sdk: &Value) {
    let (o, s) = (ours.as_object().unwrap(), sdk.as_object().unwrap());
    for (key, value) in o {
        let theirs = s.get(key).cloned().or_else(|| (key == "type").then(|| json!("message")));
        assert_eq!(Some(value.clone()), theirs, "request #{turn}, field `{key}`: ours {ours} vs the SDK's {sdk}");
    }
    for key in s.keys().filter(|k| !o.contains_key(*k)) {
        assert!(key == "id" || key == "status", "request #{turn}: the SDK sends `{key}` and we do not: {sdk}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_sends_the_same_stateless_tool_loop_request() {
    let Some(python) = recursive_testkit::require_env("SERVE_TEST_PYTHON") else { return };
    let sdk_server = ModelServer::start_with([turn1(), turn2()]).await;
    let seen = common::sdk_client(python, "responses_sdk.py", vec![sdk_server.openai_url()]).await;
    assert_eq!(seen, json!({"answer": "one", "calls": ["call_a"]}));

    let our_server = ModelServer::start_with([turn1(), turn2()]).await;
    ours(&our_server).await;
    assert_eq!(sdk_server.request_count(), 2);
    assert_eq!(our_server.request_count(), 2);
    for turn in 0..2 {
        let (sdk, ours) = (sdk_server.request(turn), our_server.request(turn));
        assert_eq!(ours.path, sdk.path);
        assert_eq!(ours.header("authorization"), sdk.header("authorization"));
        for key in TOP_LEVEL {
            assert_eq!(ours.body[key], sdk.body[key], "request #{turn}, `{key}`");
        }
        for key in ours.body.as_object().unwrap().keys() {
            assert!(sdk.body.get(key).is_some(), "request #{turn}: we send `{key}`, the SDK does not");
        }
        let (o, s) = (ours.body["input"].as_array().unwrap(), sdk.body["input"].as_array().unwrap());
        assert_eq!(o.len(), s.len(), "request #{turn}: ours {o:?} vs the SDK's {s:?}");
        for (a, b) in o.iter().zip(s) {
            assert_same_item(turn, a, b);
        }
    }
    // The second request carries the reasoning item back, encrypted content and all.
    let input = &our_server.request(1).body["input"];
    assert_eq!(input[1]["type"], "reasoning");
    assert_eq!(input[1]["encrypted_content"], "gAAAA-enc-1");
}
