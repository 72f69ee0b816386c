//! The RLM loop: the primary model writes Python against the inputs held in a sandboxed REPL,
//! each reply's code blocks run and their output comes back as observations, until the model
//! `submit`s a result that matches the output schema (or the iterations run out and one final
//! extraction call asks for the result). Sub-model calls, child RLMs and host tools are the
//! host functions of the sandbox (the `host` module); all of them land in the caller's run tree.
//! A durable run checkpoints after every iteration and resumes from its checkpoint.
//!
//! The configuration ([`RlmConfig`]) and the results ([`RlmResult`], [`RlmOutcome`]) live in
//! modules of their own and are re-exported here.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use futures::future::BoxFuture;
use recursive_core::{
    BudgetLimits, ChatProvider, ChatRequest, ChatResponse, EventKind, FinishReason, Message, ModelCall, ModelCallError,
    RunScope, ToolInvoker, ToolRegistry,
};
use serde_json::Value;
use tokio::sync::Semaphore;

use crate::dialect::{Dialect, final_in_text, is_identifier, prose, strip_thinking};
use crate::error::{RlmError, RlmRunError};
use crate::events::RlmEvent;
use crate::host::names::check_tool_name;
use crate::host::{Engine, Node, RunHost, Tree, stopped_by_tree};
use crate::inputs::Inputs;
use crate::prompt::{
    CatalogFacts, DEFAULT_INSTRUCTIONS, NO_CODE_OBSERVATION, catalog, extract_code_blocks, parse_json_reply,
    snippet_observation, truncate_middle,
};
use crate::reach::Reach;
use crate::repl::{Backend, Repl};
use crate::sandbox::{SandboxError, SandboxLimits};
use crate::schema::{OutputSchema, default_output_schema};

pub use crate::config::{DEFAULT_SUB_PROMPT_CHARS, RlmConfig, sub_prompt_chars_for_window};
pub use crate::host::PRIMITIVES;
pub use crate::result::{RlmIteration, RlmOutcome, RlmResult, RlmSnippet};

/// Characters of each input shown in the preview (head and tail together).
const PREVIEW_CHARS: usize = 600;

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

impl Engine for Rlm {
    fn config(&self) -> &RlmConfig {
        &self.config
    }

    fn sub_model(&self) -> &dyn ChatProvider {
        self.sub.as_ref()
    }

    fn tools(&self) -> &ToolInvoker {
        &self.tools
    }

    fn reach(&self) -> &Reach {
        &self.reach
    }

    fn run_child(
        self: Arc<Self>,
        question: String,
        inputs: Inputs,
        scope: RunScope,
        tree: Arc<Tree>,
        node: Node,
    ) -> BoxFuture<'static, Result<RlmResult, RlmRunError>> {
        Box::pin(async move { self.run_node(&question, inputs, &scope, tree, node).await })
    }
}
