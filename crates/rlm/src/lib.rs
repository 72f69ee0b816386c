//! Recursive language models (RLM): a long input lives as a variable inside a sandboxed
//! Python REPL (Monty, in process); the primary model writes code to look at it, slice it and
//! call sub-models on the pieces (`llm_query`, `llm_query_batched`, `rlm_query`), then
//! `submit`s a result validated against an output schema. The primary model never sees the
//! full input, only an [`InputsSummary`] and what its code prints.
//!
//! Entry point: [`Rlm::new`] + [`Rlm::run`]. The sandbox session is usable on its own through
//! [`Sandbox`].

pub mod budget;
pub mod convert;
pub mod error;
pub mod inputs;
pub mod prompt;
pub mod rewrite;
pub mod rlm;
pub mod sandbox;
pub mod schema;

pub use budget::{BudgetExhausted, CallBudget};
pub use error::RlmError;
pub use inputs::{InputSummary, InputValue, Inputs, InputsSummary};
pub use prompt::{DEFAULT_INSTRUCTIONS, extract_code_blocks, parse_json_reply, truncate_middle};
pub use rlm::{PRIMITIVES, Rlm, RlmConfig, RlmIteration, RlmOutcome, RlmResult, RlmSnippet};
pub use sandbox::{
    HostCall, HostReply, HostResult, Sandbox, SandboxError, SandboxHost, SandboxLimits, SnippetError, SnippetErrorKind,
    SnippetOutcome,
};
pub use schema::{OutputSchema, default_output_schema};

/// Python objects as the sandbox exchanges them (re-exported from `monty-types`).
pub use monty_types::{ExcType, MontyException, MontyObject};
