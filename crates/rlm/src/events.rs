//! The RLM's run-tree events: typed, serde-tagged (`type` = `rlm_...`), rendered as the
//! readable lines the CLI shows, and read back by type (`EventKind::extension::<RlmEvent>()`).
//! Model calls, tool calls and the end of a run are core's own events.

use recursive_core::text::one_line;
use recursive_core::{ExtensionEvent, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::result::RlmOutcome;
use crate::sandbox::SnippetErrorKind;

/// Something that happened in an RLM run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RlmEvent {
    /// A primary-model iteration begins.
    RlmIteration {
        /// 1-based number.
        iteration: u32,
        /// The most iterations.
        max_iterations: u32,
        /// Sub-calls left in the shared budget.
        llm_calls_left: Option<u64>,
    },
    /// The primary model's reply of an iteration, whole.
    RlmReply {
        /// Its iteration.
        iteration: u32,
        /// The reply text.
        text: String,
    },
    /// A code block is about to run.
    RlmSnippet {
        /// Its iteration.
        iteration: u32,
        /// 1-based block number within the reply.
        block: usize,
        /// The code.
        code: String,
    },
    /// A code block ran.
    RlmObservation {
        /// Its iteration.
        iteration: u32,
        /// 1-based block number.
        block: usize,
        /// What the model is shown.
        observation: String,
        /// The kind of failure, if it failed.
        error: Option<SnippetErrorKind>,
        /// Whether a valid submit ended it.
        submitted: bool,
        /// Wall-clock time.
        duration_ms: u64,
        /// Host calls made.
        host_calls: usize,
    },
    /// A sub-model call (`llm_query`, one prompt of `llm_query_batched`, a fallback
    /// `rlm_query`) ended.
    RlmSubCall {
        /// Which primitive made it.
        kind: String,
        /// The head of the prompt (`RlmConfig::trace_chars` characters).
        #[serde(default)]
        prompt_head: String,
        /// The head of the answer, when it succeeded.
        #[serde(default)]
        answer_head: Option<String>,
        /// Prompt size.
        prompt_chars: usize,
        /// Answer size, when it succeeded.
        response_chars: Option<usize>,
        /// How long it took.
        latency_ms: u64,
        /// Whether it succeeded.
        ok: bool,
        /// Why not.
        error: Option<String>,
    },
    /// `submit` was called.
    RlmSubmit {
        /// Whether the result matched the output schema.
        valid: bool,
        /// What did not match.
        errors: Option<Vec<String>>,
        /// The result as submitted (normalised).
        output: Value,
    },
    /// `rlm_query` started a child RLM.
    RlmChildStarted {
        /// The child's run id.
        child_run_id: String,
        /// Its depth in the run tree.
        depth: u32,
        /// Its RLM level.
        rlm_depth: u32,
        /// Prompt size.
        prompt_chars: usize,
        /// Its input names.
        inputs: Vec<String>,
    },
    /// A child RLM ended.
    RlmChildFinished {
        /// The child's run id.
        child_run_id: String,
        /// How it ended (none when a fault ended it).
        outcome: Option<RlmOutcome>,
        /// Its iterations.
        iterations: u32,
        /// Model calls charged to the sub-call budget by it and its descendants.
        sub_calls: u64,
        /// Its usage.
        usage: Usage,
        /// Its cost.
        cost_usd: f64,
        /// The fault that ended it.
        error: Option<String>,
    },
    /// `rlm_query` answered with a plain sub-model call instead of a child RLM.
    RlmChildFallback {
        /// Why (`max_depth`, the run tree's depth cap).
        reason: String,
        /// Prompt size.
        prompt_chars: usize,
    },
    /// A durable run resumed from its checkpoint (its cells are replayed once the REPL starts).
    RlmResumed {
        /// Iterations the checkpoint had completed.
        iteration: u32,
        /// Cells to replay.
        cells: usize,
    },
    /// The iterations ran out; the final extraction call is made.
    RlmExtraction {
        /// Its step.
        step: u32,
    },
    /// The extraction reply was not a valid result.
    RlmExtractionFailed {
        /// What was wrong.
        errors: Vec<String>,
    },
    /// The run ended this way (the `run_finished` event follows).
    RlmFinished {
        /// How.
        outcome: RlmOutcome,
    },
}

impl RlmEvent {
    /// Wraps the event for [`recursive_core::RunScope::emit`].
    pub fn into_kind(self) -> recursive_core::EventKind {
        recursive_core::EventKind::Extension(recursive_core::Extension::new(self))
    }
}

impl ExtensionEvent for RlmEvent {
    fn to_json(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    fn render(&self) -> Option<String> {
        Some(match self {
            RlmEvent::RlmIteration { iteration, llm_calls_left, .. } => format!(
                "— iteration {iteration} ({} sub-calls left)",
                llm_calls_left.map(|n| n.to_string()).unwrap_or_else(|| "unlimited".into())
            ),
            RlmEvent::RlmSnippet { code, .. } => format!("▷ code: {}", one_line(code, 160)),
            RlmEvent::RlmObservation { observation, .. } => format!("◁ {}", one_line(observation, 200)),
            RlmEvent::RlmSubCall { kind, prompt_chars, latency_ms, ok, error, .. } => format!(
                "↳ {kind} ({prompt_chars} prompt chars, {latency_ms} ms){}",
                if *ok { String::new() } else { format!(" failed: {}", one_line(error.as_deref().unwrap_or(""), 120)) }
            ),
            RlmEvent::RlmSubmit { valid: true, .. } => "✓ submitted".to_string(),
            RlmEvent::RlmSubmit { errors, .. } => {
                format!("✗ submit rejected: {}", one_line(&errors.clone().unwrap_or_default().join("; "), 200))
            }
            RlmEvent::RlmChildStarted { .. } | RlmEvent::RlmChildFinished { .. } | RlmEvent::RlmReply { .. } => {
                return None;
            }
            RlmEvent::RlmChildFallback { reason, .. } => format!("↳ rlm_query answered by a sub-model ({reason})"),
            RlmEvent::RlmResumed { iteration, cells } => {
                format!("— resumed after iteration {iteration} ({cells} cell(s) to replay)")
            }
            RlmEvent::RlmExtraction { .. } => "— extracting the answer from the trajectory".to_string(),
            RlmEvent::RlmExtractionFailed { errors } => {
                format!("✗ extraction failed: {}", one_line(&errors.join("; "), 200))
            }
            RlmEvent::RlmFinished { outcome } => format!("rlm {}", outcome.as_str()),
        })
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
