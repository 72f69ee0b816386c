#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Goals that learn from a failure: a failed leaf is assessed again with its failure as
//! evidence and may be decomposed; a plan is revised after a failed sub-goal; children's
//! contradictions and limitations reach the parent; a parent with constrained children says so.

use std::sync::Arc;

use async_trait::async_trait;
use recursive_core::{
    ChatRequest, ChatResponse, Message, MockProvider, ProviderError, Role, RunScope, StopReason, ToolContext,
    ToolError, ToolInvoker, ToolRegistry, TypedTool, Usage,
};
use recursive_goal::{GoalConfig, GoalPursuer, GoalStatus};
use serde_json::{Value, json};

/// A tool that always fails.
struct Broken;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BrokenArgs {}

#[async_trait]
impl TypedTool for Broken {
    type Args = BrokenArgs;
    fn name(&self) -> &str {
        "fetch"
    }
    fn description(&self) -> String {
        "Fetches the report.".into()
    }
    async fn run(&self, _args: BrokenArgs, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::failed("the report server answered 503"))
    }
}

fn step(req: &ChatRequest) -> String {
    let system = req.messages.iter().find(|m| m.role == Role::System).map(|m| m.content.as_str()).unwrap_or("");
    system
        .strip_prefix("Step: ")
        .or(system.strip_prefix("Action: "))
        .unwrap_or("")
        .split('.')
        .next()
        .unwrap_or("")
        .into()
}

fn user(req: &ChatRequest) -> String {
    req.messages.iter().filter(|m| m.role == Role::User).map(|m| m.content.clone()).collect::<Vec<_>>().join("\n")
}

fn goal(req: &ChatRequest) -> String {
    user(req).lines().find_map(|l| l.strip_prefix("Current goal: ")).unwrap_or("").to_string()
}

fn reply(text: String) -> Result<ChatResponse, ProviderError> {
    Ok(ChatResponse {
        message: Message::assistant(text),
        stop_reason: StopReason::EndTurn,
        usage: Usage { input_tokens: 10, output_tokens: 5, ..Default::default() },
        cost_usd: None,
        model: "mock".into(),
    })
}

fn analyze() -> Value {
    json!({ "executable": true, "reasoning": "one step", "action": {"type": "analyze", "target": "", "input": "x"} })
}

fn sub(goal: &str, deps: &[i64]) -> Value {
    json!({ "goal": goal, "rationale": "needed", "depends_on": deps, "complexity": "low" })
}

fn pursuer(provider: &MockProvider) -> GoalPursuer {
    let mut tools = ToolRegistry::new();
    tools.register_typed(Broken);
    GoalPursuer::new(Arc::new(provider.clone()), ToolInvoker::new(tools), GoalConfig::default())
}

#[tokio::test]
async fn a_failed_leaf_is_assessed_again_with_its_failure_and_decomposed_and_the_parent_achieves() {
    let provider = MockProvider::with_handler(|req| {
        let g = goal(req);
        let text = match (step(req).as_str(), g.as_str()) {
            ("assess", "Get the report figures") if user(req).contains("A first attempt at this goal failed") => {
                assert!(user(req).contains("503"), "the failure is the evidence");
                json!({ "executable": false, "reasoning": "fetch is down", "action": null, "why_decompose": "use the mirrors" }).to_string()
            }
            ("assess", "Get the report figures") => {
                json!({ "executable": true, "reasoning": "fetch it", "action": {"type": "tool", "target": "fetch", "input": {}} }).to_string()
            }
            ("assess", _) => analyze().to_string(),
            ("decompose", _) => json!({ "reasoning": "mirrors", "sub_goals": [sub("read mirror A", &[]), sub("read mirror B", &[])] }).to_string(),
            ("check", _) => json!({ "reasoning": "ok", "achieved": true, "confidence": 0.9, "remaining_gaps": [] }).to_string(),
            ("synthesize", _) => json!({ "summary": "figures from the mirrors", "key_findings": [], "confidence": 0.8, "limitations": [] }).to_string(),
            ("analyze", _) => format!("figures of {g}"),
            (other, _) => return Err(ProviderError::Invalid(format!("unexpected step {other}"))),
        };
        reply(text)
    });
    let outcome = pursuer(&provider).pursue("Get the report figures", &RunScope::detached("t")).await.unwrap();
    assert_eq!(outcome.status, GoalStatus::Achieved, "{outcome:#?}");
    let goals: Vec<&str> = outcome.children.iter().map(|c| c.goal.as_str()).collect();
    assert_eq!(goals, ["read mirror A", "read mirror B"], "decomposed after the failure");
}

#[tokio::test]
async fn a_plan_is_revised_after_a_failed_sub_goal_and_childrens_limits_reach_the_parent() {
    let provider = MockProvider::with_handler(|req| {
        let g = goal(req);
        let u = user(req);
        let text = match (step(req).as_str(), g.as_str()) {
            ("assess", "R") => json!({ "executable": false, "reasoning": "big", "action": null }).to_string(),
            // The fetch fails, and assessed again it is still a fetch: the sub-goal fails.
            ("assess", "fetch the data") => {
                json!({ "executable": true, "reasoning": "x", "action": {"type": "tool", "target": "fetch", "input": {}} })
                    .to_string()
            }
            ("assess", "estimate the data") => json!({ "executable": false, "reasoning": "two steps", "action": null }).to_string(),
            ("assess", _) => analyze().to_string(),
            ("decompose", "estimate the data") => json!({ "reasoning": "guess", "sub_goals": [sub("guess the data", &[])] }).to_string(),
            ("check", "estimate the data") => json!({ "reasoning": "ok", "achieved": true, "confidence": 0.9, "remaining_gaps": [] }).to_string(),
            ("decompose", "R") if u.contains("sub-goal `fetch the data` failed") => {
                json!({ "reasoning": "around it", "sub_goals": [sub("estimate the data", &[])] }).to_string()
            }
            ("decompose", "R") => json!({
                "reasoning": "plan",
                "sub_goals": [sub("fetch the data", &[]), sub("chart the data", &[0])]
            })
            .to_string(),
            ("check", "R") => json!({ "reasoning": "j", "achieved": true, "confidence": 0.9, "remaining_gaps": [] }).to_string(),
            ("synthesize", "R") => {
                assert!(u.contains("limitation: estimated, not measured"), "a child's limitation reaches the synthesis: {u}");
                json!({ "summary": "done", "key_findings": [], "confidence": 0.8, "limitations": [] }).to_string()
            }
            ("synthesize", _) => json!({
                "summary": "s", "key_findings": [], "confidence": 0.8,
                "limitations": ["estimated, not measured"], "contradictions": ["two sources disagree"]
            })
            .to_string(),
            ("analyze", "estimate the data") => "an estimate".to_string(),
            ("analyze", _) => format!("result of {g}"),
            (other, _) => return Err(ProviderError::Invalid(format!("unexpected step {other} for {g}"))),
        };
        reply(text)
    });
    let outcome = pursuer(&provider).pursue("R", &RunScope::detached("t")).await.unwrap();
    let goals: Vec<(&str, GoalStatus)> = outcome.children.iter().map(|c| (c.goal.as_str(), c.status)).collect();
    assert_eq!(
        goals,
        [("fetch the data", GoalStatus::Failed), ("estimate the data", GoalStatus::Achieved)],
        "`chart the data` was dropped and the plan revised after the failure"
    );
    assert!(provider.requests().iter().all(|r| goal(r) != "chart the data"));
    assert!(outcome.result.contradictions.contains(&"two sources disagree".to_string()), "{:?}", outcome.result);
}

#[tokio::test]
async fn an_achieved_goal_with_constrained_children_says_so() {
    let provider = MockProvider::with_handler(|req| {
        let text = match (step(req).as_str(), goal(req).as_str()) {
            ("assess", "R") => json!({ "executable": false, "reasoning": "big", "action": null }).to_string(),
            ("assess", _) => analyze().to_string(),
            ("decompose", _) => json!({ "reasoning": "p", "sub_goals": [sub("a", &[]), sub("b", &[])] }).to_string(),
            ("check", _) => {
                json!({ "reasoning": "ok", "achieved": true, "confidence": 0.9, "remaining_gaps": [] }).to_string()
            }
            ("synthesize", _) => {
                json!({ "summary": "s", "key_findings": [], "confidence": 0.8, "limitations": [] }).to_string()
            }
            ("analyze", g) => format!("result of {g}"),
            (other, _) => return Err(ProviderError::Invalid(format!("unexpected step {other}"))),
        };
        reply(text)
    });
    let mut config = GoalConfig { layer_concurrency: 2, ..Default::default() };
    config.constraints.max_goals = 2;
    let p = GoalPursuer::new(Arc::new(provider), ToolInvoker::default(), config);
    let outcome = p.pursue("R", &RunScope::detached("t")).await.unwrap();
    assert_eq!(outcome.status, GoalStatus::Achieved);
    let reason = outcome.reason.unwrap_or_default();
    assert!(reason.contains("1 sub-goal(s) constrained: b"), "{reason}");
}
