#![allow(clippy::unwrap_used, clippy::expect_used)]
//! MCP over streamable HTTP against a real third-party server:
//! `@modelcontextprotocol/server-everything` in its `streamableHttp` mode, on 127.0.0.1.
//!
//! The server is found through `MCP_EVERYTHING_SERVER`, the path of its JS entry point (run
//! with `node`), which `./scripts/test` installs and sets. Without it these tests fail, unless
//! `RECURSIVE_ALLOW_SKIP=1` asks to skip them.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use recursive_core::{
    Agent, Budget, FinishReason, MemorySink, MockProvider, MockReply, Role, RunScope, ToolCall, ToolContext,
};
use recursive_testkit::require_env;
use recursive_tools::mcp::{McpConfig, McpServerConfig, McpStatus, start_servers};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The running server; killed on drop.
struct Server {
    _child: tokio::process::Child,
    url: String,
}

async fn start_everything() -> Option<Server> {
    let entry = require_env("MCP_EVERYTHING_SERVER")?;
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = tokio::process::Command::new("node")
        .arg(&entry)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start node");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("listening on port") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(ready, Ok(true), "the everything server did not start");
    // Keep draining stderr so the server never blocks on it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Some(Server { _child: child, url: format!("http://127.0.0.1:{port}/mcp") })
}

#[tokio::test]
async fn http_server_tools_run_through_the_agent_loop() {
    let Some(server) = start_everything().await else { return };
    let mut config = McpConfig::default();
    config.servers.insert("everything".into(), McpServerConfig::http(&server.url).with_startup_timeout(30));
    let sink = MemorySink::new();
    let scope = RunScope::root("http", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    let mcp = start_servers(&config, &scope).await;
    assert_eq!(mcp.statuses()[0].status, McpStatus::Ready, "{:?}", mcp.statuses());
    let names = mcp.registry().names();
    assert!(names.contains(&"everything__echo".to_string()), "{names:?}");

    let provider = MockProvider::new([
        MockReply::tool("everything__echo", json!({"message": "over http"})),
        MockReply::text("echoed"),
    ]);
    let agent = Agent::new(Arc::new(provider)).with_tools(mcp.registry().clone());
    let result = agent.run_in("echo something", &scope).await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    let tool_msg = result.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(!tool_msg.is_error, "{}", tool_msg.content);
    assert!(tool_msg.content.contains("over http"), "{}", tool_msg.content);
    mcp.shutdown().await;
}

#[tokio::test]
async fn images_are_summarised_and_errors_become_tool_errors() {
    let Some(server) = start_everything().await else { return };
    let mut config = McpConfig::default();
    config.servers.insert("ev".into(), McpServerConfig::http(&server.url).with_startup_timeout(30));
    let mcp = start_servers(&config, &RunScope::detached("http")).await;
    assert_eq!(mcp.statuses()[0].status, McpStatus::Ready, "{:?}", mcp.statuses());
    let call = |name: &str, arguments| ToolCall { id: "1".into(), name: name.into(), arguments };
    let ctx = ToolContext::detached();

    let out = mcp.registry().call(&call("ev__get-tiny-image", json!({})), &ctx).await.unwrap();
    assert!(out.contains("The image above is the MCP logo."), "{out}");
    let summary = out.lines().find(|l| l.starts_with("[image image/png, ")).unwrap_or_else(|| panic!("{out}"));
    let bytes: usize = summary.trim_start_matches("[image image/png, ").split(' ').next().unwrap().parse().unwrap();
    assert!(bytes > 1000, "{summary}");
    assert!(!out.contains("iVBORw0KGgo"), "the base64 data itself must not reach the model");

    let err = mcp.registry().call(&call("ev__get-sum", json!({"a": "not a number"})), &ctx).await.unwrap_err();
    assert!(err.to_string().contains("expected number"), "{err}");
    let out = mcp.registry().call(&call("ev__get-sum", json!({"a": 2, "b": 40})), &ctx).await.unwrap();
    assert!(out.contains("42"), "{out}");
    mcp.shutdown().await;
}

#[tokio::test]
async fn missing_bearer_token_variable_fails_the_server() {
    let mut server = McpServerConfig::http("http://127.0.0.1:9/mcp");
    server.bearer_token_env = Some("RECURSIVE_TEST_SURELY_UNSET_TOKEN".into());
    let mut config = McpConfig::default();
    config.servers.insert("remote".into(), server);
    let mcp = start_servers(&config, &RunScope::detached("http")).await;
    assert_eq!(mcp.statuses()[0].status, McpStatus::Failed);
    let error = mcp.statuses()[0].error.clone().unwrap();
    assert!(error.contains("RECURSIVE_TEST_SURELY_UNSET_TOKEN"), "{error}");
}

#[tokio::test]
async fn unreachable_http_server_is_reported_as_not_ready() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = McpConfig::default();
    config
        .servers
        .insert("down".into(), McpServerConfig::http(format!("http://127.0.0.1:{port}/mcp")).with_startup_timeout(10));
    let mcp = start_servers(&config, &RunScope::detached("http")).await;
    let status = &mcp.statuses()[0];
    assert_ne!(status.status, McpStatus::Ready, "{status:?}");
    assert!(status.error.is_some());
}

#[tokio::test]
async fn https_servers_get_a_tls_client_instead_of_a_panic() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config = McpConfig::default();
    config
        .servers
        .insert("tls".into(), McpServerConfig::http(format!("https://127.0.0.1:{port}/mcp")).with_startup_timeout(10));
    let mcp = start_servers(&config, &RunScope::detached("https")).await;
    let status = &mcp.statuses()[0];
    assert_ne!(status.status, McpStatus::Ready, "{status:?}");
    assert!(status.error.as_deref().is_some_and(|e| e.contains("127.0.0.1")), "{status:?}");
}
