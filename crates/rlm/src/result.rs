//! What an RLM run gives back: the trajectory of iterations and snippets, how the run ended
//! ([`RlmOutcome`]) and the [`RlmResult`] with its spend.

use recursive_core::{FinishReason, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::sandbox::SnippetErrorKind;

/// One code block run in an iteration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlmSnippet {
    /// The code as the model wrote it.
    pub code: String,
    /// What the model was shown (truncated).
    pub observation: String,
    /// The kind of failure, if the snippet failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<SnippetErrorKind>,
    /// Whether a valid `submit` ended it.
    #[serde(default)]
    pub submitted: bool,
    /// Wall-clock time of the snippet.
    pub duration_ms: u64,
}

/// One turn of the primary model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlmIteration {
    /// 1-based number.
    pub iteration: u32,
    /// The model's full reply.
    pub reply: String,
    /// The code blocks run, in order.
    pub snippets: Vec<RlmSnippet>,
    /// The observation message sent back.
    pub observation: String,
}

/// How an RLM run ended. Every variant is a normal end; faults are [`crate::RlmRunError`]s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RlmOutcome {
    /// The model called `submit` with a valid result.
    Submitted,
    /// The iterations ran out; the final extraction call produced a valid result.
    Extracted,
    /// The iterations ran out and the extraction reply was not a valid result.
    ExtractionFailed {
        /// What was wrong.
        errors: Vec<String>,
    },
    /// The shared sub-call budget ran out before this (child) run could take another step.
    CallBudgetExhausted,
    /// The run tree told the run to stop (cancellation, token/USD budget, wall clock).
    Stopped {
        /// Why.
        reason: FinishReason,
    },
    /// A fault ended the run (provider unreachable after retries, the sandbox failed).
    Failed {
        /// The fault.
        error: String,
    },
}

impl RlmOutcome {
    /// Snake-case name, as logged in `turn_finished`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RlmOutcome::Submitted => "submitted",
            RlmOutcome::Extracted => "extracted",
            RlmOutcome::ExtractionFailed { .. } => "extraction_failed",
            RlmOutcome::CallBudgetExhausted => "call_budget_exhausted",
            RlmOutcome::Stopped { .. } => "stopped",
            RlmOutcome::Failed { .. } => "failed",
        }
    }

    /// Whether the run produced a valid result.
    pub fn has_output(&self) -> bool {
        matches!(self, RlmOutcome::Submitted | RlmOutcome::Extracted)
    }

    /// The run tree's finish reason for this outcome: `completed` with a valid result,
    /// `no_answer` when the extraction failed, the limit or cancellation that stopped it
    /// otherwise.
    pub fn finish_reason(&self) -> FinishReason {
        match self {
            RlmOutcome::Submitted | RlmOutcome::Extracted => FinishReason::Completed,
            RlmOutcome::ExtractionFailed { .. } => FinishReason::NoAnswer,
            RlmOutcome::CallBudgetExhausted => FinishReason::CallBudgetExceeded,
            RlmOutcome::Stopped { reason } => reason.clone(),
            RlmOutcome::Failed { .. } => FinishReason::Fault,
        }
    }
}

/// The result of an RLM run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RlmResult {
    /// The result (valid against the output schema when `outcome.has_output()`; otherwise the
    /// best attempt, or `null`).
    pub output: Value,
    /// How the run ended.
    pub outcome: RlmOutcome,
    /// Whether the result came from `submit`.
    pub submitted: bool,
    /// Whether the result came from the final extraction call.
    pub extracted: bool,
    /// Every iteration: the model's code and the observations.
    pub trajectory: Vec<RlmIteration>,
    /// Primary-model iterations used (the extraction call not counted).
    pub iterations: u32,
    /// Model calls charged to the sub-call budget by this run and its child runs.
    pub sub_calls: u64,
    /// Usage including sub-calls and child runs.
    pub usage: Usage,
    /// USD cost including sub-calls and child runs (0 where prices are unknown).
    pub cost_usd: f64,
    /// The run's id in the run tree.
    pub run_id: String,
}
