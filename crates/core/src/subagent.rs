//! Agents calling agents: a [`SubAgent`] is a named [`Agent`] that runs as a child node of the
//! caller's run tree; [`SubAgentTool`] offers it to a parent model as one tool; and
//! [`SubAgentSession`] keeps a sub-agent's transcript across invocations so a follow-up turn
//! sees the earlier ones.
//!
//! Depth is checked before anything runs (a refused call makes no model request), the child's
//! own events reach the tree's sink tagged with its ids, usage and cost roll up to every
//! ancestor, and the tree's budget stops every node that is still running.

use std::sync::Arc;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::EventKind;
use crate::message::{Message, ToolSpec, Usage};
use crate::run::{DepthError, FinishReason, RunScope};
use crate::runtime::{Agent, RunError, RunResult};
use crate::tool::{Tool, ToolContext, ToolError, ToolOrigin, schema_for};

/// Why a sub-agent invocation produced no outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubAgentError {
    /// The call would nest deeper than the tree allows; nothing ran.
    #[error(transparent)]
    Depth(#[from] DepthError),
    /// The sub-agent's run failed with a fault (provider, transcript log).
    #[error("sub-agent `{agent}` failed: {source}")]
    Agent {
        /// The sub-agent's name.
        agent: String,
        /// The fault, with the child's partial result.
        source: RunError,
    },
}

/// What one sub-agent invocation produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SubAgentOutcome {
    /// The sub-agent's name.
    pub agent: String,
    /// The final assistant text (partial when the run stopped early).
    pub output: String,
    /// Why the run ended.
    pub finish_reason: FinishReason,
    /// Usage of the child run including its descendants.
    pub usage: Usage,
    /// USD cost of the child run including its descendants.
    pub cost_usd: f64,
    /// Model turns the child took.
    pub steps: u32,
    /// The child run's id.
    pub run_id: String,
    /// The child's depth in the run tree.
    pub depth: u32,
    /// The child's transcript.
    pub messages: Vec<Message>,
}

impl SubAgentOutcome {
    /// Whether the sub-agent finished normally (answered without asking for more tools).
    pub fn is_complete(&self) -> bool {
        self.finish_reason == FinishReason::NoMoreToolCalls
    }

    /// The text a parent model sees as the tool result: the output when the run finished
    /// normally, otherwise what stopped it followed by the partial output.
    pub fn to_tool_text(&self) -> String {
        if self.is_complete() {
            return self.output.clone();
        }
        let partial = if self.output.is_empty() { "(none)" } else { self.output.as_str() };
        format!(
            "sub-agent `{}` stopped early: {} after {} step(s). Partial result:\n{}",
            self.agent, self.finish_reason, self.steps, partial
        )
    }

    fn from_run(agent: &str, depth: u32, r: RunResult) -> Self {
        Self {
            agent: agent.to_string(),
            output: r.output,
            finish_reason: r.finish_reason,
            usage: r.usage,
            cost_usd: r.cost_usd,
            steps: r.steps,
            run_id: r.run_id,
            depth,
            messages: r.messages,
        }
    }
}

/// A named agent (its own provider, model, system prompt and tools) that a parent can invoke
/// with a goal.
#[derive(Clone)]
pub struct SubAgent {
    name: String,
    description: String,
    agent: Agent,
}

impl std::fmt::Debug for SubAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgent").field("name", &self.name).field("description", &self.description).finish()
    }
}

impl SubAgent {
    /// Wraps an agent under a name and a description written for the parent model. The
    /// agent's configured name is set to `name`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, mut agent: Agent) -> Self {
        let name = name.into();
        agent.config_mut().name = name.clone();
        Self { name, description: description.into(), agent }
    }

    /// The sub-agent's name (also the tool name a parent model calls).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the sub-agent does, for the parent model.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The wrapped agent.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// Runs the sub-agent on `input` as a child of `parent` (named `{name}-d{depth}`).
    ///
    /// The depth cap is checked first: a refused call returns [`SubAgentError::Depth`] without
    /// any model call. `SubAgentStarted`/`SubAgentCompleted` are emitted on the parent scope;
    /// a run stopped by a limit is an `Ok` outcome carrying its finish reason.
    pub async fn invoke(&self, input: &str, parent: &RunScope) -> Result<SubAgentOutcome, SubAgentError> {
        self.invoke_at(input, parent, 0).await
    }

    async fn invoke_at(&self, input: &str, parent: &RunScope, step: u32) -> Result<SubAgentOutcome, SubAgentError> {
        let child = parent.child(&self.name)?;
        self.run_child(Vec::new(), input, parent, &child, step).await
    }

    async fn run_child(
        &self,
        history: Vec<Message>,
        input: &str,
        parent: &RunScope,
        child: &RunScope,
        step: u32,
    ) -> Result<SubAgentOutcome, SubAgentError> {
        parent.emit(
            step,
            EventKind::SubAgentStarted {
                agent: self.name.clone(),
                input: input.to_string(),
                child_run_id: child.ids().run_id.clone(),
            },
        );
        let result = self.agent.continue_in(history, input, child).await;
        let (finish_reason, error) = match &result {
            Ok(r) => (r.finish_reason.clone(), None),
            Err(e) => (e.partial.finish_reason.clone(), Some(e.to_string())),
        };
        parent.emit(
            step,
            EventKind::SubAgentCompleted {
                agent: self.name.clone(),
                child_run_id: child.ids().run_id.clone(),
                finish_reason,
                error,
                usage: child.usage(),
                cost_usd: child.cost_usd(),
            },
        );
        let run = result.map_err(|source| SubAgentError::Agent { agent: self.name.clone(), source })?;
        Ok(SubAgentOutcome::from_run(&self.name, child.depth(), run))
    }

    /// A session over this sub-agent: each turn continues the previous transcript.
    pub fn session(self: Arc<Self>) -> SubAgentSession {
        SubAgentSession::new(self)
    }
}

/// Keeps one sub-agent's transcript across several invocations (human-in-the-loop follow-ups):
/// turn 2 sees turn 1. Turns run one at a time.
pub struct SubAgentSession {
    agent: Arc<SubAgent>,
    state: tokio::sync::Mutex<SessionState>,
}

#[derive(Default)]
struct SessionState {
    history: Vec<Message>,
    turns: u32,
}

impl std::fmt::Debug for SubAgentSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubAgentSession").field("agent", &self.agent.name).finish()
    }
}

impl SubAgentSession {
    /// A session with an empty transcript.
    pub fn new(agent: Arc<SubAgent>) -> Self {
        Self { agent, state: tokio::sync::Mutex::new(SessionState::default()) }
    }

    /// The sub-agent.
    pub fn agent(&self) -> &Arc<SubAgent> {
        &self.agent
    }

    /// Runs the next turn as a child of `parent`, named `{name}-t{turn}-d{depth}`, with the
    /// transcript of every earlier turn. From turn 2 on, `SubAgentReused` is emitted on the
    /// parent scope. The transcript is kept whatever the finish reason; a refused depth or a
    /// fault leaves it unchanged.
    pub async fn send(&self, input: &str, parent: &RunScope) -> Result<SubAgentOutcome, SubAgentError> {
        self.send_at(input, parent, 0).await
    }

    async fn send_at(&self, input: &str, parent: &RunScope, step: u32) -> Result<SubAgentOutcome, SubAgentError> {
        let mut state = self.state.lock().await;
        let turn = state.turns + 1;
        let depth = parent.depth() + 1;
        let child = parent.child_named(format!("{}-t{turn}-d{depth}", self.agent.name))?;
        if turn > 1 {
            parent.emit(
                step,
                EventKind::SubAgentReused { agent: self.agent.name.clone(), turn, messages: state.history.len() },
            );
        }
        let outcome = self.agent.run_child(state.history.clone(), input, parent, &child, step).await?;
        state.history = outcome.messages.clone();
        state.turns = turn;
        Ok(outcome)
    }

    /// Turns completed so far.
    pub async fn turns(&self) -> u32 {
        self.state.lock().await.turns
    }

    /// The transcript so far.
    pub async fn history(&self) -> Vec<Message> {
        self.state.lock().await.history.clone()
    }

    /// Forgets the transcript; the next turn starts fresh as turn 1.
    pub async fn reset(&self) {
        *self.state.lock().await = SessionState::default();
    }
}

/// Arguments of a [`SubAgentTool`] call.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
pub struct SubAgentArgs {
    /// The task or question for the sub-agent, with everything it needs to know.
    pub input: String,
}

enum Target {
    Fresh(Arc<SubAgent>),
    Session(Arc<SubAgentSession>),
}

/// Exposes a whole sub-agent to a parent model as one tool named after it, taking `input`.
///
/// A refused depth comes back to the parent model as a `denied` error result; a run stopped by
/// a limit comes back as an error result naming the finish reason, with the partial output.
pub struct SubAgentTool {
    target: Target,
}

impl SubAgentTool {
    /// Each call starts a fresh run of the sub-agent.
    pub fn new(agent: Arc<SubAgent>) -> Self {
        Self { target: Target::Fresh(agent) }
    }

    /// Each call continues the session's transcript.
    pub fn with_session(session: Arc<SubAgentSession>) -> Self {
        Self { target: Target::Session(session) }
    }

    fn agent(&self) -> &SubAgent {
        match &self.target {
            Target::Fresh(a) => a,
            Target::Session(s) => &s.agent,
        }
    }
}

#[async_trait]
impl Tool for SubAgentTool {
    fn spec(&self) -> ToolSpec {
        let agent = self.agent();
        ToolSpec {
            name: agent.name.clone(),
            description: agent.description.clone(),
            parameters: schema_for::<SubAgentArgs>(),
        }
    }

    fn origin(&self) -> ToolOrigin {
        ToolOrigin::Agent
    }

    async fn call(&self, arguments: Value, ctx: &ToolContext) -> Result<String, ToolError> {
        let name = self.agent().name.clone();
        let args: SubAgentArgs = serde_json::from_value(arguments)
            .map_err(|e| ToolError::InvalidArguments { tool: name.clone(), message: e.to_string() })?;
        let outcome = match &self.target {
            Target::Fresh(a) => a.invoke_at(&args.input, &ctx.scope, ctx.step).await,
            Target::Session(s) => s.send_at(&args.input, &ctx.scope, ctx.step).await,
        };
        match outcome {
            Ok(o) if o.is_complete() => Ok(o.output),
            Ok(o) => Err(ToolError::Failed(o.to_tool_text())),
            Err(SubAgentError::Depth(e)) => Err(ToolError::Denied(e.to_string())),
            Err(e) => Err(ToolError::Failed(e.to_string())),
        }
    }

    /// A sub-agent only reads when every tool it can call only reads.
    fn read_only(&self) -> bool {
        let tools = self.agent().agent.tools();
        tools.names().iter().all(|n| tools.get(n).is_some_and(|t| t.read_only()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mock::{MockProvider, MockReply};

    #[test]
    fn tool_spec_is_named_after_the_sub_agent_and_takes_input() {
        let agent = Agent::new(Arc::new(MockProvider::default()));
        let tool = SubAgentTool::new(Arc::new(SubAgent::new("researcher", "Finds facts.", agent)));
        let spec = tool.spec();
        assert_eq!(spec.name, "researcher");
        assert_eq!(spec.description, "Finds facts.");
        assert_eq!(spec.parameters["properties"]["input"]["type"], "string");
    }

    struct Writer;

    #[async_trait]
    impl crate::tool::Tool for Writer {
        fn spec(&self) -> ToolSpec {
            ToolSpec {
                name: "write".into(),
                description: "Writes.".into(),
                parameters: serde_json::json!({"type": "object"}),
            }
        }
        async fn call(&self, _a: Value, _c: &ToolContext) -> Result<String, ToolError> {
            Ok(String::new())
        }
    }

    #[test]
    fn sub_agent_is_read_only_only_when_all_its_tools_are() {
        let reader =
            SubAgentTool::new(Arc::new(SubAgent::new("r", "d", Agent::new(Arc::new(MockProvider::default())))));
        assert!(reader.read_only(), "no tools: nothing to write with");
        let mut tools = crate::tool::ToolRegistry::new();
        tools.register(Arc::new(Writer));
        let writer = SubAgent::new("w", "d", Agent::new(Arc::new(MockProvider::default())).with_tools(tools));
        assert!(!SubAgentTool::new(Arc::new(writer)).read_only());
    }

    #[test]
    fn stopped_outcome_names_the_reason_and_keeps_the_partial_output() {
        let o = SubAgentOutcome {
            agent: "a".into(),
            output: "half done".into(),
            finish_reason: FinishReason::TokenBudgetExceeded,
            usage: Usage::default(),
            cost_usd: 0.0,
            steps: 2,
            run_id: "r".into(),
            depth: 1,
            messages: Vec::new(),
        };
        let text = o.to_tool_text();
        assert!(text.contains("token_budget_exceeded"), "{text}");
        assert!(text.contains("half done"), "{text}");
    }

    #[tokio::test]
    async fn invoke_names_the_child_run_after_the_agent_and_depth() {
        let provider = MockProvider::new([MockReply::text("done")]);
        let sub = SubAgent::new("helper", "helps", Agent::new(Arc::new(provider)));
        let root = RunScope::detached("main");
        let out = sub.invoke("go", &root).await.unwrap();
        assert_eq!(out.output, "done");
        assert_eq!(out.depth, 1);
        assert_eq!(out.finish_reason, FinishReason::NoMoreToolCalls);
    }
}
