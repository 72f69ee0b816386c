//! The scripted model server seen from a plain HTTP client: both protocols in both modes,
//! recorded bodies, rules, errors, delays, hangs, raw bytes and the pairing check.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use recursive_testkit::{Api, ModelServer, PairingError, Reply, Script};
use serde_json::{Value, json};

fn client() -> reqwest::Client {
    recursive_http::client_builder().no_proxy().build().unwrap()
}

async fn post(url: String, body: &Value) -> reqwest::Response {
    client().post(url).json(body).send().await.unwrap()
}

/// `(event name, data)` of each SSE event of a body.
fn events(text: &str) -> Vec<(Option<String>, String)> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = String::new();
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_string());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            (name, data)
        })
        .collect()
}

fn openai_request(stream: bool, messages: Value) -> Value {
    let mut body = json!({"model": "gpt-test", "messages": messages, "stream": stream});
    if stream {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

#[tokio::test]
async fn openai_streaming_answers_in_deltas_with_a_usage_chunk_and_the_body_is_recorded() {
    let server = ModelServer::start_with([Reply::text("Paris is sunny today.").with_usage(42, 7)]).await;
    let body = openai_request(true, json!([{"role": "user", "content": "Weather?"}]));
    let response = client()
        .post(format!("{}/chat/completions", server.openai_url()))
        .header("authorization", "Bearer sk-test")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let events = events(&response.text().await.unwrap());
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    let deltas: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert!(deltas.len() > 2, "{deltas:?}");
    assert_eq!(deltas.concat(), "Paris is sunny today.");
    assert!(chunks.iter().all(|c| c["model"] == "gpt-test"));
    let finish: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["finish_reason"].as_str()).collect();
    assert_eq!(finish, vec!["stop"]);
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"], json!({"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}));

    let recorded = server.request(0);
    assert_eq!((recorded.method.as_str(), recorded.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(recorded.body, body);
    assert_eq!(recorded.header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(recorded.api(), Some(Api::OpenAi));
}

#[tokio::test]
async fn openai_streaming_sends_no_usage_chunk_unless_asked() {
    let server = ModelServer::start_with([Reply::text("hi")]).await;
    let body = json!({"model": "m", "stream": true, "messages": [{"role": "user", "content": "x"}]});
    let text = post(format!("{}/chat/completions", server.openai_url()), &body).await.text().await.unwrap();
    assert!(text.contains("\"content\":\"hi\""), "{text}");
    assert!(!text.contains("\"usage\""), "{text}");
}

#[tokio::test]
async fn openai_streaming_tool_calls_arrive_in_pieces_with_numbered_ids() {
    let server = ModelServer::start_with([Reply::tool_calls([
        ("get_weather", json!({"city": "Paris"})),
        ("get_weather", json!({"city": "Rome"})),
    ])])
    .await;
    let body = openai_request(true, json!([{"role": "user", "content": "Weather?"}]));
    let text = post(format!("{}/chat/completions", server.openai_url()), &body).await.text().await.unwrap();
    let mut ids = vec![String::new(); 2];
    let mut args = vec![String::new(); 2];
    let mut pieces = 0;
    let mut finish = Vec::new();
    for (_, data) in events(&text) {
        let Ok(chunk) = serde_json::from_str::<Value>(&data) else { continue };
        if let Some(f) = chunk["choices"][0]["finish_reason"].as_str() {
            finish.push(f.to_string());
        }
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let i = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                ids[i] = id.to_string();
            }
            let piece = call["function"]["arguments"].as_str().unwrap_or("");
            if !piece.is_empty() {
                pieces += 1;
            }
            args[i].push_str(piece);
        }
    }
    assert_eq!(ids, vec!["call_1", "call_2"]);
    let args: Vec<Value> = args.iter().map(|a| serde_json::from_str(a).unwrap()).collect();
    assert_eq!(args, vec![json!({"city": "Paris"}), json!({"city": "Rome"})]);
    assert_eq!(pieces, 4, "each call's arguments arrive in two pieces");
    assert_eq!(finish, vec!["tool_calls"]);
}

#[tokio::test]
async fn openai_without_streaming_answers_one_completion() {
    let server = ModelServer::start_with([Reply::tool_call("echo", json!({"text": "hi"})).with_text("Calling.")]).await;
    let response = post(
        format!("{}/chat/completions", server.openai_url()),
        &openai_request(false, json!([{"role": "user", "content": "go"}])),
    )
    .await;
    assert_eq!(response.headers()["content-type"], "application/json");
    let v: Value = response.json().await.unwrap();
    assert_eq!(v["object"], "chat.completion");
    let message = &v["choices"][0]["message"];
    assert_eq!(message["content"], "Calling.");
    assert_eq!(message["tool_calls"][0]["id"], "call_1");
    assert_eq!(message["tool_calls"][0]["function"]["name"], "echo");
    let args: Value =
        serde_json::from_str(message["tool_calls"][0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"text": "hi"}));
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(v["usage"]["prompt_tokens"], 10);
}

#[tokio::test]
async fn anthropic_streaming_sends_the_messages_event_sequence() {
    let server = ModelServer::start_with([Reply::text("Checking the weather.")
        .with_call("get_weather", json!({"city": "Paris"}))
        .with_usage(30, 12)])
    .await;
    let body = json!({"model": "claude-test", "max_tokens": 100, "stream": true,
        "messages": [{"role": "user", "content": "Weather?"}]});
    let text = post(format!("{}/v1/messages", server.url()), &body).await.text().await.unwrap();
    let events = events(&text);
    for (name, data) in &events {
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(name.as_deref(), v["type"].as_str(), "the event name matches its type");
    }
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();
    let text_deltas = names.iter().filter(|n| **n == "content_block_delta").count() - 2;
    let mut expected = vec!["message_start", "content_block_start"];
    expected.extend(std::iter::repeat_n("content_block_delta", text_deltas));
    expected.extend([
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]);
    assert_eq!(names, expected);
    assert!(text_deltas > 1);

    let data: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(data[0]["message"]["model"], "claude-test");
    assert_eq!(data[0]["message"]["usage"]["input_tokens"], 30);
    let streamed: String = data.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert_eq!(streamed, "Checking the weather.");
    let tool_start = data.iter().find(|e| e["content_block"]["type"] == "tool_use").unwrap();
    assert_eq!(tool_start["content_block"]["id"], "toolu_1");
    assert_eq!(tool_start["content_block"]["name"], "get_weather");
    assert_eq!(tool_start["index"], 1);
    let partial: String = data
        .iter()
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap())
        .collect();
    assert_eq!(serde_json::from_str::<Value>(&partial).unwrap(), json!({"city": "Paris"}));
    let end = data.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(end["delta"]["stop_reason"], "tool_use");
    assert_eq!(end["usage"]["output_tokens"], 12);
    assert_eq!(server.request(0).api(), Some(Api::Anthropic));
}

#[tokio::test]
async fn anthropic_without_streaming_answers_one_message() {
    let server = ModelServer::start_with([Reply::text("Done.").cut_at_max_tokens()]).await;
    let body = json!({"model": "claude-test", "max_tokens": 5, "messages": [{"role": "user", "content": "go"}]});
    let v: Value = post(format!("{}/v1/messages", server.url()), &body).await.json().await.unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(v["model"], "claude-test");
    assert_eq!(v["content"], json!([{"type": "text", "text": "Done."}]));
    assert_eq!(v["stop_reason"], "max_tokens");
    assert_eq!(v["usage"], json!({"input_tokens": 10, "output_tokens": 5}));
}

#[tokio::test]
async fn standing_rules_answer_matching_user_messages_before_the_script() {
    let server = ModelServer::start_with([Reply::text("from the script")]).await;
    server.when("part 2", Reply::text("rule for part 2")).when("part", Reply::text("rule for any part"));
    let ask = |text: &str| openai_request(false, json!([{"role": "user", "content": text}]));
    let url = format!("{}/chat/completions", server.openai_url());
    // Concurrent sub-calls each get their rule, however they interleave.
    let (part_2, part_1) = (ask("summarise part 2"), ask("part 1"));
    let (a, b) = tokio::join!(post(url.clone(), &part_2), post(url.clone(), &part_1));
    let text = |v: Value| v["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(text(a.json().await.unwrap()), "rule for part 2");
    assert_eq!(text(b.json().await.unwrap()), "rule for any part");
    // A request that ends with a tool result goes to the script even if an earlier user
    // message matches.
    let after_tool = openai_request(
        false,
        json!([
            {"role": "user", "content": "part 3"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "echo", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}
        ]),
    );
    assert_eq!(text(post(url, &after_tool).await.json().await.unwrap()), "from the script");
    assert_eq!(server.remaining(), 0);
    assert_eq!(server.request_count(), 3);
}

#[tokio::test]
async fn the_second_and_third_requests_are_recorded_in_order() {
    let server = ModelServer::start_with([Reply::text("one"), Reply::text("two"), Reply::text("three")]).await;
    let url = format!("{}/v1/messages", server.url());
    for n in 1..=3 {
        post(url.clone(), &json!({"model": "m", "messages": [{"role": "user", "content": format!("turn {n}")}]})).await;
    }
    let requests = server.requests();
    let asked: Vec<String> = requests.iter().map(|r| r.last_user_text().unwrap()).collect();
    assert_eq!(asked, vec!["turn 1", "turn 2", "turn 3"]);
    assert_eq!(requests.iter().map(|r| r.index).collect::<Vec<_>>(), vec![0, 1, 2]);
}

#[tokio::test]
async fn an_error_reply_carries_its_status_body_and_retry_after() {
    let server = ModelServer::start_with([
        Reply::error(429, r#"{"error":{"message":"Rate limit reached"}}"#).with_retry_after("2"),
        Reply::error(502, "Bad Gateway from proxy"),
    ])
    .await;
    let body = openai_request(false, json!([{"role": "user", "content": "x"}]));
    let url = format!("{}/chat/completions", server.openai_url());
    let first = post(url.clone(), &body).await;
    assert_eq!(first.status(), 429);
    assert_eq!(first.headers()["retry-after"], "2");
    assert_eq!(first.headers()["content-type"], "application/json");
    assert_eq!(first.text().await.unwrap(), r#"{"error":{"message":"Rate limit reached"}}"#);
    let second = post(url, &body).await;
    assert_eq!(second.status(), 502);
    assert!(second.headers().get("retry-after").is_none());
    assert_eq!(second.text().await.unwrap(), "Bad Gateway from proxy");
}

#[tokio::test]
async fn a_used_up_script_answers_400_naming_the_request() {
    let server = ModelServer::start().await;
    let body = openai_request(false, json!([{"role": "user", "content": "anyone there?"}]));
    let response = post(format!("{}/chat/completions", server.openai_url()), &body).await;
    assert_eq!(response.status(), 400);
    let v: Value = response.json().await.unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("script is used up") && message.contains("request #0"), "{message}");
    assert!(message.contains("anyone there?"), "{message}");
    assert_eq!(server.unscripted(), vec![0]);
}

#[tokio::test]
async fn a_fallback_answers_every_request_after_the_script() {
    let server = ModelServer::start_with([Reply::text("first")]).await;
    server.fallback(Reply::text("again"));
    let body = openai_request(false, json!([{"role": "user", "content": "x"}]));
    let url = format!("{}/chat/completions", server.openai_url());
    let mut got = Vec::new();
    for _ in 0..3 {
        let v: Value = post(url.clone(), &body).await.json().await.unwrap();
        got.push(v["choices"][0]["message"]["content"].as_str().unwrap().to_string());
    }
    assert_eq!(got, vec!["first", "again", "again"]);
}

#[tokio::test]
async fn a_hung_reply_is_recorded_and_never_answered() {
    let server = ModelServer::serving(Reply::hang()).await;
    let client = recursive_http::client_builder().no_proxy().timeout(Duration::from_millis(200)).build().unwrap();
    let err = client.post(format!("{}/v1/messages", server.url())).json(&json!({})).send().await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test]
async fn a_delayed_reply_is_sent_after_its_delay() {
    let server = ModelServer::serving(Reply::text("late").after(Duration::from_secs(30))).await;
    let impatient = recursive_http::client_builder().no_proxy().timeout(Duration::from_millis(200)).build().unwrap();
    let body = openai_request(false, json!([{"role": "user", "content": "x"}]));
    let url = format!("{}/chat/completions", server.openai_url());
    assert!(impatient.post(&url).json(&body).send().await.unwrap_err().is_timeout());
    server.fallback(Reply::text("soon").after(Duration::from_millis(20)));
    let v: Value = post(url, &body).await.json().await.unwrap();
    assert_eq!(v["choices"][0]["message"]["content"], "soon");
}

#[tokio::test]
async fn a_raw_reply_writes_its_exact_bytes_for_any_path() {
    let server = ModelServer::serving(Reply::raw(Script::sse(b"data: one\n\ndata: two\n\n", 5))).await;
    let response = client().get(format!("{}/anything", server.url())).send().await.unwrap();
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.text().await.unwrap(), "data: one\n\ndata: two\n\n");
    let recorded = server.request(0);
    assert_eq!((recorded.method.as_str(), recorded.path.as_str()), ("GET", "/anything"));
    assert_eq!(recorded.body, Value::Null);
}

#[tokio::test]
async fn a_chunked_request_body_is_recorded_whole() {
    let server = ModelServer::serving(Reply::text("ok")).await;
    let pieces: Vec<Result<&'static str, std::io::Error>> =
        vec![Ok(r#"{"model": "m", "messages": [{"role": "user", "#), Ok(r#""content": "in pieces"}]}"#)];
    let body = reqwest::Body::wrap_stream(futures::stream::iter(pieces));
    let response = client().post(format!("{}/chat/completions", server.openai_url())).body(body).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let recorded = server.request(0);
    assert_eq!(recorded.header("transfer-encoding"), Some("chunked"));
    assert_eq!(recorded.last_user_text().as_deref(), Some("in pieces"));
}

#[tokio::test]
async fn with_pairing_checks_on_every_request_the_violations_are_kept() {
    let server = ModelServer::start().await;
    server.check_pairing(true).fallback(Reply::text("ok"));
    let calls = json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "echo", "arguments": "{}"}},
        {"id": "b", "type": "function", "function": {"name": "echo", "arguments": "{}"}}]});
    let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
    let user = json!({"role": "user", "content": "go"});
    let url = format!("{}/chat/completions", server.openai_url());
    let good = openai_request(false, json!([user, calls, result("a"), result("b")]));
    let swapped = openai_request(false, json!([user, calls, result("b"), result("a")]));
    let missing = openai_request(false, json!([user, calls, result("a")]));
    for body in [&good, &swapped, &missing] {
        assert_eq!(post(url.clone(), body).await.status(), 200);
    }
    let violations = server.pairing_violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert_eq!(violations[0].request, 1);
    assert_eq!(violations[0].error, PairingError::OutOfOrder { message: 2, expected: "a".into(), found: "b".into() });
    assert_eq!(violations[1].request, 2);
    assert!(matches!(&violations[1].error, PairingError::MissingResult { call_id, .. } if call_id == "b"));
    assert!(violations[1].to_string().starts_with("request #2: "), "{}", violations[1]);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| server.assert_paired())).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(message.contains("request #1") && message.contains("request #2"), "{message}");
}
