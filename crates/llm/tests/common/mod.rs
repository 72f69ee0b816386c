//! Helpers shared by the integration tests: stream collection and the SDKs' partial-JSON
//! completion. (The scripted HTTP server is `recursive_testkit::ModelServer`.)

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use recursive_core::{ChatResponse, ChatStream, ProviderError, StreamEvent};
use serde_json::Value;

/// Everything a stream produced.
#[derive(Debug, Default)]
pub struct Collected {
    /// Text deltas in order.
    pub deltas: Vec<String>,
    /// Reasoning deltas in order.
    pub reasoning: Vec<String>,
    /// Retry events `(attempt, delay_ms, reason)`.
    pub retries: Vec<(u32, u64, String)>,
    /// The final response, if the stream completed.
    pub response: Option<ChatResponse>,
    /// The error that ended the stream, if any.
    pub error: Option<ProviderError>,
}

/// Drains a stream.
pub async fn collect(mut stream: ChatStream) -> Collected {
    let mut out = Collected::default();
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamEvent::TextDelta(d)) => out.deltas.push(d),
            Ok(StreamEvent::ReasoningDelta(d)) => out.reasoning.push(d),
            Ok(StreamEvent::Retry { attempt, delay_ms, reason }) => out.retries.push((attempt, delay_ms, reason)),
            Ok(StreamEvent::Completed(r)) => out.response = Some(r),
            Ok(other) => panic!("unexpected event {other:?}"),
            Err(e) => {
                out.error = Some(e);
                break;
            }
        }
    }
    out
}

/// Completes JSON cut off mid-way the way the official SDKs' partial parsers do: the text is
/// cut back to the last complete value (an unfinished string, number or key is dropped) and
/// the open arrays and objects are closed.
pub fn complete_partial_json(raw: &str) -> Option<Value> {
    #[derive(Clone, Copy, PartialEq)]
    enum Ctx {
        Object { expect_key: bool },
        Array,
    }
    let mut stack: Vec<Ctx> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut string_is_key = false;
    let mut in_literal = false;
    let mut safe: Option<(usize, Vec<Ctx>)> = None;
    for (i, c) in raw.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
                if !string_is_key {
                    safe = Some((i + 1, stack.clone()));
                }
            }
            continue;
        }
        if in_literal && !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+')) {
            in_literal = false;
            safe = Some((i, stack.clone()));
        }
        match c {
            '{' => {
                stack.push(Ctx::Object { expect_key: true });
                safe = Some((i + 1, stack.clone()));
            }
            '[' => {
                stack.push(Ctx::Array);
                safe = Some((i + 1, stack.clone()));
            }
            '}' | ']' => {
                stack.pop();
                safe = Some((i + 1, stack.clone()));
            }
            '"' => {
                in_string = true;
                string_is_key = matches!(stack.last(), Some(Ctx::Object { expect_key: true }));
            }
            ':' => {
                if let Some(Ctx::Object { expect_key }) = stack.last_mut() {
                    *expect_key = false;
                }
            }
            ',' => {
                if let Some(Ctx::Object { expect_key }) = stack.last_mut() {
                    *expect_key = true;
                }
            }
            c if c.is_whitespace() => {}
            _ => in_literal = true,
        }
    }
    let (cut, open) = safe?;
    let mut text = raw[..cut].to_string();
    for ctx in open.iter().rev() {
        text.push(match ctx {
            Ctx::Object { .. } => '}',
            Ctx::Array => ']',
        });
    }
    serde_json::from_str(&text).ok()
}

/// The `echo` tool as the SDK clients declare it (with `additionalProperties: false` when
/// `closed`).
pub fn echo_tool(closed: bool) -> recursive_core::ToolSpec {
    let mut parameters = serde_json::json!({"type": "object",
        "properties": {"text": {"type": "string", "description": "What to echo."}}, "required": ["text"]});
    if closed {
        parameters["additionalProperties"] = Value::Bool(false);
    }
    recursive_core::ToolSpec { name: "echo".into(), description: "Echo the text back.".into(), parameters }
}

/// The two turns of an SDK oracle's echo loop through a Recursive provider: the model calls
/// `echo`, gets its result back and answers `one`.
pub async fn echo_loop(
    provider: &dyn recursive_core::ChatProvider,
    tool: recursive_core::ToolSpec,
    options: recursive_core::ChatOptions,
) {
    use recursive_core::{ChatRequest, Message};
    let mut request = ChatRequest {
        messages: vec![Message::system("You echo."), Message::user("Echo one.")],
        tools: vec![tool],
        options,
    };
    let first = collect(provider.stream(request.clone()).await.unwrap()).await.response.unwrap();
    let call = first.message.tool_calls[0].clone();
    request.messages.push(first.message);
    request.messages.push(Message::tool_result(call.id, call.arguments["text"].as_str().unwrap(), false));
    let second = collect(provider.stream(request).await.unwrap()).await.response.unwrap();
    assert_eq!(second.message.content, "one");
}

/// An agent over `provider` offering the testkit's `echo` tool, asking for medium reasoning.
pub fn echo_agent(provider: std::sync::Arc<dyn recursive_core::ChatProvider>) -> recursive_core::Agent {
    let mut tools = recursive_core::ToolRegistry::new();
    tools.register(std::sync::Arc::new(recursive_testkit::EchoTool::new()));
    let config = recursive_core::AgentConfig {
        system_prompt: Some("You echo.".into()),
        options: recursive_core::ChatOptions { reasoning_effort: Some("medium".into()), ..Default::default() },
        ..Default::default()
    };
    recursive_core::Agent::new(provider).with_tools(tools).with_config(config)
}

/// Runs the official SDK's client script `script` (under `tests/clients/`) with `python` and
/// `args`, without `AWS_PROFILE` (so a developer's profile never signs a test's request), and
/// returns what it printed as JSON; the script failing fails the test with its stderr.
pub async fn sdk_client(python: String, script: &str, args: Vec<String>) -> Value {
    let path = format!("{}/tests/clients/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python).arg(path).args(args).env_remove("AWS_PROFILE").output()
    })
    .await
    .unwrap()
    .unwrap();
    assert!(out.status.success(), "the SDK client failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}
