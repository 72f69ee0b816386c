#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Agents calling agents: depth caps, sessions, one event stream for a nested tree, usage
//! roll-up, and tree budgets that stop every running node.

use std::sync::Arc;
use std::time::Duration;

use recursive_core::{
    Agent, AgentConfig, AgentEvent, Budget, BudgetLimits, ChatResponse, EventKind, FinishReason, MemorySink, Message,
    MockProvider, MockReply, Role, RunLimits, RunScope, RunnableTool, StopReason, SubAgent, SubAgentSession, ToolCall,
    ToolRegistry, Usage,
};
use serde_json::json;

fn usage(input: u64, output: u64) -> Usage {
    Usage { input_tokens: input, output_tokens: output, ..Default::default() }
}

fn agent(provider: &MockProvider, tools: ToolRegistry) -> Agent {
    Agent::new(Arc::new(provider.clone())).with_tools(tools)
}

fn tools_with(sub: SubAgent) -> ToolRegistry {
    let mut t = ToolRegistry::new();
    t.register(Arc::new(RunnableTool::new(Arc::new(sub))));
    t
}

fn tool_results(messages: &[Message]) -> Vec<&Message> {
    messages.iter().filter(|m| m.role == Role::Tool).collect()
}

fn events_named<'a>(events: &'a [AgentEvent], name: &str) -> Vec<&'a AgentEvent> {
    events.iter().filter(|e| e.ids.name == name).collect()
}

#[tokio::test]
async fn depth_cap_refuses_the_call_before_any_model_request() {
    let child_provider = MockProvider::new([MockReply::text("never")]);
    let child = SubAgent::new("helper", "Helps.", agent(&child_provider, ToolRegistry::new()));
    let parent_provider =
        MockProvider::new([MockReply::tool("helper", json!({"input": "dig deeper"})), MockReply::text("gave up")]);
    let mut parent = agent(&parent_provider, tools_with(child));
    parent.config_mut().limits.max_depth = 0;

    let result = parent.run("start").await.unwrap();

    assert_eq!(child_provider.request_count(), 0, "the refused sub-agent must not reach its model");
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    let results = tool_results(&result.messages);
    assert_eq!(results.len(), 1);
    assert!(results[0].is_error);
    assert!(results[0].content.contains("depth limit reached"), "{}", results[0].content);
    assert!(results[0].content.contains("helper-d1"), "{}", results[0].content);
    // The parent model saw the refusal as the tool result of its second request.
    let second = &parent_provider.requests()[1];
    assert!(second.messages.iter().any(|m| m.role == Role::Tool && m.content.contains("max_depth 0")));
}

#[tokio::test]
async fn depth_cap_of_the_scope_applies_to_nested_levels() {
    let grandchild_provider = MockProvider::new([MockReply::text("never")]);
    let grandchild = SubAgent::new("gc", "Deepest.", agent(&grandchild_provider, ToolRegistry::new()));
    let child_provider =
        MockProvider::new([MockReply::tool("gc", json!({"input": "go on"})), MockReply::text("child done")]);
    let child = SubAgent::new("child", "Middle.", agent(&child_provider, tools_with(grandchild)));
    let root = RunScope::detached("main").with_max_depth(1);

    let out = child.invoke("work", &root).await.unwrap();

    assert_eq!(out.text, "child done");
    assert_eq!(grandchild_provider.request_count(), 0);
    let refusal = tool_results(&out.messages)[0];
    assert!(refusal.content.contains("`gc-d2` would run at depth 2, beyond max_depth 1"), "{}", refusal.content);
}

#[tokio::test]
async fn session_second_turn_sees_the_first() {
    let provider = MockProvider::new([MockReply::text("answer one"), MockReply::text("answer two")]);
    let mut a = agent(&provider, ToolRegistry::new());
    a.config_mut().system_prompt = Some("You are terse.".into());
    let session = Arc::new(SubAgent::new("helper", "Helps.", a)).session();
    let sink = MemorySink::new();
    let root = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));

    let first = session.send("first question", &root).await.unwrap();
    let second = session.send("follow-up", &root).await.unwrap();

    assert_eq!(first.text, "answer one");
    assert_eq!(second.text, "answer two");
    assert_eq!(session.turns().await, 2);
    let sent = &provider.requests()[1].messages;
    let seen: Vec<(Role, &str)> = sent.iter().map(|m| (m.role, m.content.as_str())).collect();
    assert_eq!(
        seen,
        vec![
            (Role::System, "You are terse."),
            (Role::User, "first question"),
            (Role::Assistant, "answer one"),
            (Role::User, "follow-up"),
        ]
    );

    let events = sink.events();
    assert_eq!(events_named(&events, "helper-t1-d1")[0].kind, EventKind::RunStarted { goal: "first question".into() });
    assert_eq!(events_named(&events, "helper-t2-d1")[0].kind, EventKind::RunStarted { goal: "follow-up".into() });
    let reused: Vec<_> =
        events.iter().filter(|e| matches!(e.kind, EventKind::SubAgentReused { .. })).map(|e| &e.kind).collect();
    assert_eq!(reused, vec![&EventKind::SubAgentReused { agent: "helper".into(), turn: 2, messages: 3 }]);
}

#[tokio::test]
async fn session_tool_lets_the_parent_model_follow_up() {
    let child_provider = MockProvider::new([MockReply::text("draft"), MockReply::text("revised")]);
    let session = Arc::new(SubAgentSession::new(Arc::new(SubAgent::new(
        "writer",
        "Writes.",
        agent(&child_provider, ToolRegistry::new()),
    ))));
    let mut tools = ToolRegistry::new();
    tools.register(Arc::new(RunnableTool::new(session.clone())));
    let parent_provider = MockProvider::new([
        MockReply::tool("writer", json!({"input": "write it"})),
        MockReply::tool("writer", json!({"input": "shorter please"})),
        MockReply::text("done"),
    ]);
    let result = agent(&parent_provider, tools).run("go").await.unwrap();

    assert_eq!(result.output, "done");
    let second_child_request = &child_provider.requests()[1];
    assert!(second_child_request.messages.iter().any(|m| m.content == "draft"));
    assert_eq!(session.history().await.len(), 4);
}

fn response(text: &str, calls: Vec<ToolCall>, usage: Usage, cost: Option<f64>) -> MockReply {
    let stop_reason = if calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
    MockReply::Response(ChatResponse {
        message: Message::assistant_with_tools(text, calls),
        stop_reason,
        usage,
        cost_usd: cost,
        model: "mock".into(),
    })
}

fn call(id: &str, name: &str, input: &str) -> ToolCall {
    ToolCall { id: id.into(), name: name.into(), arguments: json!({ "input": input }) }
}

#[tokio::test]
async fn three_nested_levels_report_on_one_sink_with_rolled_up_usage() {
    let gc_provider = MockProvider::new([response("leaf fact", vec![], usage(1000, 500), Some(0.25))]);
    let grandchild = SubAgent::new("grandchild", "Leaf.", agent(&gc_provider, ToolRegistry::new()));
    let child_provider = MockProvider::new([
        response("", vec![call("c1", "grandchild", "find the fact")], usage(100, 50), Some(0.125)),
        response("child summary", vec![], usage(100, 50), None),
    ]);
    let child = SubAgent::new("child", "Middle.", agent(&child_provider, tools_with(grandchild)));
    let parent_provider = MockProvider::new([
        response("", vec![call("p1", "child", "research")], usage(10, 5), None),
        response("final answer", vec![], usage(10, 5), Some(0.5)),
    ]);
    let parent = agent(&parent_provider, tools_with(child))
        .with_config(AgentConfig { name: "main".into(), ..Default::default() });
    let sink = MemorySink::new();
    let root = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));

    let result = parent.run_in("answer the question", &root).await.unwrap();

    assert_eq!(result.output, "final answer");
    let events = sink.events();
    let main_ev = events_named(&events, "main-d0");
    let child_ev = events_named(&events, "child-d1");
    let gc_ev = events_named(&events, "grandchild-d2");
    assert!(!main_ev.is_empty() && !child_ev.is_empty() && !gc_ev.is_empty());

    let root_id = root.ids().run_id.clone();
    let child_id = child_ev[0].ids.run_id.clone();
    let gc_id = gc_ev[0].ids.run_id.clone();
    assert_ne!(child_id, gc_id);
    for e in &main_ev {
        assert_eq!((e.ids.depth, e.ids.parent_run_id.clone(), &e.ids.run_id), (0, None, &root_id));
    }
    for e in &child_ev {
        assert_eq!(
            (e.ids.depth, e.ids.parent_run_id.as_deref(), &e.ids.run_id),
            (1, Some(root_id.as_str()), &child_id)
        );
    }
    for e in &gc_ev {
        assert_eq!((e.ids.depth, e.ids.parent_run_id.as_deref(), &e.ids.run_id), (2, Some(child_id.as_str()), &gc_id));
    }
    assert!(events.iter().all(|e| e.ids.root_run_id == root_id));

    // Started/Completed land on the caller's scope and point at the child run.
    let started_on_main = main_ev.iter().find_map(|e| match &e.kind {
        EventKind::SubAgentStarted { agent, input, child_run_id, .. } => {
            Some((agent.clone(), input.clone(), child_run_id.clone()))
        }
        _ => None,
    });
    assert_eq!(started_on_main, Some(("child".into(), "research".into(), child_id.clone())));
    let started_on_child = child_ev.iter().any(|e| {
        matches!(&e.kind, EventKind::SubAgentStarted { agent, child_run_id, .. } if agent == "grandchild" && *child_run_id == gc_id)
    });
    assert!(started_on_child);

    // Usage: grandchild 1500; child 2 x 150 + 1500; main 2 x 15 + 1800.
    let completed = |on: &[&AgentEvent], who: &str| {
        on.iter()
            .find_map(|e| match &e.kind {
                EventKind::SubAgentCompleted { agent, usage, cost_usd, finish_reason, .. } if agent == who => {
                    Some((usage.total(), *cost_usd, finish_reason.clone()))
                }
                _ => None,
            })
            .unwrap()
    };
    let (gc_tokens, gc_cost, gc_reason) = completed(&child_ev, "grandchild");
    assert_eq!((gc_tokens, gc_reason.as_str()), (1500, "no_more_tool_calls"));
    assert!((gc_cost - 0.25).abs() < 1e-9);
    let (child_tokens, child_cost, _) = completed(&main_ev, "child");
    assert_eq!(child_tokens, 1800);
    assert!((child_cost - 0.375).abs() < 1e-9);
    assert_eq!(result.usage.total(), 1830);
    assert!((result.cost_usd - 0.875).abs() < 1e-9);
    assert_eq!(root.usage().total(), 1830);
    assert_eq!(root.budget().tokens_used(), 1830);

    let finished_usage = |on: &[&AgentEvent]| {
        on.iter()
            .find_map(|e| match &e.kind {
                EventKind::RunFinished { usage, .. } => Some(usage.total()),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(finished_usage(&gc_ev), 1500);
    assert_eq!(finished_usage(&child_ev), 1800);
    assert_eq!(finished_usage(&main_ev), 1830);
}

/// Parent asks the child; the child's first (and only) model call makes progress and calls a
/// tool; the tree budget is spent by then, so both nodes stop with the same reason.
async fn run_budget_tree(
    limits: BudgetLimits,
    child_usage: Usage,
    child_cost: Option<f64>,
) -> (recursive_core::RunResult, MockProvider, MockProvider, Vec<AgentEvent>) {
    let child_provider = MockProvider::new([
        response("partial: found A", vec![call("c1", "echo_twice", "x")], child_usage, child_cost),
        response("never reached", vec![], child_usage, child_cost),
    ]);
    let mut child_tools = ToolRegistry::new();
    child_tools.register(Arc::new(RunnableTool::new(Arc::new(SubAgent::new(
        "echo_twice",
        "A sub-agent the child calls; it must never run because the budget is spent.",
        agent(&MockProvider::new([MockReply::text("unused")]), ToolRegistry::new()),
    )))));
    let child = SubAgent::new("child", "Works.", agent(&child_provider, child_tools));
    let parent_provider = MockProvider::new([
        response("", vec![call("p1", "child", "do the work")], usage(5, 5), None),
        response("parent should not get here", vec![], usage(5, 5), None),
    ]);
    let parent = agent(&parent_provider, tools_with(child));
    let sink = MemorySink::new();
    let root = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::new(limits)));
    let result = parent.run_in("start", &root).await.unwrap();
    (result, parent_provider, child_provider, sink.events())
}

fn child_completion(events: &[AgentEvent]) -> String {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::SubAgentCompleted { agent, finish_reason, .. } if agent == "child" => {
                Some(finish_reason.to_string())
            }
            _ => None,
        })
        .unwrap()
}

#[tokio::test]
async fn token_budget_spent_mid_tree_stops_child_and_parent() {
    let limits = BudgetLimits { max_tokens: Some(100), ..Default::default() };
    let (result, parent_provider, child_provider, events) = run_budget_tree(limits, usage(150, 50), None).await;

    assert_eq!(result.finish_reason, FinishReason::TokenBudgetExceeded);
    assert_eq!(child_completion(&events), "token_budget_exceeded");
    assert_eq!(parent_provider.request_count(), 1, "the parent must not call its model again");
    assert_eq!(child_provider.request_count(), 1, "the child must not call its model again");
    let tool_result = tool_results(&result.messages)[0];
    assert!(tool_result.is_error);
    assert!(tool_result.content.contains("token_budget_exceeded"), "{}", tool_result.content);
    assert!(tool_result.content.contains("partial: found A"), "{}", tool_result.content);
    // The grandchild the child asked for was refused by the budget: it never reached a model.
    let gc_started = events.iter().any(|e| e.ids.name == "echo_twice-d2" && matches!(e.kind, EventKind::Usage { .. }));
    assert!(!gc_started);
}

#[tokio::test]
async fn cost_budget_spent_mid_tree_stops_child_and_parent() {
    let limits = BudgetLimits { max_cost_usd: Some(1.0), ..Default::default() };
    let (result, parent_provider, child_provider, events) = run_budget_tree(limits, usage(1, 1), Some(1.5)).await;

    assert_eq!(result.finish_reason, FinishReason::CostBudgetExceeded);
    assert_eq!(child_completion(&events), "cost_budget_exceeded");
    assert_eq!(parent_provider.request_count(), 1);
    assert_eq!(child_provider.request_count(), 1);
    assert!(tool_results(&result.messages)[0].content.contains("cost_budget_exceeded"));
}

#[tokio::test]
async fn wall_clock_spent_mid_tree_stops_child_and_parent() {
    let slow_child = MockProvider::new([MockReply::text("too late")]).with_latency(Duration::from_secs(60));
    let child = SubAgent::new("child", "Slow.", agent(&slow_child, ToolRegistry::new()));
    let parent_provider = MockProvider::new([
        MockReply::tool("child", json!({"input": "take your time"})),
        MockReply::text("parent should not get here"),
    ]);
    let parent = agent(&parent_provider, tools_with(child));
    let sink = MemorySink::new();
    let limits = BudgetLimits { wall_clock: Some(Duration::from_millis(300)), ..Default::default() };
    let root = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::new(limits)));

    let result = parent.run_in("start", &root).await.unwrap();

    assert_eq!(result.finish_reason, FinishReason::WallClockExceeded);
    assert_eq!(child_completion(&sink.events()), "wall_clock_exceeded");
    assert_eq!(parent_provider.request_count(), 1);
    let tool_result = tool_results(&result.messages)[0];
    assert!(tool_result.content.contains("wall_clock_exceeded"), "{}", tool_result.content);
}

#[tokio::test]
async fn run_limits_max_depth_defaults_to_eight() {
    assert_eq!(RunLimits::default().max_depth, 8);
    assert_eq!(RunScope::detached("x").max_depth(), 8);
}
