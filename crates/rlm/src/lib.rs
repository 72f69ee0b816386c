//! Recursive language models (RLM): a long input lives as a variable inside a sandboxed
//! Python REPL (Monty, in a worker process); the primary model writes code to look at it, slice it and
//! call sub-models on the pieces (`llm_query`, `llm_query_batched`, `rlm_query`), then
//! `submit`s a result validated against an output schema. The primary model never sees the
//! full input, only an [`InputsSummary`] and what its code prints.
//!
//! Entry point: [`Rlm::new`] + [`Rlm::run`]. The sandbox session is usable on its own through
//! [`Sandbox`].
//!
//! ```no_run
//! # async fn demo(provider: std::sync::Arc<dyn recursive_core::ChatProvider>) -> Result<(), Box<dyn std::error::Error>> {
//! use recursive_rlm::{Inputs, Rlm, RlmConfig};
//! let rlm = Rlm::with_provider(provider, RlmConfig::default())?;
//! let inputs = Inputs::from_file("report", "report.txt")?;
//! let scope = recursive_core::RunScope::detached("rlm");
//! let result = rlm.run("Which risks does the report name?", inputs, &scope).await?;
//! println!("{} ({})", result.output, result.outcome.as_str());
//! # Ok(()) }
//! ```
//!
//! # Decisions
//!
//! - **Two call forms.** Every host function (primitives and host tools) can be called plainly
//!   (`r = llm_query(p)`, answered synchronously) or as a coroutine (`await llm_query(p)`, inside
//!   `asyncio.gather(...)`, `create_task(...)` or `wait_for(...)`, or in a list later passed to
//!   `gather(*tasks)`), answered with a future resolved concurrently. A pass over ruff's tokens
//!   ([`rewrite`]) renames the coroutine calls to an internal alias before the snippet runs, stands
//!   in for the `asyncio` functions Monty lacks (`create_task`, `wait_for`,
//!   `gather(..., return_exceptions=True)`), and error text shown to the model is renamed back.
//!   Awaiting a value that was already returned (`r = llm_query(p); await r`) cannot work; the
//!   observation then carries a hint showing the forms that do.
//! - **`submit` is terminal**: a valid `submit` stops the snippet at once, so nothing after it
//!   runs and nothing printed after it is shown. An invalid payload raises a `ValueError` naming
//!   each schema violation, and the loop goes on. When the output schema is an object with
//!   exactly one required property (the default `{"answer": string}` is), a bare value is
//!   accepted as that property: `submit("text")` means `submit({"answer": "text"})`. Keyword
//!   arguments build the object: `submit(answer="text")`.
//! - **Budget.** Each [`Rlm::run`] carves a node of `max_llm_calls` model calls from the run
//!   tree's budget (core's [`recursive_core::Budget`]), shared by the whole invocation tree;
//!   every model call goes through [`recursive_core::RunScope::call_model`] and every host
//!   tool through [`recursive_core::ToolInvoker`]. Each `llm_query` costs 1, a batch costs its size (all or nothing), each
//!   `rlm_query` costs 1, and a child run's own primary-model calls after its first (further
//!   iterations and its extraction call) cost 1 each, so a child cannot spend more than the
//!   budget its parent was given. The top-level run's own iterations are bounded by
//!   `max_iterations` instead and do not count. At zero, calls return `{"error": ...}`; a child
//!   that cannot pay for its next step ends with [`RlmOutcome::CallBudgetExhausted`].
//! - **Child runs** (`rlm_query`) use the default instructions and output schema; their answer
//!   string is returned as `{"result": answer}`. Without `inputs`, the prompt itself is the
//!   child's input (`inputs["prompt"]`), so a long prompt is read through code there too.
//! - **The sandbox is a worker process** running Monty ([`worker`]), so that its limits hold for
//!   any snippet and a crash ends only the worker; see [`sandbox`] for how each limit is enforced.
//!   The `recursive` binary is its own worker (started with [`WORKER_ARG`]); a library user's
//!   program either does the same (call [`worker::serve`]) or points [`set_default_worker`] at a
//!   worker binary such as this crate's `recursive-sandbox-worker`.

mod config;
pub mod convert;
pub mod cpython;
pub mod dialect;
pub mod durable;
pub mod error;
pub mod events;
mod host;
pub mod inputs;
mod output;
pub mod prompt;
pub mod reach;
pub mod repl;
mod result;
pub mod rewrite;
pub mod rlm;
pub mod runnable;
pub mod sandbox;
pub mod schema;
pub mod session;
pub mod trajectory;
pub mod wire;
pub mod worker;

pub use dialect::Dialect;
pub use durable::{Durable, RlmCheckpoint};
pub use error::{RlmError, RlmRunError};
pub use events::RlmEvent;
pub use inputs::{InputSummary, InputValue, Inputs, InputsSummary};
pub use prompt::SANDBOX_MODULES;
pub use prompt::{DEFAULT_INSTRUCTIONS, extract_code_blocks, parse_json_reply, truncate_middle};
pub use reach::{Reach, RunnableLoader};
pub use rlm::{
    DEFAULT_SUB_PROMPT_CHARS, PRIMITIVES, Rlm, RlmConfig, RlmIteration, RlmOutcome, RlmResult, RlmSnippet,
    sub_prompt_chars_for_window,
};
pub use sandbox::{
    Global, HostCall, HostReply, HostResult, NoHost, Sandbox, SandboxError, SandboxHost, SandboxLimits, SnippetError,
    SnippetErrorKind, SnippetOutcome, WORKER_ARG, WorkerCommand, set_default_worker,
};
pub use schema::{OutputSchema, default_output_schema};
pub use session::{RlmSession, needs_more_input};

/// Python objects as the sandbox exchanges them (re-exported from `monty-types`).
pub use monty_types::{ExcType, MontyException, MontyObject};
