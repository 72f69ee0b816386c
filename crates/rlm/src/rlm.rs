//! The RLM loop: the primary model writes Python against the inputs held in a sandboxed REPL,
//! each reply's code blocks run and their output comes back as observations, until the model
//! `submit`s a result that matches the output schema (or the iterations run out and one final
//! extraction call asks for the result). Sub-model calls, child RLMs and host tools are the
//! host functions of the sandbox; all of them land in the caller's run tree.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use monty_types::{ExcType, MontyException, MontyObject};
use recursive_core::{
    BudgetLimits, ChatOptions, ChatProvider, ChatRequest, ChatResponse, EventKind, FinishReason, Message, ModelCall,
    ModelCallError, RunInput, RunScope, RunnableKind, ToolCall, ToolInvoker, ToolRegistry, Usage, run_child,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

use crate::convert::{dict_pairs, is_none, json_to_monty, monty_to_json, prompt_text, prompt_texts};
use crate::dialect::{Dialect, FINISHERS, final_in_text, is_identifier, prose, strip_thinking};
use crate::error::{RlmError, RlmRunError};
use crate::events::RlmEvent;
use crate::inputs::{InputValue, Inputs};
use crate::prompt::{
    CatalogFacts, DEFAULT_INSTRUCTIONS, NO_CODE_OBSERVATION, argument_order, catalog, extract_code_blocks,
    parse_json_reply, snippet_observation, truncate_middle,
};
use crate::reach::{Extra, Reach, split_args, text_arg};
use crate::repl::{Backend, Repl};
use crate::sandbox::{HostCall, HostReply, SandboxError, SandboxHost, SandboxLimits, SnippetErrorKind};
use crate::schema::{OutputSchema, default_output_schema};

/// Names of the sandbox primitives (with the run tree's functions of [`crate::reach`]); host
/// tools cannot use them.
pub const PRIMITIVES: [&str; 12] = [
    "llm_query",
    "llm_query_batched",
    "rlm_query",
    "submit",
    "SUBMIT",
    "FINAL",
    "FINAL_VAR",
    "model_query",
    "tool_call",
    "agent_query",
    "goal_query",
    "graph_run",
];

/// Characters of each input shown in the preview (head and tail together).
const PREVIEW_CHARS: usize = 600;
/// A child run's question is its prompt up to this size; longer prompts are read from its inputs.
const CHILD_QUESTION_MAX_CHARS: usize = 4000;

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
    /// first (see the crate docs and [`RlmOutcome::CallBudgetExhausted`]).
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
    /// Replaces the default working rules ([`DEFAULT_INSTRUCTIONS`]).
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

/// How an RLM run ended. Every variant is a normal end; faults are [`RlmRunError`]s.
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

/// A recursive language model: a primary model working in a sandboxed REPL over the inputs,
/// with a sub-model for `llm_query`.
#[derive(Clone)]
pub struct Rlm {
    primary: Arc<dyn ChatProvider>,
    sub: Arc<dyn ChatProvider>,
    config: RlmConfig,
    schema: Arc<OutputSchema>,
    child_schema: Arc<OutputSchema>,
    tools: ToolInvoker,
    reach: Reach,
    name: String,
    description: Option<String>,
    durable: Option<crate::durable::Durable>,
}

impl std::fmt::Debug for Rlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rlm")
            .field("primary", &self.primary.name())
            .field("sub", &self.sub.name())
            .field("config", &self.config)
            .field("tools", &self.tools)
            .finish()
    }
}

/// Python keywords and builtins a host tool may not be named after (they would shadow it).
const UNUSABLE_NAMES: &[&str] = &[
    "False",
    "None",
    "True",
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "class",
    "continue",
    "def",
    "del",
    "elif",
    "else",
    "except",
    "finally",
    "for",
    "from",
    "global",
    "if",
    "import",
    "in",
    "is",
    "lambda",
    "nonlocal",
    "not",
    "or",
    "pass",
    "raise",
    "return",
    "try",
    "while",
    "with",
    "yield",
    "abs",
    "all",
    "any",
    "bool",
    "bytes",
    "callable",
    "chr",
    "dict",
    "dir",
    "divmod",
    "enumerate",
    "eval",
    "exec",
    "filter",
    "float",
    "format",
    "getattr",
    "globals",
    "hasattr",
    "hash",
    "help",
    "id",
    "input",
    "int",
    "isinstance",
    "iter",
    "len",
    "list",
    "locals",
    "map",
    "max",
    "min",
    "next",
    "object",
    "open",
    "ord",
    "pow",
    "print",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "inputs",
    "context",
    "asyncio",
    "json",
    "re",
];

impl Rlm {
    /// An RLM with a primary and a sub-model provider (they may be the same).
    pub fn new(
        primary: Arc<dyn ChatProvider>,
        sub: Arc<dyn ChatProvider>,
        config: RlmConfig,
    ) -> Result<Self, RlmError> {
        let schema = Arc::new(OutputSchema::new(config.output_schema.clone())?);
        let child_schema = Arc::new(OutputSchema::new(default_output_schema())?);
        Ok(Self {
            primary,
            sub,
            config,
            schema,
            child_schema,
            tools: ToolInvoker::default(),
            reach: Reach::default(),
            name: "rlm".into(),
            description: None,
            durable: None,
        })
    }

    /// An RLM that uses one provider for both the primary and the sub-model (the model names
    /// come from `config.primary_options` / `config.sub_options`).
    pub fn with_provider(provider: Arc<dyn ChatProvider>, config: RlmConfig) -> Result<Self, RlmError> {
        Self::new(provider.clone(), provider, config)
    }

    /// Makes the invoker's tools callable from snippets; each call goes through the invoker
    /// (its permission gate, timeout, output cap and events), as in the agent loop. Names must
    /// be Python identifiers that are not keywords, common builtins, or the primitives
    /// (`llm_query`, `llm_query_batched`, `rlm_query`, `submit`).
    pub fn with_host_tools(mut self, tools: ToolInvoker) -> Result<Self, RlmError> {
        for name in tools.tools().names() {
            check_tool_name(&name)?;
        }
        self.tools = tools;
        Ok(self)
    }

    /// The runnables its code may start (`agent_query`, `goal_query`, `graph_run`,
    /// `rlm_query(..., name=...)`; see [`crate::reach`]).
    pub fn with_reach(mut self, reach: Reach) -> Self {
        self.reach = reach;
        self
    }

    /// The runnables its code may start.
    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    /// Names this RLM as a runnable (its tool, delegate or node name; default `rlm`) and says
    /// what it is for.
    pub fn with_identity(mut self, name: impl Into<String>, description: Option<String>) -> Self {
        self.name = name.into();
        self.description = description;
        self
    }

    /// Its name as a runnable.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it is for, when said.
    pub fn described(&self) -> Option<&str> {
        self.description.as_deref()
    }

    /// The configuration.
    pub fn config(&self) -> &RlmConfig {
        &self.config
    }

    /// The host tools.
    pub fn host_tools(&self) -> &ToolRegistry {
        self.tools.tools()
    }

    /// Makes the top-level run durable: a checkpoint after every iteration in `durable.slot`,
    /// and a run whose slot already holds one resumes from it (see [`crate::durable`]).
    pub fn with_durable(mut self, durable: crate::durable::Durable) -> Self {
        self.durable = Some(durable);
        self
    }

    /// The name of a durable run's checkpoint slot, if this is one.
    pub fn durable_key(&self) -> Option<String> {
        self.durable.as_ref().map(|d| d.slot.name())
    }

    /// Answers `question` over `inputs` as a run in `scope` (events go to the scope's sink;
    /// usage and cost roll up the tree; the tree's budget is honoured before each model call).
    ///
    /// Each call carves its sub-call budget from the scope's budget: a node of the budget tree
    /// limited to `max_llm_calls` model calls, which every sub-call and every model call of a
    /// child RLM is charged to. A fault returns everything gathered so far in
    /// [`RlmRunError::partial`].
    pub async fn run(&self, question: &str, inputs: Inputs, scope: &RunScope) -> Result<RlmResult, RlmRunError> {
        let engine = Arc::new(self.clone());
        let (tree, node) = self.top_node(scope);
        engine.run_node(question, inputs, scope, tree, node).await
    }
}

fn check_tool_name(name: &str) -> Result<(), RlmError> {
    let bad = |reason: &str| Err(RlmError::ToolName { name: name.to_string(), reason: reason.to_string() });
    if PRIMITIVES.contains(&name) {
        return bad("the name is reserved for a sandbox primitive");
    }
    let mut chars = name.chars();
    let ident = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ident {
        return bad("the name is not a Python identifier");
    }
    if name.starts_with("__rlm") {
        return bad("names starting with `__rlm` are reserved");
    }
    if UNUSABLE_NAMES.contains(&name) {
        return bad("the name is a Python keyword, builtin or sandbox variable");
    }
    Ok(())
}

/// Shared by every run of one invocation tree.
pub(crate) struct Tree {
    /// Sub-model calls in flight at once.
    semaphore: Arc<Semaphore>,
}

/// Where a run sits among the RLM levels.
#[derive(Clone)]
pub(crate) struct Node {
    /// 0 for the top-level run.
    rlm_depth: u32,
    /// The scope sub-calls and child runs are made in: this run's node of the run tree, with
    /// the budget node they are charged to (the sub-call budget, or a child run's own node
    /// under it).
    sub_scope: RunScope,
    /// The run's first primary call was reserved by the `rlm_query` that started it.
    first_reserved: bool,
}

impl Node {
    /// Reserves `n` sub-calls, or says why not (nothing is spent then).
    fn reserve(&self, total: u32, n: u64) -> Result<(), String> {
        let budget = self.sub_scope.budget();
        budget.reserve_calls(n).map_err(|reason| match reason {
            FinishReason::CallBudgetExceeded => format!(
                "the sub-call budget is spent: {n} call(s) needed, {} of {} left",
                budget.calls_left().unwrap_or(0),
                total
            ),
            other => format!("the run must stop: {other}"),
        })
    }

    /// Model calls charged under this node.
    fn calls(&self) -> u64 {
        self.sub_scope.budget().calls_used()
    }

    fn calls_left(&self) -> Option<u64> {
        self.sub_scope.budget().calls_left()
    }
}

enum Primary {
    Reply(ChatResponse),
    Stop(RlmOutcome),
}

/// What a run has gathered so far (also what a fault leaves behind).
#[derive(Default)]
struct Progress {
    trajectory: Vec<RlmIteration>,
    iterations: u32,
}

impl Rlm {
    fn schema_for(&self, node: &Node) -> &Arc<OutputSchema> {
        if node.rlm_depth == 0 { &self.schema } else { &self.child_schema }
    }

    fn sandbox_limits(&self) -> SandboxLimits {
        SandboxLimits {
            timeout: self.config.snippet_timeout,
            memory_limit_bytes: self.config.memory_limit_bytes,
            recursion_limit: self.config.recursion_limit,
            max_output_chars: self.config.max_output_chars,
            ..SandboxLimits::default()
        }
    }

    fn system_prompt(&self, inputs: &Inputs, node: &Node) -> String {
        let schema = self.schema_for(node);
        let instructions = match (&self.config.instructions, node.rlm_depth) {
            (Some(custom), 0) => custom.as_str(),
            _ => DEFAULT_INSTRUCTIONS,
        };
        let summary = inputs.summary(PREVIEW_CHARS);
        let sub_model = if self.config.sub_options.model.is_empty() {
            self.sub.default_model()
        } else {
            &self.config.sub_options.model
        };
        let specs = self.tools.tools().specs();
        let facts = CatalogFacts {
            dialect: self.config.dialect,
            full_python: matches!(self.config.backend, Backend::CPython(_)),
            sub_prompt_chars: self.config.sub_prompt_chars,
            context_alias: summary.context_alias.as_deref(),
            timeout_secs: self.config.snippet_timeout.as_secs_f64(),
            memory_limit_bytes: self.config.memory_limit_bytes,
            recursion_limit: self.config.recursion_limit,
            observation_max_chars: self.config.observation_max_chars,
            batch_concurrency: self.config.batch_concurrency.max(1),
            max_llm_calls: self.config.max_llm_calls,
            sub_model,
            rlm_levels_left: self.config.max_depth.saturating_sub(node.rlm_depth),
            tools: &specs,
            runnables: !self.reach.is_empty(),
            schema: schema.schema(),
            wrap_key: schema.wrap_key(),
        };
        format!("{instructions}\n\n{}", catalog(&facts))
    }

    async fn call_primary(&self, scope: &RunScope, call: ModelCall, messages: &[Message]) -> Result<Primary, RlmError> {
        let request = ChatRequest {
            messages: messages.to_vec(),
            tools: Vec::new(),
            options: self.config.primary_options.clone(),
        };
        match scope.call_model(self.primary.as_ref(), request, call).await {
            Ok(response) => {
                scope.emit(call.step, EventKind::AssistantText { text: response.message.content.clone() });
                Ok(Primary::Reply(response))
            }
            Err(ModelCallError::Stopped(FinishReason::CallBudgetExceeded)) => {
                Ok(Primary::Stop(RlmOutcome::CallBudgetExhausted))
            }
            Err(ModelCallError::Stopped(reason)) => Ok(Primary::Stop(RlmOutcome::Stopped { reason })),
            Err(ModelCallError::Provider(e)) => Err(e.into()),
        }
    }

    /// Runs one RLM node (the top-level run or a child) to its end: `rlm_finished` and
    /// `run_finished` events close it, also after a fault, which keeps what was gathered.
    async fn run_node(
        self: Arc<Self>,
        question: &str,
        inputs: Inputs,
        scope: &RunScope,
        tree: Arc<Tree>,
        node: Node,
    ) -> Result<RlmResult, RlmRunError> {
        scope.emit(0, EventKind::RunStarted { goal: question.to_string() });
        let mut progress = Progress::default();
        let ended = self.clone().iterate(question, inputs, scope, &tree, &node, &mut progress).await;
        let (output, outcome, error) = match ended {
            Ok((output, outcome)) => (output, outcome, None),
            Err(e) => (Value::Null, RlmOutcome::Failed { error: e.to_string() }, Some(e)),
        };
        let usage = scope.usage();
        let cost_usd = scope.cost_usd();
        scope.emit(progress.iterations, RlmEvent::RlmFinished { outcome: outcome.clone() }.into_kind());
        scope.emit(
            progress.iterations,
            EventKind::RunFinished {
                finish_reason: outcome.finish_reason(),
                error: error.as_ref().map(ToString::to_string),
                usage,
                cost_usd,
            },
        );
        let result = RlmResult {
            output,
            submitted: outcome == RlmOutcome::Submitted,
            extracted: outcome == RlmOutcome::Extracted,
            outcome,
            trajectory: progress.trajectory,
            iterations: progress.iterations,
            sub_calls: node.calls(),
            usage,
            cost_usd,
            run_id: scope.ids().run_id.clone(),
        };
        match error {
            None => Ok(result),
            Some(error) => Err(RlmRunError { error, partial: Box::new(result) }),
        }
    }

    /// The iterations and, when they run out, the extraction.
    async fn iterate(
        self: Arc<Self>,
        question: &str,
        inputs: Inputs,
        scope: &RunScope,
        tree: &Arc<Tree>,
        node: &Node,
        progress: &mut Progress,
    ) -> Result<(Value, RlmOutcome), RlmError> {
        let schema = self.schema_for(node).clone();
        let mut messages = vec![
            Message::system(self.system_prompt(&inputs, node)),
            Message::user(format!(
                "Question:\n{question}\n\nInputs (read them through `inputs[...]`; the previews are not the \
                 data):\n{}",
                inputs.summary(PREVIEW_CHARS).render()
            )),
        ];
        // Only the top-level run keeps checkpoints (its children are redone if it is resumed
        // mid-iteration, like any unfinished call).
        let durable = self.durable.clone().filter(|_| node.rlm_depth == 0);
        let mut cells: Vec<crate::durable::Cell> = Vec::new();
        let mut first = 1;
        if let Some(d) = &durable
            && let Some(checkpoint) = d.load().await.map_err(RlmError::Checkpoint)?
        {
            match self.resume_from(checkpoint, question, scope, node, &mut messages, &mut cells, progress) {
                Ok(Some(done)) => return Ok((done, RlmOutcome::Submitted)),
                Ok(None) => first = progress.iterations + 1,
                Err(e) if d.strict => return Err(e),
                // Another question or other inputs in this slot: this run starts afresh.
                Err(_) => {}
            }
        }
        // The worker starts while the first model call is in flight.
        let start = self.start_repl(inputs);
        let mut starting = Some(tokio_util::task::AbortOnDropHandle::new(tokio::spawn(start)));
        let mut ready: Option<Box<dyn Repl>> = None;
        let host = Arc::new(RunHost::new(self.clone(), tree.clone(), scope, node, schema.clone()));
        let max = self.config.max_iterations;
        let mut replay = std::mem::take(&mut cells);
        for iteration in first..=max {
            host.step.store(iteration, Ordering::SeqCst);
            scope.emit(
                iteration,
                RlmEvent::RlmIteration { iteration, max_iterations: max, llm_calls_left: node.calls_left() }
                    .into_kind(),
            );
            let call = ModelCall { reserved: node.first_reserved && iteration == 1, ..ModelCall::at(iteration) };
            let response = match self.call_primary(scope, call, &messages).await? {
                Primary::Reply(r) => r,
                Primary::Stop(outcome) => return Ok((Value::Null, outcome)),
            };
            progress.iterations = iteration;
            let reply = response.message.content.clone();
            scope.emit(iteration, RlmEvent::RlmReply { iteration, text: reply.clone() }.into_kind());
            messages.push(Message::assistant(reply.clone()));
            if let Some(start) = starting.take() {
                let started =
                    start.await.map_err(|e| RlmError::Sandbox(crate::sandbox::SandboxError::Worker(e.to_string())))?;
                ready = Some(started?);
            }
            let Some(sandbox) = ready.as_deref() else { break };
            if !replay.is_empty() {
                let restored = std::mem::take(&mut replay);
                self.replay_cells(sandbox, &host, scope, &restored).await;
                cells = restored;
            }
            let recorder = durable.as_ref().map(|_| &mut cells);
            let (snippets, mut parts, submitted) =
                self.run_blocks(sandbox, &host, scope, iteration, &reply, recorder).await;
            let left = max - iteration;
            if submitted.is_none() {
                // A child's footer leaves out the shared budget: concurrent siblings spend from it,
                // so the number would depend on timing and a recorded run could not replay.
                let mut footer = if node.rlm_depth == 0 {
                    format!(
                        "[{left} iteration(s) left; {} of {} sub-calls left]",
                        node.calls_left().unwrap_or(0),
                        self.config.max_llm_calls
                    )
                } else {
                    format!("[{left} iteration(s) left]")
                };
                if left == 1 {
                    footer.push_str("\nThis is your last iteration: call submit(...) with your best result now.");
                }
                parts.push(footer);
            }
            let observation = parts.join("\n");
            messages.push(Message::user(observation.clone()));
            progress.trajectory.push(RlmIteration { iteration, reply, snippets, observation });
            if let Some(d) = &durable {
                let checkpoint = crate::durable::RlmCheckpoint {
                    version: crate::durable::CHECKPOINT_VERSION,
                    meta: d.meta.clone(),
                    question: question.to_string(),
                    iteration,
                    messages: messages.clone(),
                    trajectory: progress.trajectory.clone(),
                    cells: cells.clone(),
                    usage: scope.usage(),
                    cost_usd: scope.cost_usd(),
                    sub_calls: node.calls(),
                    submitted: submitted.clone(),
                };
                d.save(&checkpoint).await.map_err(RlmError::Checkpoint)?;
            }
            if let Some(payload) = submitted {
                return Ok((payload, RlmOutcome::Submitted));
            }
        }
        drop((ready, starting));
        self.extract(scope, &schema, &mut messages, max + 1).await
    }

    /// Runs the code blocks of one reply in order, stopping at a submit or a failure. Returns
    /// the snippets, the observation parts and the submitted payload, if any.
    async fn run_blocks(
        &self,
        sandbox: &dyn Repl,
        host: &Arc<RunHost>,
        scope: &RunScope,
        iteration: u32,
        reply: &str,
        mut cells: Option<&mut Vec<crate::durable::Cell>>,
    ) -> (Vec<RlmSnippet>, Vec<String>, Option<Value>) {
        let reply = strip_thinking(reply);
        let mut blocks = extract_code_blocks(&reply);
        let final_line = final_in_text(&prose(&reply));
        blocks.extend(final_line);
        let mut snippets = Vec::new();
        let mut parts: Vec<String> = Vec::new();
        if blocks.is_empty() {
            parts.push(NO_CODE_OBSERVATION.to_string());
        }
        let total = blocks.len();
        for (i, code) in blocks.iter().enumerate() {
            scope.emit(iteration, RlmEvent::RlmSnippet { iteration, block: i + 1, code: code.clone() }.into_kind());
            // Cancellation and the tree's deadline both end a snippet.
            let stop = scope.stop_token();
            let mut outcome = match cells.as_deref_mut() {
                Some(cells) => {
                    // A durable run records how every call of the cell was answered.
                    let recording = Arc::new(crate::durable::RecordingHost::new(host.clone()));
                    let outcome = sandbox.execute(code, recording.clone(), &stop).await;
                    cells.push(crate::durable::Cell { code: code.clone(), calls: recording.calls() });
                    outcome
                }
                None => sandbox.execute(code, host.clone(), &stop).await,
            };
            stopped_by_tree(&mut outcome, scope);
            if outcome.finished.is_none() && outcome.error.is_none() && code.contains("answer") {
                // rlms' convention: `answer = {"content": ..., "ready": True}` finishes the run.
                let check = sandbox.execute("__rlm_check_answer()", host.clone(), &stop).await;
                if check.finished.is_some() || check.error.is_some() {
                    outcome.finished = check.finished;
                    outcome.error = check.error;
                    outcome.stdout.push_str(&check.stdout);
                }
            }
            let observation = if outcome.finished.is_some() {
                let shown = truncate_middle(outcome.stdout.trim_end(), self.config.observation_max_chars);
                if shown.is_empty() { "(submitted)".to_string() } else { format!("{shown}\n(submitted)") }
            } else {
                truncate_middle(&snippet_observation(&outcome), self.config.observation_max_chars)
            };
            let error = outcome.error.as_ref().map(|e| e.kind);
            scope.emit(
                iteration,
                RlmEvent::RlmObservation {
                    iteration,
                    block: i + 1,
                    observation: observation.clone(),
                    error,
                    submitted: outcome.finished.is_some(),
                    duration_ms: outcome.duration_ms,
                    host_calls: outcome.host_calls,
                }
                .into_kind(),
            );
            let header = if total > 1 { format!("--- block {} of {total} ---\n", i + 1) } else { String::new() };
            parts.push(format!("{header}{observation}"));
            snippets.push(RlmSnippet {
                code: code.clone(),
                observation,
                error,
                submitted: outcome.finished.is_some(),
                duration_ms: outcome.duration_ms,
            });
            if let Some(payload) = outcome.finished {
                return (snippets, parts, Some(payload));
            }
            if error.is_some() && i + 1 < total {
                parts.push(format!(
                    "[the remaining {} block(s) did not run because block {} failed]",
                    total - i - 1,
                    i + 1
                ));
                break;
            }
        }
        (snippets, parts, None)
    }

    /// Takes a checkpoint of this run in: the conversation, trajectory and spend restored, the
    /// cells to replay returned through `cells`. Returns the result when the run had already
    /// submitted one.
    #[allow(clippy::too_many_arguments)]
    fn resume_from(
        &self,
        checkpoint: crate::durable::RlmCheckpoint,
        question: &str,
        scope: &RunScope,
        node: &Node,
        messages: &mut Vec<Message>,
        cells: &mut Vec<crate::durable::Cell>,
        progress: &mut Progress,
    ) -> Result<Option<Value>, RlmError> {
        if checkpoint.version != crate::durable::CHECKPOINT_VERSION {
            return Err(RlmError::Checkpoint(format!("format version {} is not understood", checkpoint.version)));
        }
        if checkpoint.question != question {
            return Err(RlmError::Checkpoint("it is of another question".into()));
        }
        if checkpoint.messages.get(1) != messages.get(1) {
            return Err(RlmError::Checkpoint("its inputs differ from this run's".into()));
        }
        // A journaled run's host restored the whole tree's spend, this node's included.
        if !self.durable.as_ref().is_some_and(|d| d.spend_restored) && scope.journal().is_none() {
            scope.record_usage(&checkpoint.usage, Some(checkpoint.cost_usd));
        }
        let _ = node.sub_scope.budget().reserve_calls(checkpoint.sub_calls);
        progress.iterations = checkpoint.iteration;
        progress.trajectory = checkpoint.trajectory;
        *messages = checkpoint.messages;
        *cells = checkpoint.cells;
        scope.emit(
            checkpoint.iteration,
            RlmEvent::RlmResumed { iteration: checkpoint.iteration, cells: cells.len() }.into_kind(),
        );
        Ok(checkpoint.submitted)
    }

    /// Executes the cells of a checkpoint again in a fresh REPL, their asynchronous calls
    /// answered from it, so the REPL's variables are back.
    async fn replay_cells(
        &self,
        sandbox: &dyn Repl,
        host: &Arc<RunHost>,
        scope: &RunScope,
        cells: &[crate::durable::Cell],
    ) {
        for cell in cells {
            let replaying = Arc::new(crate::durable::ReplayHost::new(host.clone(), cell.calls.clone()));
            let _ = sandbox.execute(&cell.code, replaying, &scope.stop_token()).await;
        }
    }

    /// The final extraction call after the iterations ran out.
    async fn extract(
        &self,
        scope: &RunScope,
        schema: &OutputSchema,
        messages: &mut Vec<Message>,
        step: u32,
    ) -> Result<(Value, RlmOutcome), RlmError> {
        messages.push(Message::user(format!(
            "You have used all {} iterations without a valid submit. From the work above, give the final result \
             now. Reply with only a JSON value that matches this schema (no code, no other text):\n```json\n{}\n```",
            self.config.max_iterations,
            schema.schema()
        )));
        scope.emit(step, RlmEvent::RlmExtraction { step }.into_kind());
        let response = match self.call_primary(scope, ModelCall::at(step), messages).await? {
            Primary::Reply(r) => r,
            Primary::Stop(outcome) => return Ok((Value::Null, outcome)),
        };
        let text = response.message.content;
        let parsed = match parse_json_reply(&text) {
            Some(v) => Some(schema.normalize(v)),
            None => {
                let wrapped = schema.normalize(Value::String(text.trim().to_string()));
                wrapped.is_object().then_some(wrapped)
            }
        };
        let verdict = match &parsed {
            None => Err(vec!["the extraction reply contained no JSON".to_string()]),
            Some(value) => schema.validate(value),
        };
        match verdict {
            Ok(()) => Ok((parsed.unwrap_or(Value::Null), RlmOutcome::Extracted)),
            Err(errors) => {
                scope.emit(step, RlmEvent::RlmExtractionFailed { errors: errors.clone() }.into_kind());
                Ok((parsed.unwrap_or(Value::String(text)), RlmOutcome::ExtractionFailed { errors }))
            }
        }
    }
}

impl Rlm {
    /// Starts the sandbox of a run over `inputs`: the inputs bound (as `inputs`, `context` when
    /// there is one, each by name in the dspy dialect), the usual imports, and every host
    /// function. The inputs move into the sandbox (which keeps them to bind again after a
    /// worker restart).
    pub(crate) fn start_repl(
        &self,
        inputs: Inputs,
    ) -> impl std::future::Future<Output = Result<Box<dyn Repl>, SandboxError>> + Send + 'static {
        let alias = (inputs.len() == 1).then(|| inputs.iter().next().map(|(name, _)| name.to_string())).flatten();
        let input_names: Vec<String> = inputs.iter().map(|(n, _)| n.to_string()).collect();
        let (globals, bind_inputs) = inputs.into_bindings();
        let mut setup = format!("{bind_inputs}import asyncio\nimport json\nimport re\n");
        if let Some(name) = alias {
            setup.push_str(&format!("context = inputs[{}]\n", Value::String(name)));
        }
        if self.config.dialect.binds_inputs_by_name() {
            for name in input_names.iter().filter(|n| is_identifier(n) && !PRIMITIVES.contains(&n.as_str())) {
                setup.push_str(&format!("{name} = inputs[{}]\n", Value::String(name.clone())));
            }
        }
        setup.push_str(ANSWER_CHECK);
        if self.config.dialect == Dialect::Rlm {
            // rlms' convention: `answer` waits for its content; `answer["ready"] = True` ends the run.
            setup.push_str(ANSWER_PREDEFINED);
        }
        let limits = self.sandbox_limits();
        let backend = self.config.backend.clone();
        let mut host_functions: Vec<String> = PRIMITIVES.iter().map(|p| p.to_string()).collect();
        host_functions.extend(self.tools.tools().names());
        async move { crate::repl::start(&backend, limits, globals, host_functions, &setup).await }
    }

    /// The budget node and call limiter of a top-level run in `scope`.
    pub(crate) fn top_node(&self, scope: &RunScope) -> (Arc<Tree>, Node) {
        let tree = Arc::new(Tree { semaphore: Arc::new(Semaphore::new(self.config.batch_concurrency.max(1))) });
        let limits = BudgetLimits { max_model_calls: Some(u64::from(self.config.max_llm_calls)), ..Default::default() };
        let node = Node { rlm_depth: 0, sub_scope: scope.clone().with_budget(limits), first_reserved: false };
        (tree, node)
    }

    /// The schema of a top-level run's result.
    pub(crate) fn schema(&self) -> &Arc<OutputSchema> {
        &self.schema
    }
}

/// Run after a snippet that mentions `answer`: finishes with `answer["content"]` when `answer`
/// is a dict marked `"ready": True` (the rlms library's convention).
/// The `answer` the rlm dialect starts with.
const ANSWER_PREDEFINED: &str = "answer = {'content': '', 'ready': False}\n";

const ANSWER_CHECK: &str = "def __rlm_check_answer():
    try:
        a = answer
    except NameError:
        return None
    if isinstance(a, dict) and a.get('ready') is True and 'content' in a:
        FINAL(a['content'])
";

/// The host side of one run's sandbox: the primitives and the host tools.
pub(crate) struct RunHost {
    engine: Arc<Rlm>,
    tree: Arc<Tree>,
    scope: RunScope,
    node: Node,
    schema: Arc<OutputSchema>,
    /// The iteration (a REPL's cell) the calls belong to.
    pub(crate) step: AtomicU32,
    tool_calls: AtomicU32,
}

fn type_error(msg: impl Into<String>) -> HostReply {
    HostReply::Raise(MontyException::new(ExcType::TypeError, Some(msg.into())))
}

fn error_value(msg: impl Into<String>) -> HostReply {
    HostReply::Value(json_to_monty(&json!({ "error": msg.into() })))
}

/// A sub-call's answer in the dialect's shape: `{"result": ...}` / `{"error": ...}`, or the text
/// itself with errors as `"[error] Type: message"`.
fn shaped(dialect: Dialect, result: Result<Value, (&str, String)>) -> Value {
    match (dialect.wraps_results(), result) {
        (true, Ok(v)) => json!({ "result": v }),
        (true, Err((_, message))) => json!({ "error": message }),
        (false, Ok(v)) => v,
        (false, Err((kind, message))) => Value::String(format!("[error] {kind}: {message}")),
    }
}

/// Binds a call's arguments to `params` (the first `required` of them required), as Python
/// would; a wrong call is the `TypeError` Python raises.
fn bind_args<'a>(
    func: &str,
    params: &[&str],
    call: &'a HostCall,
    required: usize,
) -> Result<Vec<Option<&'a MontyObject>>, HostReply> {
    split_args(func, params, &call.args, &call.kwargs, required, Extra::Refused).map(|s| s.bound).map_err(type_error)
}

impl SandboxHost for RunHost {
    fn is_host_function(&self, name: &str) -> bool {
        PRIMITIVES.contains(&name) || self.engine.tools.tools().get(name).is_some()
    }

    fn call(&self, call: HostCall) -> HostReply {
        match call.name.as_str() {
            "llm_query" | "model_query" => self.llm_query(&call),
            "llm_query_batched" => self.llm_query_batched(&call),
            "rlm_query" => self.rlm_query(&call),
            "tool_call" => self.tool_call(&call),
            "agent_query" => self.runnable_query(RunnableKind::Agent, &["task", "name"], 0, &call),
            "goal_query" => self.runnable_query(RunnableKind::Goal, &["objective", "name"], 0, &call),
            "graph_run" => self.runnable_query(RunnableKind::Graph, &["name", "input"], 1, &call),
            name if FINISHERS.contains(&name) => self.submit(&call),
            _ => self.host_tool(&call),
        }
    }
}

impl RunHost {
    pub(crate) fn new(
        engine: Arc<Rlm>,
        tree: Arc<Tree>,
        scope: &RunScope,
        node: &Node,
        schema: Arc<OutputSchema>,
    ) -> Self {
        Self {
            engine,
            tree,
            scope: scope.clone(),
            node: node.clone(),
            schema,
            step: AtomicU32::new(0),
            tool_calls: AtomicU32::new(0),
        }
    }

    fn step(&self) -> u32 {
        self.step.load(Ordering::SeqCst)
    }

    fn stopped(&self) -> Option<String> {
        self.scope.stop_reason().map(|r| format!("the run must stop: {r}"))
    }

    fn sub_caller(&self) -> SubCaller {
        SubCaller {
            engine: self.engine.clone(),
            tree: self.tree.clone(),
            scope: self.node.sub_scope.clone(),
            step: self.step(),
            model: None,
        }
    }

    fn llm_query(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("llm_query", &["prompt", "model"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompt = bound[0].map(prompt_text).unwrap_or_default();
        let dialect = self.engine.config.dialect;
        if let Some(msg) = self.stopped() {
            return self.failed("Stopped", msg);
        }
        if let Err(e) = self.node.reserve(self.engine.config.max_llm_calls, 1) {
            return self.failed("BudgetExceeded", e);
        }
        let caller = self.sub_caller().with_model(model_name(bound[1]));
        HostReply::Pending(Box::pin(async move {
            Ok(match caller.query(prompt, "llm_query").await {
                Ok(text) => shaped(dialect, Ok(Value::String(text))),
                Err(e) => shaped(dialect, Err((e.kind, e.message))),
            })
        }))
    }

    fn llm_query_batched(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("llm_query_batched", &["prompts", "model"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompts: Vec<String> = match bound[0].filter(|o| matches!(o.type_name(), "list" | "tuple")) {
            Some(list) => prompt_texts(list).unwrap_or_default(),
            None => {
                return type_error("llm_query_batched() expects a list of prompts, e.g. llm_query_batched([p1, p2])");
            }
        };
        let dialect = self.engine.config.dialect;
        let n = prompts.len();
        if let Some(msg) = self.stopped() {
            return self.batch_failed(n, "Stopped", msg);
        }
        if let Err(e) = self.node.reserve(self.engine.config.max_llm_calls, n as u64) {
            let msg = format!(
                "{e}; nothing was sent. Send a smaller batch (at most {} prompts) or finish.",
                self.node.calls_left().unwrap_or(0)
            );
            return self.batch_failed(n, "BudgetExceeded", msg);
        }
        let caller = self.sub_caller().with_model(model_name(bound[1]));
        HostReply::Pending(Box::pin(async move {
            let results = caller.query_all(prompts, "llm_query_batched").await;
            let items: Vec<Value> = results
                .into_iter()
                .map(|r| match r {
                    Ok(text) => Value::String(text),
                    Err(e) => Value::String(format!("[error] {}: {}", e.kind, e.message)),
                })
                .collect();
            Ok(shaped(dialect, Ok(Value::Array(items))))
        }))
    }

    /// A failed call in the dialect's shape.
    fn failed(&self, kind: &str, message: String) -> HostReply {
        HostReply::Value(json_to_monty(&shaped(self.engine.config.dialect, Err((kind, message)))))
    }

    /// A batch that sent nothing: `{"error": ...}`, or one error string per prompt.
    fn batch_failed(&self, n: usize, kind: &str, message: String) -> HostReply {
        if self.engine.config.dialect.wraps_results() {
            return error_value(message);
        }
        let each = Value::String(format!("[error] {kind}: {message}"));
        HostReply::Value(json_to_monty(&Value::Array(vec![each; n])))
    }

    fn rlm_query(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("rlm_query", &["prompt", "inputs", "name"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompt = bound[0].map(prompt_text).unwrap_or_default();
        if let Some(name) = text_arg(bound[2]) {
            let data = match bound[1].filter(|o| !is_none(o)).map(monty_to_json) {
                None => Map::new(),
                Some(Value::Object(m)) => m,
                Some(_) => return type_error("rlm_query() expects `inputs` to be a dict of name -> value, or None"),
            };
            return self.start_runnable(
                RunnableKind::Rlm,
                Some(name),
                RunInput { text: prompt, data, ..Default::default() },
            );
        }
        let child_inputs = match bound[1].filter(|o| !is_none(o)).map(dict_pairs) {
            None => None,
            Some(Some(pairs)) => {
                let mut inputs = Inputs::new();
                for (k, v) in pairs {
                    let value = match v.as_ref().as_str() {
                        Some(s) => InputValue::Text(s.to_string()),
                        None => InputValue::Json(monty_to_json(&v)),
                    };
                    inputs.insert(prompt_text(&k), value);
                }
                Some(inputs)
            }
            Some(None) => return type_error("rlm_query() expects `inputs` to be a dict of name -> value, or None"),
        };
        if let Some(msg) = self.stopped() {
            return self.failed("Stopped", msg);
        }
        if let Err(e) = self.node.reserve(self.engine.config.max_llm_calls, 1) {
            return self.failed("BudgetExceeded", e);
        }
        let dialect = self.engine.config.dialect;
        let child_depth = self.node.rlm_depth + 1;
        let fallback = |why: &str| {
            let caller = self.sub_caller();
            let mut text = prompt.clone();
            if let Some(inputs) = &child_inputs {
                let as_json: Map<String, Value> = inputs
                    .iter()
                    .map(|(k, v)| {
                        let v = match v {
                            InputValue::Text(s) => Value::String(s.clone()),
                            InputValue::Json(j) => j.clone(),
                        };
                        (k.to_string(), v)
                    })
                    .collect();
                text.push_str(&format!("\n\nInputs:\n{}", Value::Object(as_json)));
            }
            self.scope.emit(
                self.step(),
                RlmEvent::RlmChildFallback { reason: why.to_string(), prompt_chars: text.chars().count() }.into_kind(),
            );
            HostReply::Pending(Box::pin(async move {
                Ok(match caller.query(text, "rlm_query").await {
                    Ok(t) => shaped(dialect, Ok(Value::String(t))),
                    Err(e) => shaped(dialect, Err((e.kind, e.message))),
                })
            }))
        };
        if child_depth > self.engine.config.max_depth {
            return fallback("max_depth");
        }
        // The child's own budget node (no limit of its own) sits under the sub-call budget, so
        // every model call of the child is charged to it and counted for the child.
        let child_scope = match self.node.sub_scope.child_with_budget("rlm", BudgetLimits::default()) {
            Ok(s) => s,
            Err(e) => return fallback(&e.to_string()),
        };
        let prompt_chars = prompt.chars().count();
        let (question, inputs) = match child_inputs {
            Some(mut inputs) => {
                if prompt_chars > CHILD_QUESTION_MAX_CHARS && inputs.get("prompt").is_none() {
                    inputs.insert("prompt", prompt.clone());
                }
                (child_question(&prompt), inputs)
            }
            None => (child_question(&prompt), Inputs::single("prompt", prompt.clone())),
        };
        let input_names: Vec<String> = inputs.iter().map(|(n, _)| n.to_string()).collect();
        self.scope.emit(
            self.step(),
            RlmEvent::RlmChildStarted {
                child_run_id: child_scope.ids().run_id.clone(),
                depth: child_scope.depth(),
                rlm_depth: child_depth,
                prompt_chars,
                inputs: input_names,
            }
            .into_kind(),
        );
        let child = Node { rlm_depth: child_depth, sub_scope: child_scope.clone(), first_reserved: true };
        let engine = self.engine.clone();
        let tree = self.tree.clone();
        let parent = self.scope.clone();
        let step = self.step();
        HostReply::Pending(Box::pin(async move {
            let run: BoxFuture<'static, Result<RlmResult, RlmRunError>> = Box::pin({
                let child_scope = child_scope.clone();
                async move { engine.run_node(&question, inputs, &child_scope, tree, child).await }
            });
            let (r, error) = match run.await {
                Ok(r) => (r, None),
                Err(e) => (*e.partial, Some(e.error.to_string())),
            };
            let reply = match (&error, r.outcome.has_output()) {
                (Some(e), _) => shaped(dialect, Err(("ChildFailed", format!("the child run failed: {e}")))),
                (None, true) => match r.output.get("answer") {
                    Some(Value::String(a)) => shaped(dialect, Ok(Value::String(a.clone()))),
                    _ => shaped(dialect, Ok(r.output.clone())),
                },
                (None, false) => shaped(
                    dialect,
                    Err(("NoResult", format!("the child run ended without a result ({})", r.outcome.as_str()))),
                ),
            };
            let finished = RlmEvent::RlmChildFinished {
                child_run_id: r.run_id,
                outcome: error.is_none().then_some(r.outcome),
                iterations: r.iterations,
                sub_calls: r.sub_calls,
                usage: r.usage,
                cost_usd: r.cost_usd,
                error,
            };
            parent.emit(step, finished.into_kind());
            Ok(reply)
        }))
    }

    /// `submit`, `SUBMIT`, `FINAL` and `FINAL_VAR` (its variable already read by the rewrite):
    /// validates the result and ends the run with it.
    fn submit(&self, call: &HostCall) -> HostReply {
        let name = call.name.as_str();
        let payload = match (call.args.as_slice(), call.kwargs.is_empty()) {
            ([one], true) => monty_to_json(one),
            ([], false) => Value::Object(call.kwargs.iter().map(|(k, v)| (k.clone(), monty_to_json(v))).collect()),
            ([], true) => return type_error(format!("{name}() needs the result, e.g. {name}(answer)")),
            _ => return type_error(format!("{name}() takes one result value, or keyword arguments for its fields")),
        };
        let payload = self.schema.normalize(payload);
        let verdict = self.schema.validate(&payload);
        self.scope.emit(
            self.step(),
            RlmEvent::RlmSubmit {
                valid: verdict.is_ok(),
                errors: verdict.as_ref().err().cloned(),
                output: payload.clone(),
            }
            .into_kind(),
        );
        match verdict {
            Ok(()) => HostReply::Finish(payload),
            Err(errors) => {
                let shown = truncate_middle(&payload.to_string(), 500);
                HostReply::Raise(MontyException::new(
                    ExcType::ValueError,
                    Some(format!(
                        "{name}: the result does not match the output schema:\n- {}\nsubmitted: {shown}\nFix the \
                         result and call {name} again.",
                        errors.join("\n- ")
                    )),
                ))
            }
        }
    }

    /// `tool_call(name, **args)` (or `tool_call(name, {args})`): one of the session's tools by
    /// name, as a host tool call.
    fn tool_call(&self, call: &HostCall) -> HostReply {
        let name = match (call.args.first(), call.kwargs.iter().find(|(k, _)| k == "name")) {
            (Some(n), None) => n.as_ref().as_str().map(str::to_string),
            (None, Some((_, n))) => n.as_ref().as_str().map(str::to_string),
            _ => None,
        };
        let Some(name) = name else {
            return type_error(
                "tool_call() needs the tool's name as a str, e.g. tool_call(\"read_file\", path=\"a.txt\")",
            );
        };
        let mut kwargs: Vec<(String, MontyObject)> = call.kwargs.iter().filter(|(k, _)| k != "name").cloned().collect();
        match call.args.get(1..).unwrap_or_default() {
            [] => {}
            [dict] => match dict_pairs(dict) {
                Some(pairs) => kwargs.extend(pairs.into_iter().map(|(k, v)| (prompt_text(&k), v))),
                None => return type_error("tool_call() takes the tool's arguments as keywords or one dict"),
            },
            _ => return type_error("tool_call() takes the tool's arguments as keywords or one dict"),
        }
        if self.engine.tools.tools().get(&name).is_none() {
            let mut names = self.engine.tools.tools().names();
            names.sort();
            return HostReply::Raise(MontyException::new(
                ExcType::ValueError,
                Some(format!("tool_call(): no tool `{name}` here (tools: {})", names.join(", "))),
            ));
        }
        self.host_tool(&HostCall { name, args: Vec::new(), kwargs, awaited: call.awaited })
    }

    /// `agent_query`, `goal_query` and `graph_run`: the text and the runnable's name from
    /// `params` (the text at `text_at`), further keywords as data.
    fn runnable_query(&self, kind: RunnableKind, params: &[&str], text_at: usize, call: &HostCall) -> HostReply {
        let split = match split_args(&call.name, params, &call.args, &call.kwargs, 1, Extra::Data) {
            Ok(s) => s,
            Err(e) => return type_error(e),
        };
        let text = text_arg(split.bound[text_at]).unwrap_or_default();
        let name = text_arg(split.bound[1 - text_at]);
        self.start_runnable(kind, name, RunInput { text, data: split.data, ..Default::default() })
    }

    /// Runs a runnable of the session's reach as a child of this run; its result comes back
    /// like a sub-call's (the dialect's shape), a failed run as an error with its partial text.
    fn start_runnable(&self, kind: RunnableKind, name: Option<String>, input: RunInput) -> HostReply {
        if let Some(msg) = self.stopped() {
            return self.failed("Stopped", msg);
        }
        let runnable = match self.engine.reach.find(kind, name.as_deref()) {
            Ok(r) => r,
            Err(e) => return HostReply::Raise(MontyException::new(ExcType::ValueError, Some(e))),
        };
        let scope = self.node.sub_scope.clone();
        let step = self.step();
        let dialect = self.engine.config.dialect;
        HostReply::Pending(Box::pin(async move {
            let outcome = match run_child(runnable.as_ref(), input, &scope, step).await {
                Ok(o) => o,
                Err(e) => return Ok(shaped(dialect, Err(("DepthError", e.to_string())))),
            };
            Ok(if outcome.is_success() {
                shaped(dialect, Ok(outcome.value(kind)))
            } else {
                shaped(dialect, Err(("RunFailed", outcome.report(runnable.name(), kind))))
            })
        }))
    }

    /// A host tool: through the run's tool executor (permission gate, timeout, output cap,
    /// `tool_call`/`tool_result` events), like a tool call of the agent loop. A denied or failed
    /// call answers `{"error": ...}`.
    fn host_tool(&self, call: &HostCall) -> HostReply {
        let Some(tool) = self.engine.tools.tools().get(&call.name).cloned() else {
            return HostReply::Raise(MontyException::new(
                ExcType::NameError,
                Some(format!("name '{}' is not defined", call.name)),
            ));
        };
        let spec = tool.spec();
        let order = argument_order(&spec.parameters);
        if call.args.len() > order.len() {
            return type_error(format!(
                "{}() takes at most {} positional argument(s) ({}) but {} were given",
                call.name,
                order.len(),
                order.join(", "),
                call.args.len()
            ));
        }
        let mut args = Map::new();
        for (name, v) in order.iter().zip(&call.args) {
            args.insert(name.clone(), monty_to_json(v));
        }
        for (k, v) in &call.kwargs {
            if args.contains_key(k) {
                return type_error(format!("{}() got multiple values for argument '{k}'", call.name));
            }
            args.insert(k.clone(), monty_to_json(v));
        }
        let n = self.tool_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let step = self.step();
        let tool_call =
            ToolCall { id: format!("rlm-{step}-{n}"), name: call.name.clone(), arguments: Value::Object(args) };
        let invoker = self.engine.tools.clone();
        let scope = self.scope.clone();
        let dialect = self.engine.config.dialect;
        HostReply::Pending(Box::pin(async move {
            let outcome = invoker.invoke(tool_call, &scope, step, None).await;
            Ok(if outcome.is_error {
                let message = outcome.output.strip_prefix("error: ").unwrap_or(&outcome.output);
                if dialect.wraps_results() {
                    json!({ "error": message })
                } else {
                    Value::String(format!("[error] ToolError: {message}"))
                }
            } else {
                Value::String(outcome.output)
            })
        }))
    }
}

/// Says why a snippet the run tree stopped was stopped: the stop token fires at cancellation
/// and at the tree's deadline alike, and the sandbox only knows it was cancelled.
pub(crate) fn stopped_by_tree(outcome: &mut crate::sandbox::SnippetOutcome, scope: &RunScope) {
    let Some(error) = outcome.error.as_mut() else { return };
    match scope.stop_reason() {
        Some(reason) if error.kind == SnippetErrorKind::Cancelled && reason != FinishReason::Cancelled => {
            error.message = format!("KeyboardInterrupt: the run tree stopped this snippet: {reason}");
        }
        _ => {}
    }
}

/// The question of a child run: its prompt, or a pointer to it when the prompt is long.
fn child_question(prompt: &str) -> String {
    task_question("prompt", prompt)
}

/// The question for a task given as the input `name`: the task itself, or a pointer to the
/// input when the task is long.
pub(crate) fn task_question(name: &str, task: &str) -> String {
    let chars = task.chars().count();
    if chars <= CHILD_QUESTION_MAX_CHARS {
        task.to_string()
    } else {
        let head: String = task.chars().take(1000).collect();
        format!("The task is given in full in `inputs[\"{name}\"]` ({chars} chars); read it there. It begins:\n{head}…")
    }
}

/// A failed sub-call: a short type name and the message.
struct SubCallError {
    kind: &'static str,
    message: String,
}

/// Makes sub-model calls for one run: concurrency-limited, observable, each a guarded model
/// call of the run tree already reserved on the sub-call budget.
#[derive(Clone)]
struct SubCaller {
    engine: Arc<Rlm>,
    tree: Arc<Tree>,
    scope: RunScope,
    step: u32,
    /// A model named by the call (`llm_query(p, model="...")`), instead of the sub-model.
    model: Option<String>,
}

/// The model a call names, if any (`model=None` names none).
fn model_name(arg: Option<&MontyObject>) -> Option<String> {
    arg.and_then(|m| m.as_ref().as_str().map(str::to_string)).filter(|m| !m.is_empty())
}

impl SubCaller {
    fn with_model(mut self, model: Option<String>) -> Self {
        self.model = model;
        self
    }

    /// Asks every prompt at once, each on a task of its own — building and sending fifty 20 KB
    /// requests is work for every core, not the one that polls the batch; the answers come in
    /// the prompts' order. Dropping the future aborts the calls still running.
    async fn query_all(&self, prompts: Vec<String>, kind: &'static str) -> Vec<Result<String, SubCallError>> {
        let mut tasks = tokio::task::JoinSet::new();
        let n = prompts.len();
        for (i, prompt) in prompts.into_iter().enumerate() {
            let caller = self.clone();
            tasks.spawn(async move { (i, caller.query(prompt, kind).await) });
        }
        let mut answers: Vec<Option<Result<String, SubCallError>>> = (0..n).map(|_| None).collect();
        while let Some(joined) = tasks.join_next().await {
            if let Ok((i, answer)) = joined {
                answers[i] = Some(answer);
            }
        }
        let lost = || SubCallError { kind: "Internal", message: "the sub-call failed inside the harness".into() };
        answers.into_iter().map(|a| a.unwrap_or_else(|| Err(lost()))).collect()
    }

    async fn query(&self, prompt: String, kind: &str) -> Result<String, SubCallError> {
        let Ok(_permit) = self.tree.semaphore.acquire().await else {
            return Err(SubCallError { kind: "Internal", message: "the sub-call limiter is closed".into() });
        };
        let prompt_chars = prompt.chars().count();
        let prompt_head_source = recursive_core::text::clip_chars(&prompt, self.engine.config.trace_chars);
        let request = ChatRequest {
            messages: vec![Message::user(prompt)],
            tools: Vec::new(),
            options: match &self.model {
                Some(model) => ChatOptions { model: model.clone(), ..self.engine.config.sub_options.clone() },
                None => self.engine.config.sub_options.clone(),
            },
        };
        let t0 = Instant::now();
        let call = ModelCall { reserved: true, ..ModelCall::at(self.step) };
        let result = self.scope.call_model(self.engine.sub.as_ref(), request, call).await.map_err(|e| match e {
            ModelCallError::Stopped(r) => SubCallError { kind: "Stopped", message: format!("the run must stop: {r}") },
            other => SubCallError { kind: "ProviderError", message: other.to_string() },
        });
        let (response_chars, error) = match &result {
            Ok(r) => (Some(r.message.content.chars().count()), None),
            Err(e) => (None, Some(e.message.clone())),
        };
        let head = |t: &str| recursive_core::text::clip_chars(t, self.engine.config.trace_chars);
        self.scope.emit(
            self.step,
            RlmEvent::RlmSubCall {
                kind: kind.to_string(),
                prompt_head: head(&prompt_head_source),
                answer_head: result.as_ref().ok().map(|r| head(&r.message.content)),
                prompt_chars,
                response_chars,
                latency_ms: t0.elapsed().as_millis() as u64,
                ok: result.is_ok(),
                error,
            }
            .into_kind(),
        );
        result.map(|r| r.message.content)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_must_be_usable_identifiers() {
        assert!(check_tool_name("read_file").is_ok());
        for bad in ["llm_query", "submit", "len", "2x", "has-dash", "__rlm_x", "context"] {
            assert!(check_tool_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn long_child_prompts_are_read_from_inputs() {
        assert_eq!(child_question("short task"), "short task");
        let long = "x".repeat(CHILD_QUESTION_MAX_CHARS + 1);
        assert!(child_question(&long).contains("inputs[\"prompt\"]"));
    }

    #[test]
    fn config_serializes_timeout_as_seconds() {
        let v = serde_json::to_value(RlmConfig::default()).unwrap();
        assert_eq!(v["snippet_timeout"], 60.0);
        assert_eq!(v["max_llm_calls"], 50);
        let back: RlmConfig = serde_json::from_value(v).unwrap();
        assert_eq!(back, RlmConfig::default());
    }
}
