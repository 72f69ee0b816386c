//! Multi-turn tool exchanges through the real HTTP clients against the scripted model server
//! of `recursive-testkit`: the agent loop runs each provider for real, and the tests assert on
//! the request bodies the client sent after the first turn — each tool result paired with the
//! id of the call the server issued, in call order, in each protocol's shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{
    Agent, ChatProvider, FinishReason, RunResult, Tool, ToolContext, ToolError, ToolRegistry, ToolSpec,
};
use recursive_llm::{AnthropicConfig, AnthropicProvider, OpenAiConfig, OpenAiProvider};
use recursive_testkit::{CountingTool, EchoTool, FailingTool, ModelServer, Reply, SlowTool};
use serde_json::{Value, json};

fn openai(server: &ModelServer, stream: bool) -> Arc<dyn ChatProvider> {
    Arc::new(
        OpenAiProvider::new(OpenAiConfig {
            base_url: server.openai_url(),
            api_key: Some("sk-test".into()),
            model: "gpt-test".into(),
            stream,
            ..Default::default()
        })
        .unwrap(),
    )
}

fn anthropic(server: &ModelServer, stream: bool) -> Arc<dyn ChatProvider> {
    Arc::new(
        AnthropicProvider::new(AnthropicConfig {
            base_url: server.url().to_string(),
            api_key: Some("sk-ant-test".into()),
            model: "claude-test".into(),
            stream,
            ..Default::default()
        })
        .unwrap(),
    )
}

async fn run(provider: Arc<dyn ChatProvider>, tools: ToolRegistry, goal: &str) -> RunResult {
    Agent::new(provider).with_tools(tools).run(goal).await.unwrap()
}

fn echo_only() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(EchoTool::new()));
    tools
}

#[tokio::test]
async fn openai_sends_the_tool_result_paired_with_the_call_id_in_the_second_request() {
    for stream in [true, false] {
        let server = ModelServer::start_with([
            Reply::tool_call("echo", json!({"text": "pong"})).with_text("Let me echo."),
            Reply::text("The echo said pong."),
        ])
        .await;
        server.check_pairing(true);
        let result = run(openai(&server, stream), echo_only(), "Echo pong, please.").await;
        assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls, "stream={stream}");
        assert_eq!(result.output, "The echo said pong.", "stream={stream}");

        assert_eq!(server.request_count(), 2, "stream={stream}");
        let second = server.request(1).body;
        let messages = second["messages"].as_array().unwrap();
        let n = messages.len();
        assert_eq!(messages[n - 3], json!({"role": "user", "content": "Echo pong, please."}), "stream={stream}");
        assert_eq!(
            messages[n - 2],
            json!({"role": "assistant", "content": "Let me echo.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"pong\"}"}}
            ]}),
            "stream={stream}"
        );
        assert_eq!(messages[n - 1], json!({"role": "tool", "tool_call_id": "call_1", "content": "pong"}));
        assert_eq!(second["stream"].as_bool().unwrap_or(false), stream);
        assert_eq!(server.request(0).body["tools"][0]["function"]["name"], "echo");
        server.assert_paired();
    }
}

#[tokio::test]
async fn anthropic_sends_the_tool_result_paired_with_the_call_id_in_the_second_request() {
    for stream in [true, false] {
        let server = ModelServer::start_with([
            Reply::tool_call("echo", json!({"text": "pong"})).with_text("Let me echo."),
            Reply::text("The echo said pong."),
        ])
        .await;
        server.check_pairing(true);
        let result = run(anthropic(&server, stream), echo_only(), "Echo pong, please.").await;
        assert_eq!(result.output, "The echo said pong.", "stream={stream}");

        let second = server.request(1);
        assert_eq!(second.path, "/v1/messages");
        assert_eq!(second.header("x-api-key"), Some("sk-ant-test"));
        let messages = second.body["messages"].as_array().unwrap().clone();
        assert_eq!(
            messages,
            vec![
                json!({"role": "user", "content": "Echo pong, please."}),
                json!({"role": "assistant", "content": [
                    {"type": "text", "text": "Let me echo."},
                    {"type": "tool_use", "id": "toolu_1", "name": "echo", "input": {"text": "pong"}}
                ]}),
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "pong",
                    "cache_control": {"type": "ephemeral"}}]}),
            ],
            "stream={stream}"
        );
        server.assert_paired();
    }
}

/// Answers `quick` at once, noting how many calls of `slow` had finished by then.
struct Quick {
    slow: SlowTool,
    slow_finished_before: Arc<std::sync::Mutex<Vec<usize>>>,
}

#[async_trait]
impl Tool for Quick {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "quick".into(), description: "Answers at once.".into(), parameters: json!({"type": "object"}) }
    }

    async fn call(&self, _arguments: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        self.slow_finished_before.lock().unwrap().push(self.slow.finished());
        Ok("quick".into())
    }

    /// Read-only, so it may run beside `slow`.
    fn read_only(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn parallel_results_go_back_in_call_order_even_when_they_finish_out_of_order() {
    for api in ["openai", "anthropic"] {
        let server = ModelServer::start_with([
            Reply::tool_calls([("slow", json!({})), ("quick", json!({}))]),
            Reply::text("Both done."),
        ])
        .await;
        server.check_pairing(true);
        let slow = SlowTool::new(Duration::from_millis(150));
        let quick = Quick { slow: slow.clone(), slow_finished_before: Default::default() };
        let slow_finished_before = quick.slow_finished_before.clone();
        let mut tools = ToolRegistry::new();
        tools.register(Arc::new(slow.clone()));
        tools.register(Arc::new(quick));
        let provider = if api == "openai" { openai(&server, true) } else { anthropic(&server, true) };
        let result = run(provider, tools, "Run both.").await;
        assert_eq!(result.output, "Both done.", "{api}");
        assert_eq!(slow.finished(), 1, "{api}");
        // The second call finished while the first was still running.
        assert_eq!(*slow_finished_before.lock().unwrap(), vec![0], "{api}");

        let second = server.request(1).body;
        let results: Vec<(String, String)> = if api == "openai" {
            second["messages"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| (m["tool_call_id"].as_str().unwrap().into(), m["content"].as_str().unwrap().into()))
                .collect()
        } else {
            second["messages"][2]["content"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| (b["tool_use_id"].as_str().unwrap().into(), b["content"].as_str().unwrap().into()))
                .collect()
        };
        let prefix = if api == "openai" { "call" } else { "toolu" };
        assert_eq!(
            results,
            vec![(format!("{prefix}_1"), "slept 150ms".to_string()), (format!("{prefix}_2"), "quick".to_string())],
            "{api}"
        );
        server.assert_paired();
    }
}

#[tokio::test]
async fn the_third_request_carries_both_earlier_exchanges_and_a_failed_call_as_an_error() {
    let server = ModelServer::start_with([
        Reply::tool_call("count", json!({"n": 1})),
        Reply::tool_call("fail", json!({})),
        Reply::text("Gave up."),
    ])
    .await;
    server.check_pairing(true);
    let counter = CountingTool::new();
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(counter.clone()));
    tools.register(Arc::new(FailingTool::new("disk on fire")));
    let result = run(anthropic(&server, true), tools, "Count, then fail.").await;
    assert_eq!(result.output, "Gave up.");
    assert_eq!(counter.arguments(), vec![json!({"n": 1})]);

    let third = server.request(2).body;
    let messages: &Vec<Value> = third["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 5, "{third}");
    assert_eq!(messages[1]["content"][0]["id"], "toolu_1");
    assert_eq!(
        messages[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "call #1"})
    );
    assert_eq!(messages[3]["content"][0]["name"], "fail");
    let failed = &messages[4]["content"][0];
    assert_eq!(failed["tool_use_id"], "toolu_2");
    assert_eq!(failed["is_error"], true);
    assert!(failed["content"].as_str().unwrap().contains("disk on fire"), "{failed}");
    server.assert_paired();
}
