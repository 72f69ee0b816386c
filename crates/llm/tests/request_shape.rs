//! End to end against a mock HTTP server: the JSON body and headers each client sends
//! (messages, tools, tool results, system placement, streaming options, auth headers), and
//! the non-streaming mode.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::collect;
use recursive_core::{ChatOptions, ChatProvider, ChatRequest, Message, ResponseFormat, StopReason, ToolCall, ToolSpec};
use recursive_llm::{AnthropicConfig, AnthropicProvider, OpenAiConfig, OpenAiProvider};
use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn conversation() -> ChatRequest {
    ChatRequest {
        messages: vec![
            Message::system("You are terse."),
            Message::user("Weather in Paris and Rome?"),
            Message::assistant_with_tools(
                "Checking.",
                vec![
                    ToolCall { id: "call_1".into(), name: "get_weather".into(), arguments: json!({"city": "Paris"}) },
                    ToolCall { id: "call_2".into(), name: "get_weather".into(), arguments: json!({"city": "Rome"}) },
                ],
            ),
            Message::tool_result("call_1", "sunny", false),
            Message::tool_result("call_2", "no such city", true),
        ],
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Current weather of a city.".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        }],
        options: ChatOptions {
            model: "test-model".into(),
            temperature: Some(0.5),
            max_tokens: Some(256),
            stop: vec!["END".into()],
            response_format: None,
            reasoning_effort: None,
            tool_choice: None,
            prompt_cache_key: None,
        },
    }
}

const OPENAI_SSE: &str = "data: {\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Paris is sunny.\"},\"finish_reason\":null}]}\n\n\
data: {\"model\":\"test-model\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
data: {\"model\":\"test-model\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"completion_tokens\":4}}\n\n\
data: [DONE]\n\n";

const ANTHROPIC_SSE: &str = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"test-model\",\"content\":[],\"usage\":{\"input_tokens\":40,\"output_tokens\":1}}}\n\n\
event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Paris is sunny.\"}}\n\n\
event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":4}}\n\n\
event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

fn sse(body: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_raw(body, "text/event-stream")
}

fn header<'a>(req: &'a wiremock::Request, name: &str) -> Option<&'a str> {
    req.headers.get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn openai_request_body_and_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(sse(OPENAI_SSE)).mount(&server).await;
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{}/v1", server.uri()),
        api_key: Some("sk-test".into()),
        ..Default::default()
    })
    .unwrap();
    let got = collect(provider.stream(conversation()).await.unwrap()).await;
    let response = got.response.unwrap();
    assert_eq!(response.message.content, "Paris is sunny.");
    assert_eq!(response.usage.input_tokens, 40);

    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(header(req, "authorization"), Some("Bearer sk-test"));
    assert_eq!(header(req, "content-type"), Some("application/json"));
    assert_eq!(header(req, "accept"), Some("text/event-stream"));
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "test-model",
            "messages": [
                {"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": "Checking.", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": "no such city"}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Current weather of a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            }}],
            "temperature": 0.5,
            "max_tokens": 256,
            "stop": ["END"],
            "stream": true,
            "stream_options": {"include_usage": true}
        })
    );
}

#[tokio::test]
async fn openai_without_a_key_sends_no_authorization() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(sse(OPENAI_SSE)).mount(&server).await;
    let provider = OpenAiProvider::new(OpenAiConfig::new(format!("{}/v1", server.uri()))).unwrap();
    provider.complete(conversation()).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert!(requests[0].headers.get("authorization").is_none());
}

#[tokio::test]
async fn openai_non_streaming_mode_posts_without_stream_and_parses_json() {
    let server = MockServer::start().await;
    let answer = json!({
        "id": "x", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 10}}
    });
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&answer))
        .mount(&server)
        .await;
    let provider = OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{}/v1", server.uri()),
        stream: false,
        use_max_completion_tokens: true,
        ..Default::default()
    })
    .unwrap();
    let mut request = conversation();
    request.options.response_format =
        Some(ResponseFormat::JsonSchema { name: "weather".into(), schema: json!({"type": "object"}), strict: false });
    let response = provider.complete(request).await.unwrap();
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.tool_calls[0].id, "call_9");
    assert_eq!(response.message.tool_calls[0].arguments, json!({"city": "Oslo"}));
    assert_eq!((response.usage.input_tokens, response.usage.cache_read_tokens), (20, 10));

    let body: Value = serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert!(body.get("stream").is_none(), "{body}");
    assert!(body.get("stream_options").is_none(), "{body}");
    assert!(body.get("max_tokens").is_none(), "{body}");
    assert_eq!(body["max_completion_tokens"], 256);
    assert_eq!(
        body["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"}}})
    );
}

#[tokio::test]
async fn anthropic_request_body_and_headers() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/messages")).respond_with(sse(ANTHROPIC_SSE)).mount(&server).await;
    let provider = AnthropicProvider::new(AnthropicConfig {
        base_url: server.uri(),
        api_key: Some("sk-ant-test".into()),
        ..Default::default()
    })
    .unwrap();
    let got = collect(provider.stream(conversation()).await.unwrap()).await;
    let response = got.response.unwrap();
    assert_eq!(response.message.content, "Paris is sunny.");
    assert_eq!(response.usage.output_tokens, 4);

    let requests = server.received_requests().await.unwrap();
    assert_eq!(requests.len(), 1);
    let req = &requests[0];
    assert_eq!(header(req, "x-api-key"), Some("sk-ant-test"));
    assert_eq!(header(req, "anthropic-version"), Some("2023-06-01"));
    assert_eq!(header(req, "content-type"), Some("application/json"));
    assert!(req.headers.get("authorization").is_none());
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "test-model",
            "max_tokens": 256,
            "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "call_2", "content": "no such city", "is_error": true,
                     "cache_control": {"type": "ephemeral"}}
                ]}
            ],
            "tools": [{
                "name": "get_weather",
                "description": "Current weather of a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "cache_control": {"type": "ephemeral"}
            }],
            "temperature": 0.5,
            "stop_sequences": ["END"],
            "stream": true
        })
    );
}

#[tokio::test]
async fn anthropic_sends_the_default_max_tokens_and_parses_json_answers() {
    let server = MockServer::start().await;
    let answer = json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 12, "output_tokens": 2, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 7}});
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(200).set_body_json(&answer))
        .mount(&server)
        .await;
    let provider =
        AnthropicProvider::new(AnthropicConfig { base_url: server.uri(), stream: false, ..Default::default() })
            .unwrap();
    let request = ChatRequest { messages: vec![Message::user("hi")], ..Default::default() };
    let response = provider.complete(request).await.unwrap();
    assert_eq!(response.message.content, "Done.");
    assert_eq!((response.usage.cache_read_tokens, response.usage.cache_write_tokens), (100, 7));
    let body: Value = serde_json::from_slice(&server.received_requests().await.unwrap()[0].body).unwrap();
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert!(body.get("stream").is_none() && body.get("system").is_none(), "{body}");
}

#[tokio::test]
async fn extra_headers_are_sent() {
    let server = MockServer::start().await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(sse(OPENAI_SSE)).mount(&server).await;
    let mut config = OpenAiConfig::new(format!("{}/v1", server.uri()));
    config.headers.insert("x-title".into(), "recursive".into());
    OpenAiProvider::new(config).unwrap().complete(conversation()).await.unwrap();
    let requests = server.received_requests().await.unwrap();
    assert_eq!(header(&requests[0], "x-title"), Some("recursive"));
}
