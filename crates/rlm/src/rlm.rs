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
    ChatOptions, ChatProvider, ChatRequest, ChatResponse, EventKind, FinishReason, Message, RunScope, ToolCall,
    ToolContext, ToolRegistry, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use tokio::sync::Semaphore;

use crate::budget::CallBudget;
use crate::convert::{json_to_monty, monty_to_json, prompt_text};
use crate::error::RlmError;
use crate::inputs::{InputValue, Inputs};
use crate::prompt::{
    CatalogFacts, DEFAULT_INSTRUCTIONS, NO_CODE_OBSERVATION, argument_order, catalog, extract_code_blocks,
    parse_json_reply, snippet_observation, truncate_middle,
};
use crate::sandbox::{HostCall, HostReply, Sandbox, SandboxHost, SandboxLimits, SnippetErrorKind};
use crate::schema::{OutputSchema, default_output_schema};

/// Names of the sandbox primitives; host tools cannot use them.
pub const PRIMITIVES: [&str; 4] = ["llm_query", "llm_query_batched", "rlm_query", "submit"];

/// Characters of each input shown in the preview (head and tail together).
const PREVIEW_CHARS: usize = 600;
/// A child run's question is its prompt up to this size; longer prompts are read from its inputs.
const CHILD_QUESTION_MAX_CHARS: usize = 4000;

/// How an RLM run behaves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RlmConfig {
    /// Primary-model turns before the final extraction call.
    pub max_iterations: u32,
    /// Sub-calls for the whole invocation tree: `llm_query` (1), `llm_query_batched` (its size,
    /// all or nothing), `rlm_query` (1) and every primary-model call of a child run after its
    /// first (see the crate docs and [`CallBudget`]).
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
    /// Options of primary-model calls.
    pub primary_options: ChatOptions,
    /// Options of sub-model calls (`llm_query`...).
    pub sub_options: ChatOptions,
}

impl Default for RlmConfig {
    fn default() -> Self {
        let sandbox = SandboxLimits::default();
        Self {
            max_iterations: 20,
            max_llm_calls: 50,
            max_depth: 1,
            batch_concurrency: 16,
            snippet_timeout: sandbox.timeout,
            memory_limit_bytes: sandbox.memory_limit_bytes,
            recursion_limit: sandbox.recursion_limit,
            max_output_chars: sandbox.max_output_chars,
            observation_max_chars: 10_000,
            output_schema: default_output_schema(),
            instructions: None,
            primary_options: ChatOptions::default(),
            sub_options: ChatOptions::default(),
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

/// How an RLM run ended. Every variant is a normal end; faults are [`RlmError`]s.
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
        }
    }

    /// Whether the run produced a valid result.
    pub fn has_output(&self) -> bool {
        matches!(self, RlmOutcome::Submitted | RlmOutcome::Extracted)
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
    /// Sub-calls charged to the budget by this run and its child runs.
    pub sub_calls: u32,
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
    tools: ToolRegistry,
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
        Ok(Self { primary, sub, config, schema, child_schema, tools: ToolRegistry::new() })
    }

    /// An RLM that uses one provider for both the primary and the sub-model (the model names
    /// come from `config.primary_options` / `config.sub_options`).
    pub fn with_provider(provider: Arc<dyn ChatProvider>, config: RlmConfig) -> Result<Self, RlmError> {
        Self::new(provider.clone(), provider, config)
    }

    /// Makes these tools callable from snippets. Names must be Python identifiers that are
    /// not keywords, common builtins, or the primitives (`llm_query`, `llm_query_batched`,
    /// `rlm_query`, `submit`).
    pub fn with_host_tools(mut self, tools: ToolRegistry) -> Result<Self, RlmError> {
        for name in tools.names() {
            check_tool_name(&name)?;
        }
        self.tools.extend(&tools);
        Ok(self)
    }

    /// The configuration.
    pub fn config(&self) -> &RlmConfig {
        &self.config
    }

    /// The host tools.
    pub fn host_tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Answers `question` over `inputs` as a run in `scope` (events go to the scope's sink;
    /// usage and cost roll up the tree; the tree's budget is honoured before each model call).
    /// Each call has its own sub-call budget.
    pub async fn run(&self, question: &str, inputs: Inputs, scope: &RunScope) -> Result<RlmResult, RlmError> {
        let engine = Arc::new(self.clone());
        let tree = Arc::new(Tree {
            budget: CallBudget::new(self.config.max_llm_calls),
            semaphore: Arc::new(Semaphore::new(self.config.batch_concurrency.max(1))),
        });
        let node = Node { rlm_depth: 0, counters: vec![Arc::new(AtomicU32::new(0))] };
        engine.run_node(question, &inputs, scope, tree, node).await
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
struct Tree {
    budget: CallBudget,
    semaphore: Arc<Semaphore>,
}

/// Where a run sits among the RLM levels.
#[derive(Clone)]
struct Node {
    /// 0 for the top-level run.
    rlm_depth: u32,
    /// Sub-call counters of this run and its RLM ancestors.
    counters: Vec<Arc<AtomicU32>>,
}

impl Node {
    fn charge(&self, tree: &Tree, n: u32) -> Result<(), crate::budget::BudgetExhausted> {
        tree.budget.try_reserve(n)?;
        for c in &self.counters {
            c.fetch_add(n, Ordering::SeqCst);
        }
        Ok(())
    }

    fn own_calls(&self) -> u32 {
        self.counters.first().map(|c| c.load(Ordering::SeqCst)).unwrap_or(0)
    }
}

enum Primary {
    Reply(ChatResponse),
    Stop(FinishReason),
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
        let specs = self.tools.specs();
        let facts = CatalogFacts {
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
            schema: schema.schema(),
            wrap_key: schema.wrap_key(),
        };
        format!("{instructions}\n\n{}", catalog(&facts))
    }

    async fn call_primary(&self, scope: &RunScope, step: u32, messages: &[Message]) -> Result<Primary, RlmError> {
        if let Some(reason) = scope.stop_reason() {
            return Ok(Primary::Stop(reason));
        }
        let request = ChatRequest {
            messages: messages.to_vec(),
            tools: Vec::new(),
            options: self.config.primary_options.clone(),
        };
        let deadline = scope.budget().remaining_time().map(|r| tokio::time::Instant::now() + r);
        let cancel = scope.cancel_token().clone();
        let call = self.primary.complete(request);
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(Primary::Stop(FinishReason::Cancelled)),
            r = async {
                match deadline {
                    Some(d) => tokio::time::timeout_at(d, call).await.ok(),
                    None => Some(call.await),
                }
            } => r,
        };
        match outcome {
            None => Ok(Primary::Stop(FinishReason::WallClockExceeded)),
            Some(Err(e)) => {
                scope.emit(step, EventKind::Error { message: e.to_string() });
                Err(e.into())
            }
            Some(Ok(response)) => {
                scope.record_response(step, &response);
                scope.emit(step, EventKind::AssistantText { text: response.message.content.clone() });
                Ok(Primary::Reply(response))
            }
        }
    }

    /// Runs one RLM node (the top-level run or a child) to its end.
    async fn run_node(
        self: Arc<Self>,
        question: &str,
        inputs: &Inputs,
        scope: &RunScope,
        tree: Arc<Tree>,
        node: Node,
    ) -> Result<RlmResult, RlmError> {
        scope.emit(0, EventKind::RunStarted { goal: question.to_string() });
        let schema = self.schema_for(&node).clone();
        let mut messages = vec![
            Message::system(self.system_prompt(inputs, &node)),
            Message::user(format!(
                "Question:\n{question}\n\nInputs (read them through `inputs[...]`; the previews are not the \
                 data):\n{}",
                inputs.summary(PREVIEW_CHARS).render()
            )),
        ];
        let mut setup = String::from("import asyncio\nimport json\nimport re\n");
        if inputs.len() == 1
            && let Some((name, _)) = inputs.iter().next()
        {
            setup.push_str(&format!("context = inputs[{}]\n", Value::String(name.to_string())));
        }
        let sandbox =
            match Sandbox::start(self.sandbox_limits(), vec![("inputs".to_string(), inputs.to_monty_dict())], &setup)
                .await
            {
                Ok(s) => s,
                Err(e) => {
                    scope.emit(0, EventKind::Error { message: e.to_string() });
                    return Err(e.into());
                }
            };
        let host = Arc::new(RunHost {
            engine: self.clone(),
            tree: tree.clone(),
            scope: scope.clone(),
            node: node.clone(),
            schema: schema.clone(),
            step: AtomicU32::new(0),
            tool_calls: AtomicU32::new(0),
        });
        let max = self.config.max_iterations;
        let mut trajectory: Vec<RlmIteration> = Vec::new();
        let mut submitted: Option<Value> = None;
        let mut ended: Option<RlmOutcome> = None;
        let mut iterations = 0u32;
        for iteration in 1..=max {
            if node.rlm_depth > 0 && iteration > 1 && node.charge(&tree, 1).is_err() {
                ended = Some(RlmOutcome::CallBudgetExhausted);
                break;
            }
            host.step.store(iteration, Ordering::SeqCst);
            scope.emit(
                iteration,
                EventKind::Custom {
                    name: "rlm_iteration".into(),
                    data: json!({"iteration": iteration, "max_iterations": max, "llm_calls_left": tree.budget.left()}),
                },
            );
            let response = match self.call_primary(scope, iteration, &messages).await? {
                Primary::Reply(r) => r,
                Primary::Stop(reason) => {
                    ended = Some(RlmOutcome::Stopped { reason });
                    break;
                }
            };
            iterations = iteration;
            let reply = response.message.content.clone();
            messages.push(Message::assistant(reply.clone()));
            let blocks = extract_code_blocks(&reply);
            let mut snippets = Vec::new();
            let mut parts: Vec<String> = Vec::new();
            if blocks.is_empty() {
                parts.push(NO_CODE_OBSERVATION.to_string());
            }
            let total = blocks.len();
            for (i, code) in blocks.iter().enumerate() {
                scope.emit(
                    iteration,
                    EventKind::Custom {
                        name: "rlm_snippet".into(),
                        data: json!({"iteration": iteration, "block": i + 1, "code": code}),
                    },
                );
                let outcome = sandbox.execute(code, host.clone(), scope.cancel_token()).await;
                let observation = if outcome.finished.is_some() {
                    let shown = truncate_middle(outcome.stdout.trim_end(), self.config.observation_max_chars);
                    if shown.is_empty() { "(submitted)".to_string() } else { format!("{shown}\n(submitted)") }
                } else {
                    truncate_middle(&snippet_observation(&outcome), self.config.observation_max_chars)
                };
                let error = outcome.error.as_ref().map(|e| e.kind);
                scope.emit(
                    iteration,
                    EventKind::Custom {
                        name: "rlm_observation".into(),
                        data: json!({
                            "iteration": iteration,
                            "block": i + 1,
                            "observation": observation,
                            "error": error,
                            "submitted": outcome.finished.is_some(),
                            "duration_ms": outcome.duration_ms,
                            "host_calls": outcome.host_calls,
                        }),
                    },
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
                    submitted = Some(payload);
                    break;
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
            let left = max - iteration;
            if submitted.is_none() {
                let mut footer = format!(
                    "[{left} iteration(s) left; {} of {} sub-calls left]",
                    tree.budget.left(),
                    tree.budget.total()
                );
                if left == 1 {
                    footer.push_str("\nThis is your last iteration: call submit(...) with your best result now.");
                }
                parts.push(footer);
            }
            let observation = parts.join("\n");
            messages.push(Message::user(observation.clone()));
            trajectory.push(RlmIteration { iteration, reply, snippets, observation });
            if submitted.is_some() {
                break;
            }
        }
        drop(sandbox);
        let (output, outcome) = match (submitted, ended) {
            (Some(payload), _) => (payload, RlmOutcome::Submitted),
            (None, Some(outcome)) => (Value::Null, outcome),
            (None, None) => self.extract(scope, &tree, &node, &schema, &mut messages, max + 1).await?,
        };
        let usage = scope.usage();
        let cost_usd = scope.cost_usd();
        scope
            .emit(iterations, EventKind::TurnFinished { finish_reason: outcome.as_str().to_string(), usage, cost_usd });
        Ok(RlmResult {
            output,
            submitted: outcome == RlmOutcome::Submitted,
            extracted: outcome == RlmOutcome::Extracted,
            outcome,
            trajectory,
            iterations,
            sub_calls: node.own_calls(),
            usage,
            cost_usd,
            run_id: scope.ids().run_id.clone(),
        })
    }

    /// The final extraction call after the iterations ran out.
    async fn extract(
        &self,
        scope: &RunScope,
        tree: &Tree,
        node: &Node,
        schema: &OutputSchema,
        messages: &mut Vec<Message>,
        step: u32,
    ) -> Result<(Value, RlmOutcome), RlmError> {
        if node.rlm_depth > 0 && node.charge(tree, 1).is_err() {
            return Ok((Value::Null, RlmOutcome::CallBudgetExhausted));
        }
        messages.push(Message::user(format!(
            "You have used all {} iterations without a valid submit. From the work above, give the final result \
             now. Reply with only a JSON value that matches this schema (no code, no other text):\n```json\n{}\n```",
            self.config.max_iterations,
            schema.schema()
        )));
        scope.emit(step, EventKind::Custom { name: "rlm_extraction".into(), data: json!({"step": step}) });
        let response = match self.call_primary(scope, step, messages).await? {
            Primary::Reply(r) => r,
            Primary::Stop(reason) => return Ok((Value::Null, RlmOutcome::Stopped { reason })),
        };
        let text = response.message.content;
        let parsed = match parse_json_reply(&text) {
            Some(v) => Some(schema.normalize(v)),
            None => {
                let wrapped = schema.normalize(Value::String(text.trim().to_string()));
                wrapped.is_object().then_some(wrapped)
            }
        };
        let Some(value) = parsed else {
            let errors = vec!["the extraction reply contained no JSON".to_string()];
            scope.emit(
                step,
                EventKind::Custom { name: "rlm_extraction_failed".into(), data: json!({"errors": errors}) },
            );
            return Ok((Value::String(text), RlmOutcome::ExtractionFailed { errors }));
        };
        match schema.validate(&value) {
            Ok(()) => Ok((value, RlmOutcome::Extracted)),
            Err(errors) => {
                scope.emit(
                    step,
                    EventKind::Custom { name: "rlm_extraction_failed".into(), data: json!({"errors": errors}) },
                );
                Ok((value, RlmOutcome::ExtractionFailed { errors }))
            }
        }
    }
}

/// The host side of one run's sandbox: the primitives and the host tools.
struct RunHost {
    engine: Arc<Rlm>,
    tree: Arc<Tree>,
    scope: RunScope,
    node: Node,
    schema: Arc<OutputSchema>,
    step: AtomicU32,
    tool_calls: AtomicU32,
}

fn type_error(msg: impl Into<String>) -> HostReply {
    HostReply::Raise(MontyException::new(ExcType::TypeError, Some(msg.into())))
}

fn error_value(msg: impl Into<String>) -> HostReply {
    HostReply::Value(json_to_monty(&json!({ "error": msg.into() })))
}

/// Binds positional and keyword arguments to parameter names; unknown keywords are errors.
fn bind_args(
    func: &str,
    params: &[&str],
    call: &HostCall,
    required: usize,
) -> Result<Vec<Option<MontyObject>>, HostReply> {
    if call.args.len() > params.len() {
        return Err(type_error(format!(
            "{func}() takes at most {} positional argument(s) ({}) but {} were given",
            params.len(),
            params.join(", "),
            call.args.len()
        )));
    }
    let mut bound: Vec<Option<MontyObject>> = vec![None; params.len()];
    for (i, a) in call.args.iter().enumerate() {
        bound[i] = Some(a.clone());
    }
    for (k, v) in &call.kwargs {
        let Some(i) = params.iter().position(|p| p == k) else {
            return Err(type_error(format!("{func}() got an unexpected keyword argument '{k}'")));
        };
        if bound[i].is_some() {
            return Err(type_error(format!("{func}() got multiple values for argument '{k}'")));
        }
        bound[i] = Some(v.clone());
    }
    if let Some(missing) = (0..required).find(|&i| bound[i].is_none()) {
        return Err(type_error(format!("{func}() missing required argument '{}'", params[missing])));
    }
    Ok(bound)
}

impl SandboxHost for RunHost {
    fn is_host_function(&self, name: &str) -> bool {
        PRIMITIVES.contains(&name) || self.engine.tools.get(name).is_some()
    }

    fn call(&self, call: HostCall) -> HostReply {
        match call.name.as_str() {
            "llm_query" => self.llm_query(&call),
            "llm_query_batched" => self.llm_query_batched(&call),
            "rlm_query" => self.rlm_query(&call),
            "submit" => self.submit(&call),
            _ => self.host_tool(&call),
        }
    }
}

impl RunHost {
    fn step(&self) -> u32 {
        self.step.load(Ordering::SeqCst)
    }

    fn stopped(&self) -> Option<String> {
        self.scope.stop_reason().map(|r| format!("the run must stop: {r}"))
    }

    fn sub_caller(&self) -> SubCaller {
        SubCaller { engine: self.engine.clone(), tree: self.tree.clone(), scope: self.scope.clone(), step: self.step() }
    }

    fn llm_query(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("llm_query", &["prompt"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompt = bound[0].as_ref().map(prompt_text).unwrap_or_default();
        if let Some(msg) = self.stopped() {
            return error_value(msg);
        }
        if let Err(e) = self.node.charge(&self.tree, 1) {
            return error_value(e.to_string());
        }
        let caller = self.sub_caller();
        HostReply::Pending(Box::pin(async move {
            Ok(match caller.complete(prompt, "llm_query").await {
                Ok(text) => json!({ "result": text }),
                Err(e) => json!({ "error": e.message }),
            })
        }))
    }

    fn llm_query_batched(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("llm_query_batched", &["prompts"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompts: Vec<String> = match &bound[0] {
            Some(MontyObject::List(items) | MontyObject::Tuple(items)) => items.iter().map(prompt_text).collect(),
            _ => return type_error("llm_query_batched() expects a list of prompts, e.g. llm_query_batched([p1, p2])"),
        };
        if let Some(msg) = self.stopped() {
            return error_value(msg);
        }
        let n = prompts.len() as u32;
        if let Err(e) = self.node.charge(&self.tree, n) {
            return error_value(format!(
                "{e}; nothing was sent. Send a smaller batch (at most {} prompts) or submit.",
                e.left
            ));
        }
        let caller = self.sub_caller();
        HostReply::Pending(Box::pin(async move {
            let calls = prompts.into_iter().map(|p| caller.complete(p, "llm_query_batched"));
            let results = futures::future::join_all(calls).await;
            let items: Vec<Value> = results
                .into_iter()
                .map(|r| match r {
                    Ok(text) => Value::String(text),
                    Err(e) => Value::String(format!("[error] {}: {}", e.kind, e.message)),
                })
                .collect();
            Ok(json!({ "result": items }))
        }))
    }

    fn rlm_query(&self, call: &HostCall) -> HostReply {
        let bound = match bind_args("rlm_query", &["prompt", "inputs"], call, 1) {
            Ok(b) => b,
            Err(e) => return e,
        };
        let prompt = bound[0].as_ref().map(prompt_text).unwrap_or_default();
        let child_inputs = match &bound[1] {
            None | Some(MontyObject::None) => None,
            Some(MontyObject::Dict(pairs)) => {
                let mut inputs = Inputs::new();
                for (k, v) in pairs {
                    let value = match v {
                        MontyObject::String(s) => InputValue::Text(s.clone()),
                        other => InputValue::Json(monty_to_json(other)),
                    };
                    inputs.insert(prompt_text(k), value);
                }
                Some(inputs)
            }
            Some(_) => return type_error("rlm_query() expects `inputs` to be a dict of name -> value, or None"),
        };
        if let Some(msg) = self.stopped() {
            return error_value(msg);
        }
        if let Err(e) = self.node.charge(&self.tree, 1) {
            return error_value(e.to_string());
        }
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
                EventKind::Custom {
                    name: "rlm_child_fallback".into(),
                    data: json!({"reason": why, "prompt_chars": text.chars().count()}),
                },
            );
            HostReply::Pending(Box::pin(async move {
                Ok(match caller.complete(text, "rlm_query").await {
                    Ok(t) => json!({ "result": t }),
                    Err(e) => json!({ "error": e.message }),
                })
            }))
        };
        if child_depth > self.engine.config.max_depth {
            return fallback("max_depth");
        }
        let child_scope = match self.scope.child("rlm") {
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
            EventKind::Custom {
                name: "rlm_child_started".into(),
                data: json!({
                    "child_run_id": child_scope.ids().run_id,
                    "depth": child_scope.depth(),
                    "rlm_depth": child_depth,
                    "prompt_chars": prompt_chars,
                    "inputs": input_names,
                }),
            },
        );
        let mut counters = vec![Arc::new(AtomicU32::new(0))];
        counters.extend(self.node.counters.iter().cloned());
        let child = Node { rlm_depth: child_depth, counters };
        let engine = self.engine.clone();
        let tree = self.tree.clone();
        let parent = self.scope.clone();
        let step = self.step();
        HostReply::Pending(Box::pin(async move {
            let run: BoxFuture<'static, Result<RlmResult, RlmError>> = Box::pin({
                let child_scope = child_scope.clone();
                async move { engine.run_node(&question, &inputs, &child_scope, tree, child).await }
            });
            let result = run.await;
            let (reply, data) = match result {
                Ok(r) => {
                    let data = json!({
                        "child_run_id": r.run_id,
                        "outcome": r.outcome.as_str(),
                        "iterations": r.iterations,
                        "sub_calls": r.sub_calls,
                        "usage": r.usage,
                        "cost_usd": r.cost_usd,
                    });
                    let reply = if r.outcome.has_output() {
                        match r.output.get("answer") {
                            Some(Value::String(a)) => json!({ "result": a }),
                            _ => json!({ "result": r.output }),
                        }
                    } else {
                        json!({ "error": format!("the child run ended without a result ({})", r.outcome.as_str()) })
                    };
                    (reply, data)
                }
                Err(e) => (
                    json!({ "error": format!("the child run failed: {e}") }),
                    json!({"child_run_id": child_scope.ids().run_id, "error": e.to_string()}),
                ),
            };
            parent.emit(step, EventKind::Custom { name: "rlm_child_finished".into(), data });
            Ok(reply)
        }))
    }

    fn submit(&self, call: &HostCall) -> HostReply {
        let payload = match (call.args.as_slice(), call.kwargs.is_empty()) {
            ([one], true) => monty_to_json(one),
            ([], false) => Value::Object(call.kwargs.iter().map(|(k, v)| (k.clone(), monty_to_json(v))).collect()),
            ([], true) => return type_error("submit() needs the result, e.g. submit({\"answer\": text})"),
            _ => return type_error("submit() takes one result value, or keyword arguments for its fields"),
        };
        let payload = self.schema.normalize(payload);
        let verdict = self.schema.validate(&payload);
        self.scope.emit(
            self.step(),
            EventKind::Custom {
                name: "rlm_submit".into(),
                data: json!({"valid": verdict.is_ok(), "errors": verdict.as_ref().err(), "output": payload}),
            },
        );
        match verdict {
            Ok(()) => HostReply::Finish(payload),
            Err(errors) => {
                let shown = truncate_middle(&payload.to_string(), 500);
                HostReply::Raise(MontyException::new(
                    ExcType::ValueError,
                    Some(format!(
                        "submit: the result does not match the output schema:\n- {}\nsubmitted: {shown}\nFix the \
                         result and call submit again.",
                        errors.join("\n- ")
                    )),
                ))
            }
        }
    }

    fn host_tool(&self, call: &HostCall) -> HostReply {
        let Some(tool) = self.engine.tools.get(&call.name).cloned() else {
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
        let ctx = ToolContext { scope: self.scope.clone(), step, call_id: format!("rlm-{step}-{n}") };
        let tool_call = ToolCall { id: ctx.call_id.clone(), name: call.name.clone(), arguments: Value::Object(args) };
        let scope = self.scope.clone();
        HostReply::Pending(Box::pin(async move {
            let t0 = Instant::now();
            let result = tool.call(tool_call.arguments.clone(), &ctx).await;
            let ms = t0.elapsed().as_millis() as u64;
            let (output, is_error) = match &result {
                Ok(text) => (text.clone(), false),
                Err(e) => (e.to_string(), true),
            };
            scope.emit(
                step,
                EventKind::Custom {
                    name: "rlm_host_tool".into(),
                    data: json!({
                        "name": tool_call.name,
                        "arguments": tool_call.arguments,
                        "is_error": is_error,
                        "output_chars": output.chars().count(),
                        "duration_ms": ms,
                    }),
                },
            );
            Ok(match result {
                Ok(text) => Value::String(text),
                Err(e) => json!({ "error": e.to_string() }),
            })
        }))
    }
}

/// The question of a child run: its prompt, or a pointer to it when the prompt is long.
fn child_question(prompt: &str) -> String {
    let chars = prompt.chars().count();
    if chars <= CHILD_QUESTION_MAX_CHARS {
        prompt.to_string()
    } else {
        let head: String = prompt.chars().take(1000).collect();
        format!("The task is given in full in `inputs[\"prompt\"]` ({chars} chars); read it there. It begins:\n{head}…")
    }
}

/// A failed sub-call: a short type name and the message.
struct SubCallError {
    kind: &'static str,
    message: String,
}

/// Makes sub-model calls for one run: concurrency-limited, observable, usage recorded.
struct SubCaller {
    engine: Arc<Rlm>,
    tree: Arc<Tree>,
    scope: RunScope,
    step: u32,
}

impl SubCaller {
    async fn complete(&self, prompt: String, kind: &str) -> Result<String, SubCallError> {
        let stop = |r: FinishReason| SubCallError { kind: "Stopped", message: format!("the run must stop: {r}") };
        if let Some(r) = self.scope.stop_reason() {
            return Err(stop(r));
        }
        let cancel = self.scope.cancel_token().clone();
        let Ok(_permit) = self.tree.semaphore.acquire().await else {
            return Err(SubCallError { kind: "Internal", message: "the sub-call limiter is closed".into() });
        };
        if let Some(r) = self.scope.stop_reason() {
            return Err(stop(r));
        }
        let prompt_chars = prompt.chars().count();
        let request = ChatRequest {
            messages: vec![Message::user(prompt)],
            tools: Vec::new(),
            options: self.engine.config.sub_options.clone(),
        };
        let t0 = Instant::now();
        let result = tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(stop(FinishReason::Cancelled)),
            r = self.engine.sub.complete(request) => r.map_err(|e| SubCallError { kind: "ProviderError", message: e.to_string() }),
        };
        let latency_ms = t0.elapsed().as_millis() as u64;
        match result {
            Ok(response) => {
                self.scope.record_response(self.step, &response);
                self.scope.emit(
                    self.step,
                    EventKind::Custom {
                        name: "rlm_sub_call".into(),
                        data: json!({
                            "kind": kind,
                            "prompt_chars": prompt_chars,
                            "response_chars": response.message.content.chars().count(),
                            "latency_ms": latency_ms,
                            "usage": response.usage,
                            "cost_usd": response.cost_usd,
                            "model": response.model,
                            "ok": true,
                        }),
                    },
                );
                Ok(response.message.content)
            }
            Err(e) => {
                self.scope.emit(
                    self.step,
                    EventKind::Custom {
                        name: "rlm_sub_call".into(),
                        data: json!({
                            "kind": kind,
                            "prompt_chars": prompt_chars,
                            "latency_ms": latency_ms,
                            "ok": false,
                            "error": e.message,
                        }),
                    },
                );
                Err(e)
            }
        }
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
