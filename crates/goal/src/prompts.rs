//! The prompts of each phase. Every phase's system prompt starts with `Step: <phase>` (the
//! `analyze`/`synthesize` actions' with `Action: <type>`) and every user prompt carries a
//! `Current goal: <goal>` line, so a transcript (or a scripted test provider) can tell which
//! phase of which goal a request belongs to.

/// The phases that ask the model for structured JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Directly executable, and how?
    Assess,
    /// Split into sub-goals.
    Decompose,
    /// Achieved by the results so far?
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
            sub-goals. Reason first. Set `executable` to true only when a single action clearly suffices, and then \
            give the action: `type` is an action type name, `target` the tool or delegate it uses (\"\" when none), \
            `input` as the action type describes; `why_decompose` is then \"\". When the goal is not executable, set \
            `action` to null and say in `why_decompose` what makes decomposition necessary (it is passed to the \
            step that decomposes). Do not answer a goal that needs data from your own knowledge: choose an action \
            that gets the data."
            .to_string(),
        Phase::Decompose => format!(
            "You are one step of a recursive goal pursuer. Split the current goal into at most {max_subgoals} \
            sub-goals that together accomplish it. Each sub-goal must be concrete and pursuable on its own, must not \
            restate the current goal or any goal already in the tree, and should be independent of the others where \
            possible so they can run in parallel. List them most important first: apart from dependencies they \
            run in your order, and the rest are skipped once the goal is achieved. `depends_on` lists the 0-based \
            indices (positions in your list) of the sibling sub-goals whose results it needs; leave it empty when \
            it needs none. `complexity` is atomic (one indivisible action), simple, moderate or complex. \
            `coverage` says how the sub-goals together accomplish the goal and what they leave out."
        ),
        Phase::Check => "You are one step of a recursive goal pursuer. Judge whether the current goal is already \
            achieved by the results of the sub-goals finished so far, so that any remaining sub-goals can be \
            skipped. Reason first. Be strict: say achieved only when the results fully accomplish the goal. Give \
            your confidence from 0 to 1 and list in `remaining_gaps` what is still missing (empty when achieved)."
            .to_string(),
        Phase::Synthesize => "You are one step of a recursive goal pursuer. Merge the results of the sub-goals into \
            the result of the current goal: a concise summary that answers it, the key findings, your confidence \
            from 0 to 1, the limitations (what is missing or uncertain, including sub-goals that did not succeed) \
            and the contradictions between results (and how you resolved them). Use only what the results support."
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

/// A leaf assessed again after its action failed.
pub(crate) fn after_failure(reason: &str, at_max_depth: bool) -> String {
    let choices = if at_max_depth {
        "choose another action that avoids the failure (it cannot be decomposed: it is at the maximum depth)"
    } else {
        "choose another action that avoids the failure, or decompose it into sub-goals (executable: false)"
    };
    format!("\nA first attempt at this goal failed: {}\nAssess it again: {choices}.\n", reason.trim())
}

/// Why the assessment found the goal not directly executable, for the decomposition.
pub(crate) fn why_decompose(reasoning: &str) -> String {
    if reasoning.trim().is_empty() {
        return String::new();
    }
    format!("\nWhy the assessment found it not directly executable:\n{}\n", reasoning.trim())
}

/// The system prompt of a digest of a long action output.
pub(crate) fn digest_system() -> String {
    "Step: digest. You are one step of a recursive goal pursuer. An action's output is too long to pass on \
     whole; you read one part of it and write what that part holds that matters for the current goal: exact \
     values, names, numbers, dates, errors, quoted where the wording matters. No preamble; plain text."
        .to_string()
}

/// The user prompt of one part of a digest.
pub(crate) fn digest_part(goal: &str, part: usize, parts: usize, total: usize, text: &str, max: usize) -> String {
    format!(
        "Current goal: {goal}\nThe action's output has {total} characters. Part {part} of {parts}:\n<output>\n{text}\n\
         </output>\nWrite what this part holds that matters for the goal, in at most {max} characters. If nothing \
         does, say so in one line."
    )
}
