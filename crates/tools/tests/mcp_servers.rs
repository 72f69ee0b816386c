#![allow(clippy::unwrap_used, clippy::expect_used)]
//! MCP client end to end: a real third-party server (`@modelcontextprotocol/server-filesystem`)
//! driven through the agent loop, plus servers that fail to start or never answer.
//!
//! The filesystem server is found through `MCP_FS_SERVER`: the path of its JS entry point
//! (run with `node`) or of an executable, which `./scripts/test` installs and sets. Without it
//! the real-server test fails, unless `RECURSIVE_ALLOW_SKIP=1` asks to skip it.

use std::sync::Arc;

use recursive_core::{Agent, AgentConfig, Budget, FinishReason, MemorySink, MockProvider, MockReply, Role, RunScope};
use recursive_testkit::require_env;
use recursive_tools::mcp::{McpConfig, McpEvent, McpServerConfig, McpStatus, start_servers};
use serde_json::{Value, json};

fn fs_server() -> Option<(String, Vec<String>)> {
    let path = require_env("MCP_FS_SERVER")?;
    if path.ends_with(".js") || path.ends_with(".mjs") {
        Some(("node".into(), vec![path]))
    } else {
        Some((path, Vec::new()))
    }
}

fn scope(sink: &MemorySink) -> RunScope {
    RunScope::root("mcp-test", Arc::new(sink.clone()), Arc::new(Budget::unlimited()))
}

fn server_events(sink: &MemorySink) -> Vec<Value> {
    sink.events()
        .into_iter()
        .filter_map(|e| match e.kind.extension::<McpEvent>() {
            Some(McpEvent::McpServer(status)) => Some(serde_json::to_value(status).unwrap()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn real_filesystem_server_tool_runs_through_the_agent_loop() {
    let Some((command, mut args)) = fs_server() else { return };
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let file = root.join("hello.txt");
    std::fs::write(&file, "greetings from a real file\nsecond line\n").unwrap();
    args.push(root.display().to_string());

    let mut config = McpConfig::default();
    config.servers.insert("fs".into(), McpServerConfig::stdio(command, args).with_startup_timeout(60));
    let sink = MemorySink::new();
    let scope = scope(&sink);
    let mcp = start_servers(&config, &scope).await;

    let events = server_events(&sink);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["server"], "fs");
    assert_eq!(events[0]["status"], "ready", "{events:?}");
    let names = mcp.registry().names();
    assert!(names.iter().all(|n| n.starts_with("fs__")), "{names:?}");
    // Newer versions call it read_text_file; older ones read_file.
    let read_tool = ["fs__read_text_file", "fs__read_file"]
        .into_iter()
        .find(|n| names.iter().any(|m| m == n))
        .unwrap_or_else(|| panic!("no read tool among {names:?}"));
    let spec = mcp.registry().get(read_tool).unwrap().spec();
    assert_eq!(spec.parameters["type"], "object");
    assert!(spec.parameters["properties"]["path"].is_object(), "{}", spec.parameters);

    let provider = MockProvider::new([
        MockReply::tool(read_tool, json!({"path": file.display().to_string()})),
        MockReply::text("the file says hello"),
    ]);
    let agent = Agent::new(Arc::new(provider.clone()))
        .with_tools(mcp.registry().clone())
        .with_config(AgentConfig { name: "mcp".into(), ..Default::default() });
    let result = agent.run_in("read hello.txt", &scope).await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    let tool_msg = result.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(!tool_msg.is_error, "{}", tool_msg.content);
    assert!(tool_msg.content.contains("greetings from a real file\nsecond line"), "{}", tool_msg.content);
    // The model was offered the server's tools and saw the file's content.
    let second = &provider.requests()[1];
    assert!(second.tools.iter().any(|t| t.name == read_tool));
    assert!(second.messages.iter().any(|m| m.content.contains("greetings from a real file")));

    // A path the server does not allow comes back as a tool error the model can read.
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "nope").unwrap();
    let err = mcp
        .registry()
        .call(
            &recursive_core::ToolCall {
                id: "x".into(),
                name: read_tool.into(),
                arguments: json!({"path": secret.display().to_string()}),
            },
            &recursive_core::ToolContext::detached(),
        )
        .await
        .unwrap_err();
    // The server reports it as a result with `isError`, which becomes a tool error carrying
    // the server's text (a protocol failure would start with "MCP server `fs`").
    let text = err.to_string();
    assert!(matches!(err, recursive_core::ToolError::Failed(_)), "{err:?}");
    assert!(!text.starts_with("MCP server"), "{text}");
    assert!(text.contains("secret.txt"), "{text}");
    assert!(!text.contains("nope"), "{text}");
    mcp.shutdown().await;
}

#[tokio::test]
async fn missing_server_command_is_reported_and_the_run_goes_on() {
    let mut config = McpConfig::default();
    config.servers.insert(
        "ghost".into(),
        McpServerConfig::stdio("/definitely/not/an/mcp/server", Vec::<String>::new()).with_startup_timeout(10),
    );
    let sink = MemorySink::new();
    let scope = scope(&sink);
    let mcp = start_servers(&config, &scope).await;
    assert!(mcp.registry().is_empty());
    assert_eq!(mcp.statuses()[0].status, McpStatus::Failed);
    let events = server_events(&sink);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["server"], "ghost");
    assert_eq!(events[0]["status"], "failed");
    let error = events[0]["error"].as_str().unwrap();
    assert!(error.contains("could not start `/definitely/not/an/mcp/server`"), "{error}");

    let provider = MockProvider::new([MockReply::text("working without it")]);
    let agent = Agent::new(Arc::new(provider)).with_tools(mcp.registry().clone());
    let result = agent.run_in("go", &scope).await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(result.output, "working without it");
}

#[tokio::test]
async fn server_that_never_answers_initialize_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("server.pid");
    let mut config = McpConfig::default();
    // Keeps its pipes open and never replies.
    config.servers.insert(
        "silent".into(),
        McpServerConfig::stdio("sh", ["-c".to_string(), format!("echo $$ > {}; exec sleep 100", pid_file.display())])
            .with_startup_timeout(1),
    );
    config
        .servers
        .insert("ghost".into(), McpServerConfig::stdio("/definitely/not/an/mcp/server", Vec::<String>::new()));
    let sink = MemorySink::new();
    let mcp = start_servers(&config, &scope(&sink)).await;
    let events = server_events(&sink);
    assert_eq!(events.len(), 2, "{events:?}");
    let silent = events.iter().find(|e| e["server"] == "silent").unwrap();
    assert_eq!(silent["status"], "timeout", "{silent}");
    assert!(silent["error"].as_str().unwrap().contains("did not start within 1s"), "{silent}");
    let ghost = events.iter().find(|e| e["server"] == "ghost").unwrap();
    assert_eq!(ghost["status"], "failed");
    assert_eq!(mcp.statuses().len(), 2);
    assert!(mcp.registry().is_empty());

    // The abandoned server process is stopped (one stopped before it wrote its pid never ran).
    let Ok(pid) = std::fs::read_to_string(&pid_file).unwrap_or_default().trim().parse::<i32>() else { return };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let gone = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
            .unwrap_or(true)
    };
    while !gone() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(gone(), "the timed-out server {pid} is still running");
}

fn scripted_server(dir: &std::path::Path, mode: &str) -> McpConfig {
    let args = recursive_testkit::mcp::scripted_server_args(dir, mode);
    let mut config = McpConfig::default();
    config.servers.insert("s".into(), McpServerConfig::stdio("python3", args).with_startup_timeout(20));
    config
}

async fn emit(mcp: &recursive_tools::mcp::McpTools, size: usize) -> Result<String, recursive_core::ToolError> {
    let call = recursive_core::ToolCall { id: "x".into(), name: "s__emit".into(), arguments: json!({"size": size}) };
    let ctx = recursive_core::ToolContext::detached();
    let call = mcp.registry().call(&call, &ctx);
    tokio::time::timeout(std::time::Duration::from_secs(60), call).await.expect("the call must not stall")
}

#[tokio::test]
async fn an_answer_over_the_message_cap_fails_that_call_and_the_server_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = start_servers(&scripted_server(dir.path(), "plain"), &scope(&MemorySink::new())).await;
    assert_eq!(mcp.statuses()[0].status, McpStatus::Ready, "{:?}", mcp.statuses());

    let err = emit(&mcp, 20_000_000).await.unwrap_err().to_string();
    assert!(err.contains("larger than 8388608 bytes"), "{err}");
    assert!(err.starts_with("MCP server `s`"), "{err}");

    let below = recursive_tools::mcp::MAX_MESSAGE_BYTES - 1000;
    assert_eq!(emit(&mcp, below).await.unwrap().len(), below, "a big answer under the cap arrives whole");
    assert_eq!(emit(&mcp, 5).await.unwrap(), "zzzzz");
    mcp.shutdown().await;
}

#[tokio::test]
async fn a_server_that_ignores_shutdown_is_killed_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = start_servers(&scripted_server(dir.path(), "stubborn"), &scope(&MemorySink::new())).await;
    assert_eq!(emit(&mcp, 3).await.unwrap(), "zzz");
    let pids = recursive_testkit::mcp::server_pids(dir.path());
    assert!(pids.iter().all(|p| recursive_testkit::mcp::alive(*p)));
    mcp.shutdown().await;
    for pid in pids {
        assert!(!recursive_testkit::mcp::survives(pid), "{pid} is still running after shutdown");
    }
}

#[tokio::test]
async fn dropping_the_tools_kills_the_server_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mcp = start_servers(&scripted_server(dir.path(), "stubborn"), &scope(&MemorySink::new())).await;
    assert_eq!(emit(&mcp, 1).await.unwrap(), "z");
    let pids = recursive_testkit::mcp::server_pids(dir.path());
    // Dropped without shutdown (an early return, a panic unwinding): the group is killed
    // synchronously, not by a task that a finishing runtime might never run.
    drop(mcp);
    for pid in pids {
        assert!(!recursive_testkit::mcp::survives(pid), "{pid} is still running after the drop");
    }
}
