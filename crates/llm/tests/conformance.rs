//! Conformance of the streaming clients with recorded real streams: every fixture in
//! `shared/conformance/sse/{openai,anthropic}` is served from a local HTTP server in 7-byte
//! pieces, and the client must assemble what the official SDK assembled from the same bytes
//! (`*.expected.json`). Also: events and UTF-8 characters split across reads, streams cut off
//! mid-event, dropped connections, malformed JSON, error events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use common::{collect, complete_partial_json};
use recursive_core::{ChatProvider, ChatRequest, ChatResponse, Message, ProviderError, StopReason, Usage};
use recursive_llm::{AnthropicConfig, AnthropicProvider, OpenAiConfig, OpenAiProvider, anthropic, openai};
use recursive_testkit::{ModelServer, Reply, Script};
use serde_json::{Value, json};

fn fixture_dir(api: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/sse").join(api)
}

/// `(name, stream bytes, expected.json)` for every fixture of an API.
fn fixtures(api: &str) -> Vec<(String, Vec<u8>, Value)> {
    let dir = fixture_dir(api);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("sse") {
            continue;
        }
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let expected_path = dir.join(format!("{name}.expected.json"));
        let expected = serde_json::from_slice(&std::fs::read(&expected_path).unwrap()).unwrap();
        out.push((name, std::fs::read(&path).unwrap(), expected));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(!out.is_empty(), "no fixtures in {}", dir.display());
    out
}

/// A server answering every request with these exact bytes.
async fn serve(script: Script) -> ModelServer {
    ModelServer::serving(Reply::raw(script)).await
}

fn request() -> ChatRequest {
    ChatRequest { messages: vec![Message::user("hi")], ..Default::default() }
}

fn openai_client(url: &str) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{url}/v1"),
        api_key: Some("sk-test".into()),
        ..Default::default()
    })
    .unwrap()
}

fn anthropic_client(url: &str) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig {
        base_url: url.to_string(),
        api_key: Some("sk-ant-test".into()),
        ..Default::default()
    })
    .unwrap()
}

/// What the SDK assembled, in core terms.
#[derive(Debug)]
struct Expected {
    text: String,
    calls: Vec<(String, String, Value)>,
    stop: StopReason,
    usage: Usage,
    model: String,
}

/// Reads an OpenAI `ChatCompletion`.
fn openai_expected(v: &Value) -> Expected {
    let choice = &v["choices"][0];
    let message = &choice["message"];
    let refusal = message["refusal"].as_str();
    let text = format!("{}{}", message["content"].as_str().unwrap_or(""), refusal.unwrap_or(""));
    let calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .map(|c| {
                    let args = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
                    (c["id"].as_str().unwrap().to_string(), c["function"]["name"].as_str().unwrap().to_string(), args)
                })
                .collect()
        })
        .unwrap_or_default();
    let stop = if refusal.is_some() {
        StopReason::Refusal
    } else {
        match choice["finish_reason"].as_str().unwrap() {
            "stop" => StopReason::EndTurn,
            "tool_calls" => StopReason::ToolUse,
            "length" => StopReason::MaxTokens,
            "content_filter" => StopReason::ContentFilter,
            other => panic!("unmapped finish_reason {other}"),
        }
    };
    let u = &v["usage"];
    let cached = u["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    let usage = Usage {
        input_tokens: u["prompt_tokens"].as_u64().unwrap() - cached,
        output_tokens: u["completion_tokens"].as_u64().unwrap(),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    };
    Expected { text, calls, stop, usage, model: v["model"].as_str().unwrap().to_string() }
}

/// Reads an Anthropic `Message`.
fn anthropic_expected(v: &Value) -> Expected {
    let blocks = v["content"].as_array().unwrap();
    let text = blocks.iter().filter(|b| b["type"] == "text").map(|b| b["text"].as_str().unwrap()).collect();
    let calls = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| (b["id"].as_str().unwrap().to_string(), b["name"].as_str().unwrap().to_string(), b["input"].clone()))
        .collect();
    let stop = match v["stop_reason"].as_str().unwrap() {
        "end_turn" => StopReason::EndTurn,
        "tool_use" => StopReason::ToolUse,
        "max_tokens" => StopReason::MaxTokens,
        "stop_sequence" => StopReason::StopSequence,
        "refusal" => StopReason::Refusal,
        other => panic!("unmapped stop_reason {other}"),
    };
    let u = &v["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let usage = Usage {
        input_tokens: n("input_tokens"),
        output_tokens: n("output_tokens"),
        cache_read_tokens: n("cache_read_input_tokens"),
        cache_write_tokens: n("cache_creation_input_tokens"),
    };
    Expected { text, calls, stop, usage, model: v["model"].as_str().unwrap().to_string() }
}

/// Compares an assembled response (and its streamed deltas) with the SDK's result.
fn check(name: &str, response: &ChatResponse, deltas: &[String], expected: &Expected) {
    assert_eq!(response.message.content, expected.text, "{name}: text");
    assert_eq!(deltas.concat(), expected.text, "{name}: streamed deltas");
    assert_eq!(response.stop_reason, expected.stop, "{name}: stop reason");
    assert_eq!(response.usage, expected.usage, "{name}: usage");
    assert_eq!(response.model, expected.model, "{name}: model");
    assert_eq!(response.message.tool_calls.len(), expected.calls.len(), "{name}: number of tool calls");
    for (got, (id, tool, args)) in response.message.tool_calls.iter().zip(&expected.calls) {
        assert_eq!(&got.id, id, "{name}: call id");
        assert_eq!(&got.name, tool, "{name}: call name");
        match &got.arguments {
            // JSON cut off by the token cap is kept verbatim; the SDK's partial parse of the
            // same text must give what the SDK reported.
            Value::String(raw) => {
                assert_eq!(expected.stop, StopReason::MaxTokens, "{name}: unparseable arguments without max_tokens");
                assert_eq!(complete_partial_json(raw).as_ref(), Some(args), "{name}: partial arguments");
            }
            parsed => assert_eq!(parsed, args, "{name}: call arguments"),
        }
    }
}

#[tokio::test]
async fn openai_fixtures_served_in_7_byte_pieces_assemble_like_the_sdk() {
    for (name, bytes, expected) in fixtures("openai") {
        let server = serve(Script::sse(&bytes, 7)).await;
        let got = collect(openai_client(server.url()).stream(request()).await.unwrap()).await;
        assert!(got.error.is_none(), "{name}: {:?}", got.error);
        check(&name, got.response.as_ref().unwrap(), &got.deltas, &openai_expected(&expected));
    }
}

#[tokio::test]
async fn anthropic_fixtures_served_in_7_byte_pieces_assemble_like_the_sdk() {
    for (name, bytes, expected) in fixtures("anthropic") {
        let server = serve(Script::sse(&bytes, 7)).await;
        let got = collect(anthropic_client(server.url()).stream(request()).await.unwrap()).await;
        assert!(got.error.is_none(), "{name}: {:?}", got.error);
        check(&name, got.response.as_ref().unwrap(), &got.deltas, &anthropic_expected(&expected));
    }
}

fn byte_by_byte(bytes: &[u8]) -> impl futures::Stream<Item = Result<Bytes, ProviderError>> + Send + 'static {
    let pieces: Vec<Result<Bytes, ProviderError>> = bytes.iter().map(|b| Ok(Bytes::copy_from_slice(&[*b]))).collect();
    futures::stream::iter(pieces)
}

#[tokio::test]
async fn fixtures_fed_one_byte_at_a_time_assemble_like_the_sdk() {
    for (name, bytes, expected) in fixtures("openai") {
        let got = collect(openai::stream_from_bytes("openai", byte_by_byte(&bytes))).await;
        assert!(got.error.is_none(), "{name}: {:?}", got.error);
        check(&name, got.response.as_ref().unwrap(), &got.deltas, &openai_expected(&expected));
    }
    for (name, bytes, expected) in fixtures("anthropic") {
        let got = collect(anthropic::stream_from_bytes("anthropic", byte_by_byte(&bytes))).await;
        assert!(got.error.is_none(), "{name}: {:?}", got.error);
        check(&name, got.response.as_ref().unwrap(), &got.deltas, &anthropic_expected(&expected));
    }
}

#[test]
fn partial_json_completion_drops_the_unfinished_tail() {
    assert_eq!(complete_partial_json(r#"{"a": ["x", "y"#), Some(json!({"a": ["x"]})));
    assert_eq!(complete_partial_json(r#"{"a": 1, "b"#), Some(json!({"a": 1})));
    assert_eq!(complete_partial_json(r#"{"a": {"b": true}, "c": "d"#), Some(json!({"a": {"b": true}})));
    assert_eq!(complete_partial_json("{"), Some(json!({})));
}

/// An OpenAI stream whose text deltas are `parts`.
fn openai_stream(parts: &[&str]) -> String {
    let mut s = String::new();
    for p in parts {
        let chunk = json!({"model": "m", "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": null}]});
        s.push_str(&format!("data: {chunk}\n\n"));
    }
    s.push_str(&format!(
        "data: {}\n\n",
        json!({"model": "m", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ));
    s.push_str("data: [DONE]\n\n");
    s
}

/// An Anthropic stream whose text deltas are `parts`.
fn anthropic_stream(parts: &[&str]) -> String {
    let mut events = vec![
        json!({"type": "message_start", "message": {"model": "m", "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for p in parts {
        events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}));
    events.push(json!({"type": "message_stop"}));
    events.iter().map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap())).collect()
}

/// Splits `body` at the given byte offsets.
fn split_at(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    let mut start = 0;
    for &c in cuts {
        pieces.push(body[start..c].to_vec());
        start = c;
    }
    pieces.push(body[start..].to_vec());
    pieces
}

const PAUSE: Duration = Duration::from_millis(25);

#[tokio::test]
async fn an_event_split_across_reads_is_reassembled() {
    let body = openai_stream(&["Hello", " there"]);
    let second = body.match_indices("data:").nth(1).unwrap().0;
    // Inside the first event's JSON, inside the blank line ending it, inside the second "data:".
    let cuts = [20, second - 1, second + 3];
    let server = serve(Script::sse_pieces(split_at(body.as_bytes(), &cuts)).with_pause(PAUSE)).await;
    let got = collect(openai_client(server.url()).stream(request()).await.unwrap()).await;
    assert_eq!(got.response.unwrap().message.content, "Hello there");
    assert_eq!(got.deltas, vec!["Hello", " there"]);
}

#[tokio::test]
async fn a_multibyte_character_split_across_reads_is_kept_whole() {
    let parts = ["Grüße ", "🌍", " naïve"];
    for (api, body) in [("openai", openai_stream(&parts)), ("anthropic", anthropic_stream(&parts))] {
        let bytes = body.as_bytes();
        // Cut after the first byte of ü, and after the second byte of the 4-byte globe.
        let u = body.find('ü').unwrap();
        let globe = body.find('🌍').unwrap();
        let server = serve(Script::sse_pieces(split_at(bytes, &[u + 1, globe + 2])).with_pause(PAUSE)).await;
        let stream = if api == "openai" {
            openai_client(server.url()).stream(request()).await.unwrap()
        } else {
            anthropic_client(server.url()).stream(request()).await.unwrap()
        };
        let got = collect(stream).await;
        assert_eq!(got.response.unwrap().message.content, "Grüße 🌍 naïve", "{api}");
        assert_eq!(got.deltas.concat(), "Grüße 🌍 naïve", "{api}");
    }
}

/// The bytes of a fixture up to the middle of its `nth` event.
fn cut_mid_event(bytes: &[u8], nth: usize) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).unwrap();
    let start = text.match_indices("data: {").nth(nth).unwrap().0;
    bytes[..start + 30].to_vec()
}

#[tokio::test]
async fn a_stream_cut_off_mid_event_is_a_clear_truncation() {
    let (_, openai_bytes, _) = fixtures("openai").into_iter().find(|f| f.0 == "tool_call_non_strict").unwrap();
    let server = serve(Script::sse(&cut_mid_event(&openai_bytes, 3), 7)).await;
    let got = collect(openai_client(server.url()).stream(request()).await.unwrap()).await;
    assert!(got.response.is_none());
    match got.error {
        Some(ProviderError::Truncated { message, .. }) => assert!(message.contains("cut off"), "{message}"),
        other => panic!("expected Truncated, got {other:?}"),
    }

    let (_, anthropic_bytes, _) = fixtures("anthropic").into_iter().find(|f| f.0 == "tool_use_response").unwrap();
    let server = serve(Script::sse(&cut_mid_event(&anthropic_bytes, 5), 7)).await;
    let got = collect(anthropic_client(server.url()).stream(request()).await.unwrap()).await;
    assert!(got.response.is_none());
    assert!(matches!(got.error, Some(ProviderError::Truncated { .. })), "{:?}", got.error);
}

#[tokio::test]
async fn a_stream_that_ends_between_events_before_the_finish_is_truncated() {
    let body = openai_stream(&["Hello"]);
    let finish = body.match_indices("data:").nth(1).unwrap().0;
    let server = serve(Script::sse(&body.as_bytes()[..finish], 7)).await;
    let got = collect(openai_client(server.url()).stream(request()).await.unwrap()).await;
    assert_eq!(got.deltas, vec!["Hello"]);
    match got.error {
        Some(ProviderError::Truncated { message, .. }) => assert!(message.contains("finish_reason"), "{message}"),
        other => panic!("expected Truncated, got {other:?}"),
    }
}

#[tokio::test]
async fn a_connection_dropped_mid_body_is_truncated() {
    // A chunked body whose connection closes before the last chunk.
    let script = Script::sse_pieces(vec![b"1e\r\ndata: {\"choices\": [{\"index\":\r\n".to_vec()])
        .with_head("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked");
    let server = serve(script).await;
    let got = collect(openai_client(server.url()).stream(request()).await.unwrap()).await;
    assert!(got.response.is_none());
    assert!(matches!(got.error, Some(ProviderError::Truncated { .. })), "{:?}", got.error);
}

#[tokio::test]
async fn malformed_json_in_a_chunk_names_the_problem() {
    let good = openai_stream(&["Hi"]);
    let body = good.replacen("data: {", "data: {\"choices\": [oops]}\n\ndata: {", 1);
    let server = serve(Script::sse(body.as_bytes(), 7)).await;
    let got = collect(openai_client(server.url()).stream(request()).await.unwrap()).await;
    match got.error {
        Some(ProviderError::Malformed { message, .. }) => {
            assert!(message.contains("invalid JSON in chat.completion.chunk"), "{message}");
            assert!(message.contains("oops"), "{message}");
        }
        other => panic!("expected Malformed, got {other:?}"),
    }

    let good = anthropic_stream(&["Hi"]);
    let body = good.replacen("\"text\":\"Hi\"", "\"text\": }", 1);
    assert_ne!(body, good);
    let server = serve(Script::sse(body.as_bytes(), 7)).await;
    let got = collect(anthropic_client(server.url()).stream(request()).await.unwrap()).await;
    match got.error {
        Some(ProviderError::Malformed { message, .. }) => {
            assert!(message.contains("invalid JSON in `content_block_delta` event"), "{message}")
        }
        other => panic!("expected Malformed, got {other:?}"),
    }
}

#[tokio::test]
async fn an_anthropic_error_event_carries_the_server_message() {
    let mut body = anthropic_stream(&["Hi"]);
    let cut = body.find("event: content_block_stop").unwrap();
    body.truncate(cut);
    body.push_str("event: error\ndata: {\"type\": \"error\", \"error\": {\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}\n\n");
    let server = serve(Script::sse(body.as_bytes(), 7)).await;
    let got = collect(anthropic_client(server.url()).stream(request()).await.unwrap()).await;
    match got.error {
        Some(e @ ProviderError::Http { .. }) => {
            assert!(e.to_string().contains("Overloaded"), "{e}");
            assert!(e.is_retryable());
        }
        other => panic!("expected the server's error, got {other:?}"),
    }
}
