#![allow(clippy::unwrap_used, clippy::expect_used)]
//! AWS Bedrock's Converse API through the real client against a local server serving
//! ConverseStream answers in the real binary event-stream framing (every frame written by
//! `aws-smithy-eventstream`, CRCs included, split across reads) and Converse JSON: a three-turn
//! tool loop whose 2nd and 3rd requests carry back the signed reasoning blocks (and redacted
//! ones), the toolUse / toolResult pairs of parallel calls and the cache points; reasoning and
//! text streamed; usage with cache reads and writes priced; stop reasons (guardrail and content
//! filter as provider stops); an exception frame mid-stream; a throttled call retried and a
//! validation error not; every request's SigV4 signature recomputed independently by the server
//! side, the session token sent, and a Bedrock API key sent as a bearer token instead.

#[path = "common/aws.rs"]
mod aws;
mod common;

use std::sync::Arc;
use std::time::Duration;

use common::collect;
use recursive_core::{Agent, ChatOptions, ChatProvider, ChatRequest, FinishReason, Message, ProviderError, StopReason};
use recursive_llm::bedrock::{CredentialProvider, Credentials, credentials::Source};
use recursive_llm::{BedrockConfig, BedrockProvider, PriceTable, PricedProvider, RetryPolicy, RetryProvider};
use recursive_testkit::ModelServer;
use serde_json::{Value, json};

const MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";
const ACCESS_KEY: &str = "ASIATESTACCESSKEY01";
const SECRET: &str = "tEsT/SeCrEt+KeY/0123456789abcdefghijklmn";
const TOKEN: &str = "IQoJb3JpZ2luX2VjEXAMPLE//session+token=";
const REGION: &str = "us-west-2";

/// Static session credentials.
fn credentials() -> Arc<CredentialProvider> {
    let credentials = Credentials {
        access_key_id: ACCESS_KEY.into(),
        secret_access_key: SECRET.into(),
        session_token: Some(TOKEN.into()),
        expires: None,
    };
    Arc::new(CredentialProvider::new(Source::Static { credentials, from: "the test".into() }).unwrap())
}

fn config(server: &ModelServer, stream: bool) -> BedrockConfig {
    BedrockConfig {
        base_url: server.url().to_string(),
        region: REGION.into(),
        model: MODEL.into(),
        stream,
        credentials: Some(credentials()),
        ..Default::default()
    }
}

fn provider(server: &ModelServer, stream: bool) -> BedrockProvider {
    BedrockProvider::new(config(server, stream)).unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { messages: vec![Message::user(text)], ..Default::default() }
}

fn usage(input: u64, output: u64, read: u64, write: u64) -> Value {
    json!({"usage": {"inputTokens": input, "outputTokens": output, "totalTokens": input + output + read + write,
        "cacheReadInputTokens": read, "cacheWriteInputTokens": write}, "metrics": {"latencyMs": 812}})
}

/// One block of a scripted turn.
enum Out {
    /// Reasoning text (in two deltas) and its signature.
    Thinking(&'static str, &'static str),
    /// Redacted reasoning.
    Redacted(&'static str),
    /// Answer text, a delta per word.
    Text(&'static str),
    /// A tool call: id and arguments (their JSON in two deltas).
    Call(&'static str, Value),
}

/// The frames of one streamed turn.
fn turn(blocks: &[Out], stop: &str, usage: Value) -> Vec<Vec<u8>> {
    let mut frames = vec![aws::event("messageStart", json!({"role": "assistant"}))];
    for (i, block) in blocks.iter().enumerate() {
        let delta = |d: Value| aws::event("contentBlockDelta", json!({"contentBlockIndex": i, "delta": d}));
        match block {
            Out::Thinking(text, signature) => {
                let (a, b) = text.split_at(text.len() / 2);
                frames.push(delta(json!({"reasoningContent": {"text": a}})));
                frames.push(delta(json!({"reasoningContent": {"text": b}})));
                frames.push(delta(json!({"reasoningContent": {"signature": signature}})));
            }
            Out::Redacted(data) => frames.push(delta(json!({"reasoningContent": {"redactedContent": data}}))),
            Out::Text(text) => {
                for word in text.split_inclusive(' ') {
                    frames.push(delta(json!({"text": word})));
                }
            }
            Out::Call(id, args) => {
                frames.push(aws::event(
                    "contentBlockStart",
                    json!({"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": id, "name": "echo"}}}),
                ));
                let text = args.to_string();
                let (a, b) = text.split_at(text.len() / 2);
                frames.push(delta(json!({"toolUse": {"input": a}})));
                frames.push(delta(json!({"toolUse": {"input": b}})));
            }
        }
        frames.push(aws::event("contentBlockStop", json!({"contentBlockIndex": i})));
    }
    frames.push(aws::event("messageStop", json!({"stopReason": stop})));
    frames.push(aws::event("metadata", usage));
    frames
}

fn echo_agent(server: &ModelServer) -> Agent {
    common::echo_agent(Arc::new(provider(server, true)))
}

fn cache_point() -> Value {
    json!({"cachePoint": {"type": "default"}})
}

fn tool_use(id: &str, text: &str) -> Value {
    json!({"toolUse": {"toolUseId": id, "name": "echo", "input": {"text": text}}})
}

fn tool_result(id: &str, text: &str) -> Value {
    json!({"toolResult": {"toolUseId": id, "content": [{"text": text}]}})
}

fn thinking(text: &str, signature: &str) -> Value {
    json!({"reasoningContent": {"reasoningText": {"text": text, "signature": signature}}})
}

/// The request's messages without the cache point closing the last one (checked apart).
fn messages_without_last_cache_point(body: &Value) -> Value {
    let mut messages = body["messages"].clone();
    let last = messages.as_array_mut().unwrap().last_mut().unwrap()["content"].as_array_mut().unwrap();
    assert_eq!(last.pop(), Some(cache_point()), "the last message ends with a cache point");
    messages
}

#[tokio::test]
async fn a_three_turn_tool_loop_sends_back_signed_reasoning_and_paired_parallel_calls() {
    let turn1 = [
        Out::Thinking("The user wants two echoes; both at once.", "c2lnLTE="),
        Out::Call("tooluse_a1", json!({"text": "one"})),
        Out::Call("tooluse_b2", json!({"text": "two"})),
    ];
    let turn2 = [
        Out::Thinking("Now the third.", "c2lnLTI="),
        Out::Redacted("cmVkYWN0ZWQtYnl0ZXM="),
        Out::Call("tooluse_c3", json!({"text": "three"})),
    ];
    let turn3 = [Out::Text("Echoed one, two and three.")];
    let server = ModelServer::start_with([
        aws::stream(turn(&turn1, "tool_use", usage(120, 40, 0, 900)), 37),
        aws::stream(turn(&turn2, "tool_use", usage(60, 30, 900, 100)), 37),
        aws::stream(turn(&turn3, "end_turn", usage(40, 9, 1000, 60)), 37),
    ])
    .await;
    let result = echo_agent(&server).run("Echo one and two, then three.").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(result.output, "Echoed one, two and three.");
    assert_eq!(server.request_count(), 3);

    let encoded = "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream";
    for r in server.requests() {
        assert_eq!((r.method.as_str(), r.path.as_str()), ("POST", encoded));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("x-amz-security-token"), Some(TOKEN), "the session token goes with every request");
        aws::assert_signed(&r, ACCESS_KEY, SECRET, REGION);
        let b = &r.body;
        assert!(b["system"][0]["text"].as_str().is_some_and(|t| t.contains("You echo.")), "{b}");
        assert_eq!(b["system"].as_array().unwrap().last(), Some(&cache_point()), "a cache point closes the system");
        let tools = b["toolConfig"]["tools"].as_array().unwrap();
        assert_eq!(tools[0]["toolSpec"]["name"], "echo");
        assert_eq!(tools[0]["toolSpec"]["inputSchema"]["json"]["properties"]["text"]["type"], "string");
        assert_eq!(tools.last(), Some(&cache_point()), "a cache point closes the tools");
        assert_eq!(b["additionalModelRequestFields"], json!({"thinking": {"type": "enabled", "budget_tokens": 8192}}));
        assert!(b["inferenceConfig"]["maxTokens"].as_u64().unwrap() > 8192, "{b}");
        assert!(b.to_string().matches("cachePoint").count() <= 4, "Claude takes at most four");
    }

    let user = json!({"role": "user", "content": [{"text": "Echo one and two, then three."}]});
    let first_turn = json!({"role": "assistant", "content": [
        thinking("The user wants two echoes; both at once.", "c2lnLTE="),
        tool_use("tooluse_a1", "one"), tool_use("tooluse_b2", "two")]});
    let first_results =
        json!({"role": "user", "content": [tool_result("tooluse_a1", "one"), tool_result("tooluse_b2", "two")]});
    let mut expected = vec![user, first_turn, first_results];
    assert_eq!(messages_without_last_cache_point(&server.request(1).body), json!(expected));

    expected.push(json!({"role": "assistant", "content": [
        thinking("Now the third.", "c2lnLTI="),
        {"reasoningContent": {"redactedContent": "cmVkYWN0ZWQtYnl0ZXM="}},
        tool_use("tooluse_c3", "three")]}));
    expected.push(json!({"role": "user", "content": [tool_result("tooluse_c3", "three")]}));
    assert_eq!(messages_without_last_cache_point(&server.request(2).body), json!(expected));
}

#[tokio::test]
async fn reasoning_streams_as_reasoning_and_text_as_text() {
    let blocks = [Out::Thinking("Think it over.", "c2ln"), Out::Text("The answer is 42.")];
    let server = ModelServer::start_with([aws::stream(turn(&blocks, "end_turn", usage(10, 20, 0, 0)), 11)]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.reasoning.concat(), "Think it over.");
    assert_eq!(got.deltas, vec!["The ", "answer ", "is ", "42."]);
    let response = got.response.unwrap_or_else(|| panic!("{:?}", got.error));
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, MODEL, "the response names the model asked for");
    assert_eq!(response.message.reasoning[0].signature, "c2ln");
}

#[tokio::test]
async fn usage_counts_cache_reads_and_writes_and_is_priced_at_the_profiles_price() {
    let blocks = [Out::Text("ok")];
    let server =
        ModelServer::start_with([aws::stream(turn(&blocks, "end_turn", usage(1_000, 500, 8_000, 2_000)), 64)]).await;
    let priced = PricedProvider::new(Arc::new(provider(&server, true)), PriceTable::builtin());
    let response = priced.complete(ask("q")).await.unwrap();
    assert_eq!(
        (response.usage.input_tokens, response.usage.output_tokens),
        (1_000, 500),
        "input tokens leave out the cached ones"
    );
    assert_eq!((response.usage.cache_read_tokens, response.usage.cache_write_tokens), (8_000, 2_000));
    // Claude Sonnet 4.5 through a US profile, per million tokens: input $3.30, output $16.50,
    // cache read $0.33, cache write $4.125 (the regional price, 10% over the global one).
    let expected = (1_000.0 * 3.30 + 500.0 * 16.50 + 8_000.0 * 0.33 + 2_000.0 * 4.125) / 1e6;
    let cost = response.cost_usd.unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}

#[tokio::test]
async fn a_guardrail_or_content_filter_ends_the_run_as_a_provider_stop_with_its_reason() {
    let server = ModelServer::start_with([
        aws::stream(
            turn(&[Out::Text("Sorry, the model cannot answer.")], "guardrail_intervened", usage(9, 6, 0, 0)),
            50,
        ),
        aws::stream(turn(&[Out::Text("Partial")], "content_filtered", usage(9, 1, 0, 0)), 50),
        aws::stream(turn(&[Out::Text("Cut here")], "max_tokens", usage(9, 64, 0, 0)), 50),
    ])
    .await;
    let guarded = Agent::new(Arc::new(provider(&server, true))).run("something forbidden").await.unwrap();
    assert_eq!(guarded.finish_reason, FinishReason::ProviderStop(StopReason::Other("guardrail_intervened".into())));
    let filtered = Agent::new(Arc::new(provider(&server, true))).run("something else").await.unwrap();
    assert_eq!(filtered.finish_reason, FinishReason::ProviderStop(StopReason::ContentFilter));
    let cut = collect(provider(&server, true).stream(ask("long")).await.unwrap()).await.response.unwrap();
    assert_eq!((cut.stop_reason, cut.message.content.as_str()), (StopReason::MaxTokens, "Cut here"));
}

#[tokio::test]
async fn an_exception_frame_mid_stream_is_a_retryable_error_and_the_retry_succeeds() {
    let mut broken = turn(&[Out::Text("Half an answer that never ends")], "end_turn", usage(5, 5, 0, 0));
    broken.truncate(4);
    broken.push(aws::exception("throttlingException", "Too many tokens, please wait before trying again."));
    let fine = turn(&[Out::Text("fine")], "end_turn", usage(5, 1, 0, 0));
    let server =
        ModelServer::start_with([aws::stream(broken.clone(), 29), aws::stream(broken, 29), aws::stream(fine, 29)])
            .await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.deltas.concat(), "Half an answer ", "text before the exception still streamed");
    let err = got.error.expect("the exception ends the stream with an error");
    assert!(
        matches!(&err, ProviderError::Http { status: 429, message, .. } if message.contains("throttlingException: Too many tokens")),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let policy =
        RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(5), jitter: 0.0, ..Default::default() };
    let retrying = RetryProvider::new(Arc::new(provider(&server, true)), policy);
    let got = collect(retrying.stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.response.unwrap_or_else(|| panic!("{:?}", got.error)).message.content, "fine");
}

#[tokio::test]
async fn a_throttled_call_is_retried_and_a_validation_error_is_not() {
    let server = ModelServer::start_with([
        aws::error(
            429,
            "Too Many Requests",
            "ThrottlingException",
            "Too many requests, please wait before trying again.",
        ),
        aws::stream(turn(&[Out::Text("after the wait")], "end_turn", usage(5, 3, 0, 0)), 64),
        aws::error(400, "Bad Request", "ValidationException", "The provided model identifier is invalid."),
    ])
    .await;
    let policy =
        RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(5), jitter: 0.0, ..Default::default() };
    let retrying = RetryProvider::new(Arc::new(provider(&server, true)), policy);
    let got = collect(retrying.stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.retries.len(), 1, "{:?}", got.retries);
    assert!(got.retries[0].2.contains("Too many requests"), "{:?}", got.retries);
    assert_eq!(got.response.unwrap().message.content, "after the wait");
    assert_eq!(server.request_count(), 2);

    let got = collect(retrying.stream(ask("q")).await.unwrap()).await;
    let err = got.error.expect("a validation error is an error");
    assert!(got.retries.is_empty(), "{:?}", got.retries);
    assert!(
        matches!(&err, ProviderError::Http { status: 400, message, .. } if message.contains("model identifier is invalid")),
        "{err:?}"
    );
    assert_eq!(server.request_count(), 3, "a validation error is not retried");
}

#[tokio::test]
async fn a_stream_cut_inside_a_frame_is_truncated() {
    let mut bytes: Vec<u8> = turn(&[Out::Text("Hello there")], "end_turn", usage(1, 2, 0, 0)).concat();
    bytes.truncate(bytes.len() - 7);
    let server = ModelServer::start_with([aws::stream(vec![bytes], 64)]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert!(matches!(got.error, Some(ProviderError::Truncated { .. })), "{:?}", got.error);
}

#[tokio::test]
async fn the_non_streaming_path_posts_converse_and_parses_the_answer() {
    let body = json!({
        "output": {"message": {"role": "assistant", "content": [
            {"reasoningContent": {"reasoningText": {"text": "Plan.", "signature": "c2ln"}}},
            {"toolUse": {"toolUseId": "tooluse_x", "name": "echo", "input": {"text": "x"}}}]}},
        "stopReason": "tool_use",
        "usage": {"inputTokens": 7, "outputTokens": 5, "totalTokens": 12},
        "metrics": {"latencyMs": 301}
    });
    let server = ModelServer::start_with([aws::json_answer(&body)]).await;
    let arn = "arn:aws:bedrock:us-west-2:123456789012:inference-profile/us.amazon.nova-pro-v1:0";
    let request = ChatRequest { options: ChatOptions { model: arn.into(), ..Default::default() }, ..ask("q") };
    let response = provider(&server, false).complete(request).await.unwrap();
    let r = server.request(0);
    assert_eq!(
        r.path,
        "/model/arn%3Aaws%3Abedrock%3Aus-west-2%3A123456789012%3Ainference-profile%2Fus.amazon.nova-pro-v1%3A0/converse"
    );
    aws::assert_signed(&r, ACCESS_KEY, SECRET, REGION);
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.tool_calls[0].arguments, json!({"text": "x"}));
    assert_eq!(response.message.reasoning[0].signature, "c2ln");
    assert_eq!(response.model, arn);
}

#[tokio::test]
async fn a_bedrock_api_key_is_a_bearer_token_and_no_signature() {
    let server =
        ModelServer::start_with([aws::stream(turn(&[Out::Text("ok")], "end_turn", usage(1, 1, 0, 0)), 64)]).await;
    let config = BedrockConfig { api_key: Some("ABSKQmVkcm9ja0FQSUtleQ==".into()), ..config(&server, true) };
    let got = collect(BedrockProvider::new(config).unwrap().stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.response.unwrap().message.content, "ok");
    let r = server.request(0);
    assert_eq!(r.header("authorization"), Some("Bearer ABSKQmVkcm9ja0FQSUtleQ=="));
    assert!(r.header("x-amz-date").is_none() && r.header("x-amz-security-token").is_none());
}

#[tokio::test]
async fn a_tampered_request_fails_the_signature_check() {
    let server =
        ModelServer::start_with([aws::stream(turn(&[Out::Text("ok")], "end_turn", usage(1, 1, 0, 0)), 64)]).await;
    collect(provider(&server, true).stream(ask("the original question")).await.unwrap()).await;
    let mut r = server.request(0);
    aws::assert_signed(&r, ACCESS_KEY, SECRET, REGION);
    r.raw_body = String::from_utf8(r.raw_body).unwrap().replace("original", "tampered").into_bytes();
    assert_ne!(aws::authorization(&r).signature, aws::expected_signature(&r, SECRET));
}
