//! Retries end to end against local HTTP servers: `Retry-After` honoured and announced,
//! 5xx retried with backoff, 4xx failing at once with the provider's message, timeouts
//! retried, and a stream dropped after text was shown resent without showing that text twice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::collect;
use futures::StreamExt;
use recursive_core::{
    Agent, Budget, ChatProvider, ChatRequest, EventKind, MemorySink, Message, ProviderError, RunScope, StreamEvent,
};
use recursive_llm::{AnthropicConfig, AnthropicProvider, OpenAiConfig, OpenAiProvider, RetryPolicy, RetryProvider};
use recursive_testkit::{ModelServer, Reply, Script};
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

fn fast_policy(max_retries: u32) -> RetryPolicy {
    RetryPolicy { max_retries, base_delay: Duration::from_millis(5), jitter: 0.0, ..RetryPolicy::default() }
}

fn openai_at(server: &MockServer) -> Arc<dyn ChatProvider> {
    Arc::new(
        OpenAiProvider::new(OpenAiConfig {
            base_url: format!("{}/v1", server.uri()),
            api_key: Some("sk-test".into()),
            stream: false,
            ..Default::default()
        })
        .unwrap(),
    )
}

fn completion(text: &str) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2}
    }))
}

fn request() -> ChatRequest {
    ChatRequest { messages: vec![Message::user("hi")], ..Default::default() }
}

#[tokio::test]
async fn a_429_with_retry_after_is_announced_waited_for_and_retried() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(429)
                .insert_header("retry-after", "1")
                .set_body_json(json!({"error": {"message": "Rate limit reached for gpt-4o-mini", "type": "requests"}})),
        )
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(completion("ok")).mount(&server).await;

    let provider = RetryProvider::new(openai_at(&server), fast_policy(3));
    let got = collect(provider.stream(request()).await.unwrap()).await;
    assert_eq!(got.response.unwrap().message.content, "ok");
    assert_eq!(got.retries.len(), 1, "{:?}", got.retries);
    let (attempt, delay_ms, reason) = &got.retries[0];
    assert_eq!((*attempt, *delay_ms), (1, 1000));
    assert!(reason.contains("429") && reason.contains("Rate limit reached"), "{reason}");
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_with_backoff_until_success() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(
            ResponseTemplate::new(500).set_body_json(json!({"error": {"message": "The server had an error"}})),
        )
        .up_to_n_times(2)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(completion("third time"))
        .mount(&server)
        .await;

    let provider = RetryProvider::new(openai_at(&server), fast_policy(3));
    let got = collect(provider.stream(request()).await.unwrap()).await;
    assert_eq!(got.response.unwrap().message.content, "third time");
    let attempts: Vec<_> = got.retries.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(attempts, vec![(1, 5), (2, 10)]);
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn retries_give_up_after_the_limit_with_the_last_error() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"error": {"message": "overloaded"}})))
        .mount(&server)
        .await;
    let provider = RetryProvider::new(openai_at(&server), fast_policy(2));
    let err = provider.complete(request()).await.unwrap_err();
    assert!(matches!(err, ProviderError::Http { status: 503, .. }), "{err:?}");
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}

#[tokio::test]
async fn a_401_fails_at_once_with_the_provider_message() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(401).set_body_json(json!({"error": {
            "message": "Incorrect API key provided: sk-test. You can find your API key at https://platform.openai.com/account/api-keys.",
            "type": "invalid_request_error", "code": "invalid_api_key"}})))
        .mount(&server)
        .await;
    let provider = RetryProvider::new(openai_at(&server), fast_policy(3));
    let got = collect(provider.stream(request()).await.unwrap()).await;
    assert!(got.retries.is_empty());
    let err = got.error.unwrap();
    assert!(matches!(err, ProviderError::Http { status: 401, .. }), "{err:?}");
    assert!(err.to_string().contains("Incorrect API key provided"), "{err}");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn anthropic_errors_carry_the_provider_message() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/messages"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"type": "error", "error": {
            "type": "not_found_error", "message": "model: claude-nope"}})))
        .mount(&server)
        .await;
    let inner = AnthropicProvider::new(AnthropicConfig { base_url: server.uri(), ..Default::default() }).unwrap();
    let provider = RetryProvider::new(Arc::new(inner), fast_policy(3));
    let err = provider.complete(request()).await.unwrap_err();
    assert_eq!(err.to_string(), "anthropic returned HTTP 404: model: claude-nope");
    assert_eq!(server.received_requests().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_silent_server_times_out_and_the_call_is_retried() {
    let server = ModelServer::serving(Reply::hang()).await;
    let inner = OpenAiProvider::new(OpenAiConfig {
        base_url: server.openai_url(),
        timeout: Duration::from_millis(300),
        ..Default::default()
    })
    .unwrap();
    let provider = RetryProvider::new(Arc::new(inner), fast_policy(1));
    let got = collect(provider.stream(request()).await.unwrap()).await;
    assert_eq!(got.retries.len(), 1);
    assert!(matches!(got.error, Some(ProviderError::Timeout { .. })), "{:?}", got.error);
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_refused_connection_is_retried_then_reported() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let inner = OpenAiProvider::new(OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"))).unwrap();
    let provider = RetryProvider::new(Arc::new(inner), fast_policy(2));
    let got = collect(provider.stream(request()).await.unwrap()).await;
    assert_eq!(got.retries.len(), 2);
    assert!(matches!(got.error, Some(ProviderError::Connection { .. })), "{:?}", got.error);
}

/// A stream that delivers `Hel` and `lo wor`, then is cut off in the middle of an event.
fn cut_off() -> Reply {
    let delta = |t: &str| format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{t}\"}}}}]}}\n\n");
    let body = format!("{}{}data: {{\"choices\":[{{\"ind", delta("Hel"), delta("lo wor"));
    Reply::raw(Script::sse(body.as_bytes(), 16))
}

async fn after_a_drop(second: Reply, retries: u32) -> (common::Collected, ModelServer) {
    let server = ModelServer::start_with([cut_off(), second]).await;
    let inner = OpenAiProvider::new(OpenAiConfig::new(server.openai_url())).unwrap();
    let provider = RetryProvider::new(Arc::new(inner), fast_policy(retries));
    let got = collect(provider.stream(request()).await.unwrap()).await;
    (got, server)
}

#[tokio::test]
async fn a_stream_dropped_mid_answer_is_resent_without_showing_text_twice() {
    let (got, server) = after_a_drop(Reply::text("Hello world!"), 3).await;
    assert_eq!(got.error.as_ref().map(ToString::to_string), None);
    assert_eq!(got.retries.len(), 1);
    assert_eq!(got.deltas.concat(), "Hello world!", "what was shown is not shown again: {:?}", got.deltas);
    assert_eq!(got.response.unwrap().message.content, "Hello world!");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_resent_answer_that_departs_from_the_shown_text_says_it_restarted() {
    let (got, _server) = after_a_drop(Reply::text("Goodbye."), 3).await;
    assert_eq!(got.deltas.concat(), format!("Hello wor{}Goodbye.", recursive_llm::retry::RESTARTED_NOTICE));
    assert_eq!(got.response.unwrap().message.content, "Goodbye.", "the final answer is the new one");
}

#[tokio::test]
async fn without_retries_left_a_dropped_stream_is_surfaced() {
    let (got, server) = after_a_drop(Reply::text("unused"), 0).await;
    assert_eq!(got.deltas.concat(), "Hello wor");
    assert!(got.retries.is_empty());
    assert!(matches!(got.error, Some(ProviderError::Truncated { .. })), "{:?}", got.error);
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn the_agent_loop_reports_each_retry_as_an_event() {
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path("/v1/chat/completions"))
        .respond_with(ResponseTemplate::new(502).set_body_string("Bad Gateway"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(completion("done")).mount(&server).await;
    let provider = Arc::new(RetryProvider::new(openai_at(&server), fast_policy(3)));
    let sink = MemorySink::new();
    let scope = RunScope::root("agent", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    let result = Agent::new(provider).run_in("hi", &scope).await.unwrap();
    assert_eq!(result.output, "done");
    let retries: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Retry { attempt, reason, .. } => Some((attempt, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0].0, 1);
    assert!(retries[0].1.contains("502") && retries[0].1.contains("Bad Gateway"), "{}", retries[0].1);
}

/// A provider's per-minute limit, scaled down: a bucket of `capacity` requests refilled at
/// `rate` per second; a request beyond it gets 429 with the `Retry-After` until one token.
struct Bucket {
    capacity: f64,
    rate: f64,
    state: std::sync::Mutex<(f64, std::time::Instant)>,
}

impl wiremock::Respond for Bucket {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        let mut state = self.state.lock().unwrap();
        let now = std::time::Instant::now();
        let tokens = (state.0 + (now - state.1).as_secs_f64() * self.rate).min(self.capacity);
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            return completion("ok");
        }
        *state = (tokens, now);
        ResponseTemplate::new(429)
            .insert_header("retry-after-ms", format!("{:.0}", (1.0 - tokens) / self.rate * 1000.0))
            .set_body_json(json!({"error": {"message": "Rate limit reached for requests", "type": "requests"}}))
    }
}

#[tokio::test]
async fn a_batch_beyond_a_rate_limit_drains_at_the_providers_rate_instead_of_failing() {
    let server = MockServer::start().await;
    let bucket = Bucket { capacity: 5.0, rate: 50.0, state: std::sync::Mutex::new((5.0, std::time::Instant::now())) };
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(bucket).mount(&server).await;
    let provider = RetryProvider::new(openai_at(&server), fast_policy(3));
    let calls = (0..20).map(|_| {
        let p = provider.clone();
        async move { collect(p.stream(request()).await.unwrap()).await }
    });
    let got = futures::future::join_all(calls).await;
    let failed = got.iter().filter(|g| g.response.is_none()).count();
    assert_eq!(failed, 0, "calls failed under the rate limit");
    assert!(got.iter().map(|g| g.retries.len()).max().unwrap() > 3, "the limit was met beyond three retries");
}

/// Refuses every request for `hold` after the first one, with that wait as `Retry-After`.
struct ClosedAfterFirst {
    hold: Duration,
    first: std::sync::Mutex<Option<std::time::Instant>>,
}

impl wiremock::Respond for ClosedAfterFirst {
    fn respond(&self, _: &wiremock::Request) -> ResponseTemplate {
        let mut first = self.first.lock().unwrap();
        let started = *first.get_or_insert_with(std::time::Instant::now);
        let left = self.hold.saturating_sub(started.elapsed());
        if left.is_zero() {
            return completion("ok");
        }
        ResponseTemplate::new(429).insert_header("retry-after-ms", left.as_millis().to_string())
    }
}

#[tokio::test]
async fn a_call_started_while_the_model_is_rate_limited_waits_instead_of_being_refused() {
    let server = MockServer::start().await;
    let limited = ClosedAfterFirst { hold: Duration::from_millis(400), first: std::sync::Mutex::new(None) };
    Mock::given(method("POST")).and(path("/v1/chat/completions")).respond_with(limited).mount(&server).await;
    let provider = RetryProvider::new(openai_at(&server), fast_policy(3));
    let mut first = provider.stream(request()).await.unwrap();
    // The first call's retry is announced once its 429 holds the model's calls.
    let announced = loop {
        match first.next().await {
            Some(Ok(StreamEvent::Retry { .. })) => break true,
            Some(Ok(_)) => {}
            _ => break false,
        }
    };
    assert!(announced, "the first call was not rate limited");
    let second = collect(provider.stream(request()).await.unwrap()).await;
    assert_eq!(second.response.unwrap().message.content, "ok");
    assert!(second.retries.is_empty(), "the second call was sent into the limit: {:?}", second.retries);
    let first = collect(first).await;
    assert_eq!(first.response.unwrap().message.content, "ok");
    assert!(first.retries.is_empty(), "the first call was retried once only: {:?}", first.retries);
    assert_eq!(server.received_requests().await.unwrap().len(), 3);
}
