#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Every recursive thing nests in every other through the one `Runnable` contract: an agent, an
//! RLM, a goal pursuit and a graph, each run as a child of the others — agent→RLM,
//! agent→graph, RLM→agent, RLM→goal, goal→graph, graph→RLM (with host tools), graph→goal —
//! each in one run tree: one event log, one budget (a child's spending counts at every level,
//! a cap at the root stops the deepest child), depth caps, and cancellation reaching the
//! deepest child. Models are scripted in-process; RLM snippets run for real in the sandbox
//! worker (this package's binary).

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use recursive_core::{
    Agent, AgentConfig, AgentEvent, Budget, BudgetLimits, ChatOptions, ChatRequest, ChatResponse, EventKind,
    FinishReason, MemorySink, Message, MockProvider, Outcome, ProviderError, Role, RunInput, RunScope, Runnable,
    RunnableKind, RunnableTool, StopReason, SubAgent, Tool, ToolCall, ToolContext, ToolError, ToolInvoker,
    ToolRegistry, ToolSpec, Usage,
};
use recursive_goal::{ActionRegistry, DelegateAction, GoalConfig, GoalPursuer};
use recursive_graph::GraphRunnable;
use recursive_graph::blueprint::{self, Allowlist, Source};
use recursive_rlm::{Rlm, RlmConfig, RlmEvent};
use serde_json::{Value, json};

fn use_worker_binary() {
    recursive_rlm::set_default_worker(recursive_rlm::WorkerCommand {
        program: env!("CARGO_BIN_EXE_recursive").into(),
        args: vec![recursive_rlm::WORKER_ARG.into()],
    });
}

fn response(message: Message) -> Result<ChatResponse, ProviderError> {
    let stop_reason = if message.tool_calls.is_empty() { StopReason::EndTurn } else { StopReason::ToolUse };
    Ok(ChatResponse {
        message,
        stop_reason,
        usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
        cost_usd: Some(0.001),
        model: "mock".into(),
    })
}

/// An agent's model: calls `tool` with `args` once, then answers with what the tool returned.
fn calling(tool: &'static str, args: Value) -> MockProvider {
    MockProvider::with_handler(move |req: &ChatRequest| {
        match req.messages.iter().rev().find(|m| m.role == Role::Tool) {
            Some(result) => response(Message::assistant(format!("parent got: {}", result.content))),
            None => response(Message::assistant_with_tools(
                "",
                vec![ToolCall { id: "c1".into(), name: tool.into(), arguments: args.clone() }],
            )),
        }
    })
}

/// A model that always answers `text` (a sub-agent, a graph's model node).
fn answering(text: &'static str) -> MockProvider {
    MockProvider::with_handler(move |_req: &ChatRequest| response(Message::assistant(text)))
}

/// An RLM's primary model: always the same code block.
fn coding(code: &'static str) -> MockProvider {
    MockProvider::with_handler(move |_req: &ChatRequest| response(Message::assistant(format!("```repl\n{code}\n```"))))
}

fn rlm(name: &str, provider: &MockProvider, tools: ToolRegistry) -> Rlm {
    use_worker_binary();
    let provider = Arc::new(provider.clone());
    Rlm::new(provider.clone(), provider, RlmConfig { max_iterations: 3, ..Default::default() })
        .unwrap()
        .with_host_tools(ToolInvoker::new(tools))
        .unwrap()
        .with_identity(name, Some(format!("The RLM `{name}`.")))
}

fn agent(name: &str, provider: &MockProvider, tools: ToolRegistry) -> Agent {
    Agent::new(Arc::new(provider.clone()))
        .with_tools(tools)
        .with_config(AgentConfig { name: name.into(), ..Default::default() })
}

fn tools(runnables: &[Arc<dyn Runnable>]) -> ToolRegistry {
    let mut t = ToolRegistry::new();
    for r in runnables {
        t.register(Arc::new(RunnableTool::new(r.clone())));
    }
    t
}

/// A goal model (every phase by its system prompt): one atomic goal carried out with `action`.
fn goal_model(action: Value) -> MockProvider {
    MockProvider::with_handler(move |req: &ChatRequest| {
        let system = req.messages.iter().find(|m| m.role == Role::System).map(|m| m.content.clone());
        let step = system.unwrap_or_default();
        let text = if step.starts_with("Step: assess") {
            json!({ "executable": true, "reasoning": "one step", "action": action }).to_string()
        } else if step.starts_with("Step: check") {
            json!({ "reasoning": "done", "achieved": true, "confidence": 0.9, "remaining_gaps": [] }).to_string()
        } else if step.starts_with("Step: synthesize") {
            json!({ "summary": "synthesis", "key_findings": [], "confidence": 0.8, "limitations": [] }).to_string()
        } else {
            "analysis done".to_string()
        };
        response(Message::assistant(text))
    })
}

fn pursuer(name: &str, provider: &MockProvider, delegates: &[Arc<dyn Runnable>]) -> GoalPursuer {
    let provider = Arc::new(provider.clone());
    let mut actions = ActionRegistry::standard(provider.clone(), ToolInvoker::default(), ChatOptions::default());
    if !delegates.is_empty() {
        actions = actions.with(Arc::new(delegates.iter().fold(DelegateAction::new(), |a, d| a.with(d.clone()))));
    }
    GoalPursuer::new(provider, ToolInvoker::default(), GoalConfig::default())
        .with_actions(actions)
        .with_identity(name, Some(format!("The pursuer `{name}`.")))
}

fn graph(text: &str, allow: &Allowlist) -> Arc<dyn Runnable> {
    let source = Source { origin: "test.toml".into(), text: text.into() };
    let graph = blueprint::load(&source, allow).unwrap_or_else(|d| panic!("{d}"));
    let name = graph.name().to_string();
    Arc::new(GraphRunnable::new(Arc::new(graph)).with_identity(name, None))
}

/// `flow`: one model node drafting from `input` into `output`.
fn flow(model: &MockProvider) -> Arc<dyn Runnable> {
    let allow = Allowlist::new().model("default", Arc::new(model.clone()), ChatOptions::default());
    graph(
        r#"
name = "flow"
[state]
input = "string"
output = "string"
[[nodes]]
name = "draft"
model = "default"
prompt = "Draft: {input}"
output = "output"
[[edges]]
from = "START"
to = "draft"
"#,
        &allow,
    )
}

fn root(limits: BudgetLimits) -> (RunScope, MemorySink) {
    let sink = MemorySink::new();
    (RunScope::root("main", Arc::new(sink.clone()), Arc::new(Budget::new(limits))), sink)
}

/// Every event belongs to the one tree; returns the deepest depth seen.
fn one_tree(events: &[AgentEvent], root: &RunScope) -> u32 {
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e.ids.root_run_id == root.ids().run_id), "one run tree");
    events.iter().map(|e| e.ids.depth).max().unwrap_or_default()
}

fn started(events: &[AgentEvent], kind: RunnableKind, name: &str) -> bool {
    events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::SubAgentStarted { agent, kind: k, .. } if agent == name && *k == kind))
}

async fn run(runnable: &dyn Runnable, input: &str, scope: &RunScope) -> Outcome {
    runnable.run(RunInput::text(input), scope).await
}

#[tokio::test]
async fn an_agent_calls_an_rlm_as_a_tool() {
    let reader: Arc<dyn Runnable> =
        Arc::new(rlm("reader", &coding("submit(inputs['input'].split(':')[1].strip())"), ToolRegistry::new()));
    let parent = agent("main", &calling("reader", json!({"input": "code: 4471-KESTREL"})), tools(&[reader]));
    let (scope, sink) = root(BudgetLimits::default());

    let out = run(&parent, "find the code", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::NoMoreToolCalls);
    assert_eq!(out.text, "parent got: 4471-KESTREL");
    let events = sink.events();
    assert!(started(&events, RunnableKind::Rlm, "reader"));
    assert_eq!(one_tree(&events, &scope), 1);
    // The child's spending counts at the root: two agent turns and one RLM turn.
    assert_eq!(scope.usage().total(), 45);
}

#[tokio::test]
async fn an_agent_calls_a_graph_as_a_tool() {
    let flow = flow(&answering("a draft"));
    let parent = agent("main", &calling("flow", json!({"input": "the launch"})), tools(&[flow]));
    let (scope, sink) = root(BudgetLimits::default());

    let out = run(&parent, "draft it", &scope).await;

    assert_eq!(out.text, "parent got: a draft");
    let events = sink.events();
    assert!(started(&events, RunnableKind::Graph, "flow"));
    // main (0) → flow (1) → its node (2).
    assert_eq!(one_tree(&events, &scope), 2);
}

#[tokio::test]
async fn an_rlm_snippet_calls_an_agent_by_name() {
    let helper: Arc<dyn Runnable> =
        Arc::new(SubAgent::new("helper", "Helps.", agent("helper", &answering("hi there"), ToolRegistry::new())));
    let reader = rlm("reader", &coding("r = helper(input='say hi')\nsubmit(r)"), tools(&[helper]));
    let (scope, sink) = root(BudgetLimits::default());

    let out = run(&reader, "greet", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::Completed, "{out:?}");
    assert_eq!(out.text, "hi there");
    let events = sink.events();
    assert!(started(&events, RunnableKind::Agent, "helper"));
    assert_eq!(one_tree(&events, &scope), 1);
}

#[tokio::test]
async fn an_rlm_snippet_calls_a_goal_pursuit() {
    let planner: Arc<dyn Runnable> =
        Arc::new(pursuer("planner", &goal_model(json!({"type": "analyze", "target": "", "input": "plan"})), &[]));
    let reader = rlm("reader", &coding("r = planner('plan the launch')\nsubmit(r)"), tools(&[planner]));
    let (scope, sink) = root(BudgetLimits::default());

    let out = run(&reader, "plan", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::Completed, "{out:?}");
    assert!(!out.text.is_empty());
    let events = sink.events();
    assert!(started(&events, RunnableKind::Goal, "planner"));
    assert!(one_tree(&events, &scope) >= 2, "the pursuit's goals run below it");
}

#[tokio::test]
async fn a_goal_delegates_to_a_graph() {
    let flow = flow(&answering("graph draft"));
    let planner =
        pursuer("planner", &goal_model(json!({"type": "delegate", "target": "flow", "input": "draft notes"})), &[flow]);
    let (scope, sink) = root(BudgetLimits::default());

    let out = run(&planner, "Write the notes", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::Completed, "{out:?}");
    let events = sink.events();
    assert!(started(&events, RunnableKind::Graph, "flow"));
    // The goal's model calls carry real step numbers: 1, 2, … within its node.
    let steps: Vec<u32> = events
        .iter()
        .filter(|e| e.ids.depth == 1 && matches!(e.kind, EventKind::Usage { .. }))
        .map(|e| e.step)
        .collect();
    assert!(!steps.is_empty() && steps.windows(2).all(|w| w[0] < w[1]) && steps[0] >= 1, "{steps:?}");
    let node = events.iter().find(|e| e.ids.name.starts_with("draft-d")).expect("the graph's node ran");
    assert!(node.ids.depth >= 3, "goal → its goal node → flow → draft: {}", node.ids.depth);
    assert_eq!(one_tree(&events, &scope), node.ids.depth);
}

/// A host tool of the RLM inside a graph: it returns a fixed fact.
struct Lookup;

#[async_trait]
impl Tool for Lookup {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "lookup".into(),
            description: "Looks a key up.".into(),
            parameters: json!({"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}),
        }
    }
    async fn call(&self, args: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Ok(format!("value of {}", args["key"].as_str().unwrap_or_default()))
    }
    fn read_only(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_graph_node_runs_an_rlm_with_host_tools_and_a_goal() {
    let mut host = ToolRegistry::new();
    host.register(Arc::new(Lookup));
    let reader = rlm("reader", &coding("submit(lookup(key=inputs['doc'].strip()))"), host);
    let planner = pursuer("planner", &goal_model(json!({"type": "analyze", "target": "", "input": "x"})), &[]);
    let allow = Allowlist::new().runnable(Arc::new(reader)).runnable(Arc::new(planner));
    let g = graph(
        r#"
name = "both"
[state]
doc = "string"
fact = "string"
plan = "string"
[[nodes]]
name = "read"
rlm = "reader"
question = "What is the value?"
inputs = ["doc"]
output = "fact"
[[nodes]]
name = "plan"
goal = "planner"
objective = "Plan around {fact}"
output = "plan"
[[edges]]
from = "START"
to = "read"
[[edges]]
from = "read"
to = "plan"
"#,
        &allow,
    );
    let (scope, sink) = root(BudgetLimits::default());

    let out = g.run(RunInput::text("").with("doc", json!("alpha")), &scope).await;

    assert_eq!(out.finish_reason, FinishReason::Completed, "{out:?}");
    assert_eq!(out.output["fact"], "value of alpha");
    assert_eq!(out.output["plan"], "analysis done");
    let events = sink.events();
    assert!(events.iter().any(|e| matches!(&e.kind, EventKind::ToolCall { call } if call.name == "lookup")));
    assert!(one_tree(&events, &scope) >= 2);
}

#[tokio::test]
async fn a_cap_at_the_root_stops_the_deepest_child() {
    // main → reader (RLM) → helper (agent): the root allows 3 model calls; main and the
    // reader spend 2, so the helper's second call is refused and the whole tree stops.
    let helper_model = calling("nothing", json!({}));
    let helper: Arc<dyn Runnable> =
        Arc::new(SubAgent::new("helper", "Helps.", agent("helper", &helper_model, ToolRegistry::new())));
    let reader: Arc<dyn Runnable> = Arc::new(rlm("reader", &coding("r = helper('go')\nprint(r)"), tools(&[helper])));
    let main_model = calling("reader", json!({"input": "x"}));
    let parent = agent("main", &main_model, tools(&[reader]));
    let (scope, sink) = root(BudgetLimits { max_model_calls: Some(3), ..Default::default() });

    let out = run(&parent, "go", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::CallBudgetExceeded, "{out:?}");
    assert_eq!(helper_model.request_count(), 1, "the deepest child made the call the budget allowed, no more");
    let events = sink.events();
    let deepest = events.iter().filter(|e| e.ids.name.starts_with("helper")).map(|e| e.ids.depth).max();
    assert_eq!(deepest, Some(2));
    assert_eq!(scope.budget().calls_used(), 3);
}

#[tokio::test]
async fn the_depth_cap_refuses_a_child_before_it_runs() {
    let helper_model = answering("never");
    let helper: Arc<dyn Runnable> =
        Arc::new(SubAgent::new("helper", "Helps.", agent("helper", &helper_model, ToolRegistry::new())));
    let reader: Arc<dyn Runnable> = Arc::new(rlm("reader", &coding("submit(str(helper('go')))"), tools(&[helper])));
    let parent = agent("main", &calling("reader", json!({"input": "x"})), tools(&[reader]));
    let (scope, _sink) = root(BudgetLimits::default());
    let scope = scope.with_max_depth(1);

    let out = run(&parent, "go", &scope).await;

    assert_eq!(helper_model.request_count(), 0, "refused before any model call");
    assert!(out.text.contains("depth limit reached"), "{}", out.text);
}

#[tokio::test]
async fn cancellation_reaches_a_snippet_two_levels_down() {
    let spinner: Arc<dyn Runnable> = Arc::new(rlm("spinner", &coding("while True:\n    pass"), ToolRegistry::new()));
    let middle: Arc<dyn Runnable> = Arc::new(SubAgent::new(
        "middle",
        "Delegates.",
        agent("middle", &calling("spinner", json!({"input": "x"})), tools(&[spinner])),
    ));
    let parent = agent("main", &calling("middle", json!({"input": "go"})), tools(&[middle]));
    let (scope, sink) = root(BudgetLimits::default());
    let token = scope.cancel_token().clone();
    // Cancelled once the spinner's snippet is running, two levels down.
    tokio::spawn(async move {
        let spinning = |e: &AgentEvent| {
            e.ids.depth == 2 && matches!(e.kind.extension::<RlmEvent>(), Some(RlmEvent::RlmSnippet { .. }))
        };
        while !sink.events().iter().any(spinning) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        token.cancel();
    });
    let t0 = Instant::now();

    let out = run(&parent, "go", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::Cancelled, "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(15), "ended soon after the cancel: {:?}", t0.elapsed());
}

#[tokio::test]
async fn the_trees_wall_clock_ends_a_snippet_that_never_returns() {
    let spinner = rlm("spinner", &coding("while True:\n    pass"), ToolRegistry::new());
    let (scope, _sink) = root(BudgetLimits { wall_clock: Some(Duration::from_secs(2)), ..Default::default() });
    let t0 = Instant::now();

    let out = run(&spinner, "spin", &scope).await;

    assert_eq!(out.finish_reason, FinishReason::WallClockExceeded, "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
}
