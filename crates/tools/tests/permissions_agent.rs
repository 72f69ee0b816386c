#![allow(clippy::unwrap_used, clippy::expect_used)]
//! The permission policy inside the real agent loop: denials reach the model as tool results,
//! are logged as permission events, and end the run at the configured limit.

use std::sync::Arc;

use recursive_core::{
    Agent, AgentConfig, Budget, Decision, EventKind, FinishReason, MemorySink, MockProvider, MockReply, Role,
    RunLimits, RunScope,
};
use recursive_tools::{
    Approval, FixedApprover, PermissionPolicy, PermissionsConfig, ToolsConfig, Workspace, builtin_tools,
};
use serde::Deserialize;
use serde_json::json;

fn permissions(text: &str) -> PermissionsConfig {
    #[derive(Deserialize)]
    struct File {
        permissions: PermissionsConfig,
    }
    toml::from_str::<File>(text).unwrap().permissions
}

fn agent(provider: &MockProvider, ws: &Workspace, config: PermissionsConfig, approval: Approval) -> Agent {
    let limits = RunLimits { max_permission_denials: config.max_denials, ..Default::default() };
    let policy = PermissionPolicy::new(config, Arc::new(FixedApprover(approval))).unwrap().with_workspace(ws.clone());
    Agent::new(Arc::new(provider.clone()))
        .with_tools(builtin_tools(ws, &ToolsConfig::default()))
        .with_gate(Arc::new(policy))
        .with_config(AgentConfig { name: "perm".into(), limits, ..Default::default() })
}

#[tokio::test]
async fn repeated_denials_end_the_run_and_the_model_sees_them() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    let provider = MockProvider::new([
        MockReply::tool("write_file", json!({"path": "a.txt", "content": "a"})),
        MockReply::tool("run_shell", json!({"command": "touch b.txt"})),
        MockReply::tool("write_file", json!({"path": "c.txt", "content": "c"})),
        MockReply::text("never reached"),
    ]);
    let sink = MemorySink::new();
    let scope = RunScope::root("perm", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    let result = agent(&provider, &ws, permissions("[permissions]\nmax_denials = 3"), Approval::No)
        .run_in("make files", &scope)
        .await
        .unwrap();

    assert_eq!(result.finish_reason, FinishReason::PermissionDenialLimit);
    assert_eq!(provider.request_count(), 3, "the run stops after the third denial");
    for f in ["a.txt", "b.txt", "c.txt"] {
        assert!(!ws.root().join(f).exists(), "{f} was created despite the denial");
    }
    // The model saw each denial as the result of its call.
    let second_request = &provider.requests()[1];
    let denial = second_request.messages.iter().find(|m| m.role == Role::Tool).unwrap();
    assert!(denial.is_error);
    assert!(denial.content.starts_with("permission denied: default for tools that write or run commands: ask"));
    assert!(denial.content.contains("--no-ask"), "{}", denial.content);

    let permission_events: Vec<_> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Permission { name, decision, reason, .. } => Some((name, decision, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(permission_events.len(), 3);
    assert!(permission_events.iter().all(|(_, d, _)| *d == Decision::Deny));
    assert_eq!(permission_events[1].0, "run_shell");
}

#[tokio::test]
async fn rules_and_defaults_let_allowed_calls_run() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    std::fs::write(ws.root().join("notes.txt"), "remember the milk\n").unwrap();
    let config = permissions(
        r#"
        [permissions]
        [[permissions.rules]]
        tool = "run_shell"
        command_prefix = "echo"
        action = "allow"
        [[permissions.rules]]
        tool = "write_file"
        path = "out/**"
        action = "allow"
        "#,
    );
    let provider = MockProvider::new([
        MockReply::ToolCalls(vec![
            ("read_file".into(), json!({"path": "notes.txt"})),
            ("run_shell".into(), json!({"command": "echo shell-ran"})),
            ("write_file".into(), json!({"path": "out/result.txt", "content": "done"})),
            ("write_file".into(), json!({"path": "elsewhere.txt", "content": "nope"})),
        ]),
        MockReply::text("finished"),
    ]);
    let result = agent(&provider, &ws, config, Approval::No).run("work").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    let results: Vec<_> = result.messages.iter().filter(|m| m.role == Role::Tool).collect();
    assert_eq!(results.len(), 4);
    assert!(results[0].content.contains("remember the milk"), "{}", results[0].content);
    assert!(results[1].content.contains("shell-ran"), "{}", results[1].content);
    assert!(results[2].content.starts_with("created `out/result.txt`"), "{}", results[2].content);
    assert!(results[3].is_error && results[3].content.starts_with("permission denied"), "{}", results[3].content);
    assert_eq!(std::fs::read_to_string(ws.root().join("out/result.txt")).unwrap(), "done");
    assert!(!ws.root().join("elsewhere.txt").exists());
}

#[tokio::test]
async fn yes_approves_every_ask() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    let provider = MockProvider::new([
        MockReply::tool("write_file", json!({"path": "a.txt", "content": "a"})),
        MockReply::text("ok"),
    ]);
    let result = agent(&provider, &ws, PermissionsConfig::default(), Approval::Yes).run("write").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(std::fs::read_to_string(ws.root().join("a.txt")).unwrap(), "a");
}

/// The text of every tool result the model was sent, in order.
fn tool_results(provider: &MockProvider) -> Vec<String> {
    let last = provider.requests().pop().unwrap();
    last.messages.iter().filter(|m| m.role == Role::Tool).map(|m| m.content.clone()).collect()
}

#[tokio::test]
async fn denied_paths_stay_out_of_search_and_listing_results() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path()).unwrap();
    let root = ws.root();
    std::fs::create_dir_all(root.join("secrets")).unwrap();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("secrets/key.txt"), "API_KEY=sk-live-123\n").unwrap();
    std::fs::write(root.join("docs/readme.md"), "set API_KEY first\n").unwrap();
    std::os::unix::fs::symlink("../secrets/key.txt", root.join("docs/key-link")).unwrap();
    let provider = MockProvider::new([
        MockReply::tool("search_files", json!({"pattern": "KEY"})),
        MockReply::tool("list_dir", json!({"depth": 3})),
        MockReply::tool("search_files", json!({"pattern": "sk-live", "path": "secrets"})),
        MockReply::text("done"),
    ]);
    let rules = r#"
        [permissions]
        max_denials = 10
        [[permissions.rules]]
        tool = "*"
        path = "secrets/**"
        action = "deny"
        [[permissions.rules]]
        tool = "*"
        path = "secrets"
        action = "deny"
    "#;
    let scope = RunScope::root("perm", Arc::new(MemorySink::new()), Arc::new(Budget::unlimited()));
    agent(&provider, &ws, permissions(rules), Approval::Yes).run_in("find keys", &scope).await.unwrap();

    let results = tool_results(&provider);
    assert_eq!(results.len(), 3);
    assert!(results[0].contains("docs/readme.md:1:"), "{}", results[0]);
    assert!(!results[0].contains("sk-live") && !results[0].contains("secrets/"), "{}", results[0]);
    assert!(results[0].contains("hidden by permission rules"), "{}", results[0]);
    assert!(results[1].contains("readme.md"), "{}", results[1]);
    assert!(!results[1].contains("secrets") && !results[1].contains("key-link"), "{}", results[1]);
    assert!(results[2].starts_with("permission denied"), "{}", results[2]);
}
