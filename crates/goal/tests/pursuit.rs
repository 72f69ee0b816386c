#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Goal pursuit end to end with a scripted provider that answers by phase and goal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use recursive_core::{
    Agent, AgentEvent, Budget, BudgetLimits, ChatProvider, ChatRequest, ChatResponse, ChatStream, EventKind,
    FinishReason, MemorySink, Message, MockProvider, MockReply, ProviderError, ResponseFormat, Role, RunScope,
    StopReason, SubAgent, ToolContext, ToolError, ToolInvoker, ToolRegistry, TypedTool, Usage,
};
use recursive_goal::{
    ActionRegistry, DelegateAction, EmbedError, Embedder, ExecutionLog, GoalConfig, GoalEventKind, GoalOutcome,
    GoalPursuer, GoalRunEvent, GoalStatus,
};
use serde_json::{Value, json};

// ---------- a scripted world ----------

/// Answers each request by its phase and goal: goals with a plan are decomposed, all others
/// are executed with `analyze`; checks say "achieved" for the goals listed.
#[derive(Clone, Default)]
struct World {
    plans: HashMap<String, String>,
    actions: HashMap<String, Value>,
    achieved: Vec<String>,
    /// Goals the final check (nothing left to pursue) judges not achieved; others it judges
    /// achieved.
    not_achieved: Vec<String>,
    /// A check of this goal says achieved once its prompt contains this text.
    achieved_when: Vec<(String, String)>,
    cost_per_call: Option<f64>,
    /// Replies used for the first decompose request of a goal (then `plans`).
    first_decompose: HashMap<String, String>,
}

impl World {
    fn new() -> Self {
        Self::default()
    }

    fn plan(mut self, goal: &str, subs: Value) -> Self {
        self.plans.insert(goal.into(), json!({ "reasoning": "split", "sub_goals": subs }).to_string());
        self
    }

    fn raw_plan(mut self, goal: &str, raw: &str) -> Self {
        self.plans.insert(goal.into(), raw.into());
        self
    }

    fn action(mut self, goal: &str, action: Value) -> Self {
        self.actions.insert(goal.into(), action);
        self
    }

    fn achieved(mut self, goal: &str) -> Self {
        self.achieved.push(goal.into());
        self
    }

    fn achieved_when(mut self, goal: &str, needle: &str) -> Self {
        self.achieved_when.push((goal.into(), needle.into()));
        self
    }

    fn not_achieved(mut self, goal: &str) -> Self {
        self.not_achieved.push(goal.into());
        self
    }

    fn provider(self) -> MockProvider {
        MockProvider::with_handler(move |req| self.answer(req))
    }

    fn answer(&self, req: &ChatRequest) -> Result<ChatResponse, ProviderError> {
        let goal = goal_of(req);
        let text = match step_of(req).as_str() {
            "assess" if self.plans.contains_key(&goal) => {
                json!({ "executable": false, "reasoning": "too big", "action": null }).to_string()
            }
            "assess" => {
                let action = self.actions.get(&goal).cloned().unwrap_or_else(
                    || json!({ "type": "analyze", "target": "", "input": format!("work out: {goal}") }),
                );
                json!({ "executable": true, "reasoning": "one step", "action": action }).to_string()
            }
            "decompose" => {
                let retry = req.messages.len() > 2;
                match (self.first_decompose.get(&goal), retry) {
                    (Some(first), false) => first.clone(),
                    _ => self.plans.get(&goal).cloned().unwrap_or_default(),
                }
            }
            "check" => {
                let last = user_text(req).contains("(none: every planned sub-goal has run)");
                let seen = self.achieved_when.iter().any(|(g, needle)| *g == goal && user_text(req).contains(needle));
                let achieved = seen || self.achieved.contains(&goal) || (last && !self.not_achieved.contains(&goal));
                let gaps: Vec<String> = if achieved { vec![] } else { vec![format!("more about {goal}")] };
                json!({ "reasoning": "judged", "achieved": achieved, "confidence": 0.9, "remaining_gaps": gaps })
                    .to_string()
            }
            "digest" => format!("digest of part for {goal}"),
            "synthesize" => json!({
                "summary": format!("synthesis of {goal}"),
                "key_findings": [format!("finding about {goal}")],
                "confidence": 0.8,
                "limitations": []
            })
            .to_string(),
            "action:analyze" | "action:synthesize" => format!("result of {goal}"),
            other => return Err(ProviderError::Invalid(format!("unexpected step {other}"))),
        };
        Ok(ChatResponse {
            message: Message::assistant(text),
            stop_reason: StopReason::EndTurn,
            usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
            cost_usd: self.cost_per_call,
            model: "mock".into(),
        })
    }
}

/// `assess`, `decompose`, `check`, `synthesize` for phases; `action:<type>` for action calls.
fn step_of(req: &ChatRequest) -> String {
    let system = req.messages.iter().find(|m| m.role == Role::System).map(|m| m.content.as_str()).unwrap_or("");
    if let Some(rest) = system.strip_prefix("Step: ") {
        return rest.split('.').next().unwrap_or("").to_string();
    }
    if let Some(rest) = system.strip_prefix("Action: ") {
        return format!("action:{}", rest.split('.').next().unwrap_or(""));
    }
    String::new()
}

fn goal_of(req: &ChatRequest) -> String {
    req.messages
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.lines())
        .find_map(|l| l.strip_prefix("Current goal: "))
        .unwrap_or("")
        .to_string()
}

fn user_text(req: &ChatRequest) -> String {
    req.messages.iter().filter(|m| m.role == Role::User).map(|m| m.content.clone()).collect::<Vec<_>>().join("\n")
}

fn requests_for<'a>(requests: &'a [ChatRequest], step: &str, goal: &str) -> Vec<&'a ChatRequest> {
    requests.iter().filter(|r| step_of(r) == step && goal_of(r) == goal).collect()
}

fn sub(goal: &str, deps: &[i64]) -> Value {
    json!({ "goal": goal, "rationale": "needed", "depends_on": deps, "complexity": "low" })
}

fn pursuer(provider: &MockProvider, config: GoalConfig) -> GoalPursuer {
    GoalPursuer::new(Arc::new(provider.clone()), ToolInvoker::default(), config)
}

fn child<'a>(o: &'a GoalOutcome, goal: &str) -> &'a GoalOutcome {
    o.find(goal).unwrap_or_else(|| panic!("no goal {goal} in the outcome"))
}

fn observed_root(sink: MemorySink) -> RunScope {
    RunScope::root("main", Arc::new(sink), Arc::new(Budget::unlimited()))
}

// ---------- atomic goals ----------

#[tokio::test]
async fn atomic_goal_is_executed_with_the_chosen_action() {
    let provider = World::new().provider();
    let sink = MemorySink::new();
    let root = observed_root(sink.clone());

    let out = pursuer(&provider, GoalConfig::default()).pursue("Name three primes", &root).await.unwrap();

    assert_eq!(out.status, GoalStatus::Completed);
    assert_eq!(out.result.summary, "result of Name three primes");
    assert_eq!(out.action.as_ref().map(|a| a.kind.as_str()), Some("analyze"));
    assert!(out.children.is_empty());
    let requests = provider.requests();
    let steps: Vec<String> = requests.iter().map(step_of).collect();
    assert_eq!(steps, vec!["assess", "action:analyze"]);
    match &requests[0].options.response_format {
        Some(ResponseFormat::JsonSchema { name, schema, strict }) => {
            assert_eq!(name, "goal_assessment");
            assert!(strict, "strict structured output is requested");
            let mut required: Vec<&str> =
                schema["required"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
            required.sort_unstable();
            assert_eq!(required, vec!["action", "executable", "reasoning", "why_decompose"]);
        }
        other => panic!("assess must ask for native structured output, got {other:?}"),
    }
    assert_eq!(requests[1].options.response_format, None);
    // Usage of both calls rolls up to the goal and to the caller's scope.
    assert_eq!(out.usage.total(), 30);
    assert_eq!(root.usage().total(), 30);
    // The goal ran in its own run-tree node and reported its steps there.
    let events = sink.events();
    let goal_events: Vec<(&AgentEvent, GoalRunEvent)> =
        events.iter().filter_map(|e| e.kind.extension::<GoalRunEvent>().map(|g| (e, g))).collect();
    let kinds: Vec<GoalEventKind> = goal_events
        .iter()
        .map(|(_, g)| match g {
            GoalRunEvent::Goal { event, .. } => *event,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(kinds, vec![GoalEventKind::Started, GoalEventKind::Assessed, GoalEventKind::Executed]);
    let (executed, GoalRunEvent::Goal { goal, status, goal_depth, .. }) = goal_events.last().unwrap() else {
        unreachable!()
    };
    assert_eq!(executed.ids.name, "goal-d1");
    assert_eq!(executed.ids.parent_run_id.as_deref(), Some(root.ids().run_id.as_str()));
    assert_eq!((goal.as_str(), *status, *goal_depth), ("Name three primes", Some(GoalStatus::Completed), 0));
    // The goal's node ends with a typed run_finished event.
    let finished = events.iter().rev().find(|e| e.ids.name == "goal-d1").unwrap();
    assert!(
        matches!(finished.kind, EventKind::RunFinished { finish_reason: FinishReason::Completed, .. }),
        "{finished:?}"
    );
    assert_eq!(events.iter().filter(|e| matches!(e.kind, EventKind::Usage { .. })).count(), 2);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: i64,
    b: i64,
}

struct Add;

#[async_trait]
impl TypedTool for Add {
    type Args = AddArgs;
    fn name(&self) -> &str {
        "add"
    }
    fn description(&self) -> String {
        "Adds two integers.".into()
    }
    async fn run(&self, args: AddArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok((args.a + args.b).to_string())
    }
}

#[tokio::test]
async fn atomic_goal_runs_a_tool_through_the_registry() {
    let provider = World::new()
        .action("Add 2 and 3", json!({ "type": "tool", "target": "add", "input": { "a": 2, "b": 3 } }))
        .provider();
    let mut tools = ToolRegistry::new();
    tools.register_typed(Add);
    let sink = MemorySink::new();
    let p = GoalPursuer::new(Arc::new(provider.clone()), ToolInvoker::new(tools), GoalConfig::default());

    let out = p.pursue("Add 2 and 3", &observed_root(sink.clone())).await.unwrap();

    assert_eq!(out.status, GoalStatus::Completed);
    assert_eq!(out.result.summary, "5");
    assert_eq!(out.result.evidence[0].source, "tool:add");
    assert_eq!(provider.request_count(), 1, "a tool action needs no model call after the assessment");
    assert!(
        sink.events()
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ToolResult { name, output, .. } if name == "add" && output == "5"))
    );
    // The assess prompt listed the tool compactly.
    let assess = user_text(&provider.requests()[0]);
    assert!(assess.contains("- tool add(a: integer, b: integer): Adds two integers."), "{assess}");
}

#[tokio::test]
async fn unknown_action_is_sent_back_to_the_model_once() {
    let provider = MockProvider::new([
        MockReply::text(
            r#"{"executable": true, "reasoning": "", "action": {"type": "teleport", "target": "", "input": "x"}}"#,
        ),
        MockReply::text(
            r#"{"executable": true, "reasoning": "", "action": {"type": "analyze", "target": "", "input": "x"}}"#,
        ),
        MockReply::text("analysed"),
    ]);
    let out = pursuer(&provider, GoalConfig::default()).pursue("Do it", &RunScope::detached("t")).await.unwrap();
    assert_eq!(out.result.summary, "analysed");
    let retry = &provider.requests()[1];
    let last = retry.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(last.content.contains("unknown action type `teleport`"), "{}", last.content);
    assert!(last.content.contains("analyze, synthesize"), "{}", last.content);
}

#[tokio::test]
async fn delegate_action_runs_a_sub_agent_in_the_goal_node() {
    let sub_provider = MockProvider::new([MockReply::text("the answer is 42")]);
    let researcher =
        Arc::new(SubAgent::new("researcher", "Looks things up.", Agent::new(Arc::new(sub_provider.clone()))));
    let provider = World::new()
        .action("Find the answer", json!({ "type": "delegate", "target": "researcher", "input": "find the answer" }))
        .provider();
    let actions = ActionRegistry::standard(Arc::new(provider.clone()), ToolInvoker::default(), Default::default())
        .with(Arc::new(DelegateAction::new().with(researcher)));
    let sink = MemorySink::new();
    let p = pursuer(&provider, GoalConfig::default()).with_actions(actions);

    let out = p.pursue("Find the answer", &observed_root(sink.clone())).await.unwrap();

    assert_eq!(out.result.summary, "the answer is 42");
    assert_eq!(user_text(&sub_provider.requests()[0]), "find the answer");
    let events = sink.events();
    assert!(events.iter().any(|e| e.ids.name == "researcher-d2" && matches!(e.kind, EventKind::RunStarted { .. })));
    assert!(events.iter().any(|e| e.ids.name == "goal-d1" && matches!(e.kind, EventKind::SubAgentCompleted { .. })));
    // The sub-agent's usage rolls up into the goal's.
    assert_eq!(out.usage.total(), 30);
}

// ---------- trees ----------

#[tokio::test]
async fn two_level_tree_pursues_sub_goals_and_synthesizes_them() {
    let provider = World::new().plan("Compare A and B", json!([sub("Study A", &[]), sub("Study B", &[])])).provider();

    let out =
        pursuer(&provider, GoalConfig::default()).pursue("Compare A and B", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Achieved);
    assert_eq!(out.result.summary, "synthesis of Compare A and B");
    assert_eq!(out.result.key_findings, vec!["finding about Compare A and B"]);
    assert_eq!(out.result.confidence, Some(0.8));
    let goals: Vec<(&str, &str, u32, GoalStatus)> =
        out.children.iter().map(|c| (c.goal.as_str(), c.goal_id.as_str(), c.depth, c.status)).collect();
    assert_eq!(goals, vec![("Study A", "1.1", 1, GoalStatus::Completed), ("Study B", "1.2", 1, GoalStatus::Completed)]);
    assert_eq!(out.result.evidence.len(), 2);
    let requests = provider.requests();
    let synth = requests_for(&requests, "synthesize", "Compare A and B");
    assert_eq!(synth.len(), 1);
    let prompt = user_text(synth[0]);
    assert!(prompt.contains("result of Study A") && prompt.contains("result of Study B"), "{prompt}");
    // One layer: the achieved check runs once, when every sub-goal has run.
    let checks = requests_for(&requests, "check", "Compare A and B");
    assert_eq!(checks.len(), 1);
    assert!(user_text(checks[0]).contains("(none: every planned sub-goal has run)"));
    // The decomposition prompt listed the goals already in the tree.
    assert!(
        user_text(requests_for(&requests, "decompose", "Compare A and B")[0]).contains("Goals already in the tree")
    );
    // Usage of every call rolls up to the objective.
    assert_eq!(out.usage.total(), provider.request_count() as u64 * 15);
}

/// Counts calls in flight around a provider with latency.
struct Counting {
    inner: MockProvider,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

#[async_trait]
impl ChatProvider for Counting {
    fn name(&self) -> &str {
        "counting"
    }
    async fn stream(&self, request: ChatRequest) -> Result<ChatStream, ProviderError> {
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let r = self.inner.stream(request).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r
    }
}

#[tokio::test]
async fn three_level_tree_runs_layers_concurrently_and_feeds_results_forward() {
    let inner = World::new()
        .plan(
            "Write the report",
            json!([sub("Research topic", &[]), sub("Collect data", &[]), sub("Draft text", &[0, 1])]),
        )
        .plan("Research topic", json!([sub("Read paper one", &[]), sub("Read paper two", &[])]))
        .provider()
        .with_latency(Duration::from_millis(20));
    let counting =
        Arc::new(Counting { inner: inner.clone(), in_flight: AtomicUsize::new(0), max_in_flight: AtomicUsize::new(0) });
    let p = GoalPursuer::new(counting.clone(), ToolInvoker::default(), GoalConfig::default());

    let out = p.pursue("Write the report", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Achieved);
    let research = child(&out, "Research topic");
    assert_eq!(research.status, GoalStatus::Achieved);
    assert_eq!(research.result.summary, "synthesis of Research topic");
    let paper = child(&out, "Read paper two");
    assert_eq!((paper.depth, paper.goal_id.as_str()), (2, "1.1.2"));
    assert!(counting.max_in_flight.load(Ordering::SeqCst) >= 2, "goals of one layer must run concurrently");

    let requests = inner.requests();
    // The dependent layer saw both earlier results, the nested synthesis included.
    let draft = user_text(requests_for(&requests, "assess", "Draft text")[0]);
    assert!(draft.contains("synthesis of Research topic"), "{draft}");
    assert!(draft.contains("result of Collect data"), "{draft}");
    // The first layer did not see the dependent goal's result, and the goal stack reached the leaves.
    let first = user_text(requests_for(&requests, "assess", "Collect data")[0]);
    assert!(!first.contains("result of Draft text") && first.contains("(none yet)"), "{first}");
    let leaf = user_text(requests_for(&requests, "assess", "Read paper one")[0]);
    assert!(leaf.contains("  0. Write the report\n  1. Research topic\n"), "{leaf}");
    // The objective was checked after the first layer (a layer still to go) and at the end.
    assert_eq!(requests_for(&requests, "check", "Write the report").len(), 2);
}

#[tokio::test]
async fn achieved_goal_skips_its_remaining_sub_goals() {
    let provider = World::new()
        .plan(
            "Find a hotel",
            json!([sub("Search listings", &[]), sub("Compare prices", &[0]), sub("Read reviews", &[1])]),
        )
        .achieved("Find a hotel")
        .provider();

    let out = pursuer(&provider, GoalConfig::default()).pursue("Find a hotel", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Achieved);
    let statuses: Vec<GoalStatus> = out.children.iter().map(|c| c.status).collect();
    // The check after the first layer runs alongside the next layer (which waited for the
    // first layer's results anyway): that layer finishes, the one after it is skipped.
    assert_eq!(statuses, vec![GoalStatus::Completed, GoalStatus::Completed, GoalStatus::Skipped]);
    let requests = provider.requests();
    assert!(requests.iter().all(|r| goal_of(r) != "Read reviews"));
    assert_eq!(out.result.summary, "synthesis of Find a hotel");
    assert!(!out.result.limitations.iter().any(|l| l.contains("Compare prices")), "skipped goals are not failures");
}

#[tokio::test]
async fn a_flat_plan_stops_early_once_achieved() {
    let places: Vec<Value> = (1..=5).map(|i| sub(&format!("Look in place {i}"), &[])).collect();
    let provider = World::new()
        .plan("Find the config value", json!(places))
        .achieved_when("Find the config value", "result of Look in place 2")
        .provider();
    let config = GoalConfig { layer_concurrency: 1, ..Default::default() };

    let out = pursuer(&provider, config).pursue("Find the config value", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Achieved);
    let statuses: Vec<GoalStatus> = out.children.iter().map(|c| c.status).collect();
    use GoalStatus::{Completed, Skipped};
    assert_eq!(statuses, [Completed, Completed, Skipped, Skipped, Skipped]);
    let requests = provider.requests();
    for i in 3..=5 {
        assert!(requests.iter().all(|r| goal_of(r) != format!("Look in place {i}")), "place {i} was pursued");
    }
    // Checked after each result, in plan order: the first check had four places pending.
    let checks = requests_for(&requests, "check", "Find the config value");
    assert_eq!(checks.len(), 2);
    assert!(user_text(checks[0]).contains("Sub-goals not yet pursued:\n- Look in place 2\n- Look in place 3"));
}

/// A log of 53,000 characters.
struct ReadLog;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct ReadLogArgs {
    name: String,
}

#[async_trait]
impl TypedTool for ReadLog {
    type Args = ReadLogArgs;
    fn name(&self) -> &str {
        "read_log"
    }
    fn description(&self) -> String {
        "Reads a service log.".into()
    }
    async fn run(&self, args: ReadLogArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        let line = |i: usize| format!("{} {i:05}: request served in {} ms, status 200\n", args.name, i % 97);
        Ok((0..1000).map(line).collect::<String>().chars().take(53_000).collect())
    }
}

#[tokio::test]
async fn a_three_level_pursuit_over_large_tool_outputs_keeps_every_prompt_within_the_budget() {
    let read = |name: &str| json!({ "type": "tool", "target": "read_log", "input": { "name": name } });
    let provider = World::new()
        .plan("Audit the fleet", json!([sub("Audit the web tier", &[]), sub("Audit the data tier", &[])]))
        .plan("Audit the web tier", json!([sub("Read log web-1", &[]), sub("Read log web-2", &[])]))
        .plan(
            "Audit the data tier",
            json!([sub("Read log db-1", &[]), sub("Read log db-2", &[]), sub("Correlate the logs", &[0, 1])]),
        )
        .action("Read log web-1", read("web-1"))
        .action("Read log web-2", read("web-2"))
        .action("Read log db-1", read("db-1"))
        .action("Read log db-2", read("db-2"))
        .provider();
    let mut tools = ToolRegistry::new();
    tools.register_typed(ReadLog);
    let config = GoalConfig { prompt_chars: 6_000, result_chars: 800, ..Default::default() };
    let p = GoalPursuer::new(Arc::new(provider.clone()), ToolInvoker::new(tools), config);

    let out = p.pursue("Audit the fleet", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Achieved);
    let requests = provider.requests();
    for r in &requests {
        let chars: usize = r.messages.iter().map(|m| m.content.chars().count()).sum();
        assert!(chars <= 6_000, "a {} prompt of {chars} characters for {}", step_of(r), goal_of(r));
    }
    // Every log was digested part by part rather than passed on whole.
    // Every log was digested part by part (the first and last parts of a budget this small)
    // rather than passed on whole, and the result says what was not read.
    assert_eq!(requests_for(&requests, "digest", "Read log db-1").len(), 8);
    for leaf in out.walk().into_iter().filter(|g| g.goal.starts_with("Read log")) {
        assert!(leaf.result.summary.chars().count() <= 800, "{}: {}", leaf.goal, leaf.result.summary.len());
        let reference = leaf.result.evidence[0].reference.clone().unwrap();
        assert!(reference.contains("raw output (") && reference.contains("`executed` event"), "{reference}");
        assert!(leaf.result.limitations.iter().any(|l| l.contains("parts of the output")), "{:?}", leaf.result);
    }
    // The raw output stays in the log, whole.
    let executed = p.log().events().into_iter().find(|e| e.event == GoalEventKind::Executed).unwrap();
    assert!(executed.data["output"].as_str().unwrap().chars().count() > 40_000, "as the tool gave it");
    assert_eq!(executed.data["digested"], true);
    // The dependent goal saw both logs it depends on.
    let correlate = user_text(requests_for(&requests, "assess", "Correlate the logs")[0]);
    assert!(
        correlate.contains("- Read log db-1 (sub-goal)") && correlate.contains("- Read log db-2 (sub-goal)"),
        "{correlate}"
    );
}

#[tokio::test]
async fn decompose_hears_why_assess_chose_to_decompose() {
    let provider = World::new().plan("Find a hotel", json!([sub("Search listings", &[])])).provider();
    pursuer(&provider, GoalConfig::default()).pursue("Find a hotel", &RunScope::detached("t")).await.unwrap();
    let requests = provider.requests();
    let decompose = requests_for(&requests, "decompose", "Find a hotel");
    assert!(user_text(decompose[0]).contains("not directly executable:\ntoo big"), "{}", user_text(decompose[0]));
    // Judging prompts carry no capabilities; the plan names them in a line; assess lists them.
    let check_or_synth = requests_for(&requests, "synthesize", "Find a hotel");
    assert!(!user_text(check_or_synth[0]).contains("Capabilities"));
    assert!(!user_text(decompose[0]).contains("Capabilities"));
    assert!(user_text(decompose[0]).contains("What sub-goals can be executed with: analyze, synthesize"));
    assert!(user_text(requests_for(&requests, "assess", "Find a hotel")[0]).contains("Capabilities"));
}

#[tokio::test]
async fn a_negative_check_is_logged_as_checked_not_achieved() {
    let provider = World::new()
        .plan("Find a hotel", json!([sub("Search listings", &[]), sub("Compare prices", &[0])]))
        .not_achieved("Find a hotel")
        .provider();
    let sink = MemorySink::new();
    pursuer(&provider, GoalConfig::default()).pursue("Find a hotel", &observed_root(sink.clone())).await.unwrap();
    let kinds: Vec<GoalEventKind> = sink
        .events()
        .into_iter()
        .filter_map(|e| match e.kind.extension::<GoalRunEvent>() {
            Some(GoalRunEvent::Goal { event, goal, .. }) if goal == "Find a hotel" => Some(event),
            _ => None,
        })
        .collect();
    assert!(kinds.contains(&GoalEventKind::Checked), "{kinds:?}");
    assert!(!kinds.contains(&GoalEventKind::Achieved), "nothing said it was achieved: {kinds:?}");
}

// ---------- constraints ----------

#[tokio::test]
async fn depth_constraint_stops_a_goal_that_would_need_to_go_deeper() {
    let provider = World::new()
        .plan("Plan the launch", json!([sub("Design campaign", &[]), sub("Pick a date", &[])]))
        .plan("Design campaign", json!([sub("Write slogans", &[])]))
        .provider();
    let mut config = GoalConfig::default();
    config.constraints.max_depth = 1;

    let out = pursuer(&provider, config).pursue("Plan the launch", &RunScope::detached("t")).await.unwrap();

    let design = child(&out, "Design campaign");
    assert_eq!(design.status, GoalStatus::Constrained);
    assert!(design.reason.as_deref().unwrap().contains("max_depth"), "{:?}", design.reason);
    assert!(requests_for(&provider.requests(), "decompose", "Design campaign").is_empty());
    assert!(user_text(requests_for(&provider.requests(), "assess", "Design campaign")[0]).contains("maximum depth"));
    // The rest of the tree still synthesizes what it has.
    assert_eq!(out.status, GoalStatus::Achieved);
    assert!(out.result.limitations.iter().any(|l| l.contains("Design campaign") && l.contains("constrained")));
}

#[tokio::test]
async fn time_constraint_stops_goals_started_after_it_passed() {
    let provider = World::new()
        .plan("Survey the field", json!([sub("Read survey one", &[]), sub("Read survey two", &[])]))
        .provider()
        .with_latency(Duration::from_millis(400));
    let mut config = GoalConfig::default();
    // assess and decompose end at 800 ms (300 ms to spare on a loaded machine); the sub-goals'
    // calls cannot end before 1,200 ms, always past the limit.
    config.constraints.max_time = Duration::from_millis(1100);

    let out = pursuer(&provider, config).pursue("Survey the field", &RunScope::detached("t")).await.unwrap();

    // assess and decompose finish in time; the sub-goals' calls in flight when the time runs
    // out are cut off, and nothing else is asked.
    assert_eq!(out.children.len(), 2);
    for c in &out.children {
        assert_eq!(c.status, GoalStatus::Constrained);
        assert!(c.reason.as_deref().unwrap().starts_with("max_time"), "{:?}", c.reason);
    }
    assert_eq!(out.status, GoalStatus::Constrained);
    assert!(out.reason.as_deref().unwrap().starts_with("no sub-goal produced a result"), "{:?}", out.reason);
    let steps: Vec<String> = provider.requests().iter().map(step_of).collect();
    assert_eq!(&steps[..2], ["assess", "decompose"]);
    assert!(steps[2..].iter().all(|s| s == "assess"), "nothing but the cut-off calls: {steps:?}");
}

#[tokio::test]
async fn cost_constraint_stops_later_goals_and_the_tree_still_synthesizes() {
    let mut world =
        World::new().plan("Estimate the budget", json!([sub("Price hardware", &[]), sub("Price software", &[0])]));
    world.cost_per_call = Some(0.3);
    let provider = world.provider();
    let mut config = GoalConfig::default();
    config.constraints.max_cost_usd = 1.0;

    let out = pursuer(&provider, config).pursue("Estimate the budget", &RunScope::detached("t")).await.unwrap();

    // assess + decompose + (hardware: assess + analyze) = 1.2 USD before "Price software"; once the
    // limit is passed no more calls are made (no achievement check, no model synthesis).
    assert_eq!(child(&out, "Price hardware").status, GoalStatus::Completed);
    let software = child(&out, "Price software");
    assert_eq!(software.status, GoalStatus::Constrained);
    assert!(software.reason.as_deref().unwrap().starts_with("max_cost"), "{:?}", software.reason);
    // The objective was not completed: the limit cut it short, and its status says so.
    assert_eq!(out.status, GoalStatus::Constrained);
    assert!(out.reason.as_deref().unwrap().starts_with("max_cost"), "{:?}", out.reason);
    assert!(out.result.summary.contains("Price hardware: result of Price hardware"), "{}", out.result.summary);
    assert!(out.result.limitations.iter().any(|l| l.contains("without a model call")), "{:?}", out.result.limitations);
    assert!((out.cost_usd - 1.2).abs() < 1e-9, "{}", out.cost_usd);
    assert_eq!(provider.request_count(), 4);
}

#[tokio::test]
async fn goal_count_constraint_refuses_goals_beyond_the_limit() {
    let provider = World::new()
        .plan("Tour Europe", json!([sub("Visit Rome", &[]), sub("Visit Oslo", &[]), sub("Visit Lyon", &[])]))
        .provider();
    let mut config = GoalConfig::default();
    config.constraints.max_goals = 3;

    let out = pursuer(&provider, config).pursue("Tour Europe", &RunScope::detached("t")).await.unwrap();

    let constrained: Vec<&GoalOutcome> = out.children.iter().filter(|c| c.status == GoalStatus::Constrained).collect();
    assert_eq!(constrained.len(), 1);
    assert!(constrained[0].reason.as_deref().unwrap().starts_with("max_goals"), "{:?}", constrained[0].reason);
    assert_eq!(out.children.iter().filter(|c| c.status == GoalStatus::Completed).count(), 2);
    assert!(requests_for(&provider.requests(), "assess", &constrained[0].goal).is_empty());
}

#[tokio::test]
async fn spent_tree_budget_constrains_goals_before_any_model_call() {
    let provider = World::new().plan("Big job", json!([sub("Part one", &[]), sub("Part two", &[])])).provider();
    let budget = Arc::new(Budget::new(BudgetLimits { max_tokens: Some(30), ..Default::default() }));
    let root = RunScope::root("main", Arc::new(MemorySink::new()), budget);

    let out = pursuer(&provider, GoalConfig::default()).pursue("Big job", &root).await.unwrap();

    // assess + decompose spend 30 tokens; every sub-goal is then refused.
    assert_eq!(provider.request_count(), 2);
    for c in &out.children {
        assert_eq!(c.status, GoalStatus::Constrained);
        assert!(c.reason.as_deref().unwrap().contains("token_budget_exceeded"), "{:?}", c.reason);
    }
}

#[tokio::test]
async fn run_tree_depth_cap_constrains_goals_that_would_nest_deeper() {
    let provider = World::new().plan("Big job", json!([sub("Part one", &[])])).provider();
    let root = RunScope::detached("main").with_max_depth(1);

    let out = pursuer(&provider, GoalConfig::default()).pursue("Big job", &root).await.unwrap();

    let part = child(&out, "Part one");
    assert_eq!(part.status, GoalStatus::Constrained);
    assert!(part.reason.as_deref().unwrap().contains("depth limit reached"), "{:?}", part.reason);
    assert!(requests_for(&provider.requests(), "assess", "Part one").is_empty());
    assert_eq!(part.run_id, None);
}

// ---------- cycles ----------

#[tokio::test]
async fn exact_repeat_of_an_ancestor_is_a_cycle() {
    let provider = World::new()
        .plan("Plan a trip to Paris", json!([sub("plan a TRIP to   paris!", &[]), sub("Book flights", &[])]))
        .provider();
    let p = pursuer(&provider, GoalConfig::default());

    let out = p.pursue("Plan a trip to Paris", &RunScope::detached("t")).await.unwrap();

    let repeat = child(&out, "plan a TRIP to   paris!");
    assert_eq!(repeat.status, GoalStatus::CycleDetected);
    assert!(repeat.reason.as_deref().unwrap().contains("Plan a trip to Paris"));
    assert!(requests_for(&provider.requests(), "assess", "plan a TRIP to   paris!").is_empty());
    assert_eq!(child(&out, "Book flights").status, GoalStatus::Completed);
    let event = p.log().events().into_iter().find(|e| e.event == GoalEventKind::CycleDetected).unwrap();
    assert_eq!(event.data["kind"], "exact");
}

#[tokio::test]
async fn near_duplicate_of_a_grandparent_is_a_cycle() {
    let provider = World::new()
        .plan("Summarize the quarterly sales report", json!([sub("Collect the figures", &[])]))
        .plan(
            "Collect the figures",
            json!([sub("Summarise the quarterly sales report.", &[]), sub("Open the ledger", &[])]),
        )
        .provider();
    let p = pursuer(&provider, GoalConfig::default());

    let out = p.pursue("Summarize the quarterly sales report", &RunScope::detached("t")).await.unwrap();

    let repeat = child(&out, "Summarise the quarterly sales report.");
    assert_eq!(repeat.status, GoalStatus::CycleDetected);
    let event = p.log().events().into_iter().find(|e| e.event == GoalEventKind::CycleDetected).unwrap();
    assert_eq!(event.data["kind"], "similar");
    assert!(event.data["score"].as_f64().unwrap() >= 0.9);
    assert_eq!(child(&out, "Open the ledger").status, GoalStatus::Completed);
}

#[tokio::test]
async fn near_duplicate_below_a_raised_threshold_is_pursued() {
    let provider = World::new()
        .plan("Summarize the quarterly sales report", json!([sub("Summarise the quarterly sales report.", &[])]))
        .provider();
    let config = GoalConfig { similarity_threshold: 0.999, ..Default::default() };
    let out = pursuer(&provider, config)
        .pursue("Summarize the quarterly sales report", &RunScope::detached("t"))
        .await
        .unwrap();
    assert_eq!(out.children[0].status, GoalStatus::Completed);
}

/// Maps texts that mention "car" or "automobile" to the same direction.
struct ToyEmbedder {
    calls: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl Embedder for ToyEmbedder {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.calls.lock().unwrap().push(texts.to_vec());
        Ok(texts
            .iter()
            .map(|t| if t.contains("car") || t.contains("automobile") { vec![1.0, 0.0] } else { vec![0.0, 1.0] })
            .collect())
    }
}

#[tokio::test]
async fn semantic_duplicate_is_a_cycle_when_an_embedder_is_configured() {
    let provider = World::new()
        .plan("Choose a car", json!([sub("Select an automobile", &[]), sub("Check the budget", &[])]))
        .provider();
    let embedder = Arc::new(ToyEmbedder { calls: Mutex::new(Vec::new()) });
    let p = pursuer(&provider, GoalConfig::default()).with_embedder(embedder.clone());

    let out = p.pursue("Choose a car", &RunScope::detached("t")).await.unwrap();

    assert_eq!(child(&out, "Select an automobile").status, GoalStatus::CycleDetected);
    assert_eq!(child(&out, "Check the budget").status, GoalStatus::Completed);
    let event = p.log().events().into_iter().find(|e| e.event == GoalEventKind::CycleDetected).unwrap();
    assert_eq!(event.data["kind"], "semantic");
    // The ancestor's embedding is cached: it is sent once.
    let sent: Vec<String> = embedder.calls.lock().unwrap().iter().flatten().cloned().collect();
    assert_eq!(sent.iter().filter(|t| *t == "choose a car").count(), 1, "{sent:?}");
}

// ---------- structured output repair ----------

#[tokio::test]
async fn fenced_decomposition_with_trailing_commas_is_repaired_without_asking_again() {
    let raw = "Here you go:\n```json\n{\"reasoning\": \"split\", \"sub_goals\": [\n {\"goal\": \"Step one\", \
               \"depends_on\": [],},\n {\"goal\": \"Step two\", \"depends_on\": [0,],},\n],}\n```";
    let provider = World::new().raw_plan("Do the thing", raw).provider();

    let out = pursuer(&provider, GoalConfig::default()).pursue("Do the thing", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.children.len(), 2);
    assert_eq!(requests_for(&provider.requests(), "decompose", "Do the thing").len(), 1);
    assert_eq!(out.status, GoalStatus::Achieved);
}

#[tokio::test]
async fn unparseable_decomposition_is_retried_with_the_parse_error() {
    let mut world = World::new().plan("Do the thing", json!([sub("Step one", &[])]));
    world.first_decompose.insert("Do the thing".into(), "Sub-goals: {\"sub_goals\": [{\"goal\": 'Step one'}]}".into());
    let provider = world.provider();

    let out = pursuer(&provider, GoalConfig::default()).pursue("Do the thing", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Achieved);
    assert_eq!(out.children[0].goal, "Step one");
    let requests = provider.requests();
    let decomposes = requests_for(&requests, "decompose", "Do the thing");
    assert_eq!(decomposes.len(), 2);
    let retry = decomposes[1];
    let n = retry.messages.len();
    assert_eq!(retry.messages[n - 2].role, Role::Assistant);
    assert!(retry.messages[n - 2].content.contains("'Step one'"));
    let feedback = &retry.messages[n - 1].content;
    assert!(feedback.contains("invalid JSON") && feedback.contains("line 1 column"), "{feedback}");
}

#[tokio::test]
async fn decomposition_unusable_twice_fails_the_goal() {
    let provider = World::new().raw_plan("Do the thing", "I would rather not.").provider();

    let out = pursuer(&provider, GoalConfig::default()).pursue("Do the thing", &RunScope::detached("t")).await.unwrap();

    assert_eq!(out.status, GoalStatus::Failed);
    assert!(out.reason.as_deref().unwrap().contains("no JSON object"), "{:?}", out.reason);
    assert_eq!(requests_for(&provider.requests(), "decompose", "Do the thing").len(), 2);
}

// ---------- plan defects ----------

#[tokio::test]
async fn dependency_cycle_and_bad_index_are_repaired_and_reported() {
    let provider = World::new()
        .plan("Build it", json!([sub("Part A", &[1]), sub("Part B", &[0]), sub("Part C", &[7, -1])]))
        .provider();
    let p = pursuer(&provider, GoalConfig::default());

    let out = p.pursue("Build it", &RunScope::detached("t")).await.unwrap();

    assert!(out.children.iter().all(|c| c.status == GoalStatus::Completed));
    assert_eq!(out.status, GoalStatus::Achieved);
    let decomposed = p.log().events().into_iter().find(|e| e.event == GoalEventKind::Decomposed).unwrap();
    assert_eq!(decomposed.data["layers"], json!([[2], [0, 1]]));
    let issues = decomposed.data["issues"].to_string();
    assert!(
        issues.contains("cycle") && issues.contains("depends on 7") && issues.contains("depends on -1"),
        "{issues}"
    );
    // The cyclic pair ran after Part C and saw its result.
    let a = user_text(requests_for(&provider.requests(), "assess", "Part A")[0]);
    assert!(a.contains("result of Part C"), "{a}");
}

// ---------- log and events ----------

#[tokio::test]
async fn jsonl_log_is_written_as_it_goes_and_trace_returns_a_subtree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("goals/log.jsonl");
    let provider = World::new()
        .plan("Write the report", json!([sub("Research topic", &[]), sub("Collect data", &[])]))
        .plan("Research topic", json!([sub("Read paper one", &[]), sub("Read paper two", &[])]))
        .provider();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let sink = MemorySink::new();
    let p = pursuer(&provider, GoalConfig::default())
        .with_log(&path)
        .unwrap()
        .with_observer(move |e| seen2.lock().unwrap().push((e.goal.clone(), e.event, e.status)));

    let out = p.pursue("Write the report", &observed_root(sink.clone())).await.unwrap();
    assert_eq!(out.count(), 5);

    let from_file = ExecutionLog::read(&path).unwrap();
    assert_eq!(from_file, p.log().events());
    let kinds: Vec<GoalEventKind> = from_file.iter().map(|e| e.event).collect();
    for k in [
        GoalEventKind::Started,
        GoalEventKind::Assessed,
        GoalEventKind::Decomposed,
        GoalEventKind::Executed,
        GoalEventKind::Synthesized,
    ] {
        assert!(kinds.contains(&k), "{k:?} missing from {kinds:?}");
    }
    let paper = from_file.iter().find(|e| e.goal == "Read paper one").unwrap();
    assert_eq!(
        (paper.depth, paper.goal_id.as_str(), paper.parent_goal.as_deref(), paper.parent_goal_id.as_deref()),
        (2, "1.1.1", Some("Research topic"), Some("1.1"))
    );

    let trace = p.log().trace("Research topic");
    let mut goals: Vec<&str> = trace.iter().map(|e| e.goal.as_str()).collect();
    goals.dedup();
    assert!(goals.contains(&"Read paper two") && goals.contains(&"Research topic"));
    assert!(!goals.contains(&"Collect data") && !goals.contains(&"Write the report"), "{goals:?}");
    assert_eq!(recursive_goal::trace(&from_file, "Research topic"), trace);

    // Every logged event reached the observer and the run tree's stream, tagged with the goal's node.
    assert_eq!(seen.lock().unwrap().len(), from_file.len());
    let typed: Vec<_> =
        sink.events().into_iter().filter_map(|e| e.kind.extension::<GoalRunEvent>().map(|g| (e.ids, g))).collect();
    assert_eq!(typed.len(), from_file.len());
    let (ids, status) = typed
        .iter()
        .find_map(|(ids, g)| match g {
            GoalRunEvent::Goal { event: GoalEventKind::Synthesized, goal, status, .. } if goal == "Research topic" => {
                Some((ids, *status))
            }
            _ => None,
        })
        .unwrap();
    assert_eq!((ids.name.as_str(), ids.depth), ("goal-d2", 2));
    assert_eq!(status, Some(GoalStatus::Achieved));
    let root_done = seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(root_done, ("Write the report".to_string(), GoalEventKind::Synthesized, Some(GoalStatus::Achieved)));
}

#[tokio::test]
async fn outcome_tree_serializes_with_statuses_and_results() {
    let provider = World::new().plan("Compare A and B", json!([sub("Study A", &[])])).provider();
    let out =
        pursuer(&provider, GoalConfig::default()).pursue("Compare A and B", &RunScope::detached("t")).await.unwrap();
    let v = serde_json::to_value(&out).unwrap();
    assert_eq!(v["status"], "achieved");
    assert_eq!(v["children"][0]["status"], "completed");
    assert_eq!(v["children"][0]["result"]["summary"], "result of Study A");
    assert_eq!(v["result"]["evidence"][0]["goal"], "Study A");
    assert!(v["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn empty_objective_is_an_error() {
    let p = pursuer(&MockProvider::default(), GoalConfig::default());
    assert!(p.pursue("   ", &RunScope::detached("t")).await.is_err());
}

#[tokio::test]
async fn concurrent_goals_overshoot_the_cost_cap_by_at_most_the_calls_in_flight() {
    // Eight independent sub-goals run concurrently; each call costs $0.003 and the cap is
    // $0.012. The cap is checked before every model call, so once it is reached only the calls
    // already in flight may still land.
    let subs: Vec<Value> = (0..8).map(|i| sub(&format!("Probe server {i}"), &[])).collect();
    let mut world = World::new().plan("Probe the fleet", json!(subs));
    world.cost_per_call = Some(0.003);
    let provider = world.provider().with_latency(Duration::from_millis(20));
    let mut config = GoalConfig::default();
    config.constraints.max_cost_usd = 0.012;
    config.layer_concurrency = 8;

    let out = pursuer(&provider, config).pursue("Probe the fleet", &RunScope::detached("t")).await.unwrap();

    let in_flight_bound = 8.0 * 0.003;
    assert!(out.cost_usd <= 0.012 + in_flight_bound + 1e-9, "spent {}", out.cost_usd);
    // Each of the eight goals needs two calls; the cap allows four, so most goals were cut short.
    assert!(provider.request_count() < 16, "{} calls", provider.request_count());
    assert!(!out.status.is_success(), "{:?}", out.status);
    assert_eq!(out.finish_reason(), FinishReason::NotAchieved);
}

#[tokio::test]
async fn a_majority_of_failed_sub_goals_fails_the_goal() {
    // Five of eight sub-goals call a tool that does not exist twice over, so they fail.
    let subs: Vec<Value> = (0..8).map(|i| sub(&format!("Step {i}"), &[])).collect();
    let mut world = World::new().plan("Do eight things", json!(subs)).not_achieved("Do eight things");
    for i in 0..5 {
        world = world.action(&format!("Step {i}"), json!({"type": "no_such_action", "target": "", "input": ""}));
    }
    let provider = world.provider();
    let config = GoalConfig { gap_rounds: 0, ..Default::default() };
    let out = pursuer(&provider, config).pursue("Do eight things", &RunScope::detached("t")).await.unwrap();

    let failed = out.children.iter().filter(|c| c.status == GoalStatus::Failed).count();
    assert_eq!(failed, 5);
    assert_eq!(out.status, GoalStatus::Failed);
    assert_eq!(out.reason.as_deref(), Some("5 of 8 sub-goals did not succeed"));
    assert_eq!(out.finish_reason(), FinishReason::NotAchieved);
}

#[tokio::test]
async fn cancelling_the_pursuit_never_ends_it_completed() {
    let provider = World::new()
        .plan("Survey the field", json!([sub("Read survey one", &[]), sub("Read survey two", &[])]))
        .provider()
        .with_latency(Duration::from_millis(50));
    let sink = MemorySink::new();
    let scope = observed_root(sink.clone());
    let token = scope.cancel_token().clone();
    // Cancelled once the pursuit has made its first model call.
    tokio::spawn(async move {
        while !sink.events().iter().any(|e| matches!(e.kind, EventKind::Usage { .. })) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        token.cancel();
    });
    let out = pursuer(&provider, GoalConfig::default()).pursue("Survey the field", &scope).await.unwrap();
    assert!(!out.status.is_success(), "{:?}", out.status);
    assert!(out.reason.as_deref().is_some_and(|r| r.contains("cancelled")), "{:?}", out.reason);
}

#[tokio::test]
async fn a_provider_fault_at_the_root_is_kept_as_the_fault() {
    let provider = MockProvider::with_handler(|_| {
        Err(ProviderError::Http {
            provider: "mock".into(),
            status: 500,
            message: "down".into(),
            retry_after_secs: None,
        })
    });
    let out = pursuer(&provider, GoalConfig::default()).pursue("Anything", &RunScope::detached("t")).await.unwrap();
    assert_eq!(out.status, GoalStatus::Failed);
    assert!(out.fault.as_deref().is_some_and(|f| f.contains("HTTP 500")), "{:?}", out.fault);
    assert_eq!(out.finish_reason(), FinishReason::Fault);
}

#[tokio::test]
async fn a_sub_goal_planned_again_in_a_gap_round_is_reused_not_pursued_again() {
    // The check finds a gap after the first plan; the gap round plans the same sub-goal again.
    let provider = World::new().plan("R", json!([sub("collect the figures", &[])])).not_achieved("R").provider();
    let sink = MemorySink::default();
    let config = GoalConfig { gap_rounds: 1, ..Default::default() };
    let outcome = pursuer(&provider, config).pursue("R", &observed_root(sink.clone())).await.unwrap();
    let requests = provider.requests();
    assert_eq!(requests_for(&requests, "decompose", "R").len(), 2, "a gap round ran: {outcome:#?}");
    assert_eq!(requests_for(&requests, "assess", "collect the figures").len(), 1, "pursued once");
    assert_eq!(requests_for(&requests, "action:analyze", "collect the figures").len(), 1);
    let reused: Vec<GoalRunEvent> = sink
        .events()
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Extension(x) => x.get::<GoalRunEvent>(),
            _ => None,
        })
        .filter(|e| matches!(e, GoalRunEvent::Goal { event: GoalEventKind::Reused, .. }))
        .collect();
    assert_eq!(reused.len(), 1, "the log says it was reused");
    let again = &outcome.children[1];
    assert_eq!(again.goal, "collect the figures");
    assert_eq!(again.result, outcome.children[0].result, "the earlier result stands in");
    assert_eq!(again.usage.total(), 0, "nothing was spent on it");
}
