//! How an RLM run behaves: [`RlmConfig`] (iterations, the sub-call budget, sandbox limits,
//! dialect, model options, the interpreter) and the sub-model prompt size it asks for.

use std::time::Duration;

use recursive_core::ChatOptions;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::dialect::Dialect;
use crate::repl::Backend;
use crate::sandbox::SandboxLimits;
use crate::schema::default_output_schema;

/// The sub-model prompt size the prompt asks for when the sub-model's window is unknown.
pub const DEFAULT_SUB_PROMPT_CHARS: usize = 100_000;

/// The sub-model prompt size for a context window of `tokens`: half the window at about four
/// characters a token, leaving room for the answer.
pub fn sub_prompt_chars_for_window(tokens: u32) -> usize {
    (tokens as usize).saturating_mul(2)
}

/// How an RLM run behaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RlmConfig {
    /// Primary-model turns before the final extraction call.
    pub max_iterations: u32,
    /// Sub-calls for the whole invocation tree: `llm_query` (1), `llm_query_batched` (its size,
    /// all or nothing), `rlm_query` (1) and every primary-model call of a child run after its
    /// first (see the crate docs and [`crate::RlmOutcome::CallBudgetExhausted`]).
    pub max_llm_calls: u32,
    /// How many levels of child RLMs `rlm_query` may start (1: the top-level run may start
    /// children, whose `rlm_query` is a plain `llm_query`).
    pub max_depth: u32,
    /// Sub-model calls in flight at once, over the whole invocation tree.
    pub batch_concurrency: usize,
    /// Wall-clock limit of one snippet (host calls included), reset for each snippet.
    #[serde(with = "recursive_core::serde_secs")]
    pub snippet_timeout: Duration,
    /// Memory one snippet may add; `None` for no limit.
    pub memory_limit_bytes: Option<usize>,
    /// Deepest Python call stack.
    pub recursion_limit: usize,
    /// Printed characters captured per snippet (head and tail are kept).
    pub max_output_chars: usize,
    /// Characters of one snippet's observation shown to the model (head and tail are kept).
    pub observation_max_chars: usize,
    /// JSON Schema of the result.
    pub output_schema: Value,
    /// Replaces the default working rules ([`crate::DEFAULT_INSTRUCTIONS`]).
    pub instructions: Option<String>,
    /// The conventions the sandbox and the prompt present (every dialect's finishing forms are
    /// understood whatever this is).
    pub dialect: Dialect,
    /// Characters of each sub-call's prompt and answer kept in its `rlm_sub_call` event (and so
    /// in the trajectory); 0 keeps none.
    pub trace_chars: usize,
    /// How long a sub-model prompt should be at most, in characters (the prompt says so; set it
    /// from the sub-model's context window when known).
    pub sub_prompt_chars: usize,
    /// Options of primary-model calls.
    pub primary_options: ChatOptions,
    /// Options of sub-model calls (`llm_query`...).
    pub sub_options: ChatOptions,
    /// The interpreter running the snippets (Monty by default).
    #[serde(default)]
    pub backend: Backend,
}

impl Default for RlmConfig {
    fn default() -> Self {
        let sandbox = SandboxLimits::default();
        Self {
            max_iterations: 20,
            max_llm_calls: 50,
            max_depth: 1,
            batch_concurrency: 64,
            snippet_timeout: sandbox.timeout,
            memory_limit_bytes: sandbox.memory_limit_bytes,
            recursion_limit: sandbox.recursion_limit,
            max_output_chars: sandbox.max_output_chars,
            observation_max_chars: 10_000,
            output_schema: default_output_schema(),
            instructions: None,
            dialect: Dialect::default(),
            sub_prompt_chars: DEFAULT_SUB_PROMPT_CHARS,
            trace_chars: 500,
            primary_options: ChatOptions::default(),
            sub_options: ChatOptions::default(),
            backend: Backend::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_serializes_timeout_as_seconds() {
        let v = serde_json::to_value(RlmConfig::default()).unwrap();
        assert_eq!(v["snippet_timeout"], 60.0);
        assert_eq!(v["max_llm_calls"], 50);
        let back: RlmConfig = serde_json::from_value(v).unwrap();
        assert_eq!(back, RlmConfig::default());
    }
}
