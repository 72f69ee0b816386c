#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Extended thinking over a real stream from a local server: the reasoning streams as
//! reasoning (never as answer text), arrives whole in the response with its signature, and goes
//! back to the API in the next request of a tool exchange.

mod common;

use std::sync::Arc;

use common::collect;
use recursive_core::{ChatProvider, ChatRequest, Message};
use recursive_llm::{AnthropicConfig, AnthropicProvider};
use recursive_testkit::{ModelServer, Reply, Script};
use serde_json::json;

fn event(kind: &str, data: serde_json::Value) -> String {
    format!("event: {kind}\ndata: {data}\n\n")
}

#[tokio::test]
async fn thinking_streams_apart_from_the_answer_and_is_sent_back() {
    let body = [
        event("message_start", json!({"type": "message_start", "message": {"model": "claude-x", "content": [], "usage": {"input_tokens": 9}}})),
        event("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "First, "}})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "check the weather."}})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "EqQBCgIYAhIM"}})),
        event("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
        event("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Sunny."}})),
        event("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 12}})),
        event("message_stop", json!({"type": "message_stop"})),
    ]
    .concat();
    let server = ModelServer::start_with([Reply::raw(Script::sse(body.as_bytes(), 7)), Reply::text("next")]).await;
    let provider: Arc<dyn ChatProvider> = Arc::new(
        AnthropicProvider::new(AnthropicConfig {
            base_url: server.url().to_string(),
            api_key: Some("sk-ant-test".into()),
            ..Default::default()
        })
        .unwrap(),
    );
    let request = ChatRequest { messages: vec![Message::user("weather?")], ..Default::default() };
    let got = collect(provider.stream(request).await.unwrap()).await;
    assert_eq!(got.reasoning.concat(), "First, check the weather.");
    assert_eq!(got.deltas.concat(), "Sunny.", "reasoning is not answer text");
    let message = got.response.unwrap().message;
    assert_eq!(message.reasoning[0].signature, "EqQBCgIYAhIM");

    let next = ChatRequest {
        messages: vec![Message::user("weather?"), message, Message::user("and tomorrow?")],
        ..Default::default()
    };
    collect(provider.stream(next).await.unwrap()).await;
    let sent = &server.request(1).body["messages"][1]["content"][0];
    assert_eq!(sent["type"], "thinking");
    assert_eq!(sent["thinking"], "First, check the weather.");
    assert_eq!(sent["signature"], "EqQBCgIYAhIM");
}
