//! The result of a pursuit: a tree of [`GoalOutcome`]s, one per goal, each with its status,
//! its result (summary, key findings, confidence, limitations, evidence), timing, usage and
//! cost.

use chrono::{DateTime, Utc};
use recursive_core::{FinishReason, Usage};
use serde::{Deserialize, Serialize};

use crate::context::Evidence;
use crate::structured::ActionPlan;

/// How a goal ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum GoalStatus {
    /// Its sub-goal results were judged to achieve it (any remaining sub-goals were skipped).
    Achieved,
    /// Executed directly, or all its sub-goals were pursued and synthesized.
    Completed,
    /// A fault or an unusable model reply ended it.
    Failed,
    /// A constraint (depth, time, cost, goal count, tree budget) ended it.
    Constrained,
    /// It repeats a goal on its own stack.
    CycleDetected,
    /// Not pursued because its parent was already achieved.
    Skipped,
    /// Its sub-goals ran and were synthesized, but the achieved check judged the goal not
    /// achieved (after the rounds for the remaining gaps): the result says what is missing.
    Incomplete,
}

impl GoalStatus {
    /// Snake-case name, as logged.
    pub fn as_str(&self) -> &'static str {
        match self {
            GoalStatus::Achieved => "achieved",
            GoalStatus::Completed => "completed",
            GoalStatus::Failed => "failed",
            GoalStatus::Constrained => "constrained",
            GoalStatus::CycleDetected => "cycle_detected",
            GoalStatus::Skipped => "skipped",
            GoalStatus::Incomplete => "incomplete",
        }
    }

    /// Whether the goal did what it was asked.
    pub fn is_success(&self) -> bool {
        matches!(self, GoalStatus::Achieved | GoalStatus::Completed)
    }

    /// Whether the goal produced a result others can build on (an incomplete goal's partial
    /// result counts).
    pub fn has_result(&self) -> bool {
        self.is_success() || *self == GoalStatus::Incomplete
    }
}

impl std::fmt::Display for GoalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a goal produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GoalResult {
    /// The answer, or what happened.
    pub summary: String,
    /// The key findings.
    pub key_findings: Vec<String>,
    /// Confidence from 0 to 1, where the model judged it.
    pub confidence: Option<f64>,
    /// What the result does not cover (including sub-goals that did not succeed).
    pub limitations: Vec<String>,
    /// Where sub-results disagreed, and how the result resolved it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contradictions: Vec<String>,
    /// The evidence it rests on.
    pub evidence: Vec<Evidence>,
}

/// One node of the outcome tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoalOutcome {
    /// Hierarchical id: `1` for the objective, `1.2` for its second sub-goal...
    pub goal_id: String,
    /// The goal.
    pub goal: String,
    /// Its depth (the objective is 0).
    pub depth: u32,
    /// How it ended.
    pub status: GoalStatus,
    /// Why it ended that way, for constrained, cycle-detected, failed and skipped goals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The action it was executed with, if it was atomic.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<ActionPlan>,
    /// What it produced.
    pub result: GoalResult,
    /// Its sub-goals, in plan order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<GoalOutcome>,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: u64,
    /// Tokens used by it and its descendants.
    pub usage: Usage,
    /// USD spent by it and its descendants.
    pub cost_usd: f64,
    /// The run-tree node it ran in, if one was created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The provider fault that ended it, if one did (after the provider's retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

impl GoalOutcome {
    /// The run tree's finish reason for this goal: `completed` when achieved or completed,
    /// `error` when a provider fault ended it, `not_achieved` otherwise. (Whether the run was
    /// cancelled is the caller's to say: the scope knows.)
    pub fn finish_reason(&self) -> FinishReason {
        if self.status.is_success() {
            FinishReason::Completed
        } else if self.fault.is_some() {
            FinishReason::Fault
        } else {
            FinishReason::NotAchieved
        }
    }

    /// This goal and all its descendants, depth first.
    pub fn walk(&self) -> Vec<&GoalOutcome> {
        let mut out = vec![self];
        for c in &self.children {
            out.extend(c.walk());
        }
        out
    }

    /// The first goal (depth first) with exactly this text.
    pub fn find(&self, goal: &str) -> Option<&GoalOutcome> {
        self.walk().into_iter().find(|g| g.goal == goal)
    }

    /// Number of goals in the tree.
    pub fn count(&self) -> usize {
        self.walk().len()
    }
}
