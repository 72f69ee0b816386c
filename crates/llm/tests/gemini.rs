#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Google's Gemini API through the real client against a local server serving scripted
//! streams in the API's wire format (`data: {GenerateContentResponse}` chunks separated by
//! CRLF blank lines, as `streamGenerateContent?alt=sse` sends them and the official SDK's types
//! describe them): a three-turn tool loop whose 2nd and 3rd requests carry back the thought
//! signatures on the parts they came on and the functionCall / functionResponse pairs; parallel
//! calls; safety, blocked-prompt and MAX_TOKENS stops; Google's error body and retries; usage
//! with cached and thought tokens priced; the non-streaming path. Explicit context caching: the
//! server also serves `POST /v1beta/cachedContents`, and the requests after it name the cache
//! and leave out the system instruction and tools; a cache found gone is made anew once, a short
//! prefix is never cached, and concurrent calls with one prefix make one cache.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::collect;
use recursive_core::{
    Agent, ChatOptions, ChatProvider, ChatRequest, FinishReason, Message, ProviderError, StopReason, ToolSpec,
};
use recursive_llm::gemini::{CacheMode, CacheSettings};
use recursive_llm::{GeminiConfig, GeminiProvider, PriceTable, PricedProvider, RetryPolicy, RetryProvider};
use recursive_testkit::{ModelServer, RecordedRequest, Reply, Script};
use serde_json::{Value, json};

/// One part of a scripted turn.
#[derive(Clone)]
enum Out {
    /// A thought summary, streamed in two pieces.
    Thought(&'static str),
    /// A function call, with the signature the model put on it.
    Call { name: &'static str, args: Value, signature: Option<&'static str> },
    /// Answer text, streamed word by word, then a signature on an empty last text part.
    Text { text: &'static str, signature: Option<&'static str> },
}

/// The chunks of one streamed answer; the last one carries `finish` and the usage.
fn chunks(parts: &[Out], finish: &str, usage: Value) -> Vec<Value> {
    let mut out: Vec<Vec<Value>> = Vec::new();
    for part in parts {
        match part {
            Out::Thought(text) => {
                let (a, b) = text.split_at(text.len() / 2);
                out.push(vec![json!({"text": a, "thought": true})]);
                out.push(vec![json!({"text": b, "thought": true})]);
            }
            Out::Call { name, args, signature } => {
                let mut p = json!({"functionCall": {"name": name, "args": args}});
                if let Some(s) = signature {
                    p["thoughtSignature"] = json!(s);
                }
                // Parallel calls arrive together in one chunk.
                match out.last_mut() {
                    Some(last) if last.iter().any(|p| p.get("functionCall").is_some()) => last.push(p),
                    _ => out.push(vec![p]),
                }
            }
            Out::Text { text, signature } => {
                for word in text.split_inclusive(' ') {
                    out.push(vec![json!({"text": word})]);
                }
                if let Some(s) = signature {
                    out.push(vec![json!({"text": "", "thoughtSignature": s})]);
                }
            }
        }
    }
    let n = out.len();
    out.into_iter()
        .enumerate()
        .map(|(i, parts)| {
            let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
            let mut chunk = json!({"modelVersion": "gemini-2.5-flash", "responseId": "resp-1",
                "usageMetadata": {"promptTokenCount": 9, "totalTokenCount": 9,
                    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 9}]}});
            if i + 1 == n {
                candidate["finishReason"] = json!(finish);
                chunk["usageMetadata"] = usage.clone();
            }
            chunk["candidates"] = json!([candidate]);
            chunk
        })
        .collect()
}

fn usage(prompt: u64, cached: u64, candidates: u64, thoughts: u64) -> Value {
    let mut u = json!({"promptTokenCount": prompt, "candidatesTokenCount": candidates,
        "thoughtsTokenCount": thoughts, "totalTokenCount": prompt + candidates + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}]});
    if cached > 0 {
        u["cachedContentTokenCount"] = json!(cached);
    }
    u
}

fn sse(chunks: Vec<Value>) -> Reply {
    let body: String = chunks.iter().map(|c| format!("data: {c}\r\n\r\n")).collect();
    Reply::raw(Script::sse(body.as_bytes(), 89))
}

fn provider(server: &ModelServer, stream: bool) -> GeminiProvider {
    GeminiProvider::new(GeminiConfig {
        base_url: server.url().to_string(),
        api_key: Some("AIza-test".into()),
        model: "gemini-2.5-flash".into(),
        stream,
        ..Default::default()
    })
    .unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { messages: vec![Message::user(text)], ..Default::default() }
}

fn echo_agent(server: &ModelServer) -> Agent {
    common::echo_agent(Arc::new(provider(server, true)))
}

fn call(text: &str, signature: Option<&str>) -> Value {
    let mut p = json!({"functionCall": {"name": "echo", "args": {"text": text}}});
    if let Some(s) = signature {
        p["thoughtSignature"] = json!(s);
    }
    p
}

fn result(text: &str) -> Value {
    json!({"functionResponse": {"name": "echo", "response": {"output": text}}})
}

#[tokio::test]
async fn a_three_turn_tool_loop_sends_back_thought_signatures_and_call_pairs() {
    let turn1 = [
        Out::Thought("I should echo one first."),
        Out::Call { name: "echo", args: json!({"text": "one"}), signature: Some("c2lnLTE=") },
    ];
    let turn2 = [
        Out::Thought("Now echo two."),
        Out::Call { name: "echo", args: json!({"text": "two"}), signature: Some("c2lnLTI=") },
    ];
    let turn3 = [Out::Text { text: "Echoed one and two.", signature: Some("c2lnLTM=") }];
    let server = ModelServer::start_with([
        sse(chunks(&turn1, "STOP", usage(100, 0, 10, 30))),
        sse(chunks(&turn2, "STOP", usage(160, 0, 10, 30))),
        sse(chunks(&turn3, "STOP", usage(220, 0, 8, 0))),
    ])
    .await;
    let result_ = echo_agent(&server).run("Echo one, then two.").await.unwrap();
    assert_eq!(result_.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(result_.output, "Echoed one and two.");
    assert_eq!(server.request_count(), 3);

    let first = server.request(0);
    assert_eq!(first.path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse");
    assert_eq!(first.header("x-goog-api-key"), Some("AIza-test"));
    assert!(first.header("authorization").is_none());
    for r in server.requests() {
        let b = &r.body;
        assert_eq!(b["systemInstruction"]["parts"][0]["text"].as_str().map(|t| t.contains("You echo.")), Some(true));
        assert_eq!(b["generationConfig"]["thinkingConfig"], json!({"thinkingBudget": 8192, "includeThoughts": true}));
        let declaration = &b["tools"][0]["functionDeclarations"][0];
        assert_eq!(declaration["name"], "echo");
        assert_eq!(declaration["parameters"]["type"], "OBJECT", "{declaration}");
        assert!(declaration["parameters"].get("additionalProperties").is_none(), "{declaration}");
    }
    let user = json!({"role": "user", "parts": [{"text": "Echo one, then two."}]});
    let model =
        |thought: &str, call: Value| json!({"role": "model", "parts": [{"text": thought, "thought": true}, call]});
    let results = |text: &str| json!({"role": "user", "parts": [result(text)]});
    let mut expected = vec![user, model("I should echo one first.", call("one", Some("c2lnLTE="))), results("one")];
    assert_eq!(server.request(1).body["contents"], json!(expected));
    expected.extend([model("Now echo two.", call("two", Some("c2lnLTI="))), results("two")]);
    assert_eq!(server.request(2).body["contents"], json!(expected));
}

#[tokio::test]
async fn parallel_calls_go_back_in_one_turn_and_their_results_in_one_content() {
    let turn1 = [
        Out::Call { name: "echo", args: json!({"text": "a"}), signature: Some("c2lnLUE=") },
        Out::Call { name: "echo", args: json!({"text": "b"}), signature: None },
    ];
    let turn2 = [Out::Text { text: "a and b", signature: None }];
    let server = ModelServer::start_with([
        sse(chunks(&turn1, "STOP", usage(50, 0, 12, 0))),
        sse(chunks(&turn2, "STOP", usage(80, 0, 3, 0))),
    ])
    .await;
    let result_ = echo_agent(&server).run("Echo a and b at once.").await.unwrap();
    assert_eq!(result_.output, "a and b");
    let contents = &server.request(1).body["contents"];
    assert_eq!(contents[1], json!({"role": "model", "parts": [call("a", Some("c2lnLUE=")), call("b", None)]}));
    assert_eq!(contents[2], json!({"role": "user", "parts": [result("a"), result("b")]}));
    assert_eq!(contents.as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn thoughts_stream_as_reasoning_and_text_as_text() {
    let parts = [Out::Thought("Think it over."), Out::Text { text: "The answer is 42.", signature: Some("c2ln") }];
    let server = ModelServer::start_with([sse(chunks(&parts, "STOP", usage(10, 0, 6, 20)))]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.reasoning.concat(), "Think it over.");
    assert_eq!(got.deltas.concat(), "The answer is 42.");
    let response = got.response.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "gemini-2.5-flash");
}

#[tokio::test]
async fn a_safety_stop_ends_the_run_as_a_provider_stop_with_its_reason() {
    let mut last = chunks(&[Out::Text { text: "Here is", signature: None }], "SAFETY", usage(10, 0, 2, 0));
    last.last_mut().unwrap()["candidates"][0]["safetyRatings"] =
        json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": true}]);
    let blocked = vec![json!({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"},
        "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7}, "modelVersion": "gemini-2.5-flash"})];
    let server = ModelServer::start_with([sse(last), sse(blocked)]).await;
    let result_ = Agent::new(Arc::new(provider(&server, true))).run("something bad").await.unwrap();
    assert_eq!(result_.finish_reason, FinishReason::ProviderStop(StopReason::Other("safety".into())));
    let got = collect(provider(&server, true).stream(ask("worse")).await.unwrap()).await;
    let response = got.response.unwrap_or_else(|| panic!("{:?}", got.error));
    assert_eq!(response.stop_reason, StopReason::Other("prompt_blocked_prohibited_content".into()));
    assert_eq!(response.usage.input_tokens, 7);
}

#[tokio::test]
async fn a_max_tokens_stop_keeps_the_partial_text() {
    let parts = [Out::Text { text: "Partial answer", signature: None }];
    let server = ModelServer::start_with([sse(chunks(&parts, "MAX_TOKENS", usage(10, 0, 64, 0)))]).await;
    let request = ChatRequest { options: ChatOptions { max_tokens: Some(64), ..Default::default() }, ..ask("q") };
    let got = collect(provider(&server, true).stream(request).await.unwrap()).await;
    let response = got.response.unwrap();
    assert_eq!(response.stop_reason, StopReason::MaxTokens);
    assert_eq!(response.message.content, "Partial answer");
    assert_eq!(server.request(0).body["generationConfig"]["maxOutputTokens"], 64);
}

#[tokio::test]
async fn google_error_bodies_are_provider_errors_and_transient_ones_are_retried() {
    let invalid = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
        "status": "INVALID_ARGUMENT", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}});
    let overloaded = json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
        "status": "UNAVAILABLE"}});
    let ok = sse(chunks(&[Out::Text { text: "fine", signature: None }], "STOP", usage(3, 0, 1, 0)));
    let server = ModelServer::start_with([
        Reply::error(400, invalid.to_string()),
        Reply::error(503, overloaded.to_string()),
        ok,
    ])
    .await;
    let err = provider(&server, true).stream(ask("q")).await.err().expect("a 400 is an error");
    assert!(
        matches!(&err, ProviderError::Http { status: 400, message, .. } if message.contains("API key not valid")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let policy =
        RetryPolicy { max_retries: 2, base_delay: Duration::from_millis(5), jitter: 0.0, ..Default::default() };
    let retrying = RetryProvider::new(Arc::new(provider(&server, true)), policy);
    let got = collect(retrying.stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.retries.len(), 1, "{:?}", got.retries);
    assert!(got.retries[0].2.contains("overloaded"), "{:?}", got.retries);
    assert_eq!(got.response.unwrap().message.content, "fine");
}

#[tokio::test]
async fn an_error_chunk_in_the_stream_is_a_provider_error() {
    let error = vec![json!({"error": {"code": 500, "message": "Internal error encountered.", "status": "INTERNAL"}})];
    let server = ModelServer::start_with([sse(error)]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    let err = got.error.expect("an error chunk ends the stream with an error");
    assert!(
        matches!(&err, ProviderError::Http { status: 500, message, .. } if message.contains("INTERNAL")),
        "{err:?}"
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_stream_cut_before_its_finish_reason_is_truncated() {
    let mut parts = chunks(&[Out::Text { text: "Hello there friend", signature: None }], "STOP", usage(1, 0, 3, 0));
    parts.pop();
    let server = ModelServer::start_with([sse(parts)]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert!(matches!(got.error, Some(ProviderError::Truncated { .. })), "{:?}", got.error);
}

#[tokio::test]
async fn usage_prices_cached_prompt_tokens_as_cache_reads_and_thoughts_as_output() {
    let parts = [Out::Thought("Hm."), Out::Text { text: "ok", signature: None }];
    let server = ModelServer::start_with([sse(chunks(&parts, "STOP", usage(10_000, 8_000, 500, 1_500)))]).await;
    let priced = PricedProvider::new(Arc::new(provider(&server, true)), PriceTable::builtin());
    let response = priced.complete(ask("q")).await.unwrap();
    assert_eq!(response.usage.input_tokens, 2_000);
    assert_eq!(response.usage.cache_read_tokens, 8_000);
    assert_eq!(response.usage.output_tokens, 2_000, "thought tokens are output tokens");
    // gemini-2.5-flash list prices per million tokens: input $0.30, cached input $0.03, output $2.50.
    let expected = (2_000.0 * 0.30 + 8_000.0 * 0.03 + 2_000.0 * 2.50) / 1e6;
    let cost = response.cost_usd.unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}

#[tokio::test]
async fn the_non_streaming_path_posts_generate_content_and_parses_the_answer() {
    let body = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"text": "Plan.", "thought": true},
            {"functionCall": {"name": "echo", "args": {"text": "x"}}, "thoughtSignature": "c2ln"}]},
        "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 5, "thoughtsTokenCount": 2,
            "totalTokenCount": 14}, "modelVersion": "gemini-2.5-pro"});
    let reply = Reply::raw(
        Script::sse(body.to_string().as_bytes(), 4096)
            .with_head("HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=UTF-8\r\nconnection: close"),
    );
    let server = ModelServer::start_with([reply]).await;
    let response = provider(&server, false).complete(ask("q")).await.unwrap();
    assert_eq!(server.request(0).path, "/v1beta/models/gemini-2.5-flash:generateContent");
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.tool_calls[0].arguments, json!({"text": "x"}));
    assert_eq!(response.message.reasoning[0].text, "Plan.");
    assert_eq!(response.message.reasoning[1].signature, "c2ln");
    assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (7, 7));
    assert_eq!(response.model, "gemini-2.5-pro");
}

const CACHE_PATH: &str = "/v1beta/cachedContents";

fn json_reply(body: Value) -> Reply {
    Reply::raw(
        Script::sse(body.to_string().as_bytes(), 4096)
            .with_head("HTTP/1.1 200 OK\r\ncontent-type: application/json; charset=UTF-8\r\nconnection: close"),
    )
}

/// Serves `POST cachedContents` (names `cachedContents/c1`, `c2`... in order, after `delay`);
/// other requests go to the script. Returns the count of caches made.
fn serve_caches(server: &ModelServer, delay: Duration) -> Arc<AtomicUsize> {
    let made = Arc::new(AtomicUsize::new(0));
    let counter = made.clone();
    server.respond_with(move |r: &RecordedRequest| {
        (r.path == CACHE_PATH).then(|| {
            let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
            json_reply(json!({"name": format!("cachedContents/c{n}"), "model": r.body["model"],
                "createTime": "2026-01-01T00:00:00Z", "expireTime": "2026-01-01T00:10:00Z",
                "usageMetadata": {"totalTokenCount": 3000}}))
            .after(delay)
        })
    });
    made
}

fn caching_provider(server: &ModelServer, mode: CacheMode, min_chars: usize) -> GeminiProvider {
    GeminiProvider::new(GeminiConfig {
        cache: CacheSettings { mode, min_chars, ..Default::default() },
        ..provider(server, true).config().clone()
    })
    .unwrap()
}

fn answer_text(text: &'static str, cached: u64) -> Reply {
    sse(chunks(&[Out::Text { text, signature: None }], "STOP", usage(3_000, cached, 2, 0)))
}

/// A request whose system prompt is `system_chars` long, with a tool, asking `question`.
fn long_prompt_request(system_chars: usize, question: &str) -> ChatRequest {
    let tool = ToolSpec {
        name: "echo".into(),
        description: "Echo the text back.".into(),
        parameters: json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
    };
    ChatRequest {
        messages: vec![Message::system("You are an RLM. ".repeat(system_chars / 16)), Message::user(question)],
        tools: vec![tool],
        options: ChatOptions { tool_choice: Some(recursive_core::ToolChoice::Auto), ..Default::default() },
    }
}

fn paths(server: &ModelServer) -> Vec<String> {
    server.requests().into_iter().map(|r| r.path).collect()
}

const GENERATE: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";

/// The body names `cache` and carries none of the cached parts.
fn names_cache(r: &RecordedRequest, cache: &str) {
    assert_eq!(r.body["cachedContent"], cache, "{}", r.body);
    for cached in ["systemInstruction", "tools", "toolConfig"] {
        assert!(r.body.get(cached).is_none(), "{cached} sent with the cache: {}", r.body);
    }
    assert!(r.body["contents"].as_array().is_some_and(|c| !c.is_empty()));
}

#[tokio::test]
async fn a_long_prefix_seen_twice_is_cached_once_and_named_by_later_requests() {
    let server = ModelServer::start_with([answer_text("a", 0), answer_text("b", 2_900), answer_text("c", 2_900)]).await;
    let made = serve_caches(&server, Duration::ZERO);
    let provider = caching_provider(&server, CacheMode::Auto, 1_000);
    let priced = PricedProvider::new(Arc::new(provider), PriceTable::builtin());
    for q in ["one", "two", "three"] {
        priced.complete(long_prompt_request(4_000, q)).await.unwrap();
    }
    assert_eq!(made.load(Ordering::SeqCst), 1);
    assert_eq!(paths(&server), [GENERATE, CACHE_PATH, GENERATE, GENERATE]);
    let first = server.request(0);
    assert!(first.body.get("cachedContent").is_none(), "a prefix seen once goes uncached");
    let create = server.request(1);
    assert_eq!(create.header("x-goog-api-key"), Some("AIza-test"));
    assert_eq!(create.body["model"], "models/gemini-2.5-flash");
    assert_eq!(create.body["ttl"], "600s");
    assert_eq!(create.body["systemInstruction"], first.body["systemInstruction"]);
    assert_eq!(create.body["tools"], first.body["tools"]);
    assert_eq!(create.body["toolConfig"], json!({"functionCallingConfig": {"mode": "AUTO"}}));
    assert!(create.body.get("contents").is_none(), "the conversation is not cached: {}", create.body);
    for (i, q) in [(2, "two"), (3, "three")] {
        let r = server.request(i);
        names_cache(&r, "cachedContents/c1");
        assert_eq!(r.body["contents"], json!([{"role": "user", "parts": [{"text": q}]}]));
    }
}

#[tokio::test]
async fn cached_tokens_of_an_explicit_cache_are_priced_as_cache_reads() {
    let server = ModelServer::start_with([answer_text("a", 2_900)]).await;
    serve_caches(&server, Duration::ZERO);
    let priced =
        PricedProvider::new(Arc::new(caching_provider(&server, CacheMode::Always, 1_000)), PriceTable::builtin());
    let response = priced.complete(long_prompt_request(4_000, "q")).await.unwrap();
    assert_eq!((response.usage.input_tokens, response.usage.cache_read_tokens), (100, 2_900));
    let expected = (100.0 * 0.30 + 2_900.0 * 0.03 + 2.0 * 2.50) / 1e6;
    assert!((response.cost_usd.unwrap() - expected).abs() < 1e-12, "storage is not billed per call");
}

fn gone() -> Reply {
    let body = json!({"error": {"code": 403, "message": "CachedContent not found (or permission denied)",
        "status": "PERMISSION_DENIED"}});
    Reply::error(403, body.to_string())
}

#[tokio::test]
async fn an_expired_cache_is_made_anew_once() {
    let server = ModelServer::start_with([gone(), answer_text("fine", 2_900)]).await;
    let made = serve_caches(&server, Duration::ZERO);
    let provider = caching_provider(&server, CacheMode::Always, 1_000);
    let response = provider.complete(long_prompt_request(4_000, "q")).await.unwrap();
    assert_eq!(response.message.content, "fine");
    assert_eq!(made.load(Ordering::SeqCst), 2);
    assert_eq!(paths(&server), [CACHE_PATH, GENERATE, CACHE_PATH, GENERATE]);
    names_cache(&server.request(1), "cachedContents/c1");
    names_cache(&server.request(3), "cachedContents/c2");
}

#[tokio::test]
async fn a_cache_gone_twice_falls_back_to_an_uncached_request_and_is_not_made_again() {
    let server =
        ModelServer::start_with([gone(), gone(), answer_text("uncached", 0), answer_text("still uncached", 0)]).await;
    let made = serve_caches(&server, Duration::ZERO);
    let provider = caching_provider(&server, CacheMode::Always, 1_000);
    let response = provider.complete(long_prompt_request(4_000, "q")).await.unwrap();
    assert_eq!(response.message.content, "uncached");
    assert_eq!(paths(&server), [CACHE_PATH, GENERATE, CACHE_PATH, GENERATE, GENERATE]);
    let last = server.request(4);
    assert!(last.body.get("cachedContent").is_none());
    assert!(last.body["systemInstruction"]["parts"][0]["text"].as_str().unwrap().starts_with("You are an RLM."));
    assert_eq!(last.body["tools"][0]["functionDeclarations"][0]["name"], "echo");
    provider.complete(long_prompt_request(4_000, "again")).await.unwrap();
    assert_eq!(made.load(Ordering::SeqCst), 2, "a prefix whose cache failed twice is sent uncached");
    assert_eq!(server.request(5).path, GENERATE);
}

#[tokio::test]
async fn a_short_prefix_is_never_cached() {
    let server = ModelServer::start_with([answer_text("a", 0), answer_text("b", 0), answer_text("c", 0)]).await;
    let made = serve_caches(&server, Duration::ZERO);
    let provider = caching_provider(&server, CacheMode::Always, recursive_llm::gemini::DEFAULT_CACHE_MIN_CHARS);
    for q in ["one", "two", "three"] {
        provider.complete(long_prompt_request(2_000, q)).await.unwrap();
    }
    assert_eq!(made.load(Ordering::SeqCst), 0);
    assert_eq!(paths(&server), [GENERATE, GENERATE, GENERATE]);
    assert!(server.requests().iter().all(|r| r.body.get("systemInstruction").is_some()));
}

#[tokio::test]
async fn a_cache_the_api_refuses_is_not_asked_for_again() {
    let server = ModelServer::start_with([answer_text("a", 0), answer_text("b", 0)]).await;
    let refusals = Arc::new(AtomicUsize::new(0));
    let counter = refusals.clone();
    server.respond_with(move |r: &RecordedRequest| {
        (r.path == CACHE_PATH).then(|| {
            counter.fetch_add(1, Ordering::SeqCst);
            let body = json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": "Cached content is too small. total_token_count=900, min_total_token_count=1024"}});
            Reply::error(400, body.to_string())
        })
    });
    let provider = caching_provider(&server, CacheMode::Always, 1_000);
    for q in ["one", "two"] {
        provider.complete(long_prompt_request(4_000, q)).await.unwrap();
    }
    assert_eq!(refusals.load(Ordering::SeqCst), 1);
    assert_eq!(paths(&server), [CACHE_PATH, GENERATE, GENERATE]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_with_one_prefix_make_one_cache() {
    let server = ModelServer::start().await;
    server.fallback(answer_text("ok", 2_900));
    let made = serve_caches(&server, Duration::from_millis(300));
    let provider = Arc::new(caching_provider(&server, CacheMode::Always, 1_000));
    let calls = (0..4).map(|i| {
        let provider = provider.clone();
        async move { provider.complete(long_prompt_request(4_000, &format!("q{i}"))).await }
    });
    for result in futures::future::join_all(calls).await {
        assert_eq!(result.unwrap().message.content, "ok");
    }
    assert_eq!(made.load(Ordering::SeqCst), 1);
    let requests = server.requests();
    assert_eq!(requests.iter().filter(|r| r.path == CACHE_PATH).count(), 1);
    let generates: Vec<_> = requests.iter().filter(|r| r.path == GENERATE).collect();
    assert_eq!(generates.len(), 4);
    for r in generates {
        names_cache(r, "cachedContents/c1");
    }
}

#[tokio::test]
async fn a_cache_not_made_in_time_leaves_the_call_uncached() {
    let server = ModelServer::start_with([answer_text("uncached", 0)]).await;
    server.respond_with(|r: &RecordedRequest| (r.path == CACHE_PATH).then(Reply::hang));
    let provider = GeminiProvider::new(GeminiConfig {
        timeout: Duration::from_secs(1),
        ..caching_provider(&server, CacheMode::Always, 1_000).config().clone()
    })
    .unwrap();
    let response = provider.complete(long_prompt_request(4_000, "q")).await.unwrap();
    assert_eq!(response.message.content, "uncached");
    assert_eq!(paths(&server), [CACHE_PATH, GENERATE]);
    assert!(server.request(1).body.get("systemInstruction").is_some());
}
