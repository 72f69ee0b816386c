//! Behaviour of the agent loop against a scripted provider: finish reasons, tool-result
//! pairing, concurrency, cancellation, permissions and the transcript log.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{
    Agent, AgentConfig, Budget, EventKind, FinishReason, GateVerdict, MemorySink, Message, MockProvider, MockReply,
    Role, RunLimits, RunScope, Tool, ToolCall, ToolContext, ToolError, ToolGate, ToolRegistry, ToolSpec, Transcript,
    TranscriptLog, TypedTool,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, JsonSchema)]
struct SleepArgs {
    /// Milliseconds the call works (a slow tool whose slowness is the point: cancelled, cut off).
    ms: u64,
    /// Text to echo back.
    text: String,
    /// Waits until this many calls have been in flight at once before finishing.
    #[serde(default)]
    together: usize,
    /// Waits until this many other calls have finished before finishing.
    #[serde(default)]
    after: usize,
}

/// Waits for the calls it is told to, works, then echoes; counts how many calls overlap.
#[derive(Default)]
struct SleepEcho {
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    finished: AtomicUsize,
}

/// How long a call waits for the other calls it is told to before it fails.
const WAIT_FOR_OTHERS: Duration = Duration::from_secs(10);

impl SleepEcho {
    /// Whether `args`' conditions on the other calls came true before [`WAIT_FOR_OTHERS`].
    async fn others_came(&self, args: &SleepArgs) -> bool {
        let deadline = tokio::time::Instant::now() + WAIT_FOR_OTHERS;
        loop {
            let together = self.max_in_flight.load(Ordering::SeqCst) >= args.together;
            if together && self.finished.load(Ordering::SeqCst) >= args.after {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

#[async_trait]
impl TypedTool for EchoTool {
    type Args = SleepArgs;
    fn name(&self) -> &str {
        "sleep_echo"
    }
    fn description(&self) -> String {
        "Sleeps then echoes text.".into()
    }
    /// Read-only, so calls of one message may overlap.
    fn read_only(&self) -> bool {
        true
    }
    async fn run(&self, args: SleepArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let s = &self.0;
        let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        s.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let came = s.others_came(&args).await;
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        s.in_flight.fetch_sub(1, Ordering::SeqCst);
        s.finished.fetch_add(1, Ordering::SeqCst);
        match came {
            true => Ok(args.text),
            false => Err(ToolError::failed(format!("{}: the other calls did not come", args.text))),
        }
    }
}

struct EchoTool(Arc<SleepEcho>);

struct Failing;

#[async_trait]
impl Tool for Failing {
    fn spec(&self) -> ToolSpec {
        ToolSpec { name: "failing".into(), description: "Always fails.".into(), parameters: json!({"type": "object"}) }
    }
    async fn call(&self, _args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::failed("disk on fire"))
    }
}

fn tools() -> (ToolRegistry, Arc<SleepEcho>) {
    let echo = Arc::new(SleepEcho::default());
    let mut r = ToolRegistry::new();
    r.register_typed(EchoTool(echo.clone()));
    r.register(Arc::new(Failing));
    (r, echo)
}

fn agent(provider: &MockProvider, limits: RunLimits) -> Agent {
    Agent::new(Arc::new(provider.clone())).with_tools(tools().0).with_config(AgentConfig {
        name: "main".into(),
        limits,
        ..Default::default()
    })
}

fn tool_results(messages: &[Message]) -> Vec<&Message> {
    messages.iter().filter(|m| m.role == Role::Tool).collect()
}

#[tokio::test]
async fn finishes_with_no_more_tool_calls_after_a_tool_round_trip() {
    let provider = MockProvider::new([
        MockReply::tool("sleep_echo", json!({"ms": 1, "text": "pong"})),
        MockReply::text("The tool said pong."),
    ]);
    let result = agent(&provider, RunLimits::default()).run("ping the tool").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(result.output, "The tool said pong.");
    assert_eq!(result.steps, 2);
    let second = &provider.requests()[1];
    let last = second.messages.last().unwrap();
    assert_eq!(last.role, Role::Tool);
    assert_eq!(last.content, "pong");
    assert_eq!(second.tools.len(), 2, "tools are offered to the model");
    assert_eq!(result.usage.input_tokens, 20, "usage of both calls is summed");
}

#[tokio::test]
async fn concurrent_tool_calls_run_together_and_results_keep_call_order() {
    let (registry, echo) = tools();
    let provider = MockProvider::new([
        MockReply::ToolCalls(vec![
            // All three run at once, and they finish in another order than they were called.
            ("sleep_echo".into(), json!({"ms": 0, "text": "slow", "together": 3, "after": 2})),
            ("sleep_echo".into(), json!({"ms": 0, "text": "fast", "together": 3})),
            ("sleep_echo".into(), json!({"ms": 0, "text": "medium", "together": 3, "after": 1})),
        ]),
        MockReply::text("done"),
    ]);
    let agent = Agent::new(Arc::new(provider.clone())).with_tools(registry);
    let result = agent.run("go").await.unwrap();
    let outputs: Vec<_> = tool_results(&result.messages).iter().map(|m| m.content.clone()).collect();
    assert_eq!(outputs, ["slow", "fast", "medium"]);
    assert_eq!(echo.max_in_flight.load(Ordering::SeqCst), 3, "all three calls overlapped");
    assert!(Transcript::from_messages(result.messages).unwrap().is_balanced());
}

#[tokio::test]
async fn tool_concurrency_limit_is_respected() {
    let (registry, echo) = tools();
    let provider = MockProvider::new([
        MockReply::ToolCalls(
            (0..4).map(|i| ("sleep_echo".into(), json!({"ms": 0, "text": i.to_string(), "together": 2}))).collect(),
        ),
        MockReply::text("done"),
    ]);
    let limits = RunLimits { tool_concurrency: 2, ..Default::default() };
    let agent =
        Agent::new(Arc::new(provider)).with_tools(registry).with_config(AgentConfig { limits, ..Default::default() });
    agent.run("go").await.unwrap();
    assert_eq!(echo.max_in_flight.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn tool_errors_unknown_tools_and_bad_arguments_reach_the_model() {
    let provider = MockProvider::new([
        MockReply::ToolCalls(vec![
            ("failing".into(), json!({})),
            ("no_such_tool".into(), json!({})),
            ("sleep_echo".into(), Value::String("{not json".into())),
            ("sleep_echo".into(), json!({"ms": "soon"})),
        ]),
        MockReply::text("recovered"),
    ]);
    let result = agent(&provider, RunLimits::default()).run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
    let results = tool_results(&result.messages);
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|m| m.is_error));
    assert!(results[0].content.contains("disk on fire"));
    assert!(results[1].content.contains("unknown tool `no_such_tool`"));
    assert!(results[2].content.contains("must be a JSON object"));
    assert!(results[3].content.contains("invalid arguments"));
}

#[tokio::test]
async fn max_tokens_stop_is_a_provider_stop() {
    let mut cut = MockProvider::default().text_response("half an ans");
    cut.stop_reason = recursive_core::StopReason::MaxTokens;
    let provider = MockProvider::new([MockReply::Response(cut)]);
    let result = agent(&provider, RunLimits::default()).run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::ProviderStop(recursive_core::StopReason::MaxTokens));
    assert_eq!(result.output, "half an ans");
}

#[tokio::test]
async fn step_limit_ends_with_budget_exceeded() {
    let provider =
        MockProvider::new((0..10).map(|i| MockReply::tool("sleep_echo", json!({"ms": 0, "text": i.to_string()}))));
    let limits = RunLimits { max_steps: 3, ..Default::default() };
    let result = agent(&provider, limits).run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::BudgetExceeded);
    assert_eq!(result.steps, 3);
    assert_eq!(provider.request_count(), 3);
    assert!(Transcript::from_messages(result.messages).unwrap().is_balanced());
}

#[tokio::test]
async fn repeating_the_same_call_ends_as_stuck_without_running_it_again() {
    let (registry, echo) = tools();
    let same = || MockReply::tool("sleep_echo", json!({"ms": 0, "text": "again"}));
    let provider = MockProvider::new([same(), same(), same(), same()]);
    let agent = Agent::new(Arc::new(provider.clone())).with_tools(registry);
    let result = agent.run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::Stuck);
    assert_eq!(provider.request_count(), 3);
    let results = tool_results(&result.messages);
    assert_eq!(results.len(), 3, "the stuck call still gets its result");
    assert!(results[2].content.contains("repeated 3 times"));
    assert_eq!(echo.in_flight.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn different_arguments_are_not_stuck() {
    let provider = MockProvider::new([
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "a"})),
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "b"})),
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "a"})),
        MockReply::text("fine"),
    ]);
    let result = agent(&provider, RunLimits::default()).run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::NoMoreToolCalls);
}

#[tokio::test]
async fn transcript_over_its_limit_ends_the_run() {
    let provider = MockProvider::new([
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "x".repeat(500)})),
        MockReply::text("never asked"),
    ]);
    let limits = RunLimits { max_transcript_chars: Some(200), ..Default::default() };
    let result = agent(&provider, limits).run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::TranscriptLimit);
    assert_eq!(provider.request_count(), 1);
}

#[tokio::test]
async fn plan_mode_looks_around_with_read_only_tools_only_and_stops_with_the_plan_pending() {
    let provider = MockProvider::new([
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "the file says x"})),
        MockReply::tool("failing", json!({})),
        MockReply::text("1. read the file\n2. patch it"),
    ]);
    let mut agent = agent(&provider, RunLimits::default());
    agent.config_mut().plan_mode = true;
    let result = agent.run("fix the bug").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::PlanPending);
    assert!(result.output.contains("read the file"));
    let req = &provider.requests()[0];
    let offered: Vec<&str> = req.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(offered, ["sleep_echo"], "only the tools that change nothing");
    assert!(req.messages[0].content.contains("Plan mode"));
    let results = tool_results(&result.messages);
    assert_eq!(results[0].content, "the file says x", "a read-only call runs");
    assert!(results[1].content.contains("not run: plan mode"), "a write is refused saying why: {}", results[1].content);
}

#[tokio::test]
async fn cancellation_gives_in_flight_calls_synthetic_results() {
    let provider = MockProvider::new([MockReply::ToolCalls(vec![
        ("sleep_echo".into(), json!({"ms": 10_000, "text": "never"})),
        ("sleep_echo".into(), json!({"ms": 10_000, "text": "never"})),
    ])]);
    let scope = RunScope::detached("main");
    let token = scope.cancel_token().clone();
    let (tools, echo) = tools();
    // Cancelled once both calls are running.
    tokio::spawn(async move {
        while echo.in_flight.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        token.cancel();
    });
    let agent = Agent::new(Arc::new(provider.clone()))
        .with_tools(tools)
        .with_config(AgentConfig { name: "main".into(), ..Default::default() });
    let result = agent.run_in("go", &scope).await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::Cancelled);
    let results = tool_results(&result.messages);
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|m| m.content.contains("cancelled")));
}

#[tokio::test]
async fn wall_clock_limit_interrupts_a_slow_tool() {
    let provider = MockProvider::new([MockReply::tool("sleep_echo", json!({"ms": 10_000, "text": "late"}))]);
    let limits = RunLimits { wall_clock: Some(Duration::from_millis(100)), ..Default::default() };
    let result = agent(&provider, limits).run("go").await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::WallClockExceeded);
    assert!(tool_results(&result.messages)[0].content.contains("timed out"));
}

#[tokio::test]
async fn tree_wall_clock_budget_stops_before_the_next_model_call() {
    let provider = MockProvider::new([MockReply::text("unused")]);
    let budget = Budget::new(recursive_core::BudgetLimits { wall_clock: Some(Duration::ZERO), ..Default::default() });
    let scope = RunScope::root("main", Arc::new(recursive_core::NullSink), Arc::new(budget));
    let result = agent(&provider, RunLimits::default()).run_in("go", &scope).await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::WallClockExceeded);
    assert_eq!(provider.request_count(), 0);
}

struct DenyAll;

#[async_trait]
impl ToolGate for DenyAll {
    async fn check(&self, call: &ToolCall, _tool: Option<&Arc<dyn Tool>>) -> GateVerdict {
        GateVerdict::deny(format!("rule forbids {}", call.name))
    }
}

#[tokio::test]
async fn denials_reach_the_model_and_end_the_run_at_the_limit() {
    let provider =
        MockProvider::new((0..5).map(|i| MockReply::tool("sleep_echo", json!({"ms": 0, "text": i.to_string()}))));
    let sink = MemorySink::new();
    let scope = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    let limits = RunLimits { max_permission_denials: 2, ..Default::default() };
    let agent = agent(&provider, limits).with_gate(Arc::new(DenyAll));
    let result = agent.run_in("go", &scope).await.unwrap();
    assert_eq!(result.finish_reason, FinishReason::PermissionDenialLimit);
    assert_eq!(provider.request_count(), 2);
    let results = tool_results(&result.messages);
    assert!(results[0].content.contains("permission denied: rule forbids sleep_echo"));
    let decisions = sink.events().iter().filter(|e| matches!(e.kind, EventKind::Permission { .. })).count();
    assert_eq!(decisions, 2);
}

#[tokio::test]
async fn events_carry_run_ids_steps_and_stream_text() {
    let provider = MockProvider::new([
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "x"})),
        MockReply::text("all done now"),
    ]);
    let sink = MemorySink::new();
    let scope = RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::unlimited()));
    agent(&provider, RunLimits::default()).run_in("go", &scope).await.unwrap();
    let events = sink.events();
    assert!(events.iter().all(|e| e.ids.run_id == scope.ids().run_id && e.ids.depth == 0));
    let partial: String = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::PartialText { delta } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(partial, "all done now");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e.kind {
            EventKind::RunStarted { .. } => "start",
            EventKind::ToolCall { .. } => "call",
            EventKind::ToolResult { .. } => "result",
            EventKind::RunFinished { .. } => "finish",
            _ => "",
        })
        .filter(|k| !k.is_empty())
        .collect();
    assert_eq!(kinds, ["start", "call", "result", "finish"]);
    let result_step = events.iter().find(|e| matches!(e.kind, EventKind::ToolResult { .. })).unwrap().step;
    assert_eq!(result_step, 1);
}

#[tokio::test]
async fn transcript_is_appended_to_jsonl_as_the_run_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run/transcript.jsonl");
    let provider = MockProvider::new([
        MockReply::tool("sleep_echo", json!({"ms": 0, "text": "x"})),
        MockReply::Error(recursive_core::ProviderError::Invalid("boom".into())),
    ]);
    let mut agent = agent(&provider, RunLimits::default());
    agent.config_mut().transcript_path = Some(path.clone());
    agent.config_mut().system_prompt = Some("be brief".into());
    let err = agent.run("go").await.unwrap_err();
    assert!(err.to_string().contains("boom"));
    let saved = TranscriptLog::read(&path).unwrap();
    let roles: Vec<Role> = saved.messages().iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::System, Role::User, Role::Assistant, Role::Tool], "kept up to the failed step");
}
