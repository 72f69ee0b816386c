//! The agent loop's states and the run state its steps share: [`State`] is where a run is
//! (before the model call, the call, an answer, tool calls, done); [`Turn`] holds what the
//! steps and the hooks ([`super::hooks`]) read and change, and does the loop's own steps — the
//! guarded model call, running the agent's calls, refusing calls that will not run.

use std::time::Instant;

use crate::asks::Asks;
use crate::event::EventKind;
use crate::invoke::{ToolInvoker, ToolOutcome};
use crate::message::{Role, ToolCall};
use crate::provider::{ChatOptions, ChatRequest, StopReason};
use crate::run::{FinishReason, ModelCall, ModelCallError, RunScope};
use crate::tool::ToolRegistry;

use super::hooks::Refusal;
use super::{Agent, AgentError, Recorder};

/// Where a run is.
pub(crate) enum State {
    /// Before the first turn: a cut-off turn's pending calls, the checks of the run's set-up.
    Start,
    /// Before a model call: limits, tools and messages that joined, compaction.
    BeforeCall,
    /// The model call.
    Call,
    /// The model answered without tool calls.
    Answer(Reply),
    /// The model asked for tool calls.
    Tools(Reply),
    /// The run ends.
    Done(FinishReason),
}

/// What the model said in one turn (already in the transcript).
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The text.
    pub text: String,
    /// Why the model stopped.
    pub stop: StopReason,
    /// Every call, the agent's own first.
    pub calls: Vec<ToolCall>,
    /// The agent's own calls, answered in this turn.
    pub own: Vec<ToolCall>,
    /// The caller's calls ([`Asks::tools`]), handed back.
    pub client: Vec<ToolCall>,
}

/// One run's state as the loop's steps and hooks see it.
pub(crate) struct Turn<'a> {
    /// The agent running.
    pub agent: &'a Agent,
    /// The run's node of the run tree.
    pub scope: &'a RunScope,
    /// The caller's asks.
    pub asks: &'a Asks,
    /// The transcript (and its log).
    pub rec: &'a mut Recorder,
    /// Model turns taken.
    pub step: &'a mut u32,
    /// The run's wall-clock deadline.
    pub deadline: Option<Instant>,
    /// The agent's tools offered to the model (the caller's are in `asks`).
    pub tools: ToolRegistry,
    /// Only read-only tools are offered (plan mode), tools joining later included.
    pub read_only: bool,
    /// Runs `tools` under the agent's gate and limits.
    pub invoker: ToolInvoker,
    /// The options of every model call: the agent's with the caller's laid over.
    pub options: ChatOptions,
}

impl<'a> Turn<'a> {
    /// A run of `agent` about to start, offering all its tools.
    pub fn new(
        agent: &'a Agent,
        rec: &'a mut Recorder,
        scope: &'a RunScope,
        step: &'a mut u32,
        asks: &'a Asks,
    ) -> Self {
        Turn {
            agent,
            scope,
            asks,
            rec,
            step,
            deadline: agent.config.limits.wall_clock.and_then(|w| Instant::now().checked_add(w)),
            tools: agent.tools.clone(),
            read_only: false,
            invoker: agent.invoker_over(agent.tools.clone()),
            options: asks.overlay(&agent.config.options),
        }
    }

    /// Offers `tools` from now on instead of the current ones.
    pub fn set_tools(&mut self, tools: ToolRegistry) {
        self.invoker = self.agent.invoker_over(tools.clone());
        self.tools = tools;
    }

    /// Offers `registries` beside the current tools (their read-only tools only, when
    /// [`read_only`](Self::read_only), the others then refusing calls as a plan's do).
    pub fn offer(&mut self, registries: &[ToolRegistry]) {
        let (mut offered, mut run) = (self.tools.clone(), self.invoker.tools().clone());
        for registry in registries {
            if self.read_only {
                offered.extend(&registry.read_only());
                run.extend(&registry.planning());
            } else {
                offered.extend(registry);
                run.extend(registry);
            }
        }
        self.tools = offered;
        self.invoker = self.agent.invoker_over(run);
    }

    /// The guarded model call; its message joins the transcript, the caller's calls last.
    pub async fn call_model(&mut self) -> Result<State, AgentError> {
        let request = ChatRequest {
            messages: self.rec.transcript.messages().to_vec(),
            tools: self.tools.specs().into_iter().chain(self.asks.tools.iter().cloned()).collect(),
            options: self.options.clone(),
        };
        let call = ModelCall { step: *self.step + 1, deadline: self.deadline, stream_text: true, reserved: false };
        let response = match self.scope.call_model(self.agent.provider.as_ref(), request, call).await {
            Ok(r) => r,
            Err(ModelCallError::Stopped(reason)) => return Ok(State::Done(reason)),
            Err(ModelCallError::Provider(e)) => return Err(e.into()),
        };
        *self.step += 1;
        let mut message = response.message;
        message.role = Role::Assistant;
        message.tool_call_id = None;
        // The caller's calls go last: the agent's own are answered here, theirs later.
        let (own, client): (Vec<ToolCall>, Vec<ToolCall>) =
            message.tool_calls.drain(..).partition(|c| !self.asks.is_client_tool(&c.name));
        message.tool_calls = own.iter().chain(&client).cloned().collect();
        if !message.content.is_empty() {
            self.scope.emit(*self.step, EventKind::AssistantText { text: message.content.clone() });
        }
        let reply = Reply {
            text: message.content.clone(),
            stop: response.stop_reason,
            calls: message.tool_calls.clone(),
            own,
            client,
        };
        self.rec.push(message)?;
        Ok(if reply.calls.is_empty() { State::Answer(reply) } else { State::Tools(reply) })
    }

    /// Runs `calls` (concurrently, under the gate and the deadline).
    pub async fn run(&self, calls: &[ToolCall]) -> Vec<ToolOutcome> {
        self.invoker.invoke_all(calls, self.scope, *self.step, self.deadline).await
    }

    /// Records the agent's calls' `outcomes`; when one of them stopped the run, the caller's
    /// `client` calls get a result saying so and the reason is returned.
    pub fn answer(
        &mut self,
        outcomes: Vec<ToolOutcome>,
        client: &[ToolCall],
    ) -> Result<Option<FinishReason>, AgentError> {
        let stop = outcomes.iter().find_map(|o| o.stop.clone());
        self.rec.push_outcomes(outcomes)?;
        if stop.is_some() {
            let skipped = self.invoker.skip_all(client, self.scope, *self.step, "not executed: the run stopped");
            self.rec.push_outcomes(skipped)?;
        }
        Ok(stop)
    }

    /// Calls that cannot run still get exactly one result each; then the run ends.
    pub fn refuse(&mut self, calls: &[ToolCall], refusal: Refusal) -> Result<State, AgentError> {
        let skipped = self.invoker.skip_all(calls, self.scope, *self.step, &refusal.text);
        self.rec.push_outcomes(skipped)?;
        Ok(State::Done(refusal.reason))
    }
}
