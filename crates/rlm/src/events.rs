//! The RLM's run-tree events: typed, serde-tagged (`type` = `rlm_...`), rendered as the
//! readable lines the CLI shows, and read back by type (`EventKind::extension::<RlmEvent>()`).
//! Model calls, tool calls and the end of a run are core's own events. As spans: a run with
//! RLM events invokes an RLM; each iteration is a step span, code, observations and sub-calls
//! are notes on it (code, output, prompts and answers as content).

use recursive_core::event::{SpanAttr, SpanOn, SpanOp};
use recursive_core::text::one_line;
use recursive_core::{ExtensionEvent, RunnableKind, Usage};
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

    fn span_ops(&self) -> Vec<SpanOp> {
        let note = |name: &str, attrs| SpanOp::Note { on: SpanOn::Current, name: name.into(), attrs };
        let effect = match self {
            RlmEvent::RlmIteration { iteration, .. } => SpanOp::Step {
                key: format!("rlm-iteration:{iteration}"),
                name: format!("rlm iteration {iteration}"),
                attrs: vec![SpanAttr::new("recursive.rlm.iteration", u64::from(*iteration))],
            },
            RlmEvent::RlmSnippet { code, block, .. } => note(
                "rlm.snippet",
                vec![
                    SpanAttr::new("recursive.rlm.block", *block as u64),
                    SpanAttr::content("recursive.rlm.code", code.as_str()),
                ],
            ),
            RlmEvent::RlmObservation { observation, error, duration_ms, .. } => {
                let mut attrs = vec![SpanAttr::new("recursive.rlm.duration_ms", *duration_ms)];
                if let Some(e) = error {
                    attrs.push(SpanAttr::new("recursive.rlm.error", format!("{e:?}")));
                }
                attrs.push(SpanAttr::content("recursive.rlm.observation", observation.as_str()));
                note("rlm.observation", attrs)
            }
            RlmEvent::RlmSubCall { kind, prompt_chars, ok, error, prompt_head, answer_head, .. } => {
                let mut attrs = vec![
                    SpanAttr::new("recursive.rlm.sub_call", kind.as_str()),
                    SpanAttr::new("recursive.rlm.prompt_chars", *prompt_chars as u64),
                    SpanAttr::new("recursive.rlm.ok", *ok),
                ];
                if let Some(e) = error {
                    attrs.push(SpanAttr::new("recursive.rlm.error", e.as_str()));
                }
                attrs.push(SpanAttr::content("gen_ai.prompt", prompt_head.as_str()));
                attrs.push(SpanAttr::content("gen_ai.completion", answer_head.clone().unwrap_or_default()));
                note("rlm.sub_call", attrs)
            }
            RlmEvent::RlmFinished { outcome } => {
                let outcome = SpanAttr::new("recursive.rlm.outcome", outcome.as_str());
                return vec![
                    SpanOp::Claim(RunnableKind::Rlm),
                    SpanOp::Set { on: SpanOn::Run, attrs: vec![outcome] },
                    SpanOp::EndStep,
                ];
            }
            _ => return vec![SpanOp::Claim(RunnableKind::Rlm)],
        };
        vec![SpanOp::Claim(RunnableKind::Rlm), effect]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(op: &SpanOp) -> Vec<(String, bool)> {
        match op {
            SpanOp::Note { attrs, .. } | SpanOp::Step { attrs, .. } | SpanOp::Set { attrs, .. } => {
                attrs.iter().map(|a| (a.key.clone(), a.content)).collect()
            }
            _ => Vec::new(),
        }
    }

    #[test]
    fn an_iteration_is_a_step_span_of_an_rlm_run() {
        let ops = RlmEvent::RlmIteration { iteration: 2, max_iterations: 5, llm_calls_left: None }.span_ops();
        assert_eq!(ops[0], SpanOp::Claim(RunnableKind::Rlm));
        assert_eq!(
            ops[1],
            SpanOp::Step {
                key: "rlm-iteration:2".into(),
                name: "rlm iteration 2".into(),
                attrs: vec![SpanAttr::new("recursive.rlm.iteration", 2u64)],
            }
        );
    }

    #[test]
    fn code_output_prompts_and_answers_are_content_notes_on_the_iteration() {
        let snippet = RlmEvent::RlmSnippet { iteration: 1, block: 1, code: "print(1)".into() }.span_ops();
        assert!(matches!(&snippet[1], SpanOp::Note { on: SpanOn::Current, name, .. } if name == "rlm.snippet"));
        assert_eq!(attrs(&snippet[1]), [("recursive.rlm.block".into(), false), ("recursive.rlm.code".into(), true)]);
        let sub_call = RlmEvent::RlmSubCall {
            kind: "llm_query".into(),
            prompt_head: "p".into(),
            answer_head: Some("a".into()),
            prompt_chars: 1,
            response_chars: Some(1),
            latency_ms: 3,
            ok: true,
            error: None,
        };
        let content: Vec<String> =
            attrs(&sub_call.span_ops()[1]).into_iter().filter(|(_, content)| *content).map(|(k, _)| k).collect();
        assert_eq!(content, ["gen_ai.prompt", "gen_ai.completion"]);
    }

    #[test]
    fn the_end_of_an_rlm_sets_its_outcome_and_ends_the_iteration() {
        let ops = RlmEvent::RlmFinished { outcome: RlmOutcome::Submitted }.span_ops();
        assert_eq!(
            ops[1],
            SpanOp::Set { on: SpanOn::Run, attrs: vec![SpanAttr::new("recursive.rlm.outcome", "submitted")] }
        );
        assert_eq!(ops[2], SpanOp::EndStep);
    }
}
