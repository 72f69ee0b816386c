//! What a goal is pursued with: the original objective (never lost), the stack of goals above
//! it, the evidence gathered so far, the capabilities on offer and the constraints — and how
//! they become a prompt (a [`Prompt`] the caller adds its sections to and renders within the
//! prompt budget).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::assemble::Prompt;
use crate::config::Constraints;

/// One piece of evidence: a result some goal produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The goal that produced it.
    pub goal: String,
    /// Where it came from: `sub-goal`, `tool:<name>`, `analyze`, `delegate:<name>`...
    pub source: String,
    /// The content (bounded: a long output is digested first).
    pub content: String,
    /// Where the raw output behind a digested `content` is kept (the goal's log event), if it
    /// was digested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

impl Evidence {
    /// Evidence from a goal's result, as shown in a prompt.
    pub fn item(&self) -> String {
        format!("{} ({}): {}", self.goal, self.source, self.content)
    }
}

/// The context of one goal.
#[derive(Debug, Clone)]
pub struct GoalContext {
    /// The objective the whole pursuit started from.
    pub objective: String,
    /// The goals above this one, root first (this goal is not on it).
    pub stack: Vec<String>,
    /// Evidence gathered before this goal: the results of the goals it depends on, then what
    /// its ancestors were given.
    pub evidence: Vec<Evidence>,
    /// What can be done directly: one line per action type, then one per tool or delegate.
    pub capabilities: Vec<String>,
    /// The action types in one line (names, with their tools or delegates), for planning.
    pub overview: String,
    /// The pursuit's constraints.
    pub constraints: Constraints,
    /// This goal's depth (the objective is 0).
    pub depth: u32,
    /// When the pursuit started.
    pub started: Instant,
}

impl GoalContext {
    /// Time since the pursuit started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The prompt of a step that chooses an action (assess): the context, the evidence and
    /// the capabilities on offer, each tool compactly.
    pub fn prompt_to_act(&self, goal: &str) -> Prompt {
        let mut p = self.prompt(goal);
        p.section("Capabilities (action types, then their tools and delegates)", self.capabilities.clone(), "");
        p
    }

    /// The prompt of a step that plans (decompose): the context, the evidence and what the
    /// sub-goals will be able to do, in one line.
    pub fn prompt_to_plan(&self, goal: &str) -> Prompt {
        let mut p = self.prompt(goal);
        p.text(format!("\nWhat sub-goals can be executed with: {}\n", self.overview));
        p
    }

    /// The prompt of a step that judges results (the achieved check, synthesis, the analyze
    /// and synthesize actions): the context and the evidence, no capabilities.
    ///
    /// The budget is stated as its limits, not as what has been used: usage at the time of a
    /// prompt depends on timing and concurrency, which made prompts go stale and recorded runs
    /// unreplayable; the limits themselves are enforced by the pursuit.
    pub fn prompt(&self, goal: &str) -> Prompt {
        let mut out = format!("Original objective: {}\n", self.objective);
        if !self.stack.is_empty() {
            out.push_str("Goal stack (from the objective down to the parent of the current goal):\n");
            for (i, g) in self.stack.iter().enumerate() {
                out.push_str(&format!("  {i}. {g}\n"));
            }
        }
        out.push_str(&format!("Current goal: {goal}\n"));
        out.push_str(&format!("Depth: {} of at most {}\n", self.depth, self.constraints.max_depth));
        let cost = self.constraints.max_cost_usd;
        let cost = if cost.is_finite() { format!("${cost:.2}") } else { "no USD cap".to_string() };
        out.push_str(&format!(
            "Budget of the whole pursuit: at most {:.0}s, {cost}, {} goals (keep plans small)\n",
            self.constraints.max_time.as_secs_f64(),
            self.constraints.max_goals
        ));
        let mut p = Prompt::new();
        p.text(out).section("Evidence so far", self.evidence.iter().map(Evidence::item).collect(), "(none yet)");
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(goal: &str, content: &str) -> Evidence {
        Evidence { goal: goal.into(), source: "sub-goal".into(), content: content.into(), reference: None }
    }

    fn ctx(evidence: Vec<Evidence>) -> GoalContext {
        GoalContext {
            objective: "write a report".into(),
            stack: vec!["write a report".into(), "gather data".into()],
            evidence,
            capabilities: vec!["analyze: think".into()],
            overview: "analyze".into(),
            constraints: Constraints::default(),
            depth: 2,
            started: Instant::now(),
        }
    }

    #[test]
    fn prompt_keeps_objective_stack_goal_and_evidence() {
        let ctx = ctx(vec![ev("find sources", "three papers")]);
        let text = ctx.prompt_to_act("read paper one").render(10_000);
        assert!(text.contains("Original objective: write a report"));
        assert!(text.contains("  1. gather data"));
        assert!(text.contains("Current goal: read paper one"));
        assert!(text.contains("- find sources (sub-goal): three papers"));
        assert!(text.contains("Depth: 2 of at most 15"));
        assert!(text.contains("- analyze: think"));
        // What was used depends on timing; the prompt states the limits only, so it replays.
        assert!(!text.contains("used") && !text.contains("spent") && !text.contains("started"), "{text}");
        let judging = ctx.prompt("read paper one").render(10_000);
        assert!(!judging.contains("Capabilities") && judging.contains("three papers"), "{judging}");
        assert!(ctx.prompt_to_plan("read paper one").render(10_000).contains("executed with: analyze"));
    }

    #[test]
    fn evidence_beyond_the_budget_shows_every_item_shortened() {
        let ctx = ctx(vec![ev("old", &"x".repeat(5000)), ev("new", &"y".repeat(5000))]);
        let text = ctx.prompt("g").render(2000);
        assert!(text.chars().count() <= 2000);
        assert!(text.contains("- old (sub-goal): xxx") && text.contains("- new (sub-goal): yyy"), "{text}");
        assert!(text.contains("2 of 2 shortened"), "{text}");
    }
}
