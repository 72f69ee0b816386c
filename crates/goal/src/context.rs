//! What a goal is pursued with: the original objective (never lost), the stack of goals above
//! it, the evidence gathered so far, the capabilities on offer, the constraints and where the
//! pursuit stands against them.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::config::Constraints;

/// One piece of evidence: a result some goal produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// The goal that produced it.
    pub goal: String,
    /// Where it came from: `sub-goal`, `tool:<name>`, `analyze`, `delegate:<name>`...
    pub source: String,
    /// The content.
    pub content: String,
}

/// The context of one goal.
#[derive(Debug, Clone)]
pub struct GoalContext {
    /// The objective the whole pursuit started from.
    pub objective: String,
    /// The goals above this one, root first (this goal is not on it).
    pub stack: Vec<String>,
    /// Evidence gathered before this goal: results of earlier layers at every level above.
    pub evidence: Vec<Evidence>,
    /// What can be done directly: one line per action type (with its tools or delegates).
    pub capabilities: Vec<String>,
    /// The pursuit's constraints.
    pub constraints: Constraints,
    /// This goal's depth (the objective is 0).
    pub depth: u32,
    /// When the pursuit started.
    pub started: Instant,
    /// USD spent by the pursuit when this goal started.
    pub cost_so_far: f64,
    /// Goals started by the pursuit when this goal started.
    pub goal_count: usize,
}

impl GoalContext {
    /// Time since the pursuit started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Renders the context for a prompt that chooses what to do (assess, decompose): with the
    /// capabilities on offer, and at most `evidence_chars` characters of evidence (the newest
    /// items are kept).
    pub fn render(&self, goal: &str, evidence_chars: usize) -> String {
        let mut out = self.render_for_judging(goal, evidence_chars);
        out.push_str("\nCapabilities (action types):\n");
        for c in &self.capabilities {
            out.push_str(&format!("- {c}\n"));
        }
        out
    }

    /// Renders the context for a prompt that judges results (the achieved check, synthesis):
    /// no capabilities, since nothing is chosen there.
    ///
    /// The budget is stated as its limits, not as what has been used: usage at the time of a
    /// prompt depends on timing and concurrency, which made prompts go stale and recorded runs
    /// unreplayable; the limits themselves are enforced by the pursuit.
    pub fn render_for_judging(&self, goal: &str, evidence_chars: usize) -> String {
        let mut out = format!("Original objective: {}\n", self.objective);
        if !self.stack.is_empty() {
            out.push_str("Goal stack (from the objective down to the parent of the current goal):\n");
            for (i, g) in self.stack.iter().enumerate() {
                out.push_str(&format!("  {i}. {g}\n"));
            }
        }
        out.push_str(&format!("Current goal: {goal}\n"));
        out.push_str(&format!("Depth: {} of at most {}\n", self.depth, self.constraints.max_depth));
        out.push_str(&format!(
            "Budget of the whole pursuit: at most {:.0}s, ${:.2}, {} goals (keep plans small)\n",
            self.constraints.max_time.as_secs_f64(),
            self.constraints.max_cost_usd,
            self.constraints.max_goals
        ));
        out.push_str("\nEvidence so far:\n");
        out.push_str(&render_evidence(&self.evidence, evidence_chars));
        out
    }
}

/// Renders evidence items as a bulleted list within `max_chars`, keeping the newest items and
/// saying how many older ones were left out.
pub fn render_evidence(evidence: &[Evidence], max_chars: usize) -> String {
    if evidence.is_empty() {
        return "(none yet)\n".into();
    }
    let mut kept = Vec::new();
    let mut used = 0usize;
    for e in evidence.iter().rev() {
        let line = format!("- {} ({}): {}\n", e.goal, e.source, e.content);
        let len = line.chars().count();
        if used + len > max_chars && !kept.is_empty() {
            break;
        }
        used += len;
        kept.push(e);
    }
    let omitted = evidence.len() - kept.len();
    let mut out = String::new();
    if omitted > 0 {
        out.push_str(&format!("({omitted} older item(s) omitted)\n"));
    }
    for e in kept.iter().rev() {
        let content: String = e.content.chars().take(max_chars).collect();
        out.push_str(&format!("- {} ({}): {}\n", e.goal, e.source, content));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(goal: &str, content: &str) -> Evidence {
        Evidence { goal: goal.into(), source: "sub-goal".into(), content: content.into() }
    }

    #[test]
    fn render_keeps_objective_stack_goal_and_evidence() {
        let ctx = GoalContext {
            objective: "write a report".into(),
            stack: vec!["write a report".into(), "gather data".into()],
            evidence: vec![ev("find sources", "three papers")],
            capabilities: vec!["analyze: think".into()],
            constraints: Constraints::default(),
            depth: 2,
            started: Instant::now(),
            cost_so_far: 0.0,
            goal_count: 3,
        };
        let text = ctx.render("read paper one", 1000);
        assert!(text.contains("Original objective: write a report"));
        assert!(text.contains("  1. gather data"));
        assert!(text.contains("Current goal: read paper one"));
        assert!(text.contains("find sources (sub-goal): three papers"));
        assert!(text.contains("Depth: 2 of at most 15"));
        assert!(text.contains("- analyze: think"));
        // What was used depends on timing; the prompt states the limits only, so it replays.
        assert!(!text.contains("used") && !text.contains("spent") && !text.contains("started"), "{text}");
        let later = GoalContext { cost_so_far: 1.5, goal_count: 40, ..ctx.clone() };
        assert_eq!(later.render("read paper one", 1000), text);
        let judging = ctx.render_for_judging("read paper one", 1000);
        assert!(!judging.contains("Capabilities") && judging.contains("three papers"), "{judging}");
    }

    #[test]
    fn evidence_beyond_the_budget_keeps_the_newest() {
        let items = vec![ev("old", &"x".repeat(100)), ev("new", "fresh")];
        let text = render_evidence(&items, 50);
        assert!(text.contains("1 older item(s) omitted"), "{text}");
        assert!(text.contains("new (sub-goal): fresh"));
        assert!(!text.contains("xxxx"), "{text}");
    }
}
