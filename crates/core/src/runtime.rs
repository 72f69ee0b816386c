//! The agent loop: a goal goes to the model, the model's tool calls run (concurrently, results
//! appended in call order), and this repeats until a finish condition. Every limit ends the
//! run with a [`FinishReason`] and its transcript; `Err` is kept for faults.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use crate::event::{Decision, EventKind};
use crate::message::{Message, Role, ToolCall, Usage};
use crate::provider::{ChatOptions, ChatProvider, ChatRequest, ChatResponse, ProviderError, StopReason, StreamEvent};
use crate::run::{FinishReason, RunScope};
use crate::tool::{ToolContext, ToolGate, ToolRegistry};
use crate::transcript::{Transcript, TranscriptError, TranscriptLog};

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
    /// Deepest nesting allowed for runs started under this one.
    pub max_depth: u32,
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
    /// Plan mode: the model proposes a plan without tools, and the run stops with
    /// [`FinishReason::PlanPending`].
    pub plan_mode: bool,
    /// Append the transcript to this JSONL file as the run goes.
    pub transcript_path: Option<PathBuf>,
}

/// Instruction added in plan mode.
pub const PLAN_MODE_PROMPT: &str = "Plan mode: do not call any tools yet. Reply with a short numbered plan of the \
steps and tool calls you would make to reach the goal. The plan will be reviewed before anything runs.";

/// The outcome of a run.
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

/// A fault that stopped a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The provider failed after its retries.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The transcript log could not be written.
    #[error("transcript log: {0}")]
    Io(#[from] std::io::Error),
    /// A message broke the pairing contract (a bug in a provider or a caller's transcript).
    #[error(transparent)]
    Transcript(#[from] TranscriptError),
}

/// A model with tools and a configuration; `run` pursues one goal.
#[derive(Clone)]
pub struct Agent {
    provider: Arc<dyn ChatProvider>,
    tools: ToolRegistry,
    gate: Option<Arc<dyn ToolGate>>,
    config: AgentConfig,
}

/// The agent loop is usually called the runtime.
pub type AgentRuntime = Agent;

enum ModelOutcome {
    Response(ChatResponse),
    Stop(FinishReason),
}

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
}

impl Agent {
    /// An agent with no tools and default configuration.
    pub fn new(provider: Arc<dyn ChatProvider>) -> Self {
        Self {
            provider,
            tools: ToolRegistry::new(),
            gate: None,
            config: AgentConfig { name: "agent".into(), ..Default::default() },
        }
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: ToolRegistry) -> Self {
        self.tools = tools;
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

    /// Runs a goal as a fresh root run with no sink and no tree budget.
    pub async fn run(&self, goal: &str) -> Result<RunResult, AgentError> {
        let scope = RunScope::detached(&self.config.name).with_max_depth(self.config.limits.max_depth);
        self.run_in(goal, &scope).await
    }

    /// Runs a goal in the given run-tree node.
    pub async fn run_in(&self, goal: &str, scope: &RunScope) -> Result<RunResult, AgentError> {
        self.continue_in(Vec::new(), goal, scope).await
    }

    /// Continues an earlier conversation (e.g. a session's previous turns) with a new user
    /// message. The system prompt is added only when `history` has none.
    pub async fn continue_in(
        &self,
        history: Vec<Message>,
        input: &str,
        scope: &RunScope,
    ) -> Result<RunResult, AgentError> {
        let log = match &self.config.transcript_path {
            Some(p) => Some(TranscriptLog::open(p)?),
            None => None,
        };
        let mut rec = Recorder { transcript: Transcript::new(), log: None };
        for m in history {
            rec.push(m)?;
        }
        rec.log = log;
        if !rec.transcript.messages().iter().any(|m| m.role == Role::System) {
            let mut system = self.config.system_prompt.clone().unwrap_or_default();
            if self.config.plan_mode {
                if !system.is_empty() {
                    system.push_str("\n\n");
                }
                system.push_str(PLAN_MODE_PROMPT);
            }
            if !system.is_empty() {
                rec.push(Message::system(system))?;
            }
        }
        rec.push(Message::user(input))?;
        scope.emit(0, EventKind::RunStarted { goal: input.to_string() });
        let (finish_reason, steps) = self.drive(&mut rec, scope).await?;
        let usage = scope.usage();
        let cost_usd = scope.cost_usd();
        scope.emit(steps, EventKind::TurnFinished { finish_reason: finish_reason.to_string(), usage, cost_usd });
        Ok(RunResult {
            finish_reason,
            output: rec.transcript.last_assistant_text().unwrap_or_default().to_string(),
            messages: rec.transcript.into_messages(),
            usage,
            cost_usd,
            steps,
            run_id: scope.ids().run_id.clone(),
        })
    }

    fn deadline(&self, scope: &RunScope, started: Instant) -> Option<Instant> {
        let own = self.config.limits.wall_clock.map(|w| started + w);
        let tree = scope.budget().deadline();
        match (own, tree) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn drive(&self, rec: &mut Recorder, scope: &RunScope) -> Result<(FinishReason, u32), AgentError> {
        let limits = &self.config.limits;
        let started = Instant::now();
        let deadline = self.deadline(scope, started);
        let mut step = 0u32;
        let mut denials = 0u32;
        let mut last_call: Option<(String, String)> = None;
        let mut repeats = 0u32;
        loop {
            if let Some(reason) = scope.stop_reason() {
                return Ok((reason, step));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok((FinishReason::WallClockExceeded, step));
            }
            if step >= limits.max_steps {
                return Ok((FinishReason::BudgetExceeded, step));
            }
            if limits.max_transcript_chars.is_some_and(|max| rec.transcript.size_chars() > max) {
                return Ok((FinishReason::TranscriptLimit, step));
            }
            step += 1;
            let request = ChatRequest {
                messages: rec.transcript.messages().to_vec(),
                tools: if self.config.plan_mode { Vec::new() } else { self.tools.specs() },
                options: self.config.options.clone(),
            };
            let response = match self.call_model(request, scope, step, deadline).await? {
                ModelOutcome::Response(r) => r,
                ModelOutcome::Stop(reason) => return Ok((reason, step)),
            };
            scope.record_response(step, &response);
            let mut message = response.message;
            message.role = Role::Assistant;
            message.tool_call_id = None;
            let calls = message.tool_calls.clone();
            if !message.content.is_empty() {
                scope.emit(step, EventKind::AssistantText { text: message.content.clone() });
            }
            rec.push(message)?;
            if calls.is_empty() {
                let reason = if self.config.plan_mode {
                    FinishReason::PlanPending
                } else if response.stop_reason.is_natural() {
                    FinishReason::NoMoreToolCalls
                } else {
                    FinishReason::ProviderStop(response.stop_reason.to_string())
                };
                return Ok((reason, step));
            }
            for c in &calls {
                scope.emit(step, EventKind::ToolCall { call: c.clone() });
            }
            // Calls that cannot run still get exactly one result each.
            let skip_reason = if self.config.plan_mode {
                Some((FinishReason::PlanPending, "not executed: plan mode, the plan awaits approval".to_string()))
            } else if response.stop_reason == StopReason::MaxTokens {
                Some((
                    FinishReason::ProviderStop(StopReason::MaxTokens.to_string()),
                    "not executed: the response was cut off by the token limit".to_string(),
                ))
            } else {
                let mut stuck = false;
                for c in &calls {
                    let key = (c.name.clone(), c.arguments.to_string());
                    if last_call.as_ref() == Some(&key) {
                        repeats += 1;
                    } else {
                        repeats = 1;
                        last_call = Some(key);
                    }
                    if limits.stuck_threshold > 0 && repeats >= limits.stuck_threshold {
                        stuck = true;
                    }
                }
                stuck.then(|| {
                    (
                        FinishReason::Stuck,
                        format!(
                            "not executed: the same call was repeated {} times in a row; the run stopped as stuck",
                            limits.stuck_threshold
                        ),
                    )
                })
            };
            if let Some((reason, text)) = skip_reason {
                for c in &calls {
                    self.push_result(rec, scope, step, c, text.clone(), true, 0)?;
                }
                return Ok((reason, step));
            }
            let denied = self.check_permissions(&calls, scope, step).await;
            denials += denied.len() as u32;
            let cancelled = self.run_tools(rec, scope, step, &calls, &denied, deadline).await?;
            if let Some(reason) = cancelled {
                return Ok((reason, step));
            }
            if limits.max_permission_denials > 0 && denials >= limits.max_permission_denials {
                return Ok((FinishReason::PermissionDenialLimit, step));
            }
        }
    }

    async fn call_model(
        &self,
        request: ChatRequest,
        scope: &RunScope,
        step: u32,
        deadline: Option<Instant>,
    ) -> Result<ModelOutcome, AgentError> {
        let cancel = scope.cancel_token().clone();
        let work = async {
            let mut stream = self.provider.stream(request).await?;
            while let Some(event) = stream.next().await {
                match event? {
                    StreamEvent::TextDelta(delta) => scope.emit(step, EventKind::PartialText { delta }),
                    StreamEvent::Retry { attempt, delay_ms, reason } => {
                        scope.emit(step, EventKind::Retry { attempt, delay_ms, reason })
                    }
                    StreamEvent::Completed(r) => return Ok(r),
                }
            }
            Err(ProviderError::Truncated {
                provider: self.provider.name().to_string(),
                message: "stream ended without a final response".into(),
            })
        };
        let timed = async {
            match deadline {
                Some(d) => tokio::time::timeout_at(d.into(), work).await.ok(),
                None => Some(work.await),
            }
        };
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Ok(ModelOutcome::Stop(FinishReason::Cancelled)),
            r = timed => match r {
                None => Ok(ModelOutcome::Stop(FinishReason::WallClockExceeded)),
                Some(Ok(resp)) => Ok(ModelOutcome::Response(resp)),
                Some(Err(e)) => {
                    scope.emit(step, EventKind::Error { message: e.to_string() });
                    Err(e.into())
                }
            }
        }
    }

    async fn check_permissions(&self, calls: &[ToolCall], scope: &RunScope, step: u32) -> HashMap<String, String> {
        let mut denied = HashMap::new();
        let Some(gate) = &self.gate else { return denied };
        for c in calls {
            let verdict = gate.check(c, self.tools.get(&c.name)).await;
            scope.emit(
                step,
                EventKind::Permission {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    decision: verdict.decision,
                    reason: verdict.reason.clone(),
                },
            );
            if verdict.decision == Decision::Deny {
                denied.insert(c.id.clone(), verdict.reason);
            }
        }
        denied
    }

    #[allow(clippy::too_many_arguments)]
    fn push_result(
        &self,
        rec: &mut Recorder,
        scope: &RunScope,
        step: u32,
        call: &ToolCall,
        output: String,
        is_error: bool,
        duration_ms: u64,
    ) -> Result<(), AgentError> {
        scope.emit(
            step,
            EventKind::ToolResult {
                id: call.id.clone(),
                name: call.name.clone(),
                output: output.clone(),
                is_error,
                duration_ms,
            },
        );
        rec.push(Message::tool_result(call.id.clone(), output, is_error))
    }

    /// Runs the allowed calls concurrently and appends one result per call in call order.
    /// Returns a finish reason when cancellation or the deadline interrupted the tools.
    async fn run_tools(
        &self,
        rec: &mut Recorder,
        scope: &RunScope,
        step: u32,
        calls: &[ToolCall],
        denied: &HashMap<String, String>,
        deadline: Option<Instant>,
    ) -> Result<Option<FinishReason>, AgentError> {
        let cancel = scope.cancel_token().clone();
        let tool_timeout = self.config.limits.tool_timeout;
        // Owned calls keep the per-call futures free of a borrowed closure argument, so a run
        // nested inside a tool (a sub-agent) still yields a `Send` future.
        let futures = calls.iter().cloned().map(|call| {
            let cancel = cancel.clone();
            let denial = denied.get(&call.id).cloned();
            async move {
                let t0 = Instant::now();
                if let Some(reason) = denial {
                    return (format!("permission denied: {reason}"), true, 0, None);
                }
                let ctx = ToolContext { scope: scope.clone(), step, call_id: call.id.clone() };
                let limit = match (tool_timeout, deadline) {
                    (Some(t), Some(d)) => Some((Instant::now() + t).min(d)),
                    (Some(t), None) => Some(Instant::now() + t),
                    (None, d) => d,
                };
                let run = self.tools.call(&call, &ctx);
                let outcome = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => Err(FinishReason::Cancelled),
                    r = async {
                        match limit {
                            Some(l) => tokio::time::timeout_at(l.into(), run).await.ok(),
                            None => Some(run.await),
                        }
                    } => r.ok_or(FinishReason::WallClockExceeded),
                };
                let ms = t0.elapsed().as_millis() as u64;
                match outcome {
                    Ok(Ok(out)) => (out, false, ms, None),
                    Ok(Err(e)) => (format!("error: {e}"), true, ms, None),
                    Err(FinishReason::Cancelled) => (
                        "cancelled: the run was cancelled before this call finished".to_string(),
                        true,
                        ms,
                        Some(FinishReason::Cancelled),
                    ),
                    Err(_) => {
                        let whole_run = deadline.is_some_and(|d| Instant::now() >= d);
                        let reason = whole_run.then_some(FinishReason::WallClockExceeded);
                        (format!("error: timed out after {:.1}s", ms as f64 / 1000.0), true, ms, reason)
                    }
                }
            }
        });
        let results: Vec<_> =
            futures::stream::iter(futures).buffered(self.config.limits.tool_concurrency.max(1)).collect().await;
        let mut stop = None;
        for (call, (output, is_error, ms, reason)) in calls.iter().zip(results) {
            self.push_result(rec, scope, step, call, output, is_error, ms)?;
            if stop.is_none() {
                stop = reason;
            }
        }
        Ok(stop)
    }
}
