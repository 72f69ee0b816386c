//! The agent loop: a goal goes to the model, the model's tool calls run (concurrently, results
//! appended in call order), and this repeats until a finish condition. Every limit ends the
//! run with a [`FinishReason`] and its transcript; `Err` is kept for faults. The loop is a small
//! state machine (`turn`: the states and the steps they share); each capability — limits, plan
//! mode, client tools, joining tools and messages, compaction, repairs, the stuck detector — is
//! a hook (`hooks`), assembled in one place.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::asks::Asks;
use crate::event::EventKind;
use crate::invoke::{DEFAULT_MAX_OUTPUT_CHARS, ToolInvoker, ToolLimits, ToolOutcome};
use crate::message::{Message, Role, ToolCall, Usage};
use crate::provider::{ChatOptions, ChatProvider, ChatRequest, ProviderError};
use crate::run::{FinishReason, ModelCall, ModelCallError, RunScope};
use crate::tool::{ToolGate, ToolRegistry};
use crate::transcript::{Transcript, TranscriptError, TranscriptLog};

mod hooks;
mod turn;

use turn::{State, Turn};

/// Limits of one run (the tree-wide budget lives in [`crate::Budget`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunLimits {
    /// Model turns allowed.
    pub max_steps: u32,
    /// Identical consecutive tool calls that count as stuck.
    pub stuck_threshold: u32,
    /// Transcript size (characters) that ends the run.
    pub max_transcript_chars: Option<usize>,
    /// Denied tool calls that end the run.
    pub max_permission_denials: u32,
    /// Wall clock for this run.
    pub wall_clock: Option<Duration>,
    /// Tool calls of one message run at most this many at once.
    pub tool_concurrency: usize,
    /// Time allowed for one tool call.
    pub tool_timeout: Option<Duration>,
    /// Characters of one tool result kept (head and tail).
    pub max_tool_output_chars: usize,
    /// Deepest nesting allowed for runs started under this one.
    pub max_depth: u32,
}

impl RunLimits {
    /// The limits of this run's tool calls.
    pub fn tool_limits(&self) -> ToolLimits {
        ToolLimits {
            timeout: self.tool_timeout,
            concurrency: self.tool_concurrency,
            max_output_chars: self.max_tool_output_chars,
        }
    }
}

impl Default for RunLimits {
    fn default() -> Self {
        Self {
            max_steps: 32,
            stuck_threshold: 3,
            max_transcript_chars: None,
            max_permission_denials: 3,
            wall_clock: None,
            tool_concurrency: 8,
            tool_timeout: None,
            max_tool_output_chars: DEFAULT_MAX_OUTPUT_CHARS,
            max_depth: crate::run::DEFAULT_MAX_DEPTH,
        }
    }
}

/// How an agent behaves.
#[derive(Debug, Clone, Default)]
pub struct AgentConfig {
    /// Name used in run names (`{name}-d{depth}`) and events.
    pub name: String,
    /// System prompt, if any.
    pub system_prompt: Option<String>,
    /// Options of every model call.
    pub options: ChatOptions,
    /// Limits of each run.
    pub limits: RunLimits,
    /// Plan mode: the model may look around with the read-only tools only (reading, searching,
    /// listing: nothing changes) and proposes a plan; the run stops with
    /// [`FinishReason::PlanPending`] when it answers.
    pub plan_mode: bool,
    /// Append the transcript to this JSONL file as the run goes (with `transcript_store`, as
    /// the store's export).
    pub transcript_path: Option<PathBuf>,
    /// Keep the transcript in this store slot as the run goes (what a resume reads).
    pub transcript_store: Option<Arc<dyn crate::jsonl::StoredRecords>>,
    /// Compaction before each model call when the transcript nears the context window
    /// ([`crate::compact`]); `None`: never compacted (`max_transcript_chars` still stops the run).
    pub compaction: Option<crate::compact::CompactionConfig>,
}

/// Instruction added in plan mode.
pub const PLAN_MODE_PROMPT: &str = "Plan mode: change nothing yet. You may use the read-only tools offered (reading, \
searching, listing) to look around. Then reply with a short numbered plan of the steps and tool calls you would make \
to reach the goal. The plan will be reviewed before anything changes.";

/// Whether a conversation ends in a turn cut off before its answer (a kill): with the person's
/// message, with tool calls still awaiting results, or with results the model has not seen.
/// Continued with no new message, such a turn goes on where it was.
pub fn cut_off(messages: &[Message], balanced: bool) -> bool {
    !balanced || messages.last().is_some_and(|m| matches!(m.role, Role::User | Role::Tool))
}

/// `system` without the plan-mode instruction [`start`](Agent::continue_in) adds in plan mode.
pub fn without_plan_mode(system: &str) -> String {
    match system.strip_suffix(PLAN_MODE_PROMPT) {
        Some(rest) => rest.trim_end().to_string(),
        None => system.to_string(),
    }
}

/// The outcome of a run (also the partial result of a run a fault ended, in [`RunError`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Why it ended.
    pub finish_reason: FinishReason,
    /// The final assistant text (possibly empty).
    pub output: String,
    /// Every message of the run, pairing contract kept.
    pub messages: Vec<Message>,
    /// Usage including descendants.
    pub usage: Usage,
    /// USD cost including descendants (0 where prices are unknown).
    pub cost_usd: f64,
    /// Model turns taken.
    pub steps: u32,
    /// The run's id.
    pub run_id: String,
}

/// Why a run ended with a fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The provider failed after its retries.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The transcript log could not be written. (The I/O error is in the message, not a
    /// source, so a printed chain does not repeat it.)
    #[error("writing the transcript log: {0}")]
    Io(std::io::Error),
    /// A message broke the pairing contract (a bug in a provider or a caller's transcript).
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
    /// A caller's tool has the name of one of the agent's own tools.
    #[error("the client tool `{0}` has the name of one of the agent's own tools; rename it")]
    ToolClash(String),
}

impl From<std::io::Error> for AgentError {
    fn from(e: std::io::Error) -> Self {
        AgentError::Io(e)
    }
}

/// A fault ended the run; `partial` holds everything gathered until then (finish reason
/// [`FinishReason::Fault`]). The run's `RunFinished` event carried the error.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RunError {
    /// The fault.
    #[source]
    pub error: AgentError,
    /// The transcript, usage and steps up to the fault.
    pub partial: Box<RunResult>,
}

/// A model with tools and a configuration; `run` pursues one goal.
#[derive(Clone)]
pub struct Agent {
    provider: Arc<dyn ChatProvider>,
    tools: ToolRegistry,
    late: Option<LateTools>,
    inbox: Option<crate::inbox::Inbox>,
    gate: Option<Arc<dyn ToolGate>>,
    config: AgentConfig,
}

/// Tools that join runs when they become ready (MCP servers still starting when the first
/// model call goes out): each run checks before every model call and offers what has joined.
#[derive(Clone, Default)]
pub struct LateTools(Arc<std::sync::Mutex<Vec<ToolRegistry>>>);

impl LateTools {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `tools` available to every run from its next model call.
    pub fn add(&self, tools: ToolRegistry) {
        if let Ok(mut joined) = self.0.lock() {
            joined.push(tools);
        }
    }

    /// The registries added after the first `seen`.
    fn since(&self, seen: usize) -> Vec<ToolRegistry> {
        self.0.lock().map(|joined| joined.iter().skip(seen).cloned().collect()).unwrap_or_default()
    }
}

/// The agent loop is usually called the runtime.
pub type AgentRuntime = Agent;

struct Recorder {
    transcript: Transcript,
    log: Option<TranscriptLog>,
}

impl Recorder {
    fn push(&mut self, m: Message) -> Result<(), AgentError> {
        if let Some(log) = &mut self.log {
            log.append(&m)?;
        }
        self.transcript.push(m)?;
        Ok(())
    }

    fn push_outcomes(&mut self, outcomes: Vec<ToolOutcome>) -> Result<(), AgentError> {
        for o in outcomes {
            self.push(Message::tool_result(o.id, o.output, o.is_error))?;
        }
        Ok(())
    }
}

impl Agent {
    /// An agent with no tools and default configuration.
    pub fn new(provider: Arc<dyn ChatProvider>) -> Self {
        Self {
            provider,
            tools: ToolRegistry::new(),
            late: None,
            inbox: None,
            gate: None,
            config: AgentConfig { name: "agent".into(), ..Default::default() },
        }
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
        self
    }

    /// Tools that join while runs are under way ([`LateTools`]).
    pub fn with_late_tools(mut self, late: LateTools) -> Self {
        self.late = Some(late);
        self
    }

    /// User messages that join runs under way before their next model call ([`crate::Inbox`]).
    pub fn with_inbox(mut self, inbox: crate::inbox::Inbox) -> Self {
        self.inbox = Some(inbox);
        self
    }

    /// Sets the configuration.
    pub fn with_config(mut self, config: AgentConfig) -> Self {
        self.config = config;
        self
    }

    /// Sets the permission gate consulted before each tool call.
    pub fn with_gate(mut self, gate: Arc<dyn ToolGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Mutable configuration.
    pub fn config_mut(&mut self) -> &mut AgentConfig {
        &mut self.config
    }

    /// The tools.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn ChatProvider> {
        &self.provider
    }

    /// The tool executor of a run: this agent's tools and gate under its limits.
    pub fn invoker(&self) -> ToolInvoker {
        self.invoker_over(self.tools.clone())
    }

    fn invoker_over(&self, tools: ToolRegistry) -> ToolInvoker {
        let mut invoker = ToolInvoker::new(tools).with_limits(self.config.limits.tool_limits());
        invoker.set_gate(self.gate.clone());
        invoker
    }

    /// Runs a goal as a fresh root run with no sink and no tree budget.
    pub async fn run(&self, goal: &str) -> Result<RunResult, RunError> {
        let scope = RunScope::detached(&self.config.name).with_max_depth(self.config.limits.max_depth);
        self.run_in(goal, &scope).await
    }

    /// Runs a goal in the given run-tree node.
    pub async fn run_in(&self, goal: &str, scope: &RunScope) -> Result<RunResult, RunError> {
        self.continue_in(Vec::new(), goal, scope).await
    }

    /// Continues an earlier conversation (e.g. a session's previous turns) with a new user
    /// message. The system prompt is added only when `history` has none. Every run ends with
    /// a `RunFinished` event, a fault included.
    pub async fn continue_in(
        &self,
        history: Vec<Message>,
        input: &str,
        scope: &RunScope,
    ) -> Result<RunResult, RunError> {
        self.continue_with(history, input, &Asks::default(), scope).await
    }

    /// [`continue_in`](Self::continue_in) with a caller's [`Asks`]: client tools offered beside
    /// the agent's own, model settings over the agent's, a check of the final answer. An empty
    /// `input` after a history that ends with tool results continues from those results (the
    /// caller answered client tool calls) without a new user message.
    pub async fn continue_with(
        &self,
        history: Vec<Message>,
        input: &str,
        asks: &Asks,
        scope: &RunScope,
    ) -> Result<RunResult, RunError> {
        let mut rec = Recorder { transcript: Transcript::new(), log: None };
        scope.emit(0, EventKind::RunStarted { goal: input.to_string() });
        let mut steps = 0u32;
        let outcome = match self.start(&mut rec, history, input) {
            Ok(()) => self.drive(&mut rec, scope, &mut steps, asks).await,
            Err(e) => Err(e),
        };
        let (finish_reason, error) = match outcome {
            Ok(reason) => (reason, None),
            Err(e) => (FinishReason::Fault, Some(e)),
        };
        let result = RunResult {
            output: rec.transcript.last_assistant_text().unwrap_or_default().to_string(),
            messages: rec.transcript.into_messages(),
            usage: scope.usage(),
            cost_usd: scope.cost_usd(),
            steps,
            run_id: scope.ids().run_id.clone(),
            finish_reason,
        };
        scope.emit(
            steps,
            EventKind::RunFinished {
                finish_reason: result.finish_reason.clone(),
                error: error.as_ref().map(ToString::to_string),
                usage: result.usage,
                cost_usd: result.cost_usd,
            },
        );
        match error {
            None => Ok(result),
            Some(error) => Err(RunError { error, partial: Box::new(result) }),
        }
    }

    /// The history, the transcript log, the system prompt and the new user message.
    /// The history (already in the log), this agent's system prompt first when the history has
    /// none (logged: it is new), and the new user message.
    fn start(&self, rec: &mut Recorder, history: Vec<Message>, input: &str) -> Result<(), AgentError> {
        rec.log = match (&self.config.transcript_store, &self.config.transcript_path) {
            (Some(store), export) => Some(TranscriptLog::kept(store.clone(), export.as_deref())?),
            (None, Some(path)) => Some(TranscriptLog::open(path)?),
            (None, None) => None,
        };
        if let Some(system) = self.system_message().filter(|_| !history.iter().any(|m| m.role == Role::System)) {
            rec.push(system)?;
        }
        for mut m in history {
            // The system prompt says whether this turn plans: out of plan mode (an approved plan
            // is being carried out) it no longer forbids changes; switched into it mid-session,
            // it says so.
            if m.role == Role::System {
                m.content = without_plan_mode(&m.content);
                if self.config.plan_mode {
                    m.content = format!("{}\n\n{PLAN_MODE_PROMPT}", m.content);
                }
            }
            rec.transcript.push(m)?;
        }
        let answered = rec.transcript.messages().last().is_some_and(|m| m.role == Role::Tool);
        if input.is_empty() && answered && rec.transcript.is_balanced() {
            return Ok(());
        }
        if input.is_empty() && cut_off(rec.transcript.messages(), rec.transcript.is_balanced()) {
            return Ok(());
        }
        rec.push(Message::user(input))
    }

    /// The system message of a new conversation (with the plan-mode rules in plan mode).
    fn system_message(&self) -> Option<Message> {
        let mut system = self.config.system_prompt.clone().unwrap_or_default();
        if self.config.plan_mode {
            if !system.is_empty() {
                system.push_str("\n\n");
            }
            system.push_str(PLAN_MODE_PROMPT);
        }
        (!system.is_empty()).then(|| Message::system(system))
    }

    /// The loop: a small state machine whose capabilities are hooks ([`hooks::built_in`]).
    async fn drive(
        &self,
        rec: &mut Recorder,
        scope: &RunScope,
        step: &mut u32,
        asks: &Asks,
    ) -> Result<FinishReason, AgentError> {
        let mut hooks = hooks::built_in(self, asks.check.as_ref(), !asks.tools.is_empty());
        let mut turn = Turn::new(self, rec, scope, step, asks);
        let mut state = State::Start;
        loop {
            state = match state {
                State::Start => hooks.on_start(&mut turn).await?.then(State::BeforeCall),
                State::BeforeCall => hooks.before_call(&mut turn).await?.then(State::Call),
                State::Call => turn.call_model().await?,
                State::Answer(reply) => {
                    hooks.on_answer(&mut turn, &reply)?.then(State::Done(FinishReason::NoMoreToolCalls))
                }
                State::Tools(reply) => match hooks.before_tools(&turn, &reply) {
                    Some(refusal) => turn.refuse(&reply.calls, refusal)?,
                    None => {
                        let outcomes = turn.run(&reply.own).await;
                        let flow = hooks.after_tools(&turn, &reply, &outcomes);
                        match turn.answer(outcomes, &reply.client)? {
                            Some(stopped) => State::Done(stopped),
                            None => flow.then(State::BeforeCall),
                        }
                    }
                },
                State::Done(reason) => return Ok(reason),
            };
        }
    }
}

impl Agent {
    /// Compacts the transcript when it has grown past the compaction limit: old tool results
    /// first, then a summary of the older turns by one model call. Returns a finish reason when
    /// the summary call found the run stopped.
    async fn compact(
        &self,
        rec: &mut Recorder,
        scope: &RunScope,
        step: u32,
        deadline: Option<Instant>,
        config: &crate::compact::CompactionConfig,
    ) -> Result<Option<FinishReason>, AgentError> {
        // The tool specs go with every request: they count toward the window too.
        let specs = crate::compact::estimate_spec_tokens(&self.tools.specs());
        let before = crate::compact::estimate_tokens(rec.transcript.messages()) + specs;
        if before <= config.limit() {
            return Ok(None);
        }
        let messages = rec.transcript.messages().to_vec();
        match self.compacted(messages, scope, step, deadline, config, false).await? {
            Compaction::Stopped(reason) => Ok(Some(reason)),
            Compaction::Unchanged => Ok(None),
            Compaction::Done(messages) => {
                if let Some(log) = &mut rec.log {
                    log.append_compacted(&messages)?;
                }
                rec.transcript = crate::transcript::Transcript::from_messages(messages)?;
                Ok(None)
            }
        }
    }

    /// Compacts `history` now, whatever its size (`/compact` of a chat): old tool results
    /// elided and the turns before the last summarised. Returns it unchanged when there is
    /// nothing to compact.
    pub async fn compact_now(&self, history: Vec<Message>, scope: &RunScope) -> Result<Vec<Message>, AgentError> {
        let config = self.config.compaction.clone().unwrap_or_else(|| crate::compact::CompactionConfig::for_window(0));
        match self.compacted(history.clone(), scope, 0, None, &config, true).await? {
            Compaction::Done(messages) => Ok(messages),
            Compaction::Unchanged | Compaction::Stopped(_) => Ok(history),
        }
    }

    /// The compacted form of `messages`: micro-compaction, then (when still over the limit,
    /// or `force`d) a summary of the turns before the kept ones; emits a `compacted` event.
    async fn compacted(
        &self,
        messages: Vec<Message>,
        scope: &RunScope,
        step: u32,
        deadline: Option<Instant>,
        config: &crate::compact::CompactionConfig,
        force: bool,
    ) -> Result<Compaction, AgentError> {
        use crate::compact::{cut_tool_results, estimate_tokens, micro_compact, rebuild, split, summary_prompt};
        let before = estimate_tokens(&messages);
        let mut compacted = messages.clone();
        let mut method = "micro";
        let elided = micro_compact(&mut compacted, config.keep_tool_results);
        if (force || elided == 0 || estimate_tokens(&compacted) > config.limit())
            && let Some(parts) = split(&compacted, config.keep_turns)
        {
            let request = ChatRequest {
                // Bounded by the window, as every request is (four characters a token).
                messages: vec![Message::user(summary_prompt(&parts.old, config.limit().saturating_mul(4)))],
                tools: Vec::new(),
                options: self.config.options.clone(),
            };
            let call = ModelCall { step, deadline, stream_text: false, reserved: false };
            let summary = match scope.call_model(self.provider.as_ref(), request, call).await {
                Ok(r) => r.message.content,
                Err(ModelCallError::Stopped(reason)) => return Ok(Compaction::Stopped(reason)),
                Err(ModelCallError::Provider(e)) => return Err(e.into()),
            };
            compacted = rebuild(parts, &summary);
            method = "summary";
        }
        // What is kept may still be too big (one huge result in the latest turn): the largest
        // tool results are cut so the next request fits.
        let specs = crate::compact::estimate_spec_tokens(&self.tools.specs());
        if cut_tool_results(&mut compacted, config.limit().saturating_sub(specs)) > 0 && method == "micro" {
            method = "cut";
        }
        if compacted == messages {
            // Nothing to elide and nothing before the kept turns.
            return Ok(Compaction::Unchanged);
        }
        scope.emit(
            step,
            EventKind::Compacted {
                method: method.into(),
                before_tokens: before,
                after_tokens: estimate_tokens(&compacted),
                before_messages: messages.len(),
                after_messages: compacted.len(),
            },
        );
        Ok(Compaction::Done(compacted))
    }
}

/// What compaction made of a conversation.
enum Compaction {
    /// The compacted messages.
    Done(Vec<Message>),
    /// Nothing to compact.
    Unchanged,
    /// The summary call found the run stopped.
    Stopped(FinishReason),
}

/// Counts identical consecutive tool calls (same name and arguments).
struct StuckDetector {
    threshold: u32,
    last: Option<(String, String)>,
    repeats: u32,
}

impl StuckDetector {
    fn new(threshold: u32) -> Self {
        Self { threshold, last: None, repeats: 0 }
    }

    /// Feeds a message's calls; true when the run is stuck.
    fn observe(&mut self, calls: &[ToolCall]) -> bool {
        let mut stuck = false;
        for c in calls {
            let key = (c.name.clone(), c.arguments.to_string());
            if self.last.as_ref() == Some(&key) {
                self.repeats += 1;
            } else {
                self.repeats = 1;
                self.last = Some(key);
            }
            stuck |= self.threshold > 0 && self.repeats >= self.threshold;
        }
        stuck
    }
}
