//! The prompts of each phase. Every phase's system prompt starts with `Step: <phase>` (the
//! `analyze`/`synthesize` actions' with `Action: <type>`) and every user prompt carries a
//! `Current goal: <goal>` line, so a transcript (or a scripted test provider) can tell which
//! phase of which goal a request belongs to.

use crate::outcome::GoalOutcome;

/// The phases that ask the model for structured JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Directly executable, and how?
    Assess,
    /// Split into sub-goals.
    Decompose,
    /// Already achieved after a layer?
    Check,
    /// Merge sub-results.
    Synthesize,
}

impl Phase {
    /// Short name, as in `Step: <name>`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Phase::Assess => "assess",
            Phase::Decompose => "decompose",
            Phase::Check => "check",
            Phase::Synthesize => "synthesize",
        }
    }

    /// The schema name sent with a provider's native structured-output mode.
    pub fn schema_name(&self) -> &'static str {
        match self {
            Phase::Assess => "goal_assessment",
            Phase::Decompose => "goal_decomposition",
            Phase::Check => "goal_achieved_check",
            Phase::Synthesize => "goal_synthesis",
        }
    }

    /// The phase of a schema name, if it is one of ours.
    pub fn from_schema_name(name: &str) -> Option<Phase> {
        [Phase::Assess, Phase::Decompose, Phase::Check, Phase::Synthesize].into_iter().find(|p| p.schema_name() == name)
    }
}

pub(crate) fn system(phase: Phase, schema: &str, max_subgoals: usize) -> String {
    let body = match phase {
        Phase::Assess => "You are one step of a recursive goal pursuer. Decide whether the current goal can be \
            accomplished directly by ONE action of the listed action types, or whether it must be decomposed into \
            sub-goals. Set `executable` to true only when a single action clearly suffices, and then give the \
            action: `type` is an action type name, `target` the tool or delegate it uses (\"\" when none), `input` \
            as the action type describes. When the goal is not executable, set `action` to null."
            .to_string(),
        Phase::Decompose => format!(
            "You are one step of a recursive goal pursuer. Split the current goal into at most {max_subgoals} \
            sub-goals that together accomplish it. Each sub-goal must be concrete and pursuable on its own, must not \
            restate the current goal or any goal already in the tree, and should be independent of the others where \
            possible so they can run in parallel. `depends_on` lists the 0-based indices (positions in your list) of \
            the sibling sub-goals whose results it needs; leave it empty when it needs none. `complexity` is low, \
            medium or high."
        ),
        Phase::Check => "You are one step of a recursive goal pursuer. Judge whether the current goal is already \
            achieved by the results of the sub-goals finished so far, so that the remaining sub-goals can be \
            skipped. Be strict: say achieved only when the results fully accomplish the goal. Give your confidence \
            from 0 to 1 and list the gaps that remain."
            .to_string(),
        Phase::Synthesize => "You are one step of a recursive goal pursuer. Merge the results of the sub-goals into \
            the result of the current goal: a summary that answers it, the key findings, your confidence from 0 to \
            1, and the limitations (what is missing or uncertain, including sub-goals that did not succeed). Use \
            only what the results support."
            .to_string(),
    };
    format!(
        "Step: {}. {body}\n\nReply with one JSON object only, no prose and no code fences, matching this JSON \
         Schema:\n{schema}",
        phase.as_str()
    )
}

pub(crate) fn retry(message: &str) -> String {
    format!(
        "Your reply could not be used: {message}\nReply again with only one JSON object that matches the schema, \
         with no prose and no code fences."
    )
}

pub(crate) fn max_depth_note() -> &'static str {
    "\nThis goal is at the maximum depth: it cannot be decomposed further and must be executed directly with one \
     action if at all possible.\n"
}

/// Why the assessment found the goal not directly executable, for the decomposition.
pub(crate) fn why_decompose(reasoning: &str) -> String {
    if reasoning.trim().is_empty() {
        return String::new();
    }
    format!("\nWhy the assessment found it not directly executable:\n{}\n", reasoning.trim())
}

pub(crate) fn existing_goals(goals: &[String]) -> String {
    let mut out = String::from("\nGoals already in the tree (do not duplicate them):\n");
    for g in goals {
        out.push_str(&format!("- {g}\n"));
    }
    out
}

pub(crate) fn results(title: &str, outcomes: &[&GoalOutcome]) -> String {
    let mut out = format!("\n{title}:\n");
    for o in outcomes {
        out.push_str(&format!("- [{}] {}\n", o.status, o.goal));
        if let Some(r) = &o.reason {
            out.push_str(&format!("  reason: {r}\n"));
        }
        if !o.result.summary.is_empty() {
            out.push_str(&format!("  result: {}\n", o.result.summary));
        }
        for f in &o.result.key_findings {
            out.push_str(&format!("  finding: {f}\n"));
        }
        if let Some(c) = o.result.confidence {
            out.push_str(&format!("  confidence: {c:.2}\n"));
        }
    }
    out
}

pub(crate) fn pending(goals: &[&str]) -> String {
    let mut out = String::from("\nSub-goals not yet pursued:\n");
    for g in goals {
        out.push_str(&format!("- {g}\n"));
    }
    out
}
