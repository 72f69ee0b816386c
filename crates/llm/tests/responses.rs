#![allow(clippy::unwrap_used, clippy::expect_used)]
//! OpenAI's Responses API through the real client against a local server serving scripted
//! streams in the API's wire format (`event: response.…` frames, as the API and the official
//! SDK's types describe them): a three-turn tool loop whose 2nd and 3rd requests carry back the
//! reasoning items (with their encrypted content) and the function_call / function_call_output
//! pairs; refusals, incomplete responses and error events; usage with cached and reasoning
//! tokens priced; the non-streaming path.

mod common;

use std::sync::Arc;

use common::collect;
use recursive_core::{
    Agent, AgentConfig, ChatOptions, ChatProvider, ChatRequest, FinishReason, Message, ProviderError, StopReason,
    ToolRegistry,
};
use recursive_llm::{PriceTable, PricedProvider, ResponsesConfig, ResponsesProvider};
use recursive_testkit::{EchoTool, ModelServer, Reply, Script};
use serde_json::{Value, json};

/// One output item of a scripted turn.
#[derive(Clone)]
enum Out {
    Reasoning { id: &'static str, summary: &'static str, encrypted: &'static str },
    Call { call_id: &'static str, name: &'static str, arguments: Value },
    Text(&'static str),
    Refusal(&'static str),
}

/// A streamed response in the wire format: created, each item added → deltas → done, then
/// the terminal event (`response.completed`, or `terminal` with its extra response fields).
fn stream(items: &[Out], terminal: &str, extra: Value) -> String {
    let mut seq = 0;
    let mut frames = String::new();
    let mut emit = |kind: &str, mut data: Value| {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(seq);
        seq += 1;
        frames.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
    };
    let base =
        json!({"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5-2025-08-07", "output": []});
    let mut started = base.clone();
    started["status"] = json!("in_progress");
    emit("response.created", json!({"response": started.clone()}));
    emit("response.in_progress", json!({"response": started}));
    let mut output = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let done = item_events(item, i, &mut emit);
        output.push(done);
    }
    let mut response = base.clone();
    response["output"] = json!(output);
    response["status"] = json!(if terminal == "response.completed" { "completed" } else { "incomplete" });
    for (k, v) in extra.as_object().cloned().unwrap_or_default() {
        response[k] = v;
    }
    emit(terminal, json!({"response": response}));
    frames
}

/// The events of one output item; returns the item as `output_item.done` carries it.
fn item_events(item: &Out, i: usize, emit: &mut impl FnMut(&str, Value)) -> Value {
    match item {
        Out::Reasoning { id, summary, encrypted } => {
            emit(
                "response.output_item.added",
                json!({"output_index": i,
                "item": {"type": "reasoning", "id": id, "summary": [], "encrypted_content": null}}),
            );
            emit(
                "response.reasoning_summary_part.added",
                json!({"output_index": i, "item_id": id, "summary_index": 0,
                "part": {"type": "summary_text", "text": ""}}),
            );
            for piece in summary.split_inclusive(' ') {
                emit(
                    "response.reasoning_summary_text.delta",
                    json!({"output_index": i, "item_id": id,
                    "summary_index": 0, "delta": piece}),
                );
            }
            emit(
                "response.reasoning_summary_text.done",
                json!({"output_index": i, "item_id": id, "summary_index": 0,
                "text": summary}),
            );
            let done = json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": summary}],
                "encrypted_content": encrypted});
            emit("response.output_item.done", json!({"output_index": i, "item": done}));
            done
        }
        Out::Call { call_id, name, arguments } => {
            let fc = format!("fc_{call_id}");
            emit(
                "response.output_item.added",
                json!({"output_index": i, "item": {"type": "function_call", "id": fc,
                "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}}),
            );
            let text = arguments.to_string();
            let (a, b) = text.split_at(text.len() / 2);
            for piece in [a, b] {
                emit(
                    "response.function_call_arguments.delta",
                    json!({"output_index": i, "item_id": fc, "delta": piece}),
                );
            }
            emit("response.function_call_arguments.done", json!({"output_index": i, "item_id": fc, "arguments": text}));
            let done = json!({"type": "function_call", "id": fc, "call_id": call_id, "name": name, "arguments": text,
                "status": "completed"});
            emit("response.output_item.done", json!({"output_index": i, "item": done}));
            done
        }
        Out::Text(text) | Out::Refusal(text) => {
            let refusal = matches!(item, Out::Refusal(_));
            let id = format!("msg_{i}");
            emit(
                "response.output_item.added",
                json!({"output_index": i, "item": {"type": "message", "id": id,
                "role": "assistant", "status": "in_progress", "content": []}}),
            );
            let part = if refusal {
                json!({"type": "refusal", "refusal": text})
            } else {
                json!({"type": "output_text", "text": text, "annotations": []})
            };
            let empty = if refusal {
                json!({"type": "refusal", "refusal": ""})
            } else {
                json!({"type": "output_text", "text": "", "annotations": []})
            };
            emit(
                "response.content_part.added",
                json!({"output_index": i, "item_id": id, "content_index": 0, "part": empty}),
            );
            for piece in text.split_inclusive(' ') {
                let kind = if refusal { "response.refusal.delta" } else { "response.output_text.delta" };
                emit(
                    kind,
                    json!({"output_index": i, "item_id": id, "content_index": 0, "delta": piece, "logprobs": []}),
                );
            }
            emit(
                "response.content_part.done",
                json!({"output_index": i, "item_id": id, "content_index": 0, "part": part}),
            );
            let done =
                json!({"type": "message", "id": id, "role": "assistant", "status": "completed", "content": [part]});
            emit("response.output_item.done", json!({"output_index": i, "item": done}));
            done
        }
    }
}

fn usage(input: u64, cached: u64, output: u64, reasoning: u64) -> Value {
    json!({"usage": {"input_tokens": input, "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input + output}})
}

fn sse(body: String) -> Reply {
    Reply::raw(Script::sse(body.as_bytes(), 97))
}

fn provider(server: &ModelServer, stream: bool) -> ResponsesProvider {
    ResponsesProvider::new(ResponsesConfig {
        base_url: server.openai_url(),
        api_key: Some("sk-test".into()),
        model: "gpt-5".into(),
        stream,
        ..Default::default()
    })
    .unwrap()
}

fn ask(text: &str) -> ChatRequest {
    ChatRequest { messages: vec![Message::user(text)], ..Default::default() }
}

#[tokio::test]
async fn a_three_turn_tool_loop_sends_back_reasoning_items_and_call_pairs() {
    let turn1 = [
        Out::Reasoning { id: "rs_1", summary: "Echo one first.", encrypted: "gAAAA-enc-1" },
        Out::Call { call_id: "call_a", name: "echo", arguments: json!({"text": "one"}) },
    ];
    let turn2 = [
        Out::Reasoning { id: "rs_2", summary: "Now echo two.", encrypted: "gAAAA-enc-2" },
        Out::Call { call_id: "call_b", name: "echo", arguments: json!({"text": "two"}) },
    ];
    let turn3 = [
        Out::Reasoning { id: "rs_3", summary: "Both done.", encrypted: "gAAAA-enc-3" },
        Out::Text("Echoed one and two."),
    ];
    let server = ModelServer::start_with([
        sse(stream(&turn1, "response.completed", usage(100, 0, 40, 30))),
        sse(stream(&turn2, "response.completed", usage(160, 100, 40, 30))),
        sse(stream(&turn3, "response.completed", usage(220, 160, 20, 10))),
    ])
    .await;
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(EchoTool::new()));
    let config = AgentConfig {
        system_prompt: Some("You echo.".into()),
        options: ChatOptions {
            reasoning_effort: Some("medium".into()),
            prompt_cache_key: Some("tree-1".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let agent = Agent::new(Arc::new(provider(&server, true))).with_tools(tools).with_config(config);
    let result = agent.run("Echo one, then two.").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(result.output, "Echoed one and two.");
    assert_eq!(server.request_count(), 3);

    let first = server.request(0);
    assert_eq!(first.path, "/v1/responses");
    assert_eq!(first.header("authorization"), Some("Bearer sk-test"));
    for r in server.requests() {
        let b = &r.body;
        assert_eq!(b["store"], false, "request #{}", r.index);
        assert_eq!(b["include"], json!(["reasoning.encrypted_content"]));
        assert_eq!(b["reasoning"], json!({"effort": "medium", "summary": "auto"}));
        assert_eq!(b["prompt_cache_key"], "tree-1");
        assert_eq!(b["stream"], true);
        assert_eq!(b["parallel_tool_calls"], true);
        assert_eq!(b["tools"][0]["type"], "function");
        assert_eq!(b["tools"][0]["name"], "echo");
        assert!(b["instructions"].as_str().unwrap().contains("You echo."), "{b}");
    }
    let user = json!({"type": "message", "role": "user", "content": "Echo one, then two."});
    let reasoning = |id: &str, summary: &str, enc: &str| {
        json!({"type": "reasoning", "id": id, "summary": [{"type": "summary_text", "text": summary}],
            "encrypted_content": enc})
    };
    let call = |id: &str, text: &str| json!({"type": "function_call", "call_id": id, "name": "echo", "arguments": json!({"text": text}).to_string()});
    let output = |id: &str, text: &str| json!({"type": "function_call_output", "call_id": id, "output": text});
    let turn1_items = vec![
        user.clone(),
        reasoning("rs_1", "Echo one first.", "gAAAA-enc-1"),
        call("call_a", "one"),
        output("call_a", "one"),
    ];
    assert_eq!(server.request(1).body["input"], json!(turn1_items));
    let mut turn2_items = turn1_items.clone();
    turn2_items.extend([
        reasoning("rs_2", "Now echo two.", "gAAAA-enc-2"),
        call("call_b", "two"),
        output("call_b", "two"),
    ]);
    assert_eq!(server.request(2).body["input"], json!(turn2_items));
}

#[tokio::test]
async fn reasoning_summaries_stream_as_reasoning_and_text_as_text() {
    let items =
        [Out::Reasoning { id: "rs_1", summary: "Think it over.", encrypted: "enc" }, Out::Text("The answer is 42.")];
    let server = ModelServer::start_with([sse(stream(&items, "response.completed", usage(10, 0, 8, 4)))]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert_eq!(got.reasoning.concat(), "Think it over.");
    assert_eq!(got.deltas.concat(), "The answer is 42.");
    let response = got.response.unwrap();
    assert_eq!(response.stop_reason, StopReason::EndTurn);
    assert_eq!(response.model, "gpt-5-2025-08-07");
    assert_eq!(response.message.reasoning[0].id, "rs_1");
}

#[tokio::test]
async fn a_refusal_is_a_provider_stop_with_its_text() {
    let items = [Out::Refusal("I can't help with that.")];
    let server = ModelServer::start_with([sse(stream(&items, "response.completed", usage(10, 0, 6, 0)))]).await;
    let got = collect(provider(&server, true).stream(ask("something bad")).await.unwrap()).await;
    assert!(got.deltas.is_empty(), "a refusal is not streamed as answer text: {:?}", got.deltas);
    let response = got.response.unwrap();
    assert_eq!(response.stop_reason, StopReason::Refusal);
    assert_eq!(response.message.content, "I can't help with that.");
}

#[tokio::test]
async fn an_incomplete_response_stops_with_its_reason() {
    for (reason, expected) in
        [("max_output_tokens", StopReason::MaxTokens), ("content_filter", StopReason::ContentFilter)]
    {
        let items = [Out::Reasoning { id: "rs_1", summary: "Long thought.", encrypted: "enc" }, Out::Text("Partial")];
        let mut extra = usage(10, 0, 64, 60);
        extra["incomplete_details"] = json!({"reason": reason});
        let server = ModelServer::start_with([sse(stream(&items, "response.incomplete", extra))]).await;
        let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
        let response = got.response.unwrap_or_else(|| panic!("{reason}: {:?}", got.error));
        assert_eq!(response.stop_reason, expected, "{reason}");
        assert_eq!(response.message.content, "Partial");
        assert_eq!(response.usage.output_tokens, 64);
    }
}

#[tokio::test]
async fn an_incomplete_response_ends_the_agent_run_with_its_reason() {
    let items = [Out::Text("Partial")];
    let mut extra = usage(10, 0, 64, 0);
    extra["incomplete_details"] = json!({"reason": "max_output_tokens"});
    let server = ModelServer::start_with([sse(stream(&items, "response.incomplete", extra))]).await;
    let result = Agent::new(Arc::new(provider(&server, true))).run("q").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::ProviderStop(StopReason::MaxTokens));
}

#[tokio::test]
async fn error_events_and_failed_responses_are_provider_errors() {
    let error = format!(
        "event: response.created\ndata: {}\n\nevent: error\ndata: {}\n\n",
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": "r", "model": "gpt-5", "output": []}}),
        json!({"type": "error", "sequence_number": 1, "code": "rate_limit_exceeded", "message": "Slow down.", "param": null})
    );
    let failed = format!(
        "event: response.failed\ndata: {}\n\n",
        json!({"type": "response.failed", "sequence_number": 0, "response": {"id": "r", "model": "gpt-5",
            "status": "failed", "output": [], "error": {"code": "invalid_prompt", "message": "Prompt flagged."}}})
    );
    let server = ModelServer::start_with([sse(error), sse(failed)]).await;
    let p = provider(&server, true);
    let got = collect(p.stream(ask("q")).await.unwrap()).await;
    let err = got.error.expect("an error event ends the stream with an error");
    assert!(
        matches!(&err, ProviderError::Http { status: 429, message, .. } if message.contains("Slow down.")),
        "{err:?}"
    );
    assert!(err.is_retryable());
    let got = collect(p.stream(ask("q")).await.unwrap()).await;
    let err = got.error.expect("a failed response is an error");
    assert!(
        matches!(&err, ProviderError::Http { status: 400, message, .. } if message.contains("Prompt flagged.")),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_stream_cut_before_its_terminal_event_is_truncated() {
    let mut body = stream(&[Out::Text("Hello there")], "response.completed", usage(1, 0, 1, 0));
    let cut = body.rfind("event: response.completed").unwrap();
    body.truncate(cut);
    let server = ModelServer::start_with([sse(body)]).await;
    let got = collect(provider(&server, true).stream(ask("q")).await.unwrap()).await;
    assert!(matches!(got.error, Some(ProviderError::Truncated { .. })), "{:?}", got.error);
}

#[tokio::test]
async fn usage_prices_cached_input_as_cache_reads_and_reasoning_as_output() {
    let items = [Out::Reasoning { id: "rs_1", summary: "Hm.", encrypted: "enc" }, Out::Text("ok")];
    let server =
        ModelServer::start_with([sse(stream(&items, "response.completed", usage(10_000, 8_000, 2_000, 1_500)))]).await;
    let priced = PricedProvider::new(Arc::new(provider(&server, true)), PriceTable::builtin());
    let response = priced.complete(ask("q")).await.unwrap();
    assert_eq!(response.usage.input_tokens, 2_000);
    assert_eq!(response.usage.cache_read_tokens, 8_000);
    assert_eq!(response.usage.output_tokens, 2_000, "reasoning tokens are output tokens");
    // gpt-5 list prices per million tokens: input $1.25, cached input $0.125, output $10.
    let expected = (2_000.0 * 1.25 + 8_000.0 * 0.125 + 2_000.0 * 10.0) / 1e6;
    let cost = response.cost_usd.unwrap();
    assert!((cost - expected).abs() < 1e-12, "{cost} vs {expected}");
}

#[tokio::test]
async fn the_non_streaming_path_parses_a_response_object() {
    let body = json!({"id": "resp_1", "object": "response", "model": "gpt-5", "status": "completed", "output": [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Plan."}], "encrypted_content": "enc"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "echo", "arguments": "{\"text\":\"x\"}",
         "status": "completed"}],
        "usage": {"input_tokens": 7, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 2}, "total_tokens": 12}});
    let reply = Reply::raw(
        Script::sse(body.to_string().as_bytes(), 4096)
            .with_head("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close"),
    );
    let server = ModelServer::start_with([reply]).await;
    let response = provider(&server, false).complete(ask("q")).await.unwrap();
    assert!(server.request(0).body.get("stream").is_none(), "{}", server.request(0).body);
    assert_eq!(response.stop_reason, StopReason::ToolUse);
    assert_eq!(response.message.tool_calls[0].id, "call_1");
    assert_eq!(response.message.tool_calls[0].arguments, json!({"text": "x"}));
    assert_eq!(response.message.reasoning[0].signature, "enc");
    assert_eq!(response.usage.input_tokens, 7);
}
